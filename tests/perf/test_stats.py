"""The gate's statistics (perf/gate/stats.py): ratio intervals, verdicts, stability; property tests for the math."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perf.gate.stats import (
    FASTER,
    NO_CHANGE,
    SLOWER,
    assess_stability,
    auto_block_length,
    block_length,
    compare_samples,
    decide,
    ratio_interval,
    robust_cv,
    window_drift,
)

FAST = {"resamples": 400}
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


@given(timings)
@settings(max_examples=40, deadline=None)
def test_identical_samples_are_no_change_with_ratio_one_inside_the_interval(data: list[float]) -> None:
    result = compare_samples(data, data, **FAST)
    assert result.verdict == NO_CHANGE
    assert result.ratio == pytest.approx(1.0)
    assert result.lo <= 1.0 <= result.hi or result.lo == pytest.approx(result.hi)


@given(st.integers(0, 2**32 - 1), st.sampled_from([1.2, 1 / 1.2]))
@settings(max_examples=25, deadline=None)
def test_a_sample_scaled_by_twenty_percent_with_tight_noise_is_slower_or_faster(seed: int, scale: float) -> None:
    rng = np.random.default_rng(seed)
    result = compare_samples(_noisy(rng, 30), _noisy(rng, 30) * scale, **FAST)
    assert result.verdict == (SLOWER if scale > 1 else FASTER)
    assert result.lo <= result.ratio <= result.hi


@given(timings, st.randoms(use_true_random=False))
@settings(max_examples=40, deadline=None)
def test_ratio_and_robust_cv_do_not_depend_on_the_order_of_rounds(data: list[float], random) -> None:
    shuffled = list(data)
    random.shuffle(shuffled)
    base = [d * 1.1 for d in data]
    assert compare_samples(base, shuffled, **FAST).ratio == pytest.approx(compare_samples(base, data, **FAST).ratio)
    assert robust_cv(shuffled) == pytest.approx(robust_cv(data))


@given(timings, timings, st.floats(min_value=1e-3, max_value=1e3))
@settings(max_examples=40, deadline=None)
def test_interval_does_not_depend_on_the_time_unit(base: list[float], cand: list[float], unit: float) -> None:
    a = ratio_interval(base, cand, resamples=300, seed=3)
    b = ratio_interval([x * unit for x in base], [x * unit for x in cand], resamples=300, seed=3)
    assert b == pytest.approx(a, rel=1e-9)


def test_same_seed_same_interval_and_another_seed_nearly_the_same() -> None:
    rng = np.random.default_rng(1)
    base, cand = _noisy(rng, 200, 0.05), _noisy(rng, 200, 0.05)
    assert ratio_interval(base, cand, seed=7) == ratio_interval(base, cand, seed=7)
    assert ratio_interval(base, cand, seed=8) == pytest.approx(ratio_interval(base, cand, seed=7), abs=0.01)


@pytest.mark.parametrize(("phi", "block", "least"), [(0.0, None, 0.88), (0.7, None, 0.85), (0.9, None, 0.8)])
def test_interval_covers_the_true_ratio_even_for_autocorrelated_rounds(phi: float, block: int | None,
                                                                     least: float) -> None:
    """Coverage of the 95% interval over 120 independent pairs with true ratio 1.05, iid and AR(1) rounds."""
    rng = np.random.default_rng(11)
    covered = 0
    for seed in range(120):
        base, cand = _ar1(rng, 400, phi), _ar1(rng, 400, phi) * 1.05
        _, lo, hi = ratio_interval(base, cand, resamples=400, seed=seed, block=block)
        covered += lo <= 1.05 <= hi
    assert least <= covered / 120 <= 1.0


def test_resampling_single_rounds_undercovers_autocorrelated_rounds_which_blocks_fix() -> None:
    """Why blocks: with AR(1) rounds (phi 0.9) an iid bootstrap's interval is too narrow."""
    rng = np.random.default_rng(5)
    pairs = [(_ar1(rng, 400, 0.9), _ar1(rng, 400, 0.9)) for _ in range(60)]
    iid = sum(lo <= 1 <= hi for b, c in pairs for _, lo, hi in [ratio_interval(b, c, resamples=300, block=1)])
    blocks = sum(lo <= 1 <= hi for b, c in pairs for _, lo, hi in [ratio_interval(b, c, resamples=300)])
    assert iid / 60 < 0.8 and blocks > iid


@pytest.mark.parametrize(
    ("lo", "hi", "verdict"),
    [(1.0201, 1.1, SLOWER), (1.02, 1.1, NO_CHANGE), (0.97, 1.03, NO_CHANGE), (0.9, 0.98, FASTER),
     (0.9, 1 / 1.02, NO_CHANGE)],
)  # fmt: skip
def test_verdict_needs_the_whole_interval_past_the_minimum_effect(lo: float, hi: float, verdict: str) -> None:
    assert decide(lo, hi, 0.02) == verdict


def test_a_real_but_small_slowdown_is_no_change_below_the_minimum_effect() -> None:
    rng = np.random.default_rng(2)
    base, cand = _noisy(rng, 2000, 0.005), _noisy(rng, 2000, 0.005) * 1.01
    result = compare_samples(base, cand, min_effect=0.02)
    assert result.lo > 1.0 and result.verdict == NO_CHANGE
    assert compare_samples(base, cand, min_effect=0.0).verdict == SLOWER


@pytest.mark.parametrize(("baseline", "candidate", "message"), [
    ([], [1.0], "baseline: empty sample"), ([1.0], [float("nan")], "candidate: timings must be finite"),
    ([0.0, 0.0], [1.0], "baseline: median timing is 0"), ([1.0], [-1.0], "candidate: timings must be finite and >= 0"),
])  # fmt: skip
def test_bad_samples_are_rejected_naming_the_side(baseline: list[float], candidate: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        compare_samples(baseline, candidate)


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
