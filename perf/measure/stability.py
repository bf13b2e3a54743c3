"""The stability rule, re-measuring an unstable benchmark, and `robust_sd` (docs/method.md, section 8)."""

from __future__ import annotations

import gc
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

DEFAULT_MAX_REMEASURE, DEFAULT_MAX_CV, DEFAULT_MAX_DRIFT, DEFAULT_WINDOWS = 2, 0.10, 0.05, 4
MIN_ROUNDS = 5  # fewer rounds and a sample is "unstable": no interval from 4 numbers is worth a verdict
#: Window-median spread (in standard errors of one window median) that independent noise exceeds with
#: probability ~1e-3 for 4 windows (the studentized range's 99.9% point for 4 groups is 5.3).
DRIFT_NOISE_FACTOR = 5.3
#: A normal sample's standard deviation per unit of median absolute deviation, as the gate has always rounded
#: it (scipy's ``scale="normal"`` is 1/0.67449 = 1.482602...: every figure would move in its last digits).
MAD_TO_SD = 1.4826


@dataclass(frozen=True)
class Stability:
    """Noise and drift of one sample: ``cv`` robust (MAD-based), ``drift`` the spread of window medians over
    the median (None below ``2 * DEFAULT_WINDOWS`` rounds), ``reason`` why it is unstable ("" when stable)."""

    n: int
    median: float
    cv: float
    drift: float | None
    reason: str

    stable = property(lambda self: not self.reason)

    def summary(self) -> dict[str, Any]:
        """One measurement in ``extra_info["stability"]["attempts"]``."""
        return {"cv": self.cv, "drift": self.drift, "median_s": self.median, "rounds": self.n, "reason": self.reason}


def robust_sd(values: Sequence[float] | np.ndarray) -> float:
    """``MAD_TO_SD * MAD``: a normal sample's standard deviation, blind to outliers (values' unit; NaN if empty)."""
    from scipy.stats import median_abs_deviation

    return MAD_TO_SD * float(median_abs_deviation(np.asarray(values, dtype=float)))


def robust_cv(values: Sequence[float] | np.ndarray) -> float:
    """`robust_sd` / median (the CV of a normal sample, insensitive to outliers); 0 for a zero median."""
    x = np.asarray(values, dtype=np.float64).ravel()
    return robust_sd(x) / median if (median := float(np.median(x))) > 0 else 0.0


def window_drift(values: Sequence[float] | np.ndarray, windows: int = DEFAULT_WINDOWS) -> tuple[float, float] | None:
    """``(drift, noise)`` over the median: the spread of ``windows`` window medians, and what noise would rarely
    exceed (1.2533 = sqrt(pi / 2): a median's standard error per a mean's); None below ``2 * windows`` rounds."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size < 2 * windows:
        return None
    if (median := float(np.median(x))) <= 0:
        return 0.0, 0.0
    parts = np.array_split(x, windows)
    medians = [float(np.median(p)) for p in parts]
    noise = DRIFT_NOISE_FACTOR * 1.2533 * robust_sd(x) / math.sqrt(min(p.size for p in parts))
    return (max(medians) - min(medians)) / median, noise / median


def assess_stability(values: Sequence[float] | np.ndarray, *, max_cv: float = DEFAULT_MAX_CV,
                     max_drift: float = DEFAULT_MAX_DRIFT) -> Stability:  # fmt: skip
    """Whether a sample of timings (s, finite, >= 0) is stable enough to compare (docs/method.md, 8)."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        raise ValueError("sample: empty sample; need at least one timing")
    if not np.all(np.isfinite(x)) or np.any(x < 0):
        raise ValueError("sample: timings must be finite and >= 0")
    cv, drift_noise = robust_cv(x), window_drift(x)
    reasons = []
    if x.size < MIN_ROUNDS:
        reasons.append(f"only {x.size} round{'s' if x.size != 1 else ''} (need >= {MIN_ROUNDS})")
    if cv > max_cv:
        reasons.append(f"robust CV {cv:.1%} > {max_cv:.1%}")
    if drift_noise is not None and drift_noise[0] > (limit := max(max_drift, drift_noise[1])):
        reasons.append(f"drift {drift_noise[0]:.1%} across {DEFAULT_WINDOWS} windows > {limit:.1%}")
    return Stability(int(x.size), float(np.median(x)), cv, drift_noise and drift_noise[0], "; ".join(reasons))


@dataclass(frozen=True)
class StabilityRule:
    """Thresholds of the stability gate (fractions) and the extra measurements of an unstable benchmark."""

    max_cv: float = DEFAULT_MAX_CV
    max_drift: float = DEFAULT_MAX_DRIFT
    max_remeasure: int = DEFAULT_MAX_REMEASURE

    def assess(self, data: Any) -> Stability:
        return assess_stability(data, max_cv=self.max_cv, max_drift=self.max_drift)


def time_rounds(fn: Callable[[], Any], timer: Callable[[], float], rounds: int, iterations: int = 1, *,
                disable_gc: bool = False) -> list[float]:  # fmt: skip
    """Seconds per call of ``fn`` in each of ``rounds`` rounds of ``iterations`` (pytest-benchmark's round loop)."""
    out, gc_was_enabled = [], gc.isenabled()
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


def replace_rounds(metadata: Any, data: list[float]) -> None:
    """Put ``data`` (seconds per call) in place of a pytest-benchmark ``Metadata``'s rounds."""
    from pytest_benchmark.stats import Stats

    metadata.stats = Stats()
    for value in data:
        metadata.stats.update(value)


def measure_stable(benchmark: Any, fn: Callable[..., Any], *args: Any, rule: StabilityRule, **kwargs: Any) -> Any:
    """``benchmark(fn, *args, **kwargs)``, re-measured while unstable (at most ``rule.max_remeasure`` times)."""
    result = benchmark(fn, *args, **kwargs)
    metadata = benchmark.stats
    if metadata is None or not metadata.stats.data:
        return result
    attempts = [rule.assess(metadata.stats.data)]
    rounds, options = len(metadata.stats.data), metadata.options
    # Too few rounds (e.g. --benchmark-max-time=0.1 on a slow call) stay too few: measuring again cannot help.
    while not attempts[-1].stable and len(attempts) <= rule.max_remeasure and rounds >= MIN_ROUNDS:
        log.info("%s unstable (%s): measuring again (%d/%d)", benchmark.name, attempts[-1].reason,
                 len(attempts), rule.max_remeasure)  # fmt: skip
        data = time_rounds(lambda: fn(*args, **kwargs), options["timer"], rounds, metadata.iterations,
                           disable_gc=bool(options.get("disable_gc")))  # fmt: skip
        replace_rounds(metadata, data)
        attempts.append(rule.assess(data))
    benchmark.extra_info["stability"] = stability_record(attempts)
    return result


def stability_record(attempts: Sequence[Stability]) -> dict[str, Any]:
    """``extra_info["stability"]``: the last of ``attempts`` (one per measurement) and each one's summary."""
    last = attempts[-1]
    return {"verdict": "stable" if last.stable else "unstable", "reason": last.reason, "cv": last.cv,
            "drift": last.drift, "rounds": last.n, "measurements": len(attempts),
            "attempts": [a.summary() for a in attempts]}  # fmt: skip
