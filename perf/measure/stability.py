"""The stability rule at measurement time (docs/method.md, section 8): `assess_stability` (too few rounds, robust CV,
window drift beyond its noise) and `measure_stable`, which measures an unstable benchmark again; `robust_sd`, the
suite's one robust scale.
"""

from __future__ import annotations

import gc
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

DEFAULT_MAX_REMEASURE = 2
DEFAULT_MAX_CV = 0.10
DEFAULT_MAX_DRIFT = 0.05
DEFAULT_WINDOWS = 4
#: Fewer rounds than this and a sample is "unstable": no interval from 4 numbers is worth a verdict.
MIN_ROUNDS = 5
#: Window-median spread (in standard errors of one window median) that independent noise exceeds with
#: probability ~1e-3 for 4 windows (the studentized range's 99.9% point for 4 groups is 5.3).
DRIFT_NOISE_FACTOR = 5.3


@dataclass(frozen=True)
class Stability:
    """Noise and drift of one sample. ``cv`` is robust (MAD-based); ``drift`` is the spread of window medians
    over the median (None below ``2 * windows`` rounds); ``reason`` says why it is unstable ("" when stable)."""

    n: int
    median: float
    cv: float
    drift: float | None
    stable: bool
    reason: str



#: A normal sample's standard deviation per unit of median absolute deviation, as the gate has always rounded it
#: (scipy's ``scale="normal"`` is 1/0.67449 = 1.482602...: every figure would move in its last digits).
MAD_TO_SD = 1.4826


def _as_sample(values: Sequence[float] | np.ndarray) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        raise ValueError("sample: empty sample; need at least one timing")
    if not np.all(np.isfinite(x)) or np.any(x < 0):
        raise ValueError("sample: timings must be finite and >= 0")
    return x


def robust_sd(values: Sequence[float] | np.ndarray) -> float:
    """``MAD_TO_SD * MAD`` (`scipy.stats.median_abs_deviation`): a normal sample's standard deviation, blind to a
    few outliers; in the values' unit. NaN for an empty sample."""
    from scipy.stats import median_abs_deviation

    return MAD_TO_SD * float(median_abs_deviation(np.asarray(values, dtype=float)))


def robust_cv(values: Sequence[float] | np.ndarray) -> float:
    """`robust_sd` / median (the CV of a normal sample, insensitive to outliers); 0 for a zero median."""
    x = _as_sample(values)
    median = float(np.median(x))
    return robust_sd(x) / median if median > 0 else 0.0


def window_drift(values: Sequence[float] | np.ndarray, windows: int = DEFAULT_WINDOWS) -> tuple[float, float] | None:
    """``(drift, noise)``: the spread (max - min) of the medians of ``windows`` consecutive windows, and the
    spread independent noise would rarely exceed (`DRIFT_NOISE_FACTOR` standard errors of a window median),
    both as fractions of the overall median; None below ``2 * windows`` rounds."""
    x = _as_sample(values)
    if x.size < 2 * windows:
        return None
    median = float(np.median(x))
    if median <= 0:
        return 0.0, 0.0
    parts = np.array_split(x, windows)
    medians = np.array([np.median(p) for p in parts])
    sigma = robust_sd(x)
    shortest = min(p.size for p in parts)
    noise = DRIFT_NOISE_FACTOR * 1.2533 * sigma / math.sqrt(shortest)
    return float(medians.max() - medians.min()) / median, noise / median


def assess_stability(
    values: Sequence[float] | np.ndarray,
    *,
    max_cv: float = DEFAULT_MAX_CV,
    max_drift: float = DEFAULT_MAX_DRIFT,
    windows: int = DEFAULT_WINDOWS,
    min_rounds: int = MIN_ROUNDS,
) -> Stability:
    """Whether a sample is stable enough to compare (docs/method.md, section 8)."""
    x = _as_sample(values)
    cv = robust_cv(x)
    drift_noise = window_drift(x, windows)
    drift = None if drift_noise is None else drift_noise[0]
    reasons = []
    if x.size < min_rounds:
        reasons.append(f"only {x.size} round{'s' if x.size != 1 else ''} (need >= {min_rounds})")
    if cv > max_cv:
        reasons.append(f"robust CV {cv:.1%} > {max_cv:.1%}")
    if drift_noise is not None and drift_noise[0] > max(max_drift, drift_noise[1]):
        reasons.append(f"drift {drift_noise[0]:.1%} across {windows} windows > {max(max_drift, drift_noise[1]):.1%}")
    return Stability(int(x.size), float(np.median(x)), cv, drift, not reasons, "; ".join(reasons))


