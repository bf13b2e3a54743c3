"""The CPU reference: a fixed CPU workload timed in-band, the CPU's speed at that moment (docs/method.md, section 1)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

CALLS = 3  # calls per reading, the best kept (a reading measures speed, not interruptions)
FRAME_CALLS = 1  # calls per in-band reading on the writer thread (`FrameProbe`): ~3% of its time
NOMINAL_S = 1e-3  # normalised samples are s per frame (or tick) had a reading taken this


class CpuReference:
    """The reference workload; calling it returns the best of `CALLS` runs, in seconds."""

    def __init__(self, seed: int = 0) -> None:
        # a 540 x 960 BGR frame, seeded noise over gradients (compresses like a video frame)
        ramp = np.add.outer(np.arange(540), np.arange(960)).astype(np.float32) / (540 + 960) * 200
        noise = np.random.default_rng(seed).normal(0, 12, (540, 960, 3)).astype(np.float32)
        self.frame = np.clip(ramp[..., None] + noise, 0, 255).astype(np.uint8)

    def __call__(self, calls: int = CALLS) -> float:
        import cv2

        best = float("inf")
        for _ in range(calls):
            start = time.perf_counter()
            small = cv2.resize(self.frame, (416, 234), interpolation=cv2.INTER_LINEAR)
            rgb = cv2.cvtColor(small, cv2.COLOR_BGR2RGB)
            float((np.ascontiguousarray(rgb.transpose(2, 0, 1), dtype=np.float32) / np.float32(255)).sum())
            cv2.imencode(".jpg", self.frame[:270, :480])
            best = min(best, time.perf_counter() - start)
        return best


class ReferenceProbe:
    """A loop's ``on_progress`` hook: a reading (``readings_s``) whenever the count done passes a ``block`` multiple."""

    def __init__(self, reference: CpuReference, block: int) -> None:
        self.reference, self.block = reference, block
        self.readings_s: list[float] = []

    def __call__(self, done: int) -> None:
        if done // self.block > len(self.readings_s):
            self.readings_s.append(self.reference())


class FrameProbe:
    """The pipelined writer's on_frame hook: a reading each ``block``-th frame past ``skip`` (time: ``spent_ms``)."""

    def __init__(self, reference: CpuReference, block: int, skip: int = 0) -> None:
        self.reference, self.block, self.skip = reference, block, skip
        self.readings_s: list[float] = []
        self.spent_ms: dict[int, float] = {}

    def __call__(self, index: int, _frame: Any = None, _detections: Any = None) -> None:
        done = index + 1 - self.skip
        if done > 0 and done % self.block == 0:
            start = time.perf_counter()
            self.readings_s.append(self.reference(FRAME_CALLS))
            self.spent_ms[index + 1] = (time.perf_counter() - start) * 1e3

    def exclude(self, intervals_ms: Sequence[float]) -> list[float]:
        """``intervals_ms`` (one per frame, in order) less the time the readings took."""
        return [ms - self.spent_ms.get(i, 0.0) for i, ms in enumerate(intervals_ms)]

    @property
    def spent_s(self) -> float:
        return sum(self.spent_ms.values()) / 1e3


def smoothed(readings: Sequence[float], index: int) -> float:
    """The median of the readings at ``index - 1``, ``index`` and ``index + 1`` (one hiccup does not count)."""
    return statistics.median(readings[max(0, index - 1) : index + 2])


def normalize(blocks_s: Sequence[Sequence[float]], readings_s: Sequence[Sequence[float]], nominal_s: float,
              offset: int = 0) -> list[float]:  # fmt: skip
    """Each block's s per frame at ``nominal_s`` speed, by its `smoothed` reading ``offset + k``; none without one."""
    return [value * nominal_s / smoothed(readings, offset + k)
            for blocks, readings in zip(blocks_s, readings_s)
            for k, value in enumerate(blocks) if offset + k < len(readings)]  # fmt: skip


def summary(readings_s: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Median and spread of the reference readings (ms), for ``extra_info``."""
    flat = [r for pass_ in readings_s for r in pass_]
    if not flat:
        return {}
    q = statistics.quantiles(flat, n=10) if len(flat) > 1 else [flat[0]] * 9
    return {"median_ms": 1e3 * statistics.median(flat), "p10_ms": 1e3 * q[0], "p90_ms": 1e3 * q[-1],
            "readings": len(flat)}  # fmt: skip
