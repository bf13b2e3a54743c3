"""Saved benchmark runs and the gate's verdicts: the one model of a saved run, read by the gate and the reports.

Saved runs are pytest-benchmark's files, ``<storage>/<machine id>/NNNN_<name>.json`` (storage ``.benchmarks`` by
default; machine id like ``Linux-CPython-3.11-64bit``). The perf plugin turns ``--benchmark-save-data`` on, so
every saved benchmark keeps its raw rounds: ``benchmarks[i]["stats"]["data"]`` is the list of seconds per call,
one per round, in the order the rounds ran (a round of ``stats["iterations"]`` calls, divided by that number).
Other keys used here: ``benchmarks[i]["fullname"]`` (the pytest node id; the key runs are matched on),
``["name"]``, ``["group"]``, ``["params"]``, ``["extra_info"]`` (the suite's extras: ``stability`` from
`perf.measure.stability`, ``clock``, images/s, percentiles, GPU telemetry), ``machine_info["perf"]`` (the
fingerprint), ``perf_run`` (beside ``machine_info``, which stays the same from run to run on one machine):
``{"run_id", "injected"}``, the pytest session's id (uuid4 hex: what a verdict file names its runs by) and the
test-only options the run was made with (e.g. ``{"inject_delay_ms": 20.0}``; {} for a normal run; older runs carry
them in each benchmark's ``extra_info["injected"]`` only), ``commit_info``, ``datetime``. Every file is checked by
`perf.validate.run_problem` first.

*Metrics.* ``stats.data`` is a benchmark's primary metric, "time" (GPU time per call for inference on a GPU;
seconds per frame or per tick, in blocks of consecutive frames, for the video pipelines; see `perf.measure.samples`).
More series the gate compares sit in ``extra_info["metrics"][name] = {"label", "unit", "data": [seconds...],
"judged": bool}``: ``host`` (host latency of a call with synchronisation; judged where the call is launch-bound,
``extra_info["launch_bound"]``), ``stage:<name>`` (seconds per frame of one pipeline stage, in the same blocks).
`BenchmarkRecord.metrics` returns them all by name.

*Verdicts.* ``--perf-compare`` writes ``<reports>/perf-compare.json`` (`VERDICT_FILE`, and ``.md``; see
`perf.gate.compare.write_verdicts`): ``{"format": 2, "baseline": {"path", "number", "datetime", "commit",
"run_id"}, "current": {"run_id", "injected"}, "settings": {...}, "summary": {...}, "rows": [{"fullname", "name",
"group", "verdict", "note", "baseline_median_s", "current_median_s", "ratio", "lo", "hi", "n_baseline",
"n_current", ...}]}``. The verdicts belong to the run whose ``perf_run.run_id`` is ``current.run_id``, and to no other
run; a file without it (an older one, or another tool's) belongs to no run. `load_verdicts` also reads other tools'
verdict files (see there).

Every problem reading any of these is one `HistoryError` naming the file: ``'<path>': <what is wrong>``.

API::

    runs = load_runs(".benchmarks")                 # every saved run, oldest first (all machine folders)
    run = runs[-1]; run.benchmarks["perf/test_inference_speed.py::test_inference_speed[torch-fp32-b1]"]
    bench.data                                      # numpy float64 [rounds], seconds per call, or None
    bench.median_s, bench.stat("iqr"), bench.stats, bench.extra_info, bench.stability
    run.run_id, run.injected                        # the session's id (or None), {"inject_delay_ms": 20.0}
    describe_injected(run.injected)                 # "--perf-inject-delay=20.0 (ms)"
    verdicts = load_verdicts("reports")             # the last --perf-compare's verdicts, or None
    verdicts.judges(run), verdicts.baseline_path    # whether they are run's; the run they were judged against
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime as _datetime
from pathlib import Path
from typing import Any

import numpy as np

from detector.errors import DetectorError
from perf.validate import run_problem

_RUN_NUMBER = re.compile(r"^(\d{4})_")
#: The name of a benchmark's primary metric: its rounds (``stats.data``).
PRIMARY = "time"
#: What ``--perf-compare`` writes into the reports folder (and ``perf-compare.md`` beside it).
VERDICT_FILE = "perf-compare.json"
#: Saved-run file names pytest-benchmark writes: ``0001_<commit>_<date>.json`` (any ``NNNN_*.json``).
RUN_GLOB = "[0-9][0-9][0-9][0-9]_*.json"
#: The test-only options a run's ``perf_run.injected`` records, by key, as a user types them.
INJECTED_OPTIONS = {"inject_delay_ms": "--perf-inject-delay={} (ms)", "regression": "--perf-regression={}"}


class HistoryError(DetectorError, ValueError):
    """A saved run, verdict file or benchmark storage that cannot be used; the message is one line,
    ``'<path>': <problem>``."""


@dataclass(frozen=True)
class BenchmarkRecord:
    """One benchmark of a saved run. ``data``: raw rounds, seconds per call (None if saved without data);
    ``stats``: pytest-benchmark's statistics in seconds (``data`` taken out); ``group`` None when ungrouped."""

    fullname: str
    name: str
    group: str | None
    data: np.ndarray | None
    stats: Mapping[str, Any]
    extra_info: Mapping[str, Any]
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def median_s(self) -> float | None:
        """Median seconds per call (from the rounds when present, else pytest-benchmark's stats)."""
        if self.has_rounds:
            return float(np.median(self.data))
        value = self.stats.get("median")
        return None if value is None else float(value)

    @property
    def has_rounds(self) -> bool:
        """Whether the run kept this benchmark's rounds (``--benchmark-save-data``)."""
        return self.data is not None and bool(self.data.size)

    def stat(self, key: str) -> float:
        """``stats[key]`` (seconds for times) as a float; NaN when missing or not a number."""
        value = self.stats.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan

    def metrics(self) -> dict[str, np.ndarray]:
        """Every sample series by metric name: ``"time"`` (the rounds) and ``extra_info["metrics"]``' series;
        series without data are left out. Built once per record (a verdict reads them many times)."""
        return self._series

    @functools.cached_property
    def _series(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        if self.data is not None and self.data.size:
            out[PRIMARY] = self.data
        extra = self.extra_info.get("metrics")
        for name, metric in (extra.items() if isinstance(extra, Mapping) else ()):
            data = metric.get("data") if isinstance(metric, Mapping) else None
            if data:
                out[str(name)] = np.asarray(data, dtype=np.float64)
        return out

    def metric_info(self, name: str) -> Mapping[str, Any]:
        """``extra_info["metrics"][name]`` (label, unit, judged), or for ``"time"`` ``extra_info["samples"]``."""
        extra = self.extra_info.get("samples" if name == PRIMARY else "metrics") or {}
        info = extra if name == PRIMARY else extra.get(name, {})
        return info if isinstance(info, Mapping) else {}

    @property
    def family(self) -> str:
        """What kind of figure this is, for noise summaries: ``inference <variant>`` or the benchmark group."""
        group = self.group or "ungrouped"
        variant = self.extra_info.get("variant")
        return f"{group} {variant}" if group == "inference" and variant else group

    @property
    def stability(self) -> Mapping[str, Any] | None:
        """``extra_info["stability"]`` recorded by the stability gate, or None."""
        value = self.extra_info.get("stability")
        return value if isinstance(value, Mapping) else None

    @classmethod
    def from_json(cls, bench: Mapping[str, Any]) -> BenchmarkRecord:
        """A record from one entry of a saved run's ``benchmarks`` (checked by `perf.validate.run_problem`)."""
        stats = dict(bench.get("stats") or {})
        raw = stats.pop("data", None)
        return cls(
            fullname=str(bench["fullname"]),
            name=str(bench.get("name", bench["fullname"])),
            group=bench.get("group"),
            data=None if raw is None else np.asarray(raw, dtype=np.float64),
            stats=stats,
            extra_info=dict(bench.get("extra_info") or {}),
            params=dict(bench.get("params") or {}),
        )


def describe_injected(injected: Mapping[str, Any]) -> str:
    """``--perf-inject-delay=20.0 (ms)`` for a run's ``perf_run.injected`` (`SavedRun.injected`), options joined by
    ", "; "" for a normal run. Keys this version does not know are shown as ``key=value``."""
    return ", ".join(INJECTED_OPTIONS.get(str(key), f"{key}={{}}").format(value) for key, value in injected.items())


def run_marks(document: Mapping[str, Any]) -> Mapping[str, Any]:
    """A saved run's own marks, ``perf_run`` (``{"run_id", "injected"}``), or {} for a run saved without them."""
    marks = document.get("perf_run")
    return marks if isinstance(marks, Mapping) else {}


def injected_of(document: Mapping[str, Any]) -> dict[str, Any]:
    """The test-only options a saved run's JSON was made with: ``perf_run["injected"]``, or for a run saved
    before that was recorded, the first benchmark's ``extra_info["injected"]``; {} for a normal run."""
    marked = run_marks(document).get("injected")
    if isinstance(marked, Mapping) and marked:
        return dict(marked)
    for bench in document.get("benchmarks") or ():
        found = (bench.get("extra_info") or {}).get("injected") if isinstance(bench, Mapping) else None
        if isinstance(found, Mapping) and found:
            return dict(found)
    return {}


@dataclass(frozen=True)
class SavedRun:
    """A saved run: its file, number (``NNNN_``; None for other names), date and commit as saved, and
    benchmarks by full name (in the file's order). ``run_id``: the pytest session's id (``perf_run.run_id``; None for
    runs saved before it was recorded); ``injected``: the test-only options it was made with ({} for a normal
    run; see `injected_of`)."""

    path: Path
    number: int | None
    datetime: str | None
    commit: str | None
    machine_info: Mapping[str, Any]
    benchmarks: dict[str, BenchmarkRecord] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)
    run_id: str | None = None
    injected: Mapping[str, Any] = field(default_factory=dict)

    @property
    def fingerprint(self) -> Mapping[str, Any] | None:
        """``machine_info["perf"]`` (`perf.measure.machine.machine_fingerprint` + device), or None."""
        return self.machine_info.get("perf")

    @property
    def device(self) -> str | None:
        """The device type the run measured on (``"cpu"`` or ``"cuda"``, from the fingerprint), or None."""
        fingerprint = self.fingerprint
        device = fingerprint.get("device") if isinstance(fingerprint, Mapping) else None
        return str(device).split(":")[0] if device else None

    @property
    def machine_id(self) -> str:
        """The storage folder the run was saved in (pytest-benchmark's machine id)."""
        return self.path.parent.name

    @property
    def when(self) -> _datetime | None:
        """``datetime`` parsed (ISO 8601), or None when absent or not a date."""
        try:
            return _datetime.fromisoformat(self.datetime) if self.datetime else None
        except ValueError:
            return None

    @property
    def dirty(self) -> bool:
        """Whether the commit had uncommitted changes (``commit_info.dirty``)."""
        return bool((self.raw.get("commit_info") or {}).get("dirty"))

    @property
    def short_commit(self) -> str:
        """``abc1234``, ``abc1234+dirty``, ``unversioned`` or ``?``."""
        commit = self.commit or ""
        short = commit[:7] if commit not in ("", "unversioned") else commit or "?"
        return short + ("+dirty" if self.dirty else "")

    @property
    def name(self) -> str:
        """``0003``: the run number as its file has it (the file's stem for other names)."""
        return f"{self.number:04d}" if self.number is not None else self.path.stem

    @property
    def label(self) -> str:
        """``0003 (2025-01-02 10:00, abc1234)``."""
        when = self.when.strftime("%Y-%m-%d %H:%M") if self.when else "no date"
        return f"{self.name} ({when}, {self.short_commit})"


