"""Clock truth: time GPU work of known duration with the suite's CUDA-event clock and with the host clock.

The work is ``torch.cuda._sleep(cycles)``, a kernel that spins for a number of GPU clock cycles. Its rate is
calibrated against the host clock on long sleeps, where host overheads vanish: the median host time (launch,
then ``synchronize``) of sleeps of ``c1`` and ``c2`` cycles (about 100 and 400 ms) gives
``cycles_per_ms = (c2 - c1) / (t2 - t1)`` -- the slope cancels the fixed launch + synchronize overhead, which
the intercept estimates. Calibrating before and after the measurements shows whether the GPU clock moved.
A sleep of ``d`` ms is then ``d * cycles_per_ms`` cycles, and each short duration is timed

* with the suite's clock (`perf.measure.clock.SUITE_CLOCK`, CUDA events): ``clock(); _sleep(c); clock()``, exactly as
  a benchmark round is timed;
* with the host clock: ``perf_counter(); _sleep(c); synchronize(); perf_counter()``.

Errors are relative to the known duration (median over repetitions). The event clock's error at a short
duration is mostly a fixed offset: the gap between its start event (on an idle stream) and the kernel's start,
i.e. the launch latency, which every benchmark round includes too (``offset_us`` reports it).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

DURATIONS_MS = (0.1, 1.0, 10.0)
CALIBRATION_MS = (100.0, 400.0)


@dataclass(frozen=True)
class Calibration:
    """``cycles_per_ms`` of ``torch.cuda._sleep`` and the host's fixed launch + synchronize overhead (ms)."""

    cycles_per_ms: float
    host_overhead_ms: float


@dataclass(frozen=True)
class ClockReading:
    """One known duration timed by both clocks (ms); errors are (measured - known) / known."""

    known_ms: float
    event_ms: float
    host_ms: float
    event_error: float
    host_error: float
    offset_us: float  # event_ms - known_ms, in microseconds

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _host_sleep_ms(cycles: int) -> float:
    """Host ms of a ``cycles`` sleep from an idle GPU (earlier work, e.g. the event clock's lead-in, is waited
    for first, outside the reading)."""
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def calibrate(
    rough_cycles_per_ms: float, lengths_ms: Sequence[float] = CALIBRATION_MS, repeats: int = 3
) -> Calibration:
    """Fit host time = overhead + cycles / rate on sleeps of about ``lengths_ms`` (two lengths)."""
    short, long = (int(rough_cycles_per_ms * ms) for ms in lengths_ms)
    _host_sleep_ms(short // 10)  # warm-up
    t_short = statistics.median(_host_sleep_ms(short) for _ in range(repeats))
    t_long = statistics.median(_host_sleep_ms(long) for _ in range(repeats))
    rate = (long - short) / (t_long - t_short)
    return Calibration(rate, t_short - short / rate)


def read_clocks(cycles: int, clock: Callable[[], float], repeats: int = 20) -> tuple[float, float]:
    """Median ms of a ``cycles`` sleep timed with ``clock`` (seconds, events on the current stream) and with
    the synchronised host clock."""
    import torch

    event, host = [], []
    torch.cuda.synchronize()
    for _ in range(repeats):
        start = clock()
        torch.cuda._sleep(cycles)
        event.append((clock() - start) * 1e3)
        host.append(_host_sleep_ms(cycles))
    return statistics.median(event), statistics.median(host)


def reading(cycles: int, cycles_per_ms: float, event_ms: float, host_ms: float) -> ClockReading:
    """Both clocks' readings against the known duration ``cycles / cycles_per_ms``."""
    exact = cycles / cycles_per_ms
    return ClockReading(exact, event_ms, host_ms, event_ms / exact - 1, host_ms / exact - 1, (event_ms - exact) * 1e3)


def clock_truth(
    clock: Callable[[], float], rough_cycles_per_ms: float, durations_ms: Sequence[float] = DURATIONS_MS
) -> dict[str, Any]:
    """Calibrate, read both clocks at each duration, calibrate again; the known durations use the mean of the
    two calibrations. A JSON-ready dict with ``readings`` (`ClockReading` dicts), ``calibration_before`` /
    ``after`` and ``clock_drift`` (relative change of the sleep rate between them)."""
    before = calibrate(rough_cycles_per_ms)
    cycles = [int(round(ms * before.cycles_per_ms)) for ms in durations_ms]
    raw = [read_clocks(c, clock) for c in cycles]
    after = calibrate(rough_cycles_per_ms)
    rate = (before.cycles_per_ms + after.cycles_per_ms) / 2
    return {
        "readings": [reading(c, rate, *r).to_dict() for c, r in zip(cycles, raw)],
        "calibration_before": asdict(before),
        "calibration_after": asdict(after),
        "clock_drift": after.cycles_per_ms / before.cycles_per_ms - 1,
    }
