"""The gate's self-test: how often does ``--perf-compare`` catch a known slowdown, and how often does it cry wolf?

One trial measures, in a fresh random order (so that drift during the trial hits every comparison alike):
a *baseline* sample, an *unmodified* sample, and one *slowed* sample per level X, where the call is followed
by a calibrated delay of X times the call's median (a ``torch.cuda._sleep`` on the runner's stream on a GPU, a
host busy-wait on a CPU; `perf.slowdown.delay_call`). Each sample is what the gate sees for one benchmark:
the suite's clock, pytest-benchmark's number of rounds for this call (`suite_rounds`), re-measured while
unstable as `perf.stability` does. The gate (`perf.stats.compare_samples` with the same settings) then judges
unmodified vs baseline (a "slower" is a false alarm) and each slowed sample vs baseline (a "slower" is a
detection). A sample still unstable after re-measuring counts as neither, as in the real gate.

All samples of a trial come from one process and one runner: run-to-run differences between two pytest
processes (another CUDA graph instantiation, another memory layout) are not in these rates; the gate's
minimum effect is there for them.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perf.compare import GateSettings
from perf.stability import time_rounds
from perf.stats import SLOWER, compare_samples

log = logging.getLogger(__name__)
BASELINE = "baseline"


@dataclass
class LevelResult:
    """Outcome of the trials at one injected slowdown ``level`` (fraction of the median; 0 = unmodified)."""

    level: float
    slower: int = 0
    unstable: int = 0
    ratios: list[float] = field(default_factory=list)
    stable_ratios: list[float] = field(default_factory=list)

    @property
    def trials(self) -> int:
        return len(self.ratios)

    @property
    def rate(self) -> float:
        """Fraction of trials judged "slower": the false-alarm rate at level 0, else the detection rate."""
        return self.slower / self.trials if self.trials else math.nan

    @property
    def measured(self) -> float:
        """Median over the trials with stable samples (all trials if none) of the observed ratio of medians:
        the slowdown actually injected, + 1."""
        ratios = self.stable_ratios or self.ratios
        return statistics.median(ratios) if ratios else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "trials": self.trials, "slower": self.slower, "unstable": self.unstable,
                "rate": self.rate, "measured_ratio": self.measured, "ratios": self.ratios,
                "stable_ratios": self.stable_ratios}  # fmt: skip


def suite_rounds(call_s: float, min_rounds: int, max_time_s: float) -> int:
    """Rounds pytest-benchmark runs for a call of ``call_s`` seconds: ``max(min_rounds, ceil(max_time / call))``."""
    return max(min_rounds, math.ceil(max_time_s / call_s))


def _measure(fn: Callable[[], Any], timer: Callable[[], float], rounds: int, iterations: int,
             settings: GateSettings) -> tuple[np.ndarray, bool]:  # fmt: skip
    """A sample as the gate would keep it: re-measured while unstable; (rounds in s, stable?)."""
    for _ in range(settings.rule.max_remeasure + 1):
        data = np.asarray(time_rounds(fn, timer, rounds, iterations))
        if settings.rule.assess(data).stable:
            return data, True
    return data, False


def run_selftest(
    call: Callable[[], Any],
    make_delay: Callable[[float], Callable[[], None]],
    timer: Callable[[], float],
    *,
    median_s: float,
    rounds: int,
    levels: Sequence[float],
    trials: int,
    settings: GateSettings,
    iterations: int = 1,
    seed: int = 0,
) -> list[LevelResult]:
    """Detection and false-alarm counts: level 0 (unmodified) first, then each of ``levels``.

    ``make_delay(ms)`` returns a callable adding ``ms`` milliseconds of work; the delay at level X is
    ``X * median_s``.
    """
    delays = {level: make_delay(level * median_s * 1e3) for level in levels}

    def slowed(delay: Callable[[], None]) -> Callable[[], None]:
        def fn() -> None:
            call()
            delay()

        return fn

    functions: dict[Any, Callable[[], Any]] = {BASELINE: call, 0.0: call}
    functions.update({level: slowed(delay) for level, delay in delays.items()})
    results = {level: LevelResult(level) for level in (0.0, *levels)}
    rng = np.random.default_rng(seed)
    names = list(functions)
    for trial in range(trials):
        samples = {}
        for index in rng.permutation(len(names)):
            name = names[index]
            samples[name] = _measure(functions[name], timer, rounds, iterations, settings)
        base, base_stable = samples[BASELINE]
        for level, result in results.items():
            data, stable = samples[level]
            comparison = compare_samples(base, data, min_effect=settings.min_effect, confidence=settings.confidence,
                                         seed=seed * 100003 + trial)  # fmt: skip
            result.ratios.append(comparison.ratio)
            if not (stable and base_stable):
                result.unstable += 1
                continue
            result.stable_ratios.append(comparison.ratio)
            if comparison.verdict == SLOWER:
                result.slower += 1
        log.info("self-test trial %d/%d: %s", trial + 1, trials,
                 ", ".join(f"{r.level:.0%}: {r.slower}/{r.trials}" for r in results.values()))  # fmt: skip
    return list(results.values())


def threshold(results: Sequence[LevelResult], detection: float = 0.95, false_alarm: float = 0.05) -> float | None:
    """Smallest level detected in >= ``detection`` of trials, provided the false-alarm rate (level 0) is
    <= ``false_alarm``; None if no level qualifies."""
    alarms = next((r for r in results if r.level == 0), None)
    if alarms is None or alarms.rate > false_alarm:
        return None
    return next((r.level for r in sorted(results, key=lambda r: r.level) if r.level > 0 and r.rate >= detection), None)


def table_rows(results: Sequence[LevelResult]) -> list[dict[str, Any]]:
    """Report rows: injected slowdown, measured ratio, what "slower" means at that level, and its rate."""
    rows = []
    for r in results:
        rows.append({
            "injected": "none (identical code)" if r.level == 0 else f"{r.level:.0%}",
            "measured ratio": r.measured,
            "judged slower": f"{r.slower}/{r.trials}",
            "rate": f"{r.rate:.1%} " + ("false alarms" if r.level == 0 else "detected"),
            "unstable": r.unstable,
        })  # fmt: skip
    return rows
