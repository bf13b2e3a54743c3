"""``--perf-inject-delay=MS``: a known slowdown of every runner, the gate's proof (docs/method.md, section 8)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from detector.devices import device_index

if TYPE_CHECKING:
    from detector.backends.base import Runner


def _busy_wait_ms(ms: float) -> None:
    deadline = time.perf_counter() + ms / 1e3
    while time.perf_counter() < deadline:
        pass


def delay_call(delay_ms: float, device_index: int | None) -> Callable[[], None]:
    """A callable adding ``delay_ms`` of work: a ``torch.cuda._sleep`` on GPU ``device_index``, else a busy-wait."""
    if device_index is None:
        return functools.partial(_busy_wait_ms, delay_ms)
    import torch

    from detector.timing import sleep_cycles_per_ms

    cycles = int(sleep_cycles_per_ms(device_index) * delay_ms)
    return functools.partial(torch.cuda._sleep, cycles)


def slow_down(runner: Runner, delay_ms: float) -> Callable[[], None] | None:
    """Make every later ``runner.infer`` do ``delay_ms`` more work (GPU or host, as its stream); the hook's remover."""
    if delay_ms <= 0:
        return None
    on_gpu = runner.stream is not None and runner.torch_device is not None
    return runner.add_infer_hook(delay_call(delay_ms, device_index(runner.torch_device) if on_gpu else None))