@dataclass(frozen=True)
class StabilityRule:
    """Thresholds of the stability gate (fractions) and how many extra measurements an unstable benchmark gets."""

    max_cv: float = DEFAULT_MAX_CV
    max_drift: float = DEFAULT_MAX_DRIFT
    max_remeasure: int = DEFAULT_MAX_REMEASURE

    def assess(self, data: Any) -> Stability:
        return assess_stability(data, max_cv=self.max_cv, max_drift=self.max_drift)


def time_rounds(
    fn: Callable[[], Any], timer: Callable[[], float], rounds: int, iterations: int = 1, *, disable_gc: bool = False
) -> list[float]:
    """Seconds per call of ``fn`` in each of ``rounds`` rounds of ``iterations`` calls, read from ``timer``
    around each round (pytest-benchmark's round loop, so the numbers mean the same thing)."""
    out = []
    gc_was_enabled = gc.isenabled()
    if disable_gc:
        gc.disable()
    try:
        for _ in range(rounds):
            start = timer()
            for _ in range(iterations):
                fn()
            out.append((timer() - start) / iterations)
    finally:
        if disable_gc and gc_was_enabled:
            gc.enable()
    return out


def summary(stability: Stability) -> dict[str, Any]:
    return {"cv": stability.cv, "drift": stability.drift, "median_s": stability.median, "rounds": stability.n,
            "reason": stability.reason}  # fmt: skip


def replace_rounds(metadata: Any, data: list[float]) -> None:
    """Put ``data`` (seconds per call) in place of a pytest-benchmark ``Metadata``'s rounds."""
    from pytest_benchmark.stats import Stats

    stats = Stats()
    for value in data:
        stats.update(value)
    metadata.stats = stats


def measure_stable(benchmark: Any, fn: Callable[..., Any], *args: Any, rule: StabilityRule, **kwargs: Any) -> Any:
    """``benchmark(fn, *args, **kwargs)`` (its result returned), re-measured while unstable (up to
    ``rule.max_remeasure`` times, never for too few rounds); with ``--benchmark-disable`` it only calls through."""
    result = benchmark(fn, *args, **kwargs)
    metadata = benchmark.stats
    if metadata is None or not metadata.stats.data:
        return result
    stability = rule.assess(metadata.stats.data)
    attempts = [summary(stability)]
    options = metadata.options
    rounds, iterations = len(metadata.stats.data), metadata.iterations
    # Too few rounds (e.g. --benchmark-max-time=0.1 on a slow call) stay too few: measuring again cannot help.
    while not stability.stable and len(attempts) <= rule.max_remeasure and rounds >= MIN_ROUNDS:
        log.info("%s unstable (%s): measuring again (%d/%d)", benchmark.name, stability.reason, len(attempts),
                 rule.max_remeasure)  # fmt: skip
        data = time_rounds(lambda: fn(*args, **kwargs), options["timer"], rounds, iterations,
                           disable_gc=bool(options.get("disable_gc")))  # fmt: skip
        replace_rounds(metadata, data)
        stability = rule.assess(data)
        attempts.append(summary(stability))
    benchmark.extra_info["stability"] = stability_record(stability, attempts)
    return result


def stability_record(stability: Stability, attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """``extra_info["stability"]`` for the last measurement's ``stability`` after ``attempts`` (`summary` of each)."""
    return {"verdict": "stable" if stability.stable else "unstable", "reason": stability.reason,
            "cv": stability.cv, "drift": stability.drift, "rounds": stability.n, "measurements": len(attempts),
            "attempts": attempts}  # fmt: skip
