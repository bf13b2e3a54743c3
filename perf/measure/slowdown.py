"""A deliberate, known slowdown of a runner: the suite's way to prove its gate catches regressions.

``--perf-inject-delay=MS`` adds ``MS`` milliseconds of work to every inference call of every runner the suite
builds: on a GPU a ``torch.cuda._sleep`` kernel (a busy-wait on the device, calibrated once with CUDA events)
enqueued on the runner's stream right after the model, so it shows up in GPU time exactly as a slower kernel
would; on a CPU a busy-wait of the host. Nothing else changes, so a run with the delay compared with a baseline
without it must be reported slower (``--benchmark-compare-fail``), and the same code without it must not.
"""

from __future__ import annotations

import argparse
import functools
import math
import time
from collections.abc import Callable
from typing import Any


def parse_delay_ms(value: str) -> float:
    """``"0.2"`` or ``"0.2ms"`` -> 0.2 (milliseconds, >= 0)."""
    text = value.strip().lower().removesuffix("ms")
    try:
        delay = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Could not parse value: {value!r}. Expected milliseconds, e.g. 0.2ms.") from None
    if not 0 <= delay < math.inf:
        raise argparse.ArgumentTypeError(f"Could not parse value: {value!r}. Expected a finite number of "
                                         "milliseconds >= 0, e.g. 0.2ms.")  # fmt: skip
    return delay


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


def slow_down(runner: Any, delay_ms: float) -> None:
    """Make every later ``runner.infer`` do ``delay_ms`` more work (on the runner's stream on a GPU)."""
    if delay_ms <= 0:
        return
    inner: Callable[[Any], Any] = runner._infer
    delay = delay_call(delay_ms, (runner.torch_device.index or 0) if runner.stream is not None else None)

    def _infer(x: Any) -> Any:
        out = inner(x)
        delay()
        return out

    runner._infer = _infer
