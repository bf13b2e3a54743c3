"""The gate's self-test within one process: how often the one judge catches a known injected delay, and how often
it cries wolf on unmodified code (`run_selftest`, `threshold`, `table_rows`); docs/method.md, section 8."""

from __future__ import annotations

import functools
import itertools
import logging
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from perf.gate.compare import GateSettings
from perf.measure.stability import time_rounds
from perf.gate.judge import SLOWER, Budget, judge, verdict_of, within_reference

log = logging.getLogger(__name__)
BASELINE = "baseline"


@dataclass(frozen=True)
class Trial:
    """One comparison: ratio of medians, its interval, and whether both samples were stable."""

    ratio: float
    lo: float
    hi: float
    stable: bool


@dataclass
class LevelResult:
    """The trials at one injected slowdown ``level`` (fraction of the median; 0: unmodified code), judged per
    minimum effect; an unstable trial is never "slower"."""

    level: float
    trials: list[Trial] = field(default_factory=list)

    @property
    def unstable(self) -> int:
        return sum(not t.stable for t in self.trials)

    def slower(self, min_effect: float) -> int:
        return sum(t.stable and verdict_of(t.ratio, t.lo, t.hi, min_effect) == SLOWER for t in self.trials)

    def rate(self, min_effect: float) -> float:
        return self.slower(min_effect) / len(self.trials) if self.trials else math.nan

    @property
    def measured(self) -> float:
        """Median observed ratio over the stable trials (all trials if none)."""
        ratios = [t.ratio for t in self.trials if t.stable] or [t.ratio for t in self.trials]
        return statistics.median(ratios) if ratios else math.nan

    def to_dict(self, min_effects: Sequence[float]) -> dict[str, Any]:
        return {"level": self.level, "trials": len(self.trials), "unstable": self.unstable,
                "measured_ratio": self.measured, "slower": {f"{e:g}": self.slower(e) for e in min_effects},
                "rate": {f"{e:g}": self.rate(e) for e in min_effects}, "per_trial": [asdict(t) for t in self.trials]}


def suite_rounds(call_s: float, min_rounds: int, max_time_s: float) -> int:
    """Rounds pytest-benchmark runs for a call of ``call_s`` seconds: ``max(min_rounds, ceil(max_time / call))``."""
    return max(min_rounds, math.ceil(max_time_s / call_s))


def run_selftest(call: Callable[[], Any], make_delay: Callable[[float], Callable[[], None]], timer: Callable[[], float],
                 *, median_s: float, rounds: int, levels: Sequence[float], trials: int, settings: GateSettings,
                 iterations: int = 1, seed: int = 0) -> list[LevelResult]:  # fmt: skip
    """Detection and false-alarm counts: level 0 (unmodified) first, then each of ``levels``; ``make_delay(ms)``
    returns a callable adding ``ms`` milliseconds of work, ``level * median_s`` at a level."""

    def slowed(delay: Callable[[], None]) -> None:
        call()
        delay()

    def measure(fn: Callable[[], Any]) -> tuple[np.ndarray, bool]:
        """(rounds in s, stable?): re-measured while unstable, as the gate would keep it."""
        for _ in range(settings.rule.max_remeasure + 1):
            data = np.asarray(time_rounds(fn, timer, rounds, iterations))
            if settings.rule.assess(data).stable:
                return data, True
        return data, False

    functions: dict[Any, Callable[[], Any]] = {BASELINE: call, 0.0: call}
    functions.update({level: functools.partial(slowed, make_delay(level * median_s * 1e3)) for level in levels})
    results = {level: LevelResult(level) for level in (0.0, *levels)}
    effect, rng, names = settings.min_effect, np.random.default_rng(seed), list(functions)
    for trial in range(trials):
        samples = {names[i]: measure(functions[names[i]])
                   for i in rng.permutation(len(names))}  # a fresh order each trial: drift hits every sample alike
        base, base_stable = samples[BASELINE]
        reference = within_reference(base, seed=seed * 100003 + trial)
        for level, result in results.items():
            data, stable = samples[level]
            judged = judge(reference, [float(np.median(data))], Budget(1, confirm=False).first_level, effect)
            result.trials.append(Trial(judged.ratio, judged.lo, judged.hi, stable=stable and base_stable))
        log.info("self-test trial %d/%d: judged slower at min effect %.1f%%: %s", trial + 1, trials, 100 * effect,
                 ", ".join(f"{r.level:.0%}: {r.slower(effect)}/{len(r.trials)}" for r in results.values()))  # fmt: skip
    return list(results.values())


def threshold(results: Sequence[LevelResult], min_effect: float, detection: float = 0.95,
              false_alarm: float = 0.05) -> float | None:  # fmt: skip
    """Smallest level from which every tested level (it and all larger) is detected in >= ``detection`` of
    trials with ``min_effect``, provided the false-alarm rate (level 0) is <= ``false_alarm``; None if none."""
    alarms = next((r for r in results if r.level == 0), None)
    if alarms is None or alarms.rate(min_effect) > false_alarm:
        return None
    levels = sorted((r for r in results if r.level > 0), key=lambda r: r.level, reverse=True)
    detected = list(itertools.takewhile(lambda r: r.rate(min_effect) >= detection, levels))
    return detected[-1].level if detected else None


def table_rows(results: Sequence[LevelResult], min_effects: Sequence[float]) -> list[dict[str, Any]]:
    """Report rows: injected slowdown, measured ratio, unstable trials, and per minimum effect the trials
    judged slower (false alarms at "none", detections elsewhere), then a "threshold" row."""
    rows: list[dict[str, Any]] = [
        {"injected": "none (identical code)" if r.level == 0 else f"{r.level:.0%}", "measured ratio": r.measured,
         "unstable": r.unstable, **{f"slower @ min effect {e:.0%}": f"{r.slower(e)}/{len(r.trials)} ({r.rate(e):.0%})"
                                    for e in min_effects}} for r in results]  # fmt: skip
    found = {e: threshold(results, e) for e in min_effects}
    return [*rows, {"injected": "threshold (>= 95% detected, <= 5% false alarms)",
                    **{f"slower @ min effect {e:.0%}": "none" if f is None else f"{f:.0%}" for e, f in found.items()}}]
