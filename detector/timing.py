"""Clocks, stage timers and annotations (NVTX ranges, torch.profiler labels, the profiler capture range).

The GPU clock is :class:`CudaEventClock`: a zero-argument callable returning seconds, so it can be passed as
pytest-benchmark's ``timer``. Each call records CUDA events on the *current* stream, waits for them and adds
the GPU time since the previous call to a running total, so the difference of two consecutive calls is the GPU
time between them, with the float32 resolution of ``cudaEventElapsedTime`` applied to short intervals only.
An optional lead-in keeps the GPU busy while the host enqueues the timed work, so launch latency stays out of
the reading.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

#: The pipeline's stage names, in order; NVTX ranges, torch.profiler labels and reports use these.
STAGES: tuple[str, ...] = ("read", "preprocess", "infer", "postprocess", "write")


class CudaEventClock:
    """A clock in seconds driven by CUDA events recorded on the current stream.

    Call it before and after GPU work enqueued on the current stream (enter ``torch.cuda.stream(s)`` around
    both calls to time stream ``s``): the difference of two consecutive readings is the GPU time between them.
    Every reading plays both roles: it records an *end* event, waits for it and adds the GPU time since the
    previous reading's *start* event to a running total (the value returned), then records this reading's
    start event. So readings need not come in (start, end) pairs: pytest-benchmark's precision probe reads
    the clock an odd number of times (paired readings were then shifted by one for good, calibration saw
    rounds of zero length and grew them tenfold for minutes), and a timed call that raised leaves nothing
    behind. Each interval is short, so the float32 resolution of ``cudaEventElapsedTime`` applies to short
    intervals only.

    ``lead_in_ms`` > 0: each reading enqueues a GPU busy-wait (``torch.cuda._sleep``) of that length between
    its end and start events, so that the GPU is still busy while the host enqueues the timed work. The
    interval then holds the work's GPU execution alone instead of also the host's launch latency (a fixed
    ~0.1 ms, which is most of a CUDA-graph replay at batch 1): what trtexec reports as GPU compute time. Work
    whose enqueue takes longer than the lead-in (eager PyTorch at small batch) still shows its launch gaps.
    The busy-wait lies outside every interval; it costs wall time only (a reading waits for the previous
    reading's busy-wait, so a timed round takes up to two lead-ins longer on the host).
    """

    def __init__(self, lead_in_ms: float = 0.0) -> None:
        self.lead_in_ms = float(lead_in_ms)
        self._start: Any = None
        self._total_s = 0.0
        self.__name__ = "CudaEventClock"  # pytest-benchmark names timers by __name__

    def __call__(self) -> float:
        import torch

        if self._start is not None:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            self._total_s += self._start.elapsed_time(end) / 1e3
        if self.lead_in_ms > 0:
            torch.cuda._sleep(int(self.lead_in_ms * sleep_cycles_per_ms(torch.cuda.current_device())))
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        self._start = start
        return self._total_s

    def __repr__(self) -> str:
        return f"CudaEventClock(lead_in_ms={self.lead_in_ms:g})"


@functools.lru_cache(maxsize=None)
def sleep_cycles_per_ms(device_index: int) -> float:
    """Clock cycles of ``torch.cuda._sleep`` per millisecond on CUDA device ``device_index``, measured once
    with CUDA events on a 2M-cycle sleep (about 1 ms at 1.98 GHz)."""
    import torch

    with torch.cuda.device(device_index):
        cycles = 2_000_000
        torch.cuda._sleep(cycles)  # warm-up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        return cycles / start.elapsed_time(end)


def host_clock() -> float:
    """Host wall clock in seconds (``time.perf_counter``)."""
    return time.perf_counter()


class _Annotations:
    """Process-wide switches for the annotations that :func:`annotate` emits."""

    nvtx: bool = False
    torch_profiler: bool = False


def enable_annotations(*, nvtx: bool | None = None, torch_profiler: bool | None = None) -> None:
    """Switch NVTX ranges and/or ``torch.profiler.record_function`` labels on or off for this process."""
    if nvtx is not None:
        _Annotations.nvtx = nvtx
    if torch_profiler is not None:
        _Annotations.torch_profiler = torch_profiler


def annotations_enabled() -> bool:
    """True when :func:`annotate` emits anything."""
    return _Annotations.nvtx or _Annotations.torch_profiler


@contextlib.contextmanager
def annotate(name: str) -> Iterator[None]:
    """Label a region (a pipeline stage, one inference call) for Nsight Systems and/or torch.profiler.

    A no-op unless :func:`enable_annotations` switched a kind on, so it costs nothing in timed runs that
    are not being profiled.
    """
    if not (_Annotations.nvtx or _Annotations.torch_profiler):
        yield
        return
    import torch

    with contextlib.ExitStack() as stack:
        if _Annotations.torch_profiler:
            stack.enter_context(torch.profiler.record_function(name))
        pushed = _Annotations.nvtx and torch.cuda.is_available()
        if pushed:
            torch.cuda.nvtx.range_push(name)
        try:
            yield
        finally:
            if pushed:
                torch.cuda.nvtx.range_pop()


@contextlib.contextmanager
def profiler_capture(enabled: bool) -> Iterator[None]:
    """Bracket the measured region with ``cudaProfilerStart``/``cudaProfilerStop`` when ``enabled``.

    ``nsys profile --capture-range=cudaProfilerApi`` records only inside this region, which keeps engine
    builds and warm-up out of the report.
    """
    if not enabled:
        yield
        return
    import torch

    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    try:
        yield
    finally:
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


@dataclass
class StageTimer:
    """Accumulates host wall time per named stage, in milliseconds.

    ``with timer.stage("read"): ...`` adds one sample to ``samples_ms["read"]`` and emits an annotation of
    the same name (see :func:`annotate`).
    """

    samples_ms: dict[str, list[float]] = field(default_factory=dict)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        with annotate(name):
            yield
        self.samples_ms.setdefault(name, []).append((time.perf_counter() - start) * 1e3)

    def add(self, name: str, ms: float) -> None:
        """Record one externally measured sample of ``ms`` milliseconds for stage ``name``."""
        self.samples_ms.setdefault(name, []).append(ms)

    def total_ms(self, name: str) -> float:
        """Sum of the samples of stage ``name`` (0.0 if it never ran)."""
        return float(sum(self.samples_ms.get(name, ())))

    def totals_ms(self) -> dict[str, float]:
        """Total milliseconds per stage, in first-seen order."""
        return {name: float(sum(values)) for name, values in self.samples_ms.items()}


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``samples`` by linear interpolation; NaN when empty."""
    # by hand: numpy.percentile(method="linear") rounds differently in the last digit (8.13 for 8.129999999999999)
    if not samples:
        return math.nan
    ordered = sorted(samples)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize_ms(samples: Iterable[float], prefix: str = "") -> dict[str, float]:
    """p50/p90/p95/p99, mean, min and max of millisecond samples, keys like ``f"{prefix}p50_ms"``."""
    values = list(samples)
    if not values:
        return {}
    out = {f"{prefix}p{q}_ms": percentile(values, q) for q in (50, 90, 95, 99)}
    out[f"{prefix}mean_ms"] = sum(values) / len(values)
    out[f"{prefix}min_ms"] = min(values)
    out[f"{prefix}max_ms"] = max(values)
    return out
