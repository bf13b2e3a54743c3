"""``--perf-compare``: one verdict row per benchmark, each judged metric against main's history of this runner at
its share of the run's `Budget`; old saved rows may say "unstable". docs/method.md, section 4 (items 7, 8) and 8."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from perf.gate.history import HistoryReference, record_median, reference_for
from perf.gate.judge import (DEFAULT_FLOOR, FASTER, INCONCLUSIVE, MIN_REFERENCE, NO_CHANGE, SLOWER, Budget, Judgement,
                             Reference, judge, judge_pairs, within_reference)  # fmt: skip
from perf.measure.stability import StabilityRule
from perf.runs import PRIMARY, BenchmarkRecord, SavedRun

if TYPE_CHECKING:
    from perf.gate.noise import NoiseProfile

MISSING = "missing"
VERDICTS = (SLOWER, FASTER, NO_CHANGE, INCONCLUSIVE, MISSING)
FORMAT = 3
HOST, STAGE = "host", "stage:"


@dataclass(frozen=True)
class GateSettings:
    """How ``--perf-compare`` decides: floor (a fraction), stability rule, whether inconclusive rows fail, confirmation
    pairs at most (0: none), confirmation seconds (`perf.gate.confirm.next_look_pairs`; None: no limit)."""

    min_effect: float = DEFAULT_FLOOR
    rule: StabilityRule = field(default_factory=StabilityRule)
    fail_inconclusive: bool = False
    confirm: int = 0
    confirm_budget_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"min_effect": self.min_effect, "max_cv": self.rule.max_cv, "max_drift": self.rule.max_drift,
                "fail_inconclusive": self.fail_inconclusive, "confirm_pairs": self.confirm,
                "confirm_budget_s": self.confirm_budget_s}


@dataclass
class Baseline:
    """``runs``, main's comparable history on this runner (oldest first), and the noise profile that seeds it."""

    runs: list[SavedRun]
    noise: NoiseProfile | None = None

    def __post_init__(self) -> None:
        if not self.runs:
            raise ValueError("a baseline needs at least one saved run")
        self._cache: dict[tuple[str, str, float], HistoryReference | None] = {}
        #: (judged metrics, floor) -> how many runs the first pass flags, each judged against the others (`budget`)
        self.flagged: dict[tuple[int, float], int] = {}

    @property
    def latest(self) -> SavedRun:
        return self.runs[-1]

    @property
    def benchmarks(self) -> dict[str, BenchmarkRecord]:
        return self.latest.benchmarks

    def noise_fields(self) -> dict[str, Any]:
        """The verdict document's ``settings.noise_profile`` (path, "in memory", or None) and ``noise_processes``."""
        noise = self.noise
        return {"noise_profile": None if noise is None else str(noise.path or "in memory"),
                "noise_processes": None if noise is None else noise.processes}

    def reference(self, fullname: str, metric: str, min_effect: float = DEFAULT_FLOOR) -> HistoryReference | None:
        """The history's reference of one metric (`perf.gate.history.reference_for`), seeded and its change points
        judged with the noise profile's entry; ``min_effect``: the smallest level shift that restarts it."""
        key = (fullname, metric, min_effect)
        if key not in self._cache:
            entry = self.noise.entry(fullname, metric) if self.noise is not None else None
            seed, scatter = (entry.medians_s, math.expm1(entry.between_sd)) if entry else ((), 0.0)
            self._cache[key] = reference_for(self.runs, fullname, metric, seed, min_effect=min_effect, scatter=scatter)
        return self._cache[key]

    def judged_metrics(self, expected: Iterable[str] | None = None) -> int:
        """How many metrics a run of the ``expected`` benchmarks (None: the latest run's) is judged on, at least 1,
        each with its metrics in the latest history run that measured it (docs/method.md, section 4, item 6)."""
        newest = {name: b for run in self.runs for name, b in run.benchmarks.items()}  # a later run's replaces
        names = self.benchmarks if expected is None else expected
        return max(1, sum(len(judged_names(newest[name])) for name in names if name in newest))

    def describe(self) -> str:
        first, last = self.runs[0], self.latest
        short = ("; too short to know how far identical code moves between processes (no noise profile): judged "
                 "against the latest run's own spread; seed a history with --perf-noise=10"
                 if len(self.runs) < MIN_REFERENCE and self.noise is None else "")  # fmt: skip
        return (f"main's history of {len(self.runs)} comparable run(s) on this runner ({first.name} .. {last.name}, "
                f"latest commit {str(last.commit or 'unknown')[:12]}){short}")


