"""Statistics of one process's rounds: the spread of its median (whether they were stable is
`perf.measure.stability.assess_stability`).

Pure functions of per-round timings (1-D arrays of seconds, in the order the rounds ran); numpy only. Verdicts are
not drawn here: the one judge is `perf.gate.judge`, which works on per-process medians.

*The median's spread.* `log_median_se` is the standard error of a process's log median from a seeded, vectorised
**circular block bootstrap** (`bootstrap_medians`): each resample is built from blocks of consecutive rounds.
Rounds are autocorrelated in time (GPU clocks and temperature, CPU frequency, other processes, caches), and
resampling single rounds as if they were independent gives errors that are too small; blocks keep the dependence.
The block length (`auto_block_length`) is the larger of ``ceil(n ** (1/3))`` and twice the sample's
autocorrelation time estimated from its lag-1 autocorrelation ``r`` as ``(1 + r) / (1 - r)`` (AR(1)), at most
``n / 4``. The judge uses it only where no history of processes exists (`perf.gate.judge.within_reference`), and
the noise profile to split a spread into its within- and between-process parts.
"""

from __future__ import annotations

import math

import numpy as np

#: Resamples per vectorised chunk (bounds memory to ~ chunk * n * 16 bytes).
_CHUNK = 250


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
