"""Clocks, stage timers and annotations (NVTX ranges, torch.profiler labels, the profiler capture range).

The GPU clock is :class:`CudaEventClock`: a zero-argument callable returning seconds, so it can be passed as
pytest-benchmark's ``timer``. Each call records a CUDA event on the *current* stream, waits for it, and adds
the event-measured time since the previous call to a running total. Differences between two calls are
therefore GPU time between the two records, with the float32 resolution of ``cudaEventElapsedTime`` applied
to short intervals only (never to the time since the clock was created).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

#: The pipeline's stage names, in order; NVTX ranges, torch.profiler labels and reports use these.
STAGES: tuple[str, ...] = ("read", "preprocess", "infer", "postprocess", "write")


class CudaEventClock:
    """A monotonic clock in seconds driven by CUDA events recorded on the current stream.

    Call it before and after GPU work that was enqueued on the current stream (enter
    ``torch.cuda.stream(s)`` around both calls to time stream ``s``); the difference is the GPU time
    between the two records. Each call synchronizes on its own event, so the host waits for the work.
    """

    def __init__(self) -> None:
        self._last_event = None
        self._total_s = 0.0
        self.__name__ = "CudaEventClock"  # pytest-benchmark names timers by __name__

    def __call__(self) -> float:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        event.synchronize()
        if self._last_event is not None:
            self._total_s += self._last_event.elapsed_time(event) / 1e3
        self._last_event = event
        return self._total_s

    def __repr__(self) -> str:
        return "CudaEventClock()"


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