@dataclass
class MetricResult:
    """One metric judged: medians (seconds), ratio, interval, verdict, ``detectable`` (a fraction); for a stage,
    ``contribution``: the ratio's excess times the stage's share of the reference frame (``[lo, hi]``)."""

    metric: str
    label: str
    judged: bool
    verdict: str
    baseline_median_s: float
    current_median_s: float
    ratio: float
    lo: float
    hi: float
    detectable: float | None = None
    contribution: tuple[float, float] | None = None
    note: str = ""
    reference_runs: int = 0
    level: float | None = None

    def describe(self, word: str | None = None) -> str:
        """``host latency (sync) 1.085 [1.051, 1.120] slower``, or for a stage ``stage preprocess +0.41 ms/frame
        (+5.2% of the frame [4.6%, 5.8%]) slower``; ``word`` in place of the verdict."""
        if self.contribution is None:
            return f"{self.label} {self.ratio:.3f} [{self.lo:.3f}, {self.hi:.3f}] {word or self.verdict}"
        (lo, hi), delta_ms = self.contribution, (self.current_median_s - self.baseline_median_s) * 1e3
        share = f"{100 * (lo + hi) / 2:+.1f}% of the frame [{100 * lo:+.1f}%, {100 * hi:+.1f}%]"
        return f"{self.label} {delta_ms:+.3g} ms/frame ({share}) {word or self.verdict}"


@dataclass
class Row:
    """One benchmark's verdict line (seconds per call, frame or tick; the primary metric's ratio). ``detectable``: a
    fraction; ``suspect``: metrics the first pass called slower; ``why`` / ``kernels_moved_us``: kernels that moved
    most and all (microseconds per call); ``n_current`` / ``n_baseline``: rounds (None: saved without them)."""

    fullname: str
    name: str
    group: str | None
    verdict: str
    note: str = ""
    baseline_median_s: float | None = None
    current_median_s: float | None = None
    ratio: float | None = None
    lo: float | None = None
    hi: float | None = None
    n_baseline: int | None = None
    n_current: int | None = None
    moved: str = ""
    detectable: float | None = None
    reference_runs: int | None = None
    suspect: list[str] = field(default_factory=list)
    confirmation: dict[str, Any] | None = None
    metrics: list[MetricResult] = field(default_factory=list)
    why: list[dict[str, Any]] = field(default_factory=list)
    kernels_moved_us: float | None = None


def judged_names(bench: BenchmarkRecord) -> list[str]:
    """The metrics of ``bench`` the gate judges: ``time`` first, ``host`` if launch-bound, ``stage:*`` marked judged."""
    launch_bound = bool(bench.extra_info.get("launch_bound"))
    return [*([PRIMARY] if PRIMARY in bench.metrics() or bench.median_s else []),
            *(m for m in bench.metrics() if (m == HOST and launch_bound)
              or (m.startswith(STAGE) and bench.metric_info(m).get("judged")))]  # fmt: skip


def stage_share(metric: str, stage_s: float | None, frame_s: float | None, floor: float) -> tuple[float | None, float]:
    """(a stage's share of the reference frame, None for other metrics; the floor on its ratio: ``floor`` / share)."""
    share = min(1.0, stage_s / frame_s) if metric.startswith(STAGE) and frame_s and stage_s else None
    return share, floor / share if share else floor


def reference_of(baseline: Baseline, fullname: str, metric: str,
                 min_effect: float = DEFAULT_FLOOR) -> tuple[Reference | None, int, str]:  # fmt: skip
    """(the reference, the processes it rests on, a note) of one metric: the history's, or with too short a
    history the latest run's own within-process spread (noted); None when neither has the series."""
    if (found := baseline.reference(fullname, metric, min_effect)) is not None:
        note = f"history restarted at a change point ({found.restarted_at})" if found.restarted_at else ""
        return found.reference, found.reference.n, note
    base = baseline.latest.benchmarks.get(fullname)
    data = None if base is None else base.metrics().get(metric)
    if data is None or not data.size or record_median(base, metric) is None:  # a NaN round: no median
        return None, 0, ""
    note = (f"history too short ({len(baseline.runs)} comparable run(s), no noise profile): judged against "
            f"{baseline.latest.name} alone, within-process only; seed a history with --perf-noise=10")
    return within_reference(data), 1, note