def run_from_json(data: Any, path: str | os.PathLike[str] = "<memory>") -> SavedRun:
    """A `SavedRun` from a pytest-benchmark JSON document (``--benchmark-json`` files work too); `HistoryError`
    names the file and the problem when the document is not a usable run (`perf.validate.run_problem`)."""
    path = Path(path)
    problem = run_problem(data)
    if problem is not None:
        raise HistoryError(f"'{path}': not a usable saved run: {problem}")
    benchmarks = {b.fullname: b for b in map(BenchmarkRecord.from_json, data["benchmarks"])}
    match = _RUN_NUMBER.match(path.name)
    return SavedRun(
        path=path,
        number=int(match.group(1)) if match else None,
        datetime=data.get("datetime"),
        commit=(data.get("commit_info") or {}).get("id"),
        machine_info=data.get("machine_info") or {},
        benchmarks=benchmarks,
        raw=data,
        run_id=_text(run_marks(data).get("run_id")),
        injected=injected_of(data),
    )


def _text(value: Any) -> str | None:
    """A non-empty string as is; anything else None (ids and paths are strings in every file this reads)."""
    return value if isinstance(value, str) and value else None


def read_json(path: Path, what: str) -> Any:
    """The parsed JSON of ``path``; `HistoryError` ``'<path>': no such file`` or ``'<path>': cannot read
    <what>: <why>``."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise HistoryError(f"'{path}': no such file") from e
    except OSError as e:
        raise HistoryError(f"'{path}': cannot read {what}: {e.strerror or e}") from e
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HistoryError(f"'{path}': cannot read {what}: {e}") from e


def load_run(path: str | os.PathLike[str]) -> SavedRun:
    """Read one saved run; `HistoryError` names the file when it is missing, unreadable or not a run."""
    path = Path(path)
    return run_from_json(read_json(path, "a saved run"), path)


def run_files(storage: str | os.PathLike[str] = ".benchmarks", machine: str | None = None) -> list[Path]:
    """Saved run files (``NNNN_*.json``) in ``storage`` (a storage folder, or one machine's folder of it), in
    machine folder ``machine`` or in all, oldest first (by run number, then folder). `HistoryError` when
    ``storage`` is not a folder."""
    root = Path(storage)
    if not root.is_dir():
        problem = "not a folder" if root.exists() else "no such folder"
        raise HistoryError(f"benchmark storage '{root}': {problem} (run pytest with --benchmark-autosave)")
    folders = [root, *sorted(p for p in root.iterdir() if p.is_dir())]
    files = [f for folder in folders for f in folder.glob(RUN_GLOB)
             if f.is_file() and (machine is None or folder.name == machine)]  # fmt: skip
    return sorted(files, key=lambda f: (f.name, str(f.parent)))


def load_runs(storage: str | os.PathLike[str] = ".benchmarks", machine: str | None = None, *,
              skipped: list[str] | None = None) -> list[SavedRun]:  # fmt: skip
    """Every saved run under ``storage`` (see `run_files`), oldest first.

    A file that cannot be read raises `HistoryError`; with ``skipped`` (a list) its message is appended there
    instead and the file left out, unless every file is bad. `HistoryError` too when ``machine`` has no runs.
    """
    files = run_files(storage, machine)
    if machine is not None and not files:
        known = ", ".join(sorted({f.parent.name for f in run_files(storage)})) or "none"
        raise HistoryError(f"benchmark storage '{storage}': no saved runs of machine '{machine}' "
                           f"(machines with runs: {known})")  # fmt: skip
    runs, errors = [], []
    for path in files:
        try:
            runs.append(load_run(path))
        except HistoryError as e:
            if skipped is None:
                raise
            errors.append(str(e))
    if errors and not runs:
        raise HistoryError(errors[0] + (f" (and {len(errors) - 1} more bad saved runs)" if len(errors) > 1 else ""))
    if skipped is not None:
        skipped += errors
    return runs


def series(runs: list[SavedRun], fullname: str) -> list[tuple[SavedRun, BenchmarkRecord]]:
    """The runs that have benchmark ``fullname``, with that benchmark, in the given order."""
    return [(run, run.benchmarks[fullname]) for run in runs if fullname in run.benchmarks]


@dataclass(frozen=True)
class Verdicts:
    """A verdict file: ``document`` as read (``verdicts["rows"]`` reads it) and its ``entries``, each a dict with
    ``name`` and/or ``fullname`` and a lower-case ``verdict`` (``baseline_median_s``, ``current_median_s``,
    ``ratio``, ``lo``, ``hi``, ``note`` when the gate wrote it).

    ``current_run_id``: the ``perf_run.run_id`` of the run judged (``current.run_id``; None when the file does not say,
    and then the verdicts belong to no run); ``current_injected``: the test-only options that run was made with;
    ``baseline_run_id``, ``baseline_path``, ``baseline_number``, ``baseline_commit``: the run it was judged
    against, as far as the file says (None otherwise)."""

    path: Path
    document: Any
    entries: tuple[dict[str, Any], ...]
    current_run_id: str | None = None
    current_injected: Mapping[str, Any] = field(default_factory=dict)
    baseline_run_id: str | None = None
    baseline_path: str | None = None
    baseline_number: int | None = None
    baseline_commit: str | None = None

    def __getitem__(self, key: str) -> Any:
        return self.document[key]

    def judges(self, run: SavedRun) -> bool:
        """Whether these are ``run``'s verdicts: the file names the run it judged and ``run`` is that run."""
        return self.current_run_id is not None and run.run_id == self.current_run_id

    @property
    def baseline_label(self) -> str:
        """The baseline as a person reads it: ``run 0002 (commit abc1234, file 0002_abc.json)``, or what the file
        says of it; ``"not named in the file"`` when it says nothing."""
        about = [f"commit {self.baseline_commit[:7]}" if self.baseline_commit else "",
                 f"file {Path(self.baseline_path).name}" if self.baseline_path else ""]  # fmt: skip
        about_text = ", ".join(a for a in about if a)
        number = f"run {self.baseline_number:04d}" if self.baseline_number is not None else "a run"
        return f"{number} ({about_text})" if about_text else number if self.baseline_number is not None else (
            "not named in the file")

    def entry(self, fullname: str, name: str | None = None) -> dict[str, Any] | None:
        """The entry of a benchmark, by full name first, then by short name; None when it has none."""
        for entry in self.entries:
            if fullname in (entry.get("fullname"), entry.get("name")):
                return entry
        return next((e for e in self.entries if name is not None and e.get("name") == name), None)


def _verdict_entries(doc: Any) -> Sequence[Any]:
    if isinstance(doc, dict):
        for key in ("rows", "verdicts", "benchmarks", "results"):
            if isinstance(doc.get(key), list):
                return doc[key]
        if doc and all(isinstance(v, dict) for v in doc.values()):  # {name: {...}}
            return [{"name": k, **v} for k, v in doc.items()]
        if doc and all(isinstance(v, str) for v in doc.values()):  # {name: "slower"}
            return [{"name": k, "verdict": v} for k, v in doc.items()]
    return doc if isinstance(doc, list) else []


def load_verdicts(reports_dir: str | os.PathLike[str] = "reports", *,
                  path: str | os.PathLike[str] | None = None) -> Verdicts | None:  # fmt: skip
    """The verdicts of the last ``--perf-compare`` (``<reports_dir>/perf-compare.json``; None when there is none),
    or of the verdict file ``path`` (which must exist).

    Accepted shapes: the gate's (``{"rows": [entries]}``), a list of entries, ``{"verdicts" | "benchmarks" |
    "results": [entries]}``, ``{name: entry}`` or ``{name: "slower"}``; an entry is an object with ``name``
    and/or ``fullname`` and ``verdict`` (or ``status``). `HistoryError` when the file is unreadable or holds
    no verdicts.
    """
    if path is None:
        path = Path(reports_dir) / VERDICT_FILE
        if not path.exists():
            return None
    path = Path(path)
    document = read_json(path, "the verdicts")
    entries = []
    for entry in _verdict_entries(document):
        verdict = entry.get("verdict", entry.get("status")) if isinstance(entry, dict) else None
        if verdict is not None and (entry.get("name") or entry.get("fullname")):
            entries.append({**entry, "verdict": str(verdict).lower()})
    if not entries:
        raise HistoryError(f"'{path}': holds no compare verdicts (entries with a name and a 'verdict')")
    current = _section(document, "current")
    baseline = _section(document, "baseline")
    injected = current.get("injected")
    number = baseline.get("number")
    return Verdicts(path, document, tuple(entries), current_run_id=_text(current.get("run_id")),
                    current_injected=dict(injected) if isinstance(injected, Mapping) else {},
                    baseline_run_id=_text(baseline.get("run_id")), baseline_path=_text(baseline.get("path")),
                    baseline_number=number if isinstance(number, int) and not isinstance(number, bool) else None,
                    baseline_commit=_text(baseline.get("commit")))  # fmt: skip


def _section(document: Any, key: str) -> Mapping[str, Any]:
    """``document[key]`` when the document is an object and that is one; {} otherwise."""
    value = document.get(key) if isinstance(document, dict) else None
    return value if isinstance(value, Mapping) else {}
