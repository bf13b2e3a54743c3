"""Read saved benchmark runs and the gate's verdicts: the data API for reports and plots.

Saved runs are pytest-benchmark's files, ``<storage>/<machine id>/NNNN_<name>.json`` (storage ``.benchmarks`` by
default; machine id like ``Linux-CPython-3.11-64bit``). The perf plugin turns ``--benchmark-save-data`` on, so
every saved benchmark keeps its raw rounds: ``benchmarks[i]["stats"]["data"]`` is the list of seconds per call,
one per round, in the order the rounds ran (a round of ``stats["iterations"]`` calls, divided by that number).
Other keys used here: ``benchmarks[i]["fullname"]`` (the pytest node id; the key runs are matched on),
``["name"]``, ``["group"]``, ``["extra_info"]`` (the suite's extras: ``stability`` from `perf.measure.stability`,
``clock``, images/s, percentiles, GPU telemetry), ``machine_info["perf"]`` (the fingerprint),
``commit_info``, ``datetime``.

*Metrics.* ``stats.data`` is a benchmark's primary metric, "time" (GPU time per call for inference on a GPU;
seconds per frame or per tick, in blocks of consecutive frames, for the video pipelines; see `perf.measure.samples`).
More series the gate compares sit in ``extra_info["metrics"][name] = {"label", "unit", "data": [seconds...],
"judged": bool}``: ``host`` (host latency of a call with synchronisation; judged where the call is launch-bound,
``extra_info["launch_bound"]``), ``stage:<name>`` (seconds per frame of one pipeline stage, in the same blocks).
`BenchmarkRecord.metrics` returns them all by name.

``--perf-compare`` writes its verdicts to ``<reports>/perf-compare.json`` (and ``.md``), see
`perf.gate.compare.VERDICT_FILE`: ``{"format": 1, "baseline": {...}, "settings": {...}, "summary": {...},
"rows": [{"fullname", "name", "group", "verdict", "note", "baseline_median_s", "current_median_s", "ratio", "lo",
"hi", "n_baseline", "n_current", ...}]}``.

API::

    runs = load_runs(".benchmarks")                 # every saved run, oldest first (all machine folders)
    run = runs[-1]; run.benchmarks["perf/test_inference_speed.py::test_inference_speed[torch-fp32-b1]"]
    bench.data                                      # numpy float64 [rounds], seconds per call, or None
    bench.median_s, bench.stats, bench.extra_info, bench.stability
    load_verdicts("reports")                        # the last --perf-compare's JSON, or None
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perf.validate import run_problem

_RUN_NUMBER = re.compile(r"^(\d{4})_")
#: The name of a benchmark's primary metric: its rounds (``stats.data``).
PRIMARY = "time"


class HistoryError(ValueError):
    """A saved run that cannot be read; the message names the file and the problem."""


@dataclass(frozen=True)
class BenchmarkRecord:
    """One benchmark of a saved run. ``data``: raw rounds, seconds per call (None if saved without data)."""

    fullname: str
    name: str
    group: str | None
    data: np.ndarray | None
    stats: Mapping[str, Any]
    extra_info: Mapping[str, Any]

    @property
    def median_s(self) -> float | None:
        """Median seconds per call (from the rounds when present, else pytest-benchmark's stats)."""
        if self.data is not None and self.data.size:
            return float(np.median(self.data))
        value = self.stats.get("median")
        return None if value is None else float(value)

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
        stats = dict(bench.get("stats") or {})
        raw = stats.pop("data", None)
        return cls(
            fullname=str(bench["fullname"]),
            name=str(bench.get("name", bench["fullname"])),
            group=bench.get("group"),
            data=None if raw is None else np.asarray(raw, dtype=np.float64),
            stats=stats,
            extra_info=dict(bench.get("extra_info") or {}),
        )


@dataclass(frozen=True)
class SavedRun:
    """A saved run: its file, number (``NNNN_``; None for other names), and benchmarks by full name."""

    path: Path
    number: int | None
    datetime: str | None
    commit: str | None
    machine_info: Mapping[str, Any]
    benchmarks: dict[str, BenchmarkRecord] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def fingerprint(self) -> Mapping[str, Any] | None:
        """``machine_info["perf"]`` (`perf.measure.machine.machine_fingerprint` + device), or None."""
        return self.machine_info.get("perf")


def run_from_json(data: Mapping[str, Any], path: str | os.PathLike[str] = "<memory>") -> SavedRun:
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
    )


def load_run(path: str | os.PathLike[str]) -> SavedRun:
    """Read one saved run; `HistoryError` names the file when it is missing, unreadable or not a run."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise HistoryError(f"'{path}': no such file") from e
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HistoryError(f"'{path}': cannot read a saved run: {e}") from e
    return run_from_json(data, path)


def run_files(storage: str | os.PathLike[str] = ".benchmarks", machine: str | None = None) -> list[Path]:
    """Saved run files (``NNNN_*.json``) under ``storage``, in ``machine`` (a machine-id folder) or in all,
    oldest first (by run number, then folder)."""
    root = Path(storage)
    folders = [root / machine] if machine else sorted(p for p in root.glob("*") if p.is_dir())
    files = [f for folder in folders for f in folder.glob("[0-9][0-9][0-9][0-9]_*.json")]
    return sorted(files, key=lambda f: (f.name, str(f.parent)))


def load_runs(storage: str | os.PathLike[str] = ".benchmarks", machine: str | None = None) -> list[SavedRun]:
    """Every saved run under ``storage`` (see `run_files`), oldest first; a bad file raises `HistoryError`."""
    return [load_run(path) for path in run_files(storage, machine)]


def series(runs: list[SavedRun], fullname: str) -> list[tuple[SavedRun, BenchmarkRecord]]:
    """The runs that have benchmark ``fullname``, with that benchmark, in the given order."""
    return [(run, run.benchmarks[fullname]) for run in runs if fullname in run.benchmarks]


def load_verdicts(reports_dir: str | os.PathLike[str] = "reports") -> dict[str, Any] | None:
    """The verdict table of the last ``--perf-compare`` (``<reports>/perf-compare.json``), or None if absent."""
    from perf.gate.compare import VERDICT_FILE

    path = Path(reports_dir) / VERDICT_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as e:
        raise HistoryError(f"'{path}': cannot read the verdicts: {e}") from e