def _levels(level: float | Budget) -> tuple[float, float | None]:
    """(the level of "slower", of "faster"; None: the same) of a plain level or a `Budget`'s first pass."""
    return (level.first_level, level.faster_level) if isinstance(level, Budget) else (level, None)


def _geomean(values: Sequence[float]) -> float:
    return math.exp(float(np.mean(np.log(values))))


def _result(bench: BenchmarkRecord, metric: str, done: list[MetricResult], base_s: float, value_s: float, floor: float,
            level: float, runs: int, decide: Callable[[float], Judgement], note: str = "") -> MetricResult:
    """A `MetricResult` of ``decide(its floor)`` after the judged metrics ``done``; a stage's also its contribution."""
    share, metric_floor = stage_share(metric, base_s, done[0].baseline_median_s if done else None, floor)
    result = decide(metric_floor)
    label = bench.metric_info(metric).get("label") or metric.replace(STAGE, "stage ")
    return MetricResult(metric, str(label), True, result.verdict, base_s, value_s, result.ratio, result.lo,
                        result.hi, result.detectable * (share or 1.0), note=note, reference_runs=runs, level=level,
                        contribution=((result.lo - 1) * share, (result.hi - 1) * share) if share else None)


def _moved(metrics: list[MetricResult]) -> str:
    """What moved, largest first: the other metrics called slower or faster, after the primary when it moved too;
    when the primary moved and no stage did, the stage with the largest share of the change, "moved most"."""
    primary, others = metrics[0], metrics[1:]
    changed = sorted((m for m in others if m.verdict in (SLOWER, FASTER)),
                     key=lambda m: -abs(m.current_median_s - m.baseline_median_s))
    moved = primary.verdict in (SLOWER, FASTER)
    words = [m.describe() for m in ([primary] if moved and others else []) + changed]
    stages = [m for m in others if m.contribution is not None]
    if moved and stages and not any(m.contribution for m in changed):
        sign = 1 if primary.verdict == SLOWER else -1
        top = max(stages, key=lambda m: sign * sum(m.contribution))  # type: ignore[arg-type]
        if sign * sum(top.contribution) > 0:  # type: ignore[arg-type]
            words.append(top.describe("moved most"))
    return "; ".join(words)


def _assemble(row: Row, metrics: list[MetricResult], unjudged: str) -> Row:
    """Fill ``row`` from its judged metrics (primary first): medians, ratio, interval, suspects, verdict; without
    the primary judged, note ``unjudged`` alone."""
    if not metrics or metrics[0].metric != PRIMARY:
        row.note = unjudged
        return row
    for name in ("note", "baseline_median_s", "current_median_s", "ratio", "lo", "hi", "detectable", "reference_runs"):
        setattr(row, name, getattr(metrics[0], name))
    row.metrics, row.moved, row.suspect = metrics, _moved(metrics), [m.metric for m in metrics if m.verdict == SLOWER]
    row.verdict = SLOWER if row.suspect else FASTER if any(m.verdict == FASTER for m in metrics) else NO_CHANGE
    return row


def judge_benchmark(baseline: Baseline, current: BenchmarkRecord, level: float | Budget, floor: float = DEFAULT_FLOOR,
                    more: Sequence[BenchmarkRecord] = ()) -> Row:  # fmt: skip
    """The first-pass verdict row of one benchmark, every judged metric at one-sided ``level`` (or a `Budget`'s);
    ``more``: the same benchmark in more processes of the same code, judged together with ``current``."""
    level, faster = _levels(level)
    row = Row(current.fullname, current.name, current.group, MISSING, current_median_s=current.median_s)
    metrics: list[MetricResult] = []
    for metric in judged_names(current):
        value = record_median(current, metric)
        ref, runs, note = (reference_of(baseline, current.fullname, metric, floor) if value is not None
                           else (None, 0, ""))
        if ref is None and metric == PRIMARY:
            break
        if ref is None:
            continue
        candidates = [v for r in (current, *more) if (v := record_median(r, metric)) is not None] if more else []
        value = _geomean(candidates) if candidates else value
        metrics.append(_result(current, metric, metrics, ref.median_s, value, floor, level, runs,  # type: ignore
                               lambda f: judge(ref, candidates or [value], level, f, faster), note))  # type: ignore
    base = baseline.benchmarks.get(current.fullname)  # the same benchmark in the latest saved run
    row = _assemble(row, metrics, "not in the history" if base is None else
                    "no rounds to judge (saved without --benchmark-save-data)")  # fmt: skip
    if row.metrics:
        row.n_baseline = None if base is None or base.data is None else int(base.data.size)
        row.n_current = None if current.data is None else int(current.data.size)
    return row


