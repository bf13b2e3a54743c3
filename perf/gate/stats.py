"""The gate's statistics: is a benchmark slower, faster or unchanged, and were its timings stable enough to say.

Pure functions of per-round timings (1-D arrays of seconds, in the order the rounds ran); numpy only (scipy for
Student's t of paired processes, `paired_ratio_interval`).

*Comparison.* The effect is the ratio of medians ``median(candidate) / median(baseline)`` (> 1: slower). Its
confidence interval comes from a seeded, vectorised **circular block bootstrap**: each resample is built from
blocks of consecutive rounds. Rounds are autocorrelated in time (GPU clocks and temperature, CPU frequency,
other processes, caches), and resampling single rounds as if they were independent gives intervals that are
too narrow, hence false alarms; blocks keep the dependence. The block length (`auto_block_length`) is the
larger of ``ceil(n ** (1/3))`` and twice the sample's autocorrelation time estimated from its lag-1
autocorrelation ``r`` as ``(1 + r) / (1 - r)`` (AR(1)), at most ``n / 4``; with independent rounds it costs only
a slightly wider interval. The verdict needs the *whole* interval past a
minimum effect: "slower" when ``lo > 1 + min_effect``, "faster" when ``hi < 1 / (1 + min_effect)``, else "no
change" -- a one-sided test, at level ``(1 - confidence) / 2``, of "slower by more than ``min_effect``".

*Between processes.* CI compares two separate processes, and identical code moves between processes by more
than any within-process interval shows (another CUDA graph instantiation, memory layout, CPU placement, GPU
clock). `BetweenNoise` is that part, measured on this runner by ``--perf-noise`` (`perf.gate.noise`): the standard
deviation of the log per-process median beyond its within-process sampling error, from K processes. Given
one, the interval is widened in log space: each side's half-width becomes
``sqrt(within ** 2 + (t * sqrt(2) * sd) ** 2)``, with ``t`` Student's quantile on K - 1 degrees of freedom (the
sd is estimated) and ``sqrt(2)`` because both runs carry their own process offset. The verdict rule is the same
`decide`: the change must exceed the minimum effect *and* what identical code does between processes.

*Stability.* A sample is unstable when it has fewer than ``min_rounds`` rounds, when its robust coefficient of
variation (``1.4826 * MAD / median``, blind to a few outliers such as a garbage collection, which the median
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

SLOWER, FASTER, NO_CHANGE = "slower", "faster", "no change"
DEFAULT_MIN_EFFECT = 0.02
DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000
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


@dataclass(frozen=True)
class BetweenNoise:
    """Between-process noise of one benchmark metric on one runner: ``sd`` is the standard deviation of the
    natural log of the per-process median beyond within-process sampling (0.01 ~ 1%), estimated from
    ``processes`` separate processes of identical code."""

    sd: float
    processes: int

    def __post_init__(self) -> None:
        if not (self.sd >= 0 and math.isfinite(self.sd)) or self.processes < 2:
            raise ValueError(f"between-process noise needs sd >= 0 and >= 2 processes, got {self.sd!r}, "
                             f"{self.processes!r}")

    def half_width(self, confidence: float = DEFAULT_CONFIDENCE) -> float:
        """Half-width (log scale) the two runs' process offsets add to a two-sided ``confidence`` interval of a
        ratio: ``t(confidence, processes - 1) * sqrt(2) * sd``."""
        from scipy.stats import t

        return float(t.ppf(0.5 + confidence / 2, df=self.processes - 1)) * math.sqrt(2) * self.sd


@dataclass(frozen=True)
class Comparison:
    """``ratio`` = median(candidate) / median(baseline), its ``[lo, hi]`` interval, and the verdict.

    ``between`` is the log half-width the between-process noise added (None: within-process interval only)."""

    ratio: float
    lo: float
    hi: float
    verdict: str
    n_baseline: int
    n_candidate: int
    min_effect: float
    confidence: float
    between: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def ratio_interval(
    baseline: Sequence[float] | np.ndarray,
    candidate: Sequence[float] | np.ndarray,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    block: int | None = None,
) -> tuple[float, float, float]:
    """``(ratio, lo, hi)``: median(candidate) / median(baseline) and its percentile bootstrap interval.

    Both samples are resampled independently with circular blocks (``block`` rounds; default
    `auto_block_length` of each); the same ``seed`` gives the same interval.
    """
    base = _as_sample(baseline, "baseline")
    cand = _as_sample(candidate, "candidate")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence!r}: expected a number between 0 and 1")
    base_median = float(np.median(base))
    if base_median <= 0:
        raise ValueError("baseline: median timing is 0; cannot form a ratio")
    rng = np.random.default_rng(seed)
    base_boot = bootstrap_medians(base, resamples, rng, block)
    cand_boot = bootstrap_medians(cand, resamples, rng, block)
    ratios = cand_boot / np.maximum(base_boot, np.finfo(float).tiny)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(ratios, [tail, 100 - tail])
    return float(np.median(cand)) / base_median, float(lo), float(hi)


def widen(ratio: float, lo: float, hi: float, half_width: float) -> tuple[float, float]:
    """``[lo, hi]`` around ``ratio`` with ``half_width`` (log scale) added in quadrature to each side."""
    if half_width <= 0:
        return lo, hi
    below = math.log(ratio) - math.log(lo) if lo > 0 else math.inf
    above = math.log(hi) - math.log(ratio)
    return (ratio * math.exp(-math.hypot(below, half_width)) if math.isfinite(below) else 0.0,
            ratio * math.exp(math.hypot(above, half_width)))


def log_median_se(x: np.ndarray, resamples: int = 400, seed: int = 0) -> float:
    """Standard error of ``log(median(x))`` from a circular block bootstrap (0 for a constant sample)."""
    boot = bootstrap_medians(x, resamples, np.random.default_rng(seed))
    boot = boot[boot > 0]
    return float(np.std(np.log(boot), ddof=1)) if boot.size > 1 else 0.0


def paired_ratio_interval(baseline_medians: Sequence[float] | np.ndarray, candidate_medians: Sequence[float] | np.ndarray,
                          confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float, float]:  # fmt: skip
    """(ratio, lo, hi) of K paired processes: the geometric mean of the per-pair ratios ``candidate_i / baseline_i``
    and its Student-t interval on K - 1 degrees of freedom (log space). Each pair ran back to back on one runner,
    so the between-process noise is in the pairs' scatter and the interval holds it; K >= 2 pairs."""
    base, cand = _as_sample(baseline_medians, "baseline"), _as_sample(candidate_medians, "candidate")
    if base.size != cand.size or base.size < 2 or np.any(base <= 0) or np.any(cand <= 0):
        raise ValueError(f"paired medians: expected K >= 2 positive pairs, got {base.size} and {cand.size} values")
    from scipy import stats

    logs = np.log(cand) - np.log(base)
    mean, se = float(logs.mean()), float(logs.std(ddof=1) / math.sqrt(logs.size))
    half = float(stats.t.ppf(0.5 + confidence / 2, logs.size - 1)) * se
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def decide(lo: float, hi: float, min_effect: float = DEFAULT_MIN_EFFECT) -> str:
    """"slower" if the interval lies above ``1 + min_effect``, "faster" if below ``1 / (1 + min_effect)``,
    else "no change"."""
    if lo > 1 + min_effect:
        return SLOWER
    if hi < 1 / (1 + min_effect):
        return FASTER
    return NO_CHANGE


