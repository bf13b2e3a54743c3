"""Change points in a benchmark's history (one benchmark on one machine and branch, one point per run, oldest first,
test-only runs left out): where its median moved, as a ratio of geometric means ``after / before``, at the first run
of the new level. The rule, its noise floor and why: docs/method.md, section 11."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from perf.measure.stability import robust_sd
from perf.runs import BenchmarkRecord, SavedRun

#: Relative run-to-run scatter assumed at least (0.5%): a GPU run never repeats closer than that.
NOISE_FLOOR = 0.005
#: Standard errors the shift must exceed (about p < 1e-4 two-sided for a normal scatter).
Z = 4.0
#: Degrees of freedom the floor counts for when pooled with a larger scatter of the data.
PRIOR_DF = 4
#: Runs a level of a history needs at least, before and after a change point (`history_change_points`).
MIN_SEGMENT = 2


@dataclass(frozen=True)
class ChangePoint:
    """A change of level at ``index`` (the new level's first point): ``before_s`` / ``after_s`` (geometric
    means of the segments, seconds), ``ratio`` after / before, ``z`` in standard errors, points after."""

    index: int
    before_s: float
    after_s: float
    ratio: float
    z: float
    points_after: int


@dataclass(frozen=True)
class HistoryChange:
    """A change point of one benchmark's history, named by the run and commit where the new level starts."""

    fullname: str
    name: str
    machine_key: str
    branch: str | None
    run_id: str
    commit: str | None
    saved_at: str | None
    change: ChangePoint


def find_change_points(medians_s: Sequence[float], *, min_effect: float = 0.02, noise_floor: float = NOISE_FLOOR,
                       z: float = Z, min_size: int = 1) -> list[ChangePoint]:  # fmt: skip
    """The change points of a series of medians (seconds, oldest first; none for fewer than 3 points or any
    not > 0), every level at least ``min_size`` points long."""
    values = np.asarray(medians_s, dtype=np.float64)
    if values.size < 3 or not np.all(np.isfinite(values)) or np.any(values <= 0):
        return []
    import ruptures

    x, floor = np.log(values), math.log1p(noise_floor)
    scatter = max(floor, min(robust_sd(np.diff(x)) / math.sqrt(2), robust_sd(x)))
    kept = ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(x.reshape(-1, 1)).predict(
        pen=2 * scatter**2 * math.log(x.size))[:-1]  # fmt: skip
    while failing := [(c.z, c.index) for c, passed in _judge(x, kept, floor, min_effect, z) if not passed]:
        kept.remove(min(failing)[1])  # drop the weakest failing candidate, judge the others again
    return [c for c, _ in _judge(x, kept, floor, min_effect, z)]


def history_change_points(medians_s: Sequence[float], *, min_effect: float = 0.02,
                          scatter: float = 0.0) -> list[ChangePoint]:  # fmt: skip
    """`find_change_points` against the benchmark's own between-process ``scatter`` (relative, 0 when not profiled:
    `perf.gate.noise.floors_from_profile`): the one rule of the gate's history (`perf.gate.history.reference_for`),
    of ``perf-history changes`` and of the reports."""
    return find_change_points(medians_s, min_effect=min_effect, noise_floor=max(NOISE_FLOOR, scatter),
                              min_size=MIN_SEGMENT)


def _judge(x: np.ndarray, breaks: list[int], floor: float, min_effect: float,
           z: float) -> list[tuple[ChangePoint, bool]]:  # fmt: skip
    """Each break's change point (its shift in standard errors: ``z``) and whether it passes."""
    from scipy import stats

    bounds = [0, *breaks, x.size]
    squares = float(np.sum(np.concatenate([x[a:b] - x[a:b].mean() for a, b in zip(bounds, bounds[1:])]) ** 2))
    df = x.size - (len(bounds) - 1)
    if df > 0 and squares / df > floor**2:  # noisier than the floor: pooled with it, Student's t
        sigma = math.sqrt((squares + PRIOR_DF * floor**2) / (df + PRIOR_DF))
        critical = float(stats.t.isf(stats.norm.sf(z), df + PRIOR_DF))
    else:  # within the floor: the floor is the known scatter
        sigma, critical = floor, z
    out = []
    for left, at, right in zip(bounds, bounds[1:], bounds[2:]):
        before, after = x[left:at].mean(), x[at:right].mean()
        score = abs(after - before) / (sigma * math.sqrt(1 / (at - left) + 1 / (right - at)))
        change = ChangePoint(int(at), math.exp(before), math.exp(after), math.exp(after - before), float(score),
                             int(right - at))  # fmt: skip
        out.append((change, score > critical and abs(after - before) > math.log1p(min_effect)))
    return out


def history_changes(runs: Sequence[SavedRun], *, min_effect: float = 0.02,
                    floors: Mapping[str, float] | None = None) -> list[HistoryChange]:  # fmt: skip
    """The change points of every history (benchmark, machine, branch) in ``runs`` (from files or the store alike;
    test-only ones left out); ``floors``: each benchmark's between-process scatter (`history_change_points`)."""
    from perf.store.db import branch_of, machine_key, run_id_of  # here: the gate's history needs no SQLAlchemy

    histories: dict[tuple[str, str, str | None], list[tuple[SavedRun, BenchmarkRecord]]] = defaultdict(list)
    for run in runs:
        key, branch = machine_key(run.machine_info), branch_of(run.raw)
        for bench in run.benchmarks.values():
            if not run.injected and bench.median_s is not None:
                histories[(bench.fullname, key, branch)].append((run, bench))
    found = []
    for (fullname, key, branch), series in sorted(histories.items(), key=lambda item: str(item[0])):
        for c in history_change_points([bench.median_s for _, bench in series], min_effect=min_effect,
                                       scatter=(floors or {}).get(fullname, 0.0)):  # fmt: skip
            run, bench = series[c.index]
            found.append(HistoryChange(fullname, bench.name, key, branch, run_id_of(run.raw), run.commit,
                                       run.datetime, c))  # fmt: skip
    return found
