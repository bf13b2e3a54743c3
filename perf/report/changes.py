"""The history of each benchmark across saved runs, with its changes marked (pure functions, no plotting).

A point is marked with the verdict of the compare verdicts that judged its run (`perf.verdicts.Verdicts.judges`),
else ``moved`` when its median moved by more than ``threshold`` (a fraction: 0.10 = 10 %) against the previous
normal run with the benchmark; commit changes are flagged. A test-only run (`perf.runs.SavedRun.injected`) is marked
like any other and flagged ``injected``, but is never the base of the next run's change.
"""

from __future__ import annotations

from dataclasses import dataclass

from perf.report.inputs import ReportInputs
from perf.runs import BenchmarkRecord, SavedRun, describe_injected

#: Verdict words (lower case) that mean slower / faster; anything else marks nothing.
SLOWER = frozenset({"slower", "regression", "regressed", "worse", "fail", "failed"})
FASTER = frozenset({"faster", "improvement", "improved", "better"})
DEFAULT_THRESHOLD = 0.10


@dataclass(frozen=True)
class Point:
    """One benchmark in one run: times in seconds."""

    index: int  # position of the run in the history (0 = oldest)
    run: SavedRun
    bench: BenchmarkRecord
    change: float | None  # (median - base median) / base median, base: the previous normal run; None for none
    mark: str | None  # the gate's verdict word for this run ("slower", "no change", ...), else "moved", or None
    reason: str  # why it is marked ("median +23% vs 0002", "compare verdict: slower"), or ""
    commit_changed: bool  # the run's commit differs from the previous normal run's
    #: "slower" / "faster" when a change point of the history starts at this run (`perf.store.changepoints`).
    level: str | None = None

    @property
    def injected(self) -> bool:
        """Whether the run was made with test-only options (its times are not the code's own)."""
        return bool(self.run.injected)

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
    return list(dict.fromkeys(name for run in reversed(runs) for name in run.benchmarks))


#: The mark of a point whose median moved beyond the threshold and that no verdict judged.
MOVED = "moved"


def verdict_word(verdict: dict | None) -> str | None:
    """The gate's word of a verdict entry (another tool's "regression" is "slower", "improved" is "faster"), or
    None without one."""
    word = str((verdict or {}).get("verdict", "")).lower()
    return "slower" if word in SLOWER else "faster" if word in FASTER else word or None


def history(inputs: ReportInputs, fullname: str, threshold: float = DEFAULT_THRESHOLD) -> list[Point]:
    """The points of benchmark ``fullname`` over ``inputs.runs`` (oldest first), changes marked; each compared with
    the previous normal (not injected) run."""
    points: list[Point] = []
    base: Point | None = None
    for index, run in enumerate(inputs.runs):
        bench = run.benchmarks.get(fullname)
        if bench is None:
            continue
        change, mark, reasons = None, None, []
        if run.injected:
            reasons.append(f"injected ({describe_injected(run.injected)})")
        verdict = verdict_word(inputs.verdict_for(run, bench))
        if verdict is not None:
            mark = verdict
            reasons.append(f"compare verdict: {verdict}")
        if base is not None and base.median > 0:
            change = (bench.stat("median") - base.median) / base.median
            if abs(change) > threshold:
                mark = mark or MOVED
                reasons.append(f"median {change:+.0%} vs {base.run.name}")
        level = None
        found = inputs.change_at(index, fullname)
        if found is not None:
            level = "slower" if found.change.ratio > 1 else "faster"
            reasons.append(f"change point: level {100 * (found.change.ratio - 1):+.1f}%")
        commit_changed = base is not None and (run.commit, run.dirty) != (base.run.commit, base.run.dirty)
        point = Point(index, run, bench, change, mark, "; ".join(reasons) if mark or level or run.injected else "",
                      commit_changed, level)
        points.append(point)
        if not run.injected:
            base = point
    return points
