"""`SUITE_CLOCK`: CUDA events on a GPU run, ``time.perf_counter`` otherwise (docs/method.md, section 1)."""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from collections.abc import Callable, Iterator
from typing import Any

#: GPU busy-wait ahead of each start event (ms): longer than the enqueue of a CUDA-graph replay or a compiled
#: model (0.1-0.6 ms measured on an H100), so their readings are GPU execution time without launch latency.
DEFAULT_LEAD_IN_MS = 1.0
#: A call whose enqueue takes longer than the lead-in gets this many times its enqueue time (`SuiteClock.covering`).
LEAD_IN_PER_ENQUEUE = 1.5
#: pytest-benchmark's time budget per benchmark on the GPU clock (s of GPU time) without ``--benchmark-max-time``:
#: rounds past ~100 do not narrow the spread between processes (docs/method.md, section 1).
GPU_MAX_TIME_S = 0.2


class SuiteClock:
    """A zero-argument clock in seconds whose source is chosen from the suite's device on first use."""

    _clock: Any  # the source (`detector.timing.CudaEventClock` or ``time.perf_counter``), None before use

    def __init__(self) -> None:
        self.configure(lambda: "cpu")
        self._on_host = False

    @property
    def __name__(self) -> str:  # pytest-benchmark stores the timer by name in saved runs
        return f"SuiteClock[{self.kind}]"

    def configure(self, device: Callable[[], str], lead_in_ms: float = DEFAULT_LEAD_IN_MS) -> None:
        """Point the clock at the resolved device (a callable: "cpu" or "cuda:N") and its lead-in (ms)."""
        self._device, self.lead_in_ms, self._clock = device, lead_in_ms, None

    @property
    def kind(self) -> str:
        """``"cuda-events"`` or ``"perf_counter"`` (resolves the device)."""
        return "cuda-events" if self._device().startswith("cuda") and not self._on_host else "perf_counter"

    @contextlib.contextmanager
    def on_host(self) -> Iterator[None]:
        """For the block, ``time.perf_counter``: for a runner on its own stream (ONNX Runtime): CUDA events miss it."""
        before, self._on_host = self._on_host, True
        try:
            yield
        finally:
            self._on_host = before

    @contextlib.contextmanager
    def covering(self, enqueue_ms: float) -> Iterator[float]:
        """For the block, a lead-in (ms, yielded) covering a host enqueue of ``enqueue_ms``; a lead-in of 0 is kept."""
        if self.kind != "cuda-events" or self.lead_in_ms <= 0:
            yield self.lead_in_ms
            return
        self()  # resolves the source
        before = self._clock.lead_in_ms
        self._clock.lead_in_ms = max(before, LEAD_IN_PER_ENQUEUE * enqueue_ms)
        try:
            yield self._clock.lead_in_ms
        finally:
            self._clock.lead_in_ms = before

    def __call__(self) -> float:
        if self._on_host:
            return time.perf_counter()
        if self._clock is None:
            from detector.timing import CudaEventClock

            on_gpu = self.kind == "cuda-events"
            self._clock = CudaEventClock(lead_in_ms=self.lead_in_ms) if on_gpu else time.perf_counter
        return self._clock()

    def __repr__(self) -> str:
        return "SuiteClock()"


def max_time_given(config: Any) -> bool:
    """Whether ``--benchmark-max-time`` is on the command line, the ini's ``addopts`` or ``PYTEST_ADDOPTS``."""
    words = [*config.invocation_params.args, *config.getini("addopts"),
             *shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))]
    return any(str(word).startswith("--benchmark-max-time") for word in words)


def max_time_s(max_time: float, given: bool) -> float:
    """A benchmark's time budget (s): ``max_time``, at most `GPU_MAX_TIME_S` on the GPU clock unless ``given``."""
    return float(max_time) if given or SUITE_CLOCK.kind != "cuda-events" else min(float(max_time), GPU_MAX_TIME_S)


SUITE_CLOCK = SuiteClock()  # every inference benchmark's clock: ``@pytest.mark.benchmark(timer=SUITE_CLOCK)``
