"""Saved benchmark runs, the one model the gate, the reports and the history store read: `load_runs` gives every
`SavedRun` of a storage, oldest first, with its `BenchmarkRecord`s by full name (docs/architecture.md, "Saved runs").
Each file is checked by `perf.validate.run_problem` first; a problem is a `HistoryError` ``'<path>': <problem>``."""

from __future__ import annotations

import ast
import functools
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from detector.errors import DetectorError
from detector.fileio import parse_json, read_text
from perf.validate import is_number, run_problem

#: The name of a benchmark's primary metric: its rounds (``stats.data``).
PRIMARY = "time"
_INJECTED = {"inject_delay_ms": "--perf-inject-delay={} (ms)", "regression": "--perf-regression={}"}
_UNSERIALIZABLE = re.compile(r"^UNSERIALIZABLE\[(.*)\]$", re.DOTALL)
#: A saved run's file name, pytest-benchmark's ``NNNN_<name>.json``: 4 digits or more (run 10000 follows 9999).
RUN_NAME = re.compile(r"^(\d{4,})_.*\.json$", re.DOTALL)
#: The same as a glob prefix for pytest-benchmark's ``FileStorage.query`` (which appends ``*.json``); what it finds
#: is kept by `RUN_NAME` (`saved_run_files`). pytest-benchmark's own, ``[0-9][0-9][0-9][0-9]_``, misses 10000 on.
RUN_GLOB = "[0-9][0-9][0-9][0-9]*_"


class HistoryError(DetectorError, ValueError):
    """A saved run, verdict file or benchmark storage that cannot be used: ``'<path>': <problem>``."""


def mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else {} (for the optional objects of a saved file)."""
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class BenchmarkRecord:
    """One benchmark of a saved run. ``data``: raw rounds, seconds per call (None if saved without data);
    ``stats``: pytest-benchmark's statistics in seconds (without ``data``); ``group`` None when ungrouped."""

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
        value = np.median(self.data) if self.has_rounds else self.stats.get("median")
        return None if value is None else float(value)

    @property
    def has_rounds(self) -> bool:
        """Whether the run kept this benchmark's rounds (``--benchmark-save-data``)."""
        return self.data is not None and bool(self.data.size)

    def stat(self, key: str) -> float:
        """``stats[key]`` (seconds for times) as a float; NaN when missing or not a number."""
        return float(self.stats[key]) if is_number(self.stats.get(key)) else math.nan

    def metrics(self) -> dict[str, np.ndarray]:
        """Every sample series with data by name: ``"time"`` (the rounds) and ``extra_info["metrics"]``'s."""
        return self._series

    @functools.cached_property
    def _series(self) -> dict[str, np.ndarray]:
        extra = {str(name): np.asarray(metric["data"], dtype=np.float64)
                 for name, metric in mapping(self.extra_info.get("metrics")).items()
                 if isinstance(metric, Mapping) and metric.get("data")}  # fmt: skip
        return {PRIMARY: self.data, **extra} if self.has_rounds else extra

    def metric_info(self, name: str) -> Mapping[str, Any]:
        """``extra_info["metrics"][name]`` (label, unit, judged); ``extra_info["samples"]`` for ``"time"``."""
        info = self.extra_info.get("samples") if name == PRIMARY else mapping(self.extra_info.get("metrics")).get(name)
        return mapping(info)

    @property
    def family(self) -> str:
        """The kind of figure, for noise summaries: ``inference <variant>`` or the benchmark group."""
        group, variant = self.group or "ungrouped", self.extra_info.get("variant")
        return f"{group} {variant}" if group == "inference" and variant else group

    @property
    def stability(self) -> Mapping[str, Any] | None:
        """``extra_info["stability"]`` recorded by the stability gate, or None."""
        return value if isinstance(value := self.extra_info.get("stability"), Mapping) else None

    @classmethod
    def from_json(cls, bench: Mapping[str, Any]) -> BenchmarkRecord:
        """A record from one (checked) entry of a saved run's ``benchmarks``."""
        stats = dict(bench.get("stats") or {})
        raw = stats.pop("data", None)
        return cls(str(bench["fullname"]), str(bench.get("name", bench["fullname"])), bench.get("group"),
                   None if raw is None else np.asarray(raw, dtype=np.float64), stats,
                   dict(bench.get("extra_info") or {}), read_params(bench.get("params")))  # fmt: skip


def param_json(value: Any) -> Any:
    """A test parameter as JSON for a saved run's ``params`` (``to_json()`` if it has one; else a repr)."""
    if hasattr(value, "to_json"):
        return param_json(value.to_json())
    if is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(key): param_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [param_json(item) for item in value]
    return value if value is None or isinstance(value, (str, int, float, bool)) else repr(value)


