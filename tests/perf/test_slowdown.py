"""The deliberate slowdown (perf.measure.slowdown) on a real CPU torch runner: every call does the added work,
inside the time the runner reports. Timings are only ever checked from below: a loaded machine can make a call
slower, never faster than the work it does."""

from __future__ import annotations

import numpy as np

from detector.backends import create_runner
from detector.spec import ModelSpec
from perf.measure.slowdown import slow_down

CALLS = 3


def test_slowdown_adds_the_delay_to_every_call_on_the_host(spec: ModelSpec) -> None:
    batch = np.random.default_rng(0).random((1, 3, *spec.input_size), dtype=np.float32)
    with create_runner("torch", spec, device="cpu") as runner:
        assert slow_down(runner, 0.0) is None  # no delay: nothing added
        runner.infer(batch)  # warm-up: the first call pays one-off costs
        plain = []
        for _ in range(CALLS):
            runner.infer(batch)
            plain.append(runner.last_timing.compute_ms)
        # Longer than any call without it, so every call's time past it shows the delay ran in that call.
        delay_ms = max(50.0, 2 * max(plain))
        remove = slow_down(runner, delay_ms)
        assert remove is not None
        slowed = []
        try:
            for _ in range(CALLS):
                runner.infer(batch)
                slowed.append((runner.last_timing.compute_ms, runner.last_timing.total_ms))
        finally:
            remove()
    assert all(compute >= delay_ms and total >= delay_ms for compute, total in slowed), (plain, delay_ms, slowed)
