"""Statistics of one process's rounds: the spread of its median, and whether its timings were stable.

Pure functions of per-round timings (1-D arrays of seconds, in the order the rounds ran); numpy and scipy. Verdicts are
not drawn here: the one judge is `perf.gate.judge`, which works on per-process medians.

*The median's spread.* `log_median_se` is the standard error of a process's log median from a seeded, vectorised
**circular block bootstrap** (`bootstrap_medians`): each resample is built from blocks of consecutive rounds.
Rounds are autocorrelated in time (GPU clocks and temperature, CPU frequency, other processes, caches), and
resampling single rounds as if they were independent gives errors that are too small; blocks keep the dependence.
The block length (`auto_block_length`) is the larger of ``ceil(n ** (1/3))`` and twice the sample's
autocorrelation time estimated from its lag-1 autocorrelation ``r`` as ``(1 + r) / (1 - r)`` (AR(1)), at most
``n / 4``. The judge uses it only where no history of processes exists (`perf.gate.judge.within_reference`), and
the noise profile to split a spread into its within- and between-process parts.

*Stability.* A sample is unstable when it has fewer than ``min_rounds`` rounds, when its robust coefficient of
variation (`robust_sd` / median, blind to a few outliers such as a garbage collection, which the median
ignores too) exceeds ``max_cv``, or when it drifts: the medians of ``windows`` consecutive windows spread by
more than ``max_drift`` of the median *and* by more than `DRIFT_NOISE_FACTOR` standard errors of a window
median (so that a short, noisy sample is not called drifting because of its noise alone).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

DEFAULT_MAX_CV = 0.10
DEFAULT_MAX_DRIFT = 0.05
DEFAULT_WINDOWS = 4
#: Fewer rounds than this and a sample is "unstable": no interval from 4 numbers is worth a verdict.
MIN_ROUNDS = 5
#: Window-median spread (in standard errors of one window median) that independent noise exceeds with
#: probability ~1e-3 for 4 windows (the studentized range's 99.9% point for 4 groups is 5.3).
DRIFT_NOISE_FACTOR = 5.3
#: Resamples per vectorised chunk (bounds memory to ~ chunk * n * 16 bytes).
_CHUNK = 250
#: A normal sample's standard deviation per unit of median absolute deviation, as the gate has always rounded it
#: (scipy's ``scale="normal"`` is 1/0.67449 = 1.482602...: every figure would move in its last digits).
MAD_TO_SD = 1.4826


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _as_sample(values: Sequence[float] | np.ndarray, what: str) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        raise ValueError(f"{what}: empty sample; need at least one timing")
    if not np.all(np.isfinite(x)) or np.any(x < 0):
        raise ValueError(f"{what}: timings must be finite and >= 0")
    return x


def block_length(n: int) -> int:
    """Bootstrap block length for ``n`` rounds: ``ceil(n ** (1/3))`` (1 for n <= 1)."""
    return max(1, math.ceil(n ** (1 / 3) - 1e-9))


def auto_block_length(x: np.ndarray) -> int:
    """Block length for the rounds ``x``: ``max(ceil(n ** (1/3)), ceil(2 (1 + r) / (1 - r)))`` with ``r`` the
    lag-1 autocorrelation clipped to [0, 0.95], at most ``max(1, n // 4)``."""
    n = x.size
    centred = x - np.median(x)
    energy = float(np.dot(centred, centred))
    r = float(np.dot(centred[:-1], centred[1:])) / energy if energy > 0 and n > 2 else 0.0
    r = min(max(r, 0.0), 0.95)
    return max(1, min(max(block_length(n), math.ceil(2 * (1 + r) / (1 - r))), n // 4))


def bootstrap_medians(
    x: np.ndarray, resamples: int, rng: np.random.Generator, block: int | None = None
) -> np.ndarray:
    """Medians of ``resamples`` circular-block-bootstrap resamples of ``x`` (float64 [resamples]); blocks of
    ``block`` rounds (default `auto_block_length`)."""
    n = x.size
    length = min(block or auto_block_length(x), n)
    blocks = math.ceil(n / length)
    offsets = np.arange(length)
    out = np.empty(resamples)
    for start in range(0, resamples, _CHUNK):
        count = min(_CHUNK, resamples - start)
        starts = rng.integers(0, n, size=(count, blocks, 1))
        index = ((starts + offsets) % n).reshape(count, blocks * length)[:, :n]
        out[start : start + count] = np.median(x[index], axis=1)
    return out


def log_median_se(x: np.ndarray, resamples: int = 400, seed: int = 0) -> float:
    """Standard error of ``log(median(x))`` from a circular block bootstrap (0 for a constant sample)."""
    boot = bootstrap_medians(x, resamples, np.random.default_rng(seed))
    boot = boot[boot > 0]
    return float(np.std(np.log(boot), ddof=1)) if boot.size > 1 else 0.0


def robust_sd(values: Sequence[float] | np.ndarray) -> float:
    """``MAD_TO_SD * MAD`` (`scipy.stats.median_abs_deviation`): a normal sample's standard deviation, blind to a
    few outliers; in the values' unit. NaN for an empty sample."""
    from scipy.stats import median_abs_deviation

    return MAD_TO_SD * float(median_abs_deviation(np.asarray(values, dtype=float)))


def robust_cv(values: Sequence[float] | np.ndarray) -> float:
    """`robust_sd` / median (the CV of a normal sample, insensitive to outliers); 0 for a zero median."""
    x = _as_sample(values, "sample")
    median = float(np.median(x))
    if median <= 0:
        return 0.0
    return robust_sd(x) / median


def window_drift(values: Sequence[float] | np.ndarray, windows: int = DEFAULT_WINDOWS) -> tuple[float, float] | None:
    """``(drift, noise)``: the spread (max - min) of the medians of ``windows`` consecutive windows, and the
    spread independent noise would rarely exceed (`DRIFT_NOISE_FACTOR` standard errors of a window median),
    both as fractions of the overall median; None below ``2 * windows`` rounds."""
    x = _as_sample(values, "sample")
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
    """Whether a sample is stable enough to compare (see the module docstring for the rules)."""
    x = _as_sample(values, "sample")
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