def as_text(value: Any) -> Any:
    """``value`` (JSON) with each string's lone surrogates (a name not UTF-8, ``'\\udcff'``) written as stderr shows
    them: a saved run is UTF-8 text (`perf.validate` refuses a lone surrogate)."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {as_text(key): as_text(item) for key, item in value.items()}
    return list(map(as_text, value)) if isinstance(value, list) else value


def read_params(raw: Any) -> dict[str, Any]:
    """A saved benchmark's ``params`` as JSON values; an older run's ``"UNSERIALIZABLE[Case(variant='torch',
    ...)]"`` is read back as the call's keyword values (``{"variant": "torch", ...}``) where it can be."""
    return {str(key): _old_param(value) for key, value in mapping(raw).items()}


def _old_param(value: Any) -> Any:
    match = _UNSERIALIZABLE.match(value) if isinstance(value, str) else None
    try:
        call = ast.parse(match.group(1), mode="eval").body if match else None
        if not isinstance(call, ast.Call) or any(keyword.arg is None for keyword in call.keywords):
            return value
        return {str(keyword.arg): _literal(keyword.value) for keyword in call.keywords}
    except (SyntaxError, MemoryError, RecursionError):  # not Python, or nested deeper than the parser goes
        return value


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):  # a nested object (a source): its repr, as written
        return ast.unparse(node)


def describe_injected(injected: Mapping[str, Any]) -> str:
    """``--perf-inject-delay=20.0 (ms)``, ... for a run's ``perf_run.injected`` ("" for a normal run)."""
    return ", ".join(_INJECTED.get(str(key), f"{key}={{}}").format(value) for key, value in injected.items())


def mismatch_lines(differences: list[tuple[str, Any, Any]], saved_run: Mapping[str, Any], location: str,
                   option: str, what: str) -> list[str]:  # fmt: skip
    """The head of a refusal to compare with a saved run: which run, ``what`` is wrong, each difference."""
    commit = str((saved_run.get("commit_info") or {}).get("id") or "unknown")[:12]
    when = saved_run.get("datetime", "at an unknown time")
    return [f"{option}: the saved run in '{location}' (recorded {when}, commit {commit}) {what}:",
            *(f"  {name}: saved {saved!r}, current {current!r}" for name, saved, current in differences)]


def injected_of(document: Mapping[str, Any]) -> dict[str, Any]:
    """A saved run's test-only options: ``perf_run["injected"]``, else its first ``extra_info["injected"]``, else {}."""
    benches = (mapping(mapping(bench).get("extra_info")) for bench in document.get("benchmarks") or ())
    found = (mapping(f.get("injected")) for f in (mapping(document.get("perf_run")), *benches))
    return dict(next((f for f in found if f), {}))


@dataclass(frozen=True)
class SavedRun:
    """A saved run: its file, number (``NNNN_``; None for other names), date, commit, benchmarks by full name
    (in the file's order), ``run_id`` (None in older runs) and ``injected`` (`injected_of`)."""

    path: Path
    number: int | None
    datetime: str | None
    commit: str | None
    machine_info: Mapping[str, Any]
    benchmarks: dict[str, BenchmarkRecord] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)
    run_id: str | None = None
    injected: Mapping[str, Any] = field(default_factory=dict)
    dirty: bool = False  #: the commit had uncommitted changes (``commit_info.dirty``)

    @property
    def fingerprint(self) -> Mapping[str, Any] | None:
        """``machine_info["perf"]`` (`perf.measure.machine.machine_fingerprint` + device), or None."""
        return self.machine_info.get("perf")

    @property
    def device(self) -> str | None:
        """The device type the run measured on (``"cpu"`` or ``"cuda"``, from the fingerprint), or None."""
        return str(device).split(":")[0] if (device := mapping(self.fingerprint).get("device")) else None

    @property
    def machine_id(self) -> str:
        """The storage folder the run was saved in (pytest-benchmark's machine id)."""
        return self.path.parent.name

    @property
    def short_commit(self) -> str:
        """``abc1234``, ``abc1234+dirty``, ``unversioned`` or ``?``."""
        commit = self.commit or "?"
        return (commit if commit == "unversioned" else commit[:7]) + ("+dirty" if self.dirty else "")

    @property
    def name(self) -> str:
        """``0003``: the run number as its file has it (the file's stem for other names)."""
        return f"{self.number:04d}" if self.number is not None else self.path.stem

    @property
    def label(self) -> str:
        """``0003 (2025-01-02 10:00, abc1234)``; ``no date`` when ``datetime`` is absent or not ISO 8601."""
        try:
            when = datetime.fromisoformat(self.datetime or "").strftime("%Y-%m-%d %H:%M")
        except ValueError:
            when = "no date"
        return f"{self.name} ({when}, {self.short_commit})"


