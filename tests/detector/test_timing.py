"""detector.timing's host-side helpers: the stage timer, percentiles against numpy, the per-stage summary."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detector.timing import StageTimer, percentile, summarize_ms


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=200), st.floats(0, 100))
def test_percentile_matches_numpy_linear_interpolation(samples: list[float], q: float) -> None:
    assert percentile(samples, q) == pytest.approx(float(np.percentile(samples, q)), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(("samples", "q", "ours", "numpy_linear"), [
    ([0.3, 9.0], 90, 8.129999999999999, 8.13), ([2.2, 5.7], 90, 5.35, 5.3500000000000005),
])  # fmt: skip
def test_percentile_keeps_its_last_digits_where_numpy_rounds_otherwise(samples: list[float], q: float, ours: float,
                                                                       numpy_linear: float) -> None:
    # why percentile is not numpy.percentile: saved and reported figures would move in their last digit
    assert percentile(samples, q) == ours
    assert float(np.percentile(samples, q, method="linear")) == numpy_linear


def test_stage_timer_keeps_per_stage_samples_and_totals() -> None:
    timer = StageTimer()
    for _ in range(3):
        with timer.stage("read"):
            time.sleep(0.002)  # at least 2 ms each: a total of at least 6 ms, however loaded the machine
    timer.add("infer", 5.0)
    assert len(timer.samples_ms["read"]) == 3 and timer.total_ms("read") >= 6.0
    assert timer.totals_ms()["infer"] == 5.0 and timer.total_ms("write") == 0.0


def test_summary_gives_median_min_and_max_and_nothing_without_samples() -> None:
    summary = summarize_ms([1.0, 2.0, 3.0, 4.0])
    assert summary["p50_ms"] == 2.5 and summary["min_ms"] == 1.0 and summary["max_ms"] == 4.0
    assert summarize_ms([]) == {}
