"""The suite's benchmark clock: CUDA events on a GPU run, ``time.perf_counter`` on a CPU run.

pytest-benchmark takes its clock from the ``benchmark`` marker's ``timer`` argument, fixed at import time,
while the device is known only once the options are parsed. :data:`SUITE_CLOCK` bridges the two: the perf
plugin tells it the device in ``pytest_configure``; on the first call it becomes either a
:class:`detector.timing.CudaEventClock` (GPU time between events recorded on the *current* stream: tests enter
the runner's stream around ``benchmark(...)``) or the host clock.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any


#: GPU busy-wait ahead of each start event (ms): longer than the enqueue of a CUDA-graph replay or a compiled
#: model (0.1-0.6 ms measured on an H100), so their readings are GPU execution time without launch latency.
DEFAULT_LEAD_IN_MS = 1.0
#: A call whose enqueue takes longer than the lead-in gets a lead-in of this many times its enqueue time
#: (`SuiteClock.covering`): eager PyTorch at batch 1 enqueues for ~3 ms, and with a 1 ms lead-in its GPU reading
#: held the host's launch gaps, which moved by 10-72% between two processes of identical code.
LEAD_IN_PER_ENQUEUE = 1.5
#: pytest-benchmark's time budget per benchmark on the GPU clock when ``--benchmark-max-time`` is not given (s of
#: GPU time). Rounds past ~100 do not narrow the spread of a benchmark's median between processes (11 identical
#: processes on the H100: the same CV from the first 100 rounds as from all 400-4,900), and every round also waits
#: for its lead-in, so pytest-benchmark's 1 s of 0.2 ms calls took 11 s of wall time.
GPU_MAX_TIME_S = 0.2


class SuiteClock:
    """A zero-argument clock in seconds whose source is chosen from the suite's device on first use."""

    def __init__(self) -> None:
        self._device: Callable[[], str] = lambda: "cpu"
        self._clock: Callable[[], float] | None = None
        self.lead_in_ms = DEFAULT_LEAD_IN_MS

    @property
    def __name__(self) -> str:  # pytest-benchmark stores the timer by name in saved runs
        return f"SuiteClock[{self.kind}]"

    def configure(self, device: Callable[[], str], lead_in_ms: float = DEFAULT_LEAD_IN_MS) -> None:
        """Set the callable that returns the resolved device ("cpu", "cuda", "cuda:N") and the CUDA clock's
        lead-in (ms, see :class:`detector.timing.CudaEventClock`); resets the source."""
        self._device = device
        self.lead_in_ms = lead_in_ms
        self._clock = None

    @property
    def kind(self) -> str:
        """``"cuda-events"`` or ``"perf_counter"`` (resolves the device)."""
        return "cuda-events" if self._device().startswith("cuda") else "perf_counter"

    @contextlib.contextmanager
    def covering(self, enqueue_ms: float) -> Iterator[float]:
        """For the block, a lead-in long enough to cover a call whose enqueue takes ``enqueue_ms`` on the host
        (``max(lead-in, LEAD_IN_PER_ENQUEUE * enqueue_ms)``), so the GPU reading holds the call's execution and no
        launch gap; yields the lead-in in ms. A lead-in of 0 (time from an idle GPU, on request) is kept."""
        if self.kind != "cuda-events" or self.lead_in_ms <= 0:
            yield self.lead_in_ms
            return
        self()  # resolves the source
        clock = self._clock
        before = clock.lead_in_ms  # type: ignore[union-attr]
        clock.lead_in_ms = max(before, LEAD_IN_PER_ENQUEUE * enqueue_ms)  # type: ignore[union-attr]
        try:
            yield clock.lead_in_ms  # type: ignore[union-attr]
        finally:
            clock.lead_in_ms = before  # type: ignore[union-attr]

    def __call__(self) -> float:
        if self._clock is None:
            if self.kind == "cuda-events":
                from detector.timing import CudaEventClock

                self._clock = CudaEventClock(lead_in_ms=self.lead_in_ms)
            else:
                self._clock = time.perf_counter
        return self._clock()

    def __repr__(self) -> str:
        return "SuiteClock()"


def max_time_given(config: Any) -> bool:
    """Whether the user set ``--benchmark-max-time`` on the command line, in the ini's ``addopts`` or in
    ``PYTEST_ADDOPTS`` (``config``: the pytest config): then `GPU_MAX_TIME_S` does not replace it."""
    import os
    import shlex

    words = [*config.invocation_params.args, *config.getini("addopts"),
             *shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))]
    return any(str(word).startswith("--benchmark-max-time") for word in words)


def max_time_s(max_time: float, given: bool) -> float:
    """The time budget of a benchmark on the suite's clock: pytest-benchmark's ``max_time`` (s), or at most
    `GPU_MAX_TIME_S` on the GPU clock unless the user ``given`` their own ``--benchmark-max-time``."""
    if given or SUITE_CLOCK.kind != "cuda-events":
        return float(max_time)
    return min(float(max_time), GPU_MAX_TIME_S)


def gpu_time_budget(benchmark: Any, given: bool) -> float:
    """Set `max_time_s` on ``benchmark`` (a pytest-benchmark fixture about to measure; pytest-benchmark 4 and 5
    read it as ``_max_time`` when the measurement starts) and return it."""
    benchmark._max_time = max_time_s(benchmark._max_time, given)
    return benchmark._max_time


#: The one clock every inference benchmark uses (``@pytest.mark.benchmark(timer=SUITE_CLOCK)``).
SUITE_CLOCK = SuiteClock()