def run_from_json(data: Any, path: str | os.PathLike[str] = "<memory>") -> SavedRun:
    """A `SavedRun` from a pytest-benchmark JSON document (``--benchmark-json`` too); else `HistoryError`."""
    path = Path(path)
    if (problem := run_problem(data)) is not None:
        raise HistoryError(f"'{path}': not a usable saved run: {problem}")
    commit = data.get("commit_info") or {}
    return SavedRun(path, run_number(path), data.get("datetime"), commit.get("id"),
                    data.get("machine_info") or {},
                    {b.fullname: b for b in map(BenchmarkRecord.from_json, data["benchmarks"])}, data,
                    text_value(mapping(data.get("perf_run")).get("run_id")), injected_of(data),
                    bool(commit.get("dirty")))  # fmt: skip


def text_value(value: Any) -> str | None:
    """A non-empty string as is; anything else None (ids and paths are strings in every file this reads)."""
    return value if isinstance(value, str) and value else None


def read_json(path: Path, what: str) -> Any:
    """Parsed JSON of ``path``; `HistoryError` ``'<path>': no such file`` / ``cannot read <what>: <why>``."""
    try:
        return parse_json(read_text(path))
    except FileNotFoundError as e:
        raise HistoryError(f"'{path}': no such file") from e
    except (OSError, ValueError) as e:  # ValueError: UnicodeDecodeError, parse_json's
        reason = e.strerror if isinstance(e, OSError) and e.strerror else e
        raise HistoryError(f"'{path}': cannot read {what}: {reason}") from e


def load_run(path: str | os.PathLike[str]) -> SavedRun:
    """Read one saved run; `HistoryError` names the file when it is missing, unreadable or not a run."""
    return run_from_json(read_json(Path(path), "a saved run"), path)


def run_number(path: str | os.PathLike[str]) -> int | None:
    """The number of a saved run's file (`RUN_NAME`: 12 of ``0012_x.json``), None for any other name."""
    return int(match.group(1)) if (match := RUN_NAME.match(Path(path).name)) else None


def saved_run_files(paths: Iterable[Path]) -> list[Path]:
    """The saved runs among ``paths`` (`RUN_NAME`), oldest first: by number (10000 after 9999), then name, folder."""
    runs = [(number, path) for path in paths if (number := run_number(path)) is not None]
    return [path for _, path in sorted(runs, key=lambda run: (run[0], run[1].name, str(run[1].parent)))]


def run_files(storage: str | os.PathLike[str] = ".benchmarks", machine: str | None = None) -> list[Path]:
    """Saved run files (`RUN_NAME`; a folder is none, a dangling link or FIFO is one its reader names) in ``storage``
    or one machine's folder of it, oldest first (`saved_run_files`);
    `HistoryError` when the storage, or a folder in it, is missing or cannot be read."""
    root = Path(storage)
    try:
        if not root.is_dir():  # raises where a folder on the way cannot be searched
            problem = "not a folder" if root.exists() else "no such folder"
            raise HistoryError(f"benchmark storage '{root}': {problem} (run pytest with --benchmark-autosave)")
        folders = [root, *sorted(p for p in root.iterdir() if p.is_dir())]
        files = [f for folder in folders if machine in (None, folder.name)
                 for f in folder.iterdir() if RUN_NAME.match(f.name) and not f.is_dir()]  # fmt: skip
    except OSError as e:  # a folder that cannot be listed: its runs would be missed without a word
        raise HistoryError(f"benchmark storage '{root}': cannot read '{e.filename}': {e.strerror or e}") from e
    return saved_run_files(files)


def load_runs(storage: str | os.PathLike[str] = ".benchmarks", machine: str | None = None, *,
              skipped: list[str] | None = None) -> list[SavedRun]:  # fmt: skip
    """Every saved run under ``storage`` (`run_files`), oldest first; `HistoryError` for a bad file (with
    ``skipped``, its message goes there instead, unless every file is bad) or a ``machine`` without runs."""
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
        more = f" (and {len(errors) - 1} more bad saved runs)" if len(errors) > 1 else ""
        raise HistoryError(errors[0] + more)
    if skipped is not None:
        skipped += errors
    return runs
