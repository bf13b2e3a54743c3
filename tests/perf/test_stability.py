"""The stability gate at measurement time (perf.measure.stability): its round loop, pytest-benchmark's own."""

from __future__ import annotations

from perf.measure.stability import time_rounds


def test_time_rounds_reads_the_timer_around_each_round_per_call() -> None:
    ticks = iter(range(0, 100, 1))
    calls = []
    out = time_rounds(lambda: calls.append(1), lambda: float(next(ticks)), rounds=3, iterations=4)
    assert out == [0.25, 0.25, 0.25] and len(calls) == 12
