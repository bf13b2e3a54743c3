"""Each stage of the video loop alone: decode only, encode only, inference only (frames per second).

A pipelined loop can be at best as fast as its slowest stage; these measure each stage on its own so that a
report can give the pipeline's FPS as a fraction of that bound. Host wall clock throughout (on CUDA the
inference measurement synchronizes once at the end, so queued GPU work is included).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

    from detector.backends.base import Runner

log = logging.getLogger(__name__)

__all__ = ["StageSpeed", "decode_speed", "encode_speed", "infer_ms_per_call", "infer_speed", "meets", "slowest"]


@dataclass(frozen=True)
class StageSpeed:
    """``frames`` frames through one stage in ``seconds`` (wall clock)."""

    name: str
    frames: int
    seconds: float

    @property
    def fps(self) -> float:
        """Frames per second."""
        return self.frames / self.seconds if self.seconds > 0 else math.inf

    @property
    def ms_per_frame(self) -> float:
        """Milliseconds per frame."""
        return self.seconds * 1e3 / self.frames if self.frames else math.nan


def slowest(*speeds: StageSpeed) -> StageSpeed:
    """The stage with the lowest FPS: the bound on a pipeline of these stages."""
    return min(speeds, key=lambda s: s.fps)


def meets(ratio: float, target: float) -> str:
    """Whether a pipeline at ``ratio`` (its FPS over its slowest stage alone) reaches ``target``: "yes", "no", or
    "unknown" above 1, where it beat that stage alone: the two ran at different speeds of the host's CPU."""
    if ratio > 1:
        return "unknown: above 1, so the stage alone ran at another CPU speed than the pipeline"
    return "yes" if ratio >= target else "no"


def decode_speed(video: str | os.PathLike[str], max_frames: int | None = None, keep: int = 0, *,
                 decoder: str = "opencv", device: str = "cuda") -> tuple[StageSpeed, list[np.ndarray]]:
    """Decode the first ``max_frames`` frames (all when None) of ``video``; also return the first ``keep`` (BGR uint8
    host arrays).

    The frames are read 8 at a time from :func:`detector.frames.open_frames`: ``decoder`` "opencv" decodes on the
    CPU (keeping a frame costs nothing: OpenCV returns a new array per frame, kept by reference); "nvdec" decodes
    into the memory of ``device`` (on the current stream, waited for at the end), and the kept frames are copied to
    the host after the clock stops.
    """
    from detector.frames import open_frames

    kept: list[Any] = []
    frames = 0
    with open_frames(video, decoder, device) as source:
        if source.on_device:
            import torch
        start = time.perf_counter()
        while max_frames is None or frames < max_frames:
            batch = source.read(8 if max_frames is None else min(8, max_frames - frames))
            if not len(batch):
                break
            wanted = batch[: max(keep - len(kept), 0)]
            kept.extend(wanted.clone() if source.on_device else wanted)  # device frames: the decoder reuses its memory
            frames += len(batch)
        if source.on_device:
            torch.cuda.synchronize(source.device)
        seconds = time.perf_counter() - start
    return StageSpeed("decode", frames, seconds), [frame.cpu().numpy() if source.on_device else frame for frame in kept]


def encode_speed(frames: Sequence[np.ndarray], count: int, path: str | os.PathLike[str], fps: float = 30.0,
                 codec: str = "mp4v") -> StageSpeed:
    """Encode ``count`` frames, cycling through ``frames``, into ``path`` (written atomically, then kept).

    The time covers every ``write`` and closing the file (the encoder flushes on close), not opening it.
    """
    from detector.video import VideoWriter

    if not frames or count < 1:
        raise ValueError(f"encode_speed needs frames and count >= 1, got {len(frames)} frames, count={count}")
    height, width = frames[0].shape[:2]
    writer = VideoWriter(path, fps=fps, size=(width, height), codec=codec)
    with writer:
        start = time.perf_counter()
        for frame in itertools.islice(itertools.cycle(frames), count):
            writer.write(frame)
    seconds = time.perf_counter() - start
    return StageSpeed("encode", count, seconds)


def infer_speed(runner: Runner, batch: torch.Tensor | np.ndarray, frames: int, warmup: int = 3) -> StageSpeed:
    """Run ``runner.infer`` on ``batch`` (``[B, 3, H, W]``, on the runner's device for device-side timing)
    until ``frames`` frames (rounded up to whole batches) have been inferred; synchronize once at the end."""
    b = int(batch.shape[0])
    calls = max(1, -(-frames // b))
    out: Any = None
    for _ in range(warmup):
        out = runner.infer(batch, to_host=False)
    _sync(runner, out)
    start = time.perf_counter()
    for _ in range(calls):
        out = runner.infer(batch, to_host=False)
    _sync(runner, out)
    seconds = time.perf_counter() - start
    return StageSpeed(f"infer b{b}", calls * b, seconds)


def infer_ms_per_call(runner: Runner, x: Any, calls: int) -> float:
    """Milliseconds per call of ``calls`` back-to-back ``runner.infer(x)``: on a CUDA runner (its ``stream`` set)
    GPU time between two CUDA events around the loop on the current stream, outputs left on the device; on a
    CPU runner the host clock around the loop."""
    if runner.stream is None:
        start = time.perf_counter()
        for _ in range(calls):
            runner.infer(x)
        return (time.perf_counter() - start) * 1e3 / calls
    import torch

    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(calls):
        runner.infer(x, to_host=False)
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / calls


def _sync(runner: Runner, out: Any) -> None:
    if out is not None and getattr(out, "is_cuda", False):
        import torch

        torch.cuda.synchronize(out.device)
