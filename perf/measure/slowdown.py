"""A deliberate, known slowdown of a runner: the suite's way to prove its gate catches regressions.

``--perf-inject-delay=MS`` adds ``MS`` milliseconds of work to every inference call of every runner the suite
builds: on a GPU a ``torch.cuda._sleep`` kernel (a busy-wait on the device, calibrated once with CUDA events)
enqueued on the runner's stream right after the model, so it shows up in GPU time exactly as a slower kernel
would; on a CPU a busy-wait of the host. Nothing else changes, so a run with the delay compared with a baseline
without it must be reported slower (``--benchmark-compare-fail``), and the same code without it must not.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from detector.backends.base import Runner


def _busy_wait_ms(ms: float) -> None:
    deadline = time.perf_counter() + ms / 1e3
    while time.perf_counter() < deadline:
        pass


def delay_call(delay_ms: float, device_index: int | None) -> Callable[[], None]:
    """A callable that adds ``delay_ms`` of work where it is called: a ``torch.cuda._sleep`` kernel on the
    current stream of CUDA device ``device_index``, or a host busy-wait when ``device_index`` is None."""
    if device_index is None:
        return functools.partial(_busy_wait_ms, delay_ms)
    import torch

    from detector.timing import sleep_cycles_per_ms

    cycles = int(sleep_cycles_per_ms(device_index) * delay_ms)
    return functools.partial(torch.cuda._sleep, cycles)


def slow_down(runner: Runner, delay_ms: float) -> Callable[[], None] | None:
    """Make every later ``runner.infer`` do ``delay_ms`` more work (on the runner's stream on a GPU), through
    :meth:`~detector.backends.base.Runner.add_infer_hook`; returns the hook's remover (``None`` for no delay).

    Call it on an active runner: whether the delay is a GPU kernel or a host busy-wait follows the runner's
    stream, which activation creates.
    """
    if delay_ms <= 0:
        return None
    on_gpu = runner.stream is not None and runner.torch_device is not None
    return runner.add_infer_hook(delay_call(delay_ms, (runner.torch_device.index or 0) if on_gpu else None))
