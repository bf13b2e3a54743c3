"""The history of each benchmark across saved runs, with its changes marked (pure functions, no plotting).

A point is *marked* when its median moved by more than ``threshold`` (a fraction: 0.10 = 10 %) against the
previous run that has the same benchmark, or -- for the newest run -- when the compare verdict says ``slower`` or
``faster``. Commit changes (a different ``commit_info.id`` than the previous run) are flagged as well.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from perf.report.inputs import ReportInputs
from perf.runs import BenchmarkRecord, SavedRun

#: Verdict words (lower case) that mean slower / faster; anything else marks nothing.
SLOWER = frozenset({"slower", "regression", "regressed", "worse", "fail", "failed"})
FASTER = frozenset({"faster", "improvement", "improved", "better"})
DEFAULT_THRESHOLD = 0.10


def parse_threshold(value: str) -> float:
    """``"10%"`` or ``"0.1"`` -> 0.1 (a fraction > 0)."""
    text = value.strip()
    try:
        fraction = float(text.removesuffix("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Could not parse value: {value!r}. Expected e.g. 10% or 0.1.") from None
    if not fraction > 0 or math.isinf(fraction):
        raise argparse.ArgumentTypeError(f"Could not parse value: {value!r}. Expected a change > 0, e.g. 10%.")
    return fraction


@dataclass(frozen=True)
class Point:
    """One benchmark in one run: times in seconds."""

    index: int  # position of the run in the history (0 = oldest)
    run: SavedRun
    bench: BenchmarkRecord
    change: float | None  # (median - previous median) / previous median; None for the first point
    mark: str | None  # "slower", "faster" or None
    reason: str  # why it is marked ("median +23% vs 0002", "compare verdict: slower"), or ""
    commit_changed: bool  # the run's commit differs from the previous run's

    @property
    def median(self) -> float:
        return self.bench.stat("median")

    @property
    def q1(self) -> float:
        return self.bench.stat("q1")

    @property
    def q3(self) -> float:
        return self.bench.stat("q3")


def bench_names(runs: list[SavedRun]) -> list[str]:
    """Every benchmark fullname over ``runs``: the newest run's order first, then older-only ones."""
    names: dict[str, None] = {}
    for run in reversed(runs):
        names.update(dict.fromkeys(run.benchmarks))
    return list(names)


def _verdict_mark(verdict: dict | None) -> str | None:
    word = str((verdict or {}).get("verdict", "")).lower()
    return "slower" if word in SLOWER else "faster" if word in FASTER else None


def history(inputs: ReportInputs, fullname: str, threshold: float = DEFAULT_THRESHOLD) -> list[Point]:
    """The points of benchmark ``fullname`` over ``inputs.runs`` (oldest first), changes marked."""
    points: list[Point] = []
    previous: Point | None = None
    last = len(inputs.runs) - 1
    for index, run in enumerate(inputs.runs):
        bench = run.benchmarks.get(fullname)
        if bench is None:
            continue
        change, mark, reason = None, None, ""
        if previous is not None and previous.median > 0:
            change = (bench.stat("median") - previous.median) / previous.median
            if abs(change) > threshold:
                mark = "slower" if change > 0 else "faster"
                reason = f"median {change:+.0%} vs {previous.run.number:04d}"
        verdict_mark = _verdict_mark(inputs.verdict_for(bench)) if index == last else None
        if verdict_mark is not None:
            mark = verdict_mark
            reason = "; ".join(filter(None, [reason, f"compare verdict: {verdict_mark}"]))
        commit_changed = previous is not None and (run.commit, run.dirty) != (previous.run.commit, previous.run.dirty)
        previous = Point(index, run, bench, change, mark, reason, commit_changed)
        points.append(previous)
    return points


def previous_change(inputs: ReportInputs, fullname: str, threshold: float = DEFAULT_THRESHOLD) -> Point | None:
    """The newest run's point of ``fullname`` (None when the newest run lacks it)."""
    points = history(inputs, fullname, threshold)
    latest = inputs.latest
    return points[-1] if points and latest is not None and points[-1].run is latest else None
