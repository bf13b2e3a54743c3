"""Saved benchmark runs: the one model of a saved run, read by the gate, the reports and the history store.

A saved run is pytest-benchmark's ``<storage>/<machine id>/NNNN_<name>.json`` with raw rounds (``stats.data``) and
the suite's marks; its fields are listed in docs/architecture.md ("Saved runs"). Every file is checked by
`perf.validate.run_problem` first; every problem reading one is a `HistoryError` ``'<path>': <what is wrong>``.

API::

    runs = load_runs(".benchmarks")                 # every saved run, oldest first (all machine folders)
    bench = runs[-1].benchmarks["perf/test_inference_speed.py::test_inference_speed[torch-fp32-b1]"]
    bench.data                                      # numpy float64 [rounds], seconds per call, or None
    bench.median_s, bench.stat("iqr"), bench.metrics(), bench.stability
    runs[-1].run_id, runs[-1].injected              # the session's id (or None), {"inject_delay_ms": 20.0}"""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import math
import os
import re
from collections.abc import Mapping
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
        """Every sample series with data by metric name: ``"time"`` (the rounds) and ``extra_info["metrics"]``'s;
        built once per record."""
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
        """A record from one (checked) entry of a saved run's ``benchmarks``."""
        stats = dict(bench.get("stats") or {})
        raw = stats.pop("data", None)
        return cls(
            fullname=str(bench["fullname"]),
            name=str(bench.get("name", bench["fullname"])),
            group=bench.get("group"),
            data=None if raw is None else np.asarray(raw, dtype=np.float64),
            stats=stats,
            extra_info=dict(bench.get("extra_info") or {}),
            params=read_params(bench.get("params")),
        )


def param_json(value: Any) -> Any:
    """A test parameter as JSON, for a saved run's ``params``: its ``to_json()`` when it has one, a dataclass as its
    fields, lists and mappings item by item, JSON types as they are, anything else as its ``repr``."""
    if hasattr(value, "to_json"):
        return param_json(value.to_json())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: param_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(key): param_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [param_json(item) for item in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


_UNSERIALIZABLE = re.compile(r"^UNSERIALIZABLE\[(.*)\]$", re.DOTALL)


def read_params(raw: Any) -> dict[str, Any]:
    """A saved benchmark's ``params`` as JSON values; an older run's ``"UNSERIALIZABLE[Case(variant='torch', ...)]"``
    is read back as the call's keyword values (``{"variant": "torch", ...}``) where it can be, else kept as is."""
    if not isinstance(raw, Mapping):
        return {}
    return {str(key): _old_param(value) for key, value in raw.items()}


def _old_param(value: Any) -> Any:
    match = _UNSERIALIZABLE.match(value) if isinstance(value, str) else None
    if match is None:
        return value
    try:
        call = ast.parse(match.group(1), mode="eval").body
    except SyntaxError:
        return value
    if not isinstance(call, ast.Call):
        return value
    fields: dict[str, Any] = {}
    for keyword in call.keywords:
        if keyword.arg is None:
            return value
        try:
            fields[keyword.arg] = ast.literal_eval(keyword.value)
        except (ValueError, TypeError, SyntaxError):  # a nested object (a source): its repr, as written
            fields[keyword.arg] = ast.unparse(keyword.value)
    return fields


def describe_injected(injected: Mapping[str, Any]) -> str:
    """``--perf-inject-delay=20.0 (ms)`` for a run's ``perf_run.injected``, joined by ", " ("" for a normal run);
    unknown keys as ``key=value``."""
    return ", ".join(INJECTED_OPTIONS.get(str(key), f"{key}={{}}").format(value) for key, value in injected.items())


def mismatch_lines(differences: list[tuple[str, Any, Any]], saved_run: Mapping[str, Any], location: str, option: str,
                   what: str) -> list[str]:  # fmt: skip
    """The head of a refusal to compare with a saved run: which run, ``what`` is wrong, one line per difference."""
    commit = str((saved_run.get("commit_info") or {}).get("id") or "unknown")[:12]
    when = saved_run.get("datetime", "at an unknown time")
    lines = [f"{option}: the saved run in '{location}' (recorded {when}, commit {commit}) {what}:"]
    return lines + [f"  {field}: saved {saved!r}, current {current!r}" for field, saved, current in differences]


def run_marks(document: Mapping[str, Any]) -> Mapping[str, Any]:
    """A saved run's own marks, ``perf_run`` (``{"run_id", "injected"}``), or {} for a run saved without them."""
    marks = document.get("perf_run")
    return marks if isinstance(marks, Mapping) else {}


def injected_of(document: Mapping[str, Any]) -> dict[str, Any]:
    """The test-only options a saved run's JSON was made with (``perf_run["injected"]``, else an older run's first
    benchmark's ``extra_info["injected"]``); {} for a normal run."""
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
    """A saved run: its file, number (``NNNN_``; None for other names), date, commit, benchmarks by full name (in
    the file's order), ``run_id`` (None in older runs) and ``injected`` (`injected_of`)."""

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
    """A `SavedRun` from a pytest-benchmark JSON document (``--benchmark-json`` files too); else `HistoryError`."""
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
        run_id=text_value(run_marks(data).get("run_id")),
        injected=injected_of(data),
    )


def text_value(value: Any) -> str | None:
    """A non-empty string as is; anything else None (ids and paths are strings in every file this reads)."""
    return value if isinstance(value, str) and value else None


def read_json(path: Path, what: str) -> Any:
    """The parsed JSON of ``path``; `HistoryError` ``'<path>': no such file`` / ``cannot read <what>: <why>``."""
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
    """Saved run files (``NNNN_*.json``) in ``storage`` (or one machine's folder of it), of ``machine`` or all,
    oldest first (by run number, then folder); `HistoryError` when ``storage`` is not a folder."""
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
        raise HistoryError(errors[0] + (f" (and {len(errors) - 1} more bad saved runs)" if len(errors) > 1 else ""))
    if skipped is not None:
        skipped += errors
    return runs


def series(runs: list[SavedRun], fullname: str) -> list[tuple[SavedRun, BenchmarkRecord]]:
    """The runs that have benchmark ``fullname``, with that benchmark, in the given order."""
    return [(run, run.benchmarks[fullname]) for run in runs if fullname in run.benchmarks]
