"""The history of each benchmark across saved runs, its changes marked (docs/method.md, section 9): the
verdict of the verdicts that judged a run, else ``moved`` beyond ``threshold`` (0.10 = 10 %) against the
previous normal run; a test-only run is never the base of the next run's change."""

from __future__ import annotations

from dataclasses import dataclass

from perf.report.inputs import ReportInputs
from perf.runs import BenchmarkRecord, SavedRun, describe_injected

#: Verdict words (lower case) that mean slower / faster; anything else marks nothing.
SLOWER = frozenset({"slower", "regression", "regressed", "worse", "fail", "failed"})
FASTER = frozenset({"faster", "improvement", "improved", "better"})
DEFAULT_THRESHOLD = 0.10
#: The mark of a point whose median moved beyond the threshold and that no verdict judged.
MOVED = "moved"


@dataclass(frozen=True)
class Point:
    """One benchmark in one run: ``index`` (0 = oldest), ``change`` of the median (a fraction) against the
    previous normal run, ``mark`` (the gate's verdict word, else "moved", or None) and why, ``level``
    ("slower" / "faster": a change point of the history starts here)."""

    index: int
    run: SavedRun
    bench: BenchmarkRecord
    change: float | None
    mark: str | None
    reason: str
    commit_changed: bool
    level: str | None = None

    @property
    def injected(self) -> bool:
        """Whether the run was made with test-only options (its times are not the code's own)."""
        return bool(self.run.injected)

    @property
    def median(self) -> float:
        return self.bench.stat("median")


def history(inputs: ReportInputs, fullname: str, threshold: float = DEFAULT_THRESHOLD) -> list[Point]:
    """The points of benchmark ``fullname`` over ``inputs.runs`` (oldest first), changes marked; the mark is the
    gate's word of the verdict (another tool's "regression" is "slower", "improved" is "faster"), else "moved"."""
    points: list[Point] = []
    base: Point | None = None
    for index, run in enumerate(inputs.runs):
        if (bench := run.benchmarks.get(fullname)) is None:
            continue
        reasons = [f"injected ({describe_injected(run.injected)})"] if run.injected else []
        word = str((inputs.verdict_for(run, bench) or {}).get("verdict", "")).lower()
        change, mark = None, "slower" if word in SLOWER else "faster" if word in FASTER else word or None
        if mark is not None:
            reasons.append(f"compare verdict: {mark}")
        if base is not None and base.median > 0:
            change = (bench.stat("median") - base.median) / base.median
            if abs(change) > threshold:
                mark = mark or MOVED
                reasons.append(f"median {change:+.0%} vs {base.run.name}")
        level = None
        if (found := inputs.change_at(index, fullname)) is not None:
            level = "slower" if found.change.ratio > 1 else "faster"
            reasons.append(f"change point: level {100 * (found.change.ratio - 1):+.1f}%")
        commit_changed = base is not None and (run.commit, run.dirty) != (base.run.commit, base.run.dirty)
        reason = "; ".join(reasons) if mark or level or run.injected else ""
        points.append(Point(index, run, bench, change, mark, reason, commit_changed, level))
        if not run.injected:
            base = points[-1]
    return points