def judge_paired(base: Sequence[BenchmarkRecord], candidate: Sequence[BenchmarkRecord], level: float | Budget,
                 floor: float = DEFAULT_FLOOR, baseline: Baseline | None = None) -> Row:  # fmt: skip
    """One benchmark judged on K pairs of processes (``base[i]``, ``candidate[i]`` back to back) by
    `perf.gate.judge.judge_pairs`, with the history's spread where ``baseline`` has one; medians: geometric means."""
    level, faster = _levels(level)
    first = candidate[0]
    row = Row(first.fullname, first.name, first.group, MISSING)
    metrics: list[MetricResult] = []
    for name in judged_names(first):
        b, c = [record_median(r, name) for r in base], [record_median(r, name) for r in candidate]
        if any(v is None for v in (*b, *c)):
            continue
        prior = found.reference if (found := baseline and baseline.reference(first.fullname, name, floor)) else None
        try:
            metrics.append(_result(first, name, metrics, _geomean(b), _geomean(c), floor, level,  # type: ignore
                                   prior.n if prior else 0, lambda f: judge_pairs(b, c, level, f, prior, faster)))
        except ValueError as e:  # too few pairs for a spread
            row.note = str(e)
            return row
    return _assemble(row, metrics, "no rounds to judge in every pair")


def explain_slower(row: Row, baseline: Baseline, current: BenchmarkRecord) -> None:
    """For a slower row: the kernels that moved most against the latest run's table (`perf.profile.kernels`)."""
    from perf.profile.kernels import kernel_changes, total_change_us

    base = baseline.benchmarks.get(row.fullname)
    tables = (base.extra_info.get("kernels") if base else None), current.extra_info.get("kernels")
    row.why, row.kernels_moved_us = kernel_changes(*tables), total_change_us(*tables)


def compare_runs(baseline: Baseline, current: Mapping[str, BenchmarkRecord], settings: GateSettings,
                 expected: Iterable[str] | None = None, judged: Mapping[str, Row] | None = None) -> list[Row]:
    """Rows for every current benchmark (``judged``: rows already judged, kept), then a "missing" row for each
    history benchmark of ``expected`` (this session's node ids; None: the latest run's) not measured."""
    wanted = None if expected is None else set(expected)  # once: an iterator of node ids is read once
    plan, judged = budget(baseline, settings, wanted), judged or {}
    rows = [judged[name] if name in judged else judge_benchmark(baseline, bench, plan, settings.min_effect)
            for name, bench in current.items()]
    return rows + [Row(name, bench.name, bench.group, MISSING, "not measured in this run (skipped or failed)",
                       baseline_median_s=bench.median_s)
                   for name, bench in baseline.benchmarks.items()
                   if name not in current and (wanted is None or name in wanted)]  # fmt: skip


def budget(baseline: Baseline, settings: GateSettings, expected: Iterable[str] | None = None) -> Budget:
    """The run's error budget: its judged metrics, whether suspects are confirmed, and with confirmation how many
    of the history's runs its first pass flags, each judged against the others (docs/method.md, section 4, item 6)."""
    plan, runs = Budget(baseline.judged_metrics(expected), settings.confirm > 0), baseline.runs
    if not plan.confirm or len(runs) <= MIN_REFERENCE:
        return plan
    key = (plan.metrics, settings.min_effect)
    if key not in baseline.flagged:
        baseline.flagged[key] = sum(any(
            row.verdict == SLOWER and row.suspect for row in (judge_benchmark(
                Baseline(runs[:i] + runs[i + 1:], baseline.noise), bench, plan, settings.min_effect)
                for bench in run.benchmarks.values())) for i, run in enumerate(runs))  # fmt: skip
    return replace(plan, flagged=baseline.flagged[key], judged=len(runs))