def inconclusive(ratio: float, min_effect: float = DEFAULT_MIN_EFFECT) -> bool:
    """Whether a "no change" from `decide` is really undecided: the point estimate ``ratio`` lies outside the
    no-change band ``[1 / (1 + min_effect), 1 + min_effect]`` while the interval still reaches into it. Callers
    report such a result as unstable, never as "no change"."""
    return ratio > 1 + min_effect or ratio < 1 / (1 + min_effect)


def compare_samples(
    baseline: Sequence[float] | np.ndarray,
    candidate: Sequence[float] | np.ndarray,
    *,
    min_effect: float = DEFAULT_MIN_EFFECT,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    block: int | None = None,
    between: BetweenNoise | None = None,
) -> Comparison:
    """The verdict on ``candidate`` against ``baseline`` (per-round timings, any one unit): the gate's one
    decision rule. With ``between`` (this runner's between-process noise of the metric) the interval includes it.
    """
    if not min_effect >= 0:
        raise ValueError(f"min_effect {min_effect!r}: expected a fraction >= 0, e.g. 0.02")
    ratio, lo, hi = ratio_interval(
        baseline, candidate, confidence=confidence, resamples=resamples, seed=seed, block=block
    )
    added = None
    if between is not None and ratio > 0:
        added = between.half_width(confidence)
        lo, hi = widen(ratio, lo, hi, added)
    return Comparison(ratio, lo, hi, decide(lo, hi, min_effect), len(baseline), len(candidate), min_effect,
                      confidence, added)


def robust_cv(values: Sequence[float] | np.ndarray) -> float:
    """``1.4826 * MAD / median`` (the CV of a normal sample, insensitive to outliers); 0 for a zero median."""
    x = _as_sample(values, "sample")
    median = float(np.median(x))
    if median <= 0:
        return 0.0
    return float(1.4826 * np.median(np.abs(x - median)) / median)


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
    sigma = 1.4826 * float(np.median(np.abs(x - median)))
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
