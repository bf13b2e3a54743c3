"""The statistics of one process's rounds: the block bootstrap of the median (perf/gate/stats.py), stability
(perf/measure/stability.py); property tests for the math. The verdicts are perf.gate.judge's (tests/perf/test_judge.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perf.gate.stats import auto_block_length, block_length, bootstrap_medians, log_median_se
from perf.measure.stability import assess_stability, robust_cv, robust_sd, window_drift

timings = st.lists(st.floats(min_value=1e-4, max_value=1.0, allow_nan=False), min_size=5, max_size=60)


def _noisy(rng: np.random.Generator, n: int, cv: float = 0.01, median: float = 1e-3) -> np.ndarray:
    return median * (1 + cv * rng.standard_normal(n))


def _ar1(rng: np.random.Generator, n: int, phi: float, cv: float = 0.02) -> np.ndarray:
    """Positively autocorrelated rounds around 1 ms: x_t = phi * x_(t-1) + noise."""
    noise = rng.standard_normal(n) * np.sqrt(1 - phi**2)
    x = np.empty(n)
    x[0] = rng.standard_normal()
    for t in range(1, n):
        x[t] = phi * x[t - 1] + noise[t]
    return 1e-3 * (1 + cv * x)


@given(timings, st.randoms(use_true_random=False))
@settings(max_examples=40, deadline=None)
def test_robust_cv_does_not_depend_on_the_order_of_rounds(data: list[float], random) -> None:
    shuffled = list(data)
    random.shuffle(shuffled)
    assert robust_cv(shuffled) == pytest.approx(robust_cv(data))


@given(timings, st.floats(min_value=1e-3, max_value=1e3))
@settings(max_examples=40, deadline=None)
def test_the_spread_of_the_log_median_does_not_depend_on_the_time_unit(data: list[float], unit: float) -> None:
    x = np.asarray(data)
    assert log_median_se(x * unit, seed=3) == pytest.approx(log_median_se(x, seed=3), abs=1e-12)


def test_block_bootstrap_sees_the_spread_of_autocorrelated_rounds_that_single_rounds_hide() -> None:
    """Why blocks: with AR(1) rounds (phi 0.9) the medians of independent samples spread far more than an iid
    bootstrap of one sample says; the block bootstrap comes close."""
    rng = np.random.default_rng(5)
    samples = [_ar1(rng, 400, 0.9) for _ in range(60)]
    true_sd = float(np.std(np.log([np.median(x) for x in samples]), ddof=1))
    iid = np.median([np.std(np.log(bootstrap_medians(x, 300, np.random.default_rng(k), block=1)), ddof=1)
                     for k, x in enumerate(samples)])  # fmt: skip
    blocks = np.median([log_median_se(x, resamples=300, seed=k) for k, x in enumerate(samples)])
    assert iid < 0.6 * true_sd and 0.6 * true_sd < blocks < 1.6 * true_sd


@settings(deadline=None)  # the first call imports scipy.stats
@given(st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=1, max_size=60))
def test_robust_sd_through_scipy_gives_the_hand_written_mad_bit_for_bit(data: list[float]) -> None:
    # the formula every robust scale of the gate and the history used before scipy's median_abs_deviation did it
    x = np.asarray(data)
    assert robust_sd(x) == float(1.4826 * np.median(np.abs(x - np.median(x))))


@settings(deadline=None)  # the first call imports scipy.stats
@given(timings)
def test_robust_cv_is_unchanged_by_scipy(data: list[float]) -> None:
    x = np.asarray(data)
    median = float(np.median(x))
    assert robust_cv(x) == float(1.4826 * np.median(np.abs(x - median)) / median)


def test_a_constant_sample_has_no_spread() -> None:
    assert log_median_se(np.full(50, 1e-3)) == 0.0
    assert robust_cv([0.0, 0.0, 0.0]) == 0.0


def test_block_length_is_the_cube_root_rounded_up() -> None:
    assert [block_length(n) for n in (1, 8, 9, 27, 1000, 1001)] == [1, 2, 3, 3, 10, 11]


def test_automatic_blocks_grow_with_autocorrelation_and_stay_within_a_quarter_of_the_sample() -> None:
    rng = np.random.default_rng(3)
    lengths = [auto_block_length(_ar1(rng, 1000, phi)) for phi in (0.0, 0.5, 0.9)]
    assert lengths[0] == 10 and lengths[0] <= lengths[1] < lengths[2] <= 250
    assert auto_block_length(np.arange(12.0)) == 3 and auto_block_length(np.ones(5)) == 1


def test_stability_flags_too_few_rounds_high_noise_and_a_step_but_not_steady_noise() -> None:
    rng = np.random.default_rng(4)
    assert assess_stability([1e-3] * 4).reason == "only 4 rounds (need >= 5)"
    noisy = assess_stability(_noisy(rng, 200, 0.3), max_cv=0.1)
    assert not noisy.stable and noisy.reason.startswith("robust CV")
    step = np.concatenate([_noisy(rng, 100, 0.01), _noisy(rng, 100, 0.01) * 1.1])
    drifting = assess_stability(step)
    assert not drifting.stable and "drift" in drifting.reason and drifting.drift == pytest.approx(0.1, abs=0.02)
    steady = assess_stability(_noisy(rng, 200, 0.03))
    assert steady.stable and steady.reason == "" and steady.cv == pytest.approx(0.03, rel=0.3)


def test_noise_alone_is_rarely_called_drift_even_in_short_samples() -> None:
    rng = np.random.default_rng(9)
    flagged = sum(window_drift_flag(_noisy(rng, 18, 0.06)) for _ in range(300))
    assert flagged / 300 < 0.02


def window_drift_flag(sample: np.ndarray) -> bool:
    drift, noise = window_drift(sample)  # type: ignore[misc]
    return drift > max(0.05, noise)


def test_window_drift_needs_two_rounds_per_window() -> None:
    assert window_drift([1.0] * 7) is None
    assert window_drift([1.0] * 8) == (0.0, 0.0)


def test_the_circular_block_bootstrap_draws_every_round_alike() -> None:
    """Blocks wrap around the end of the rounds: the last round is drawn no more often than the others, so the
    resampled medians of a symmetric sample centre on its median (a clipped block would repeat the last round)."""
    x = np.arange(10.0)
    medians = bootstrap_medians(x, 4000, np.random.default_rng(0), block=5)
    assert medians.mean() == pytest.approx(4.5, abs=0.1)


@given(st.lists(st.floats(min_value=1e150, max_value=1e299), min_size=3, max_size=40), st.integers(0, 20))
@settings(max_examples=40, deadline=None)
def test_rounds_whose_squares_pass_a_float_get_a_block_length_and_a_spread(huge: list[float], small: int) -> None:
    x = np.array([1e-3] * small + huge)  # a saved run's rounds may go up to 1.8e299 s: once "cannot convert NaN"
    assert 1 <= auto_block_length(x) <= max(1, x.size // 4)
    assert np.isfinite(log_median_se(x))
