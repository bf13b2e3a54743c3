"""Clock truth: calibrated ``torch.cuda._sleep`` timed by the event and host clocks (docs/method.md, section 7)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

DURATIONS_MS = (0.1, 1.0, 10.0)
CALIBRATION_MS = (100.0, 400.0)


def _host_sleep_ms(cycles: int) -> float:
    """Host ms of a ``cycles`` sleep from an idle GPU (earlier work is waited for first, outside the reading)."""
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def calibrate(rough_cycles_per_ms: float, repeats: int = 3) -> dict[str, float]:
    """``cycles_per_ms`` of ``torch.cuda._sleep`` and ``host_overhead_ms``, fitted on sleeps of `CALIBRATION_MS`."""
    short, long = (int(rough_cycles_per_ms * ms) for ms in CALIBRATION_MS)
    _host_sleep_ms(short // 10)  # warm-up
    t_short, t_long = (statistics.median(_host_sleep_ms(c) for _ in range(repeats)) for c in (short, long))
    rate = (long - short) / (t_long - t_short)
    return {"cycles_per_ms": rate, "host_overhead_ms": t_short - short / rate}


def read_clocks(cycles: int, clock: Callable[[], float], repeats: int = 20) -> tuple[float, float]:
    """Median ms of a ``cycles`` sleep timed with ``clock`` (s) and with the synchronised host clock."""
    import torch

    event, host = [], []
    torch.cuda.synchronize()
    for _ in range(repeats):
        start = clock()
        torch.cuda._sleep(cycles)
        event.append((clock() - start) * 1e3)
        host.append(_host_sleep_ms(cycles))
    return statistics.median(event), statistics.median(host)


def reading(cycles: int, cycles_per_ms: float, event_ms: float, host_ms: float) -> dict[str, float]:
    """Both clocks' readings (ms) of ``cycles / cycles_per_ms``, relative errors and the event clock's offset (us)."""
    exact = cycles / cycles_per_ms
    return {"known_ms": exact, "event_ms": event_ms, "host_ms": host_ms, "event_error": event_ms / exact - 1,
            "host_error": host_ms / exact - 1, "offset_us": (event_ms - exact) * 1e3}


def clock_truth(clock: Callable[[], float], rough_cycles_per_ms: float) -> dict[str, Any]:
    """Calibrate, read both clocks at each of `DURATIONS_MS`, calibrate again (known durations from the mean rate)."""
    before = calibrate(rough_cycles_per_ms)
    cycles = [int(round(ms * before["cycles_per_ms"])) for ms in DURATIONS_MS]
    raw = [read_clocks(c, clock) for c in cycles]
    after = calibrate(rough_cycles_per_ms)
    rate = (before["cycles_per_ms"] + after["cycles_per_ms"]) / 2
    return {"readings": [reading(c, rate, *r) for c, r in zip(cycles, raw)], "calibration_before": before,
            "calibration_after": after, "clock_drift": after["cycles_per_ms"] / before["cycles_per_ms"] - 1}
