"""Multi-stream batching: N video streams decoded on their own threads, one inference per tick for all of them.

What a video-analytics server does with N cameras: each stream has a reader thread that decodes into
(page-locked) buffers of its own pool and a bounded queue of ``queue_depth`` frames. Every *tick* the
calling thread takes the oldest frame of each stream, uploads the N frames into one ``[N, H, W, 3]`` device
batch, letterboxes and normalises it on the device, runs one inference at batch size N and postprocesses all
N frames together; each frame's detections go back to its own stream, in order.

Per-frame latency is the time from the frame being available (decoded into its buffer) to its detections
being on the host, so it includes the time the frame waited in its stream's queue: when inference is the
bottleneck the queues stay full and latency is about ``queue_depth`` ticks. Aggregate FPS is frames of all
streams over the wall time of the measured ticks. No video is written (a server emits metadata).

A stream that reaches the end of its video starts again from the first frame, so any number of ticks can be
measured on a short video; ``offsets`` start streams at different frames of one video.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detector.errors import VideoError
from detector.handoff import BoundedQueue, BufferPool, Control, start_worker
from detector.memory import check_fits
from detector.frames import frame_device
from detector.pipeline import LoopSettings
from detector.stages import Progress, StageChain
from detector.timing import percentile

if TYPE_CHECKING:
    from detector.backends.base import Runner
    from detector.frames import HostFrames
    from detector.postprocess import Detections

log = logging.getLogger(__name__)

__all__ = ["MultistreamResult", "StreamFrame", "run_multistream"]

_END = object()


@dataclass(frozen=True)
class StreamFrame:
    """One processed frame of one stream.

    ``index``: position in the stream (0, 1, ... counting measured frames only); ``position``: frame number in
    the stream's video (wraps to 0 at its end); ``latency_ms``: available -> detections on the host.
    """

    stream: int
    index: int
    position: int
    latency_ms: float
    detections: Detections | None


@dataclass
class MultistreamResult:
    """What :func:`run_multistream` measured over its measured ticks (warm-up ticks excluded)."""

    streams: int
    ticks: int
    wall_s: float
    queue_depth: int
    backend: str
    precision: str
    device: str
    latencies_ms: list[float] = field(repr=False, default_factory=list)
    per_stream: list[list[StreamFrame]] = field(repr=False, default_factory=list)
    stage_ms: dict[str, float] = field(default_factory=dict)
    tick_ms: list[float] = field(repr=False, default_factory=list)  # each measured tick, its queue wait included

    @property
    def frames(self) -> int:
        """Frames processed in the measured ticks (all streams)."""
        return self.streams * self.ticks

    @property
    def fps(self) -> float:
        """Aggregate frames per second over all streams."""
        return self.frames / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def per_stream_fps(self) -> float:
        """Frames per second each stream gets."""
        return self.ticks / self.wall_s if self.wall_s > 0 else 0.0

    def latency_ms(self, q: float) -> float:
        """The ``q``-th percentile (0..100) of per-frame latency, in milliseconds."""
        return percentile(self.latencies_ms, q)

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary (no per-frame data)."""
        return {"streams": self.streams, "ticks": self.ticks, "frames": self.frames, "wall_s": self.wall_s,
                "fps": self.fps, "per_stream_fps": self.per_stream_fps, "latency_p50_ms": self.latency_ms(50),
                "latency_p99_ms": self.latency_ms(99), "queue_depth": self.queue_depth, "backend": self.backend,
                "precision": self.precision, "device": self.device, "stage_ms": self.stage_ms}


def run_multistream(
    runner: Runner,
    videos: Sequence[str | os.PathLike[str]],
    *,
    ticks: int,
    offsets: Sequence[int] | None = None,
    warmup_ticks: int = 2,
    queue_depth: int = 2,
    settings: LoopSettings | None = None,
    on_progress: Progress | None = None,
    **keywords: Any,
) -> MultistreamResult:
    """Run ``len(videos)`` streams batched into one inference per tick, for ``warmup_ticks + ticks`` ticks.

    Args:
        runner: an activated runner; it runs at batch size ``len(videos)`` (warm it up at that size first
            for CUDA graphs or TensorRT profiles, so that capture stays out of the measurement).
        videos: one video per stream (a path may repeat); all must have the same frame size.
        ticks: measured ticks (each one frame of every stream).
        offsets: frames each stream skips before its first frame (default 0 for every stream).
        warmup_ticks: ticks run first and not measured.
        queue_depth: frames each stream's reader may decode ahead (its bounded queue's capacity).
        settings, keywords: the pass's :class:`~detector.pipeline.LoopSettings` (``keywords`` replace its fields):
            ``conf_threshold``, ``iou_threshold``, ``letterbox``, ``nms`` (None: the runner's cfg's) and
            ``keep_detections`` (each frame's :class:`Detections` kept in ``per_stream``) apply; the batch is one
            frame per stream and ``ticks`` the length, so ``batch``, ``max_frames``, ``skip_interval`` and
            ``decoder`` keep their defaults (1, None, 0, ``opencv``); ``warmup`` and ``names`` are not used.
        on_progress: called on the calling thread after each measured tick with the measured ticks so far, outside
            the tick's time (``tick_ms``) but inside ``wall_s`` (:data:`detector.stages.Progress`).

    Raises:
        VideoError: a video cannot be opened or its frame size differs from the first stream's.
        ValueError: no videos, ``ticks < 1``, offsets of another length or negative, or settings this loop does
            not take.
    """
    import torch

    from detector.frames import open_frames

    loop = LoopSettings.of(settings, keywords)
    if (loop.batch, loop.max_frames, loop.skip_interval, loop.decoder) != (1, None, 0, "opencv"):
        raise ValueError(f"the multi-stream loop infers one frame of each stream per tick, decoded by opencv, for "
                         f"`ticks` ticks; got batch={loop.batch}, max_frames={loop.max_frames}, skip_interval="
                         f"{loop.skip_interval}, decoder={loop.decoder!r} (leave them at 1, None, 0, 'opencv')")
    n = len(videos)
    offsets = list(offsets) if offsets is not None else [0] * n
    if n < 1 or ticks < 1 or warmup_ticks < 0 or queue_depth < 1:
        raise ValueError(f"need >= 1 video, ticks >= 1, warmup_ticks >= 0, queue_depth >= 1; got {n} videos, "
                         f"ticks={ticks}, warmup_ticks={warmup_ticks}, queue_depth={queue_depth}")
    if len(offsets) != n or any(o < 0 for o in offsets):
        raise ValueError(f"offsets must be {n} integers >= 0, got {offsets}")
    device = frame_device(runner)
    chain = StageChain.of(runner.spec, loop)
    total = warmup_ticks + ticks
    control = Control()
    with contextlib.ExitStack() as stack:
        readers = [stack.enter_context(open_frames(videos[0]))]
        size = (readers[0].height, readers[0].width)
        check_fits(n * (queue_depth + 2) * size[0] * size[1] * 3,  # each stream's pool, before any opens
                   f"the frame buffers of {n} streams ({queue_depth + 2} frames of {size[1]}x{size[0]} each)")
        readers += [stack.enter_context(open_frames(v)) for v in videos[1:]]
        for video, reader in zip(videos[1:], readers[1:]):
            if (reader.height, reader.width) != size:
                raise VideoError(f"cannot batch '{Path(video)}': frames are {reader.width}x{reader.height}, the "
                                 f"first stream's '{Path(videos[0])}' are {size[1]}x{size[0]}")
        if device.type == "cuda":
            stack.enter_context(torch.cuda.device(device))
            stack.enter_context(torch.cuda.stream(torch.cuda.Stream(device)))
        pools = [BufferPool(queue_depth + 2, (*size, 3), control, pinned=device.type == "cuda") for _ in range(n)]
        queues: list[BoundedQueue[Any]] = [BoundedQueue(queue_depth, control, f"stream{k}") for k in range(n)]
        threads = [start_worker(f"stream{k}-read", _reader_body(readers[k], offsets[k], total, pools[k], queues[k]),
                                control) for k in range(n)]
        ticker = _Ticker(runner, device, n, size, chain)
        try:
            result = ticker.run(pools, queues, warmup_ticks, ticks, loop.keep_detections, on_progress)
        except BaseException as e:  # noqa: BLE001 -- re-raised below, after the threads have stopped
            control.fail(e)
        control.stop.set()  # readers may still be decoding ahead
        for thread in threads:
            thread.join()
        if control.error is not None:
            raise control.error
    result.queue_depth = queue_depth
    log.info("multistream %s/%s x%d: %.1f FPS, latency p50 %.2f ms p99 %.2f ms", runner.name, runner.precision, n,
             result.fps, result.latency_ms(50), result.latency_ms(99))
    return result


def _reader_body(reader: HostFrames, offset: int, frames: int, pool: BufferPool, out: BoundedQueue[Any]) -> Any:
    """The reader thread of one stream: skip ``offset`` frames, then decode ``frames`` frames (looping)."""
    import numpy as np

    def body() -> None:
        position, produced, skip = 0, 0, offset
        source = iter(reader)
        while produced < frames:
            frame = next(source, None)
            if frame is None:  # end of the video: start again from its first frame
                source, position = iter(reader), 0
                continue
            if skip > 0:
                skip, position = skip - 1, position + 1
                continue
            slot = pool.acquire()
            np.copyto(pool.arrays[slot], frame)
            out.put((produced, position, slot, time.perf_counter()))
            produced += 1
            position += 1

    return body


class _Ticker:
    """The calling thread's loop: gather one frame per stream, infer at batch N, scatter the detections."""

    def __init__(self, runner: Runner, device: Any, n: int, size: tuple[int, int], chain: StageChain) -> None:
        import torch

        self.runner, self.n, self.chain = runner, n, chain
        self.frames_dev = torch.zeros((n, *size, 3), dtype=torch.uint8, device=device)
        self.stage_ms = {"wait": 0.0, "preprocess": 0.0, "infer": 0.0, "postprocess": 0.0}

    def run(self, pools: list[BufferPool], queues: list[BoundedQueue[Any]], warmup_ticks: int, ticks: int,
            keep: bool, on_progress: Progress | None = None) -> MultistreamResult:
        runner = self.runner
        result = MultistreamResult(self.n, ticks, 0.0, 0, runner.name, runner.precision, runner.device,
                                   per_stream=[[] for _ in range(self.n)], stage_ms=self.stage_ms)
        start = time.perf_counter()
        for tick in range(warmup_ticks + ticks):
            if tick == warmup_ticks:
                start = time.perf_counter()
                self.stage_ms.update(dict.fromkeys(self.stage_ms, 0.0))
            t0 = time.perf_counter()
            items = [q.get() for q in queues]
            t1 = time.perf_counter()
            for k, (_, _, slot, _) in enumerate(items):
                self.frames_dev[k].copy_(pools[k].tensors[slot], non_blocking=True)
            x, transforms = self.chain.prepare_device(self.frames_dev)
            t2 = time.perf_counter()
            decoded = runner.infer(x, to_host=False)
            t3 = time.perf_counter()
            dets = self.chain.postprocess(decoded, transforms)
            done = time.perf_counter()  # postprocess waited for the stream: the uploads are complete too
            for ms, key in zip((t1 - t0, t2 - t1, t3 - t2, done - t3), self.stage_ms):
                self.stage_ms[key] += ms * 1e3
            for k, ((index, position, slot, available), det) in enumerate(zip(items, dets)):
                pools[k].release(slot)
                if tick >= warmup_ticks:
                    latency = (done - available) * 1e3
                    result.latencies_ms.append(latency)
                    result.per_stream[k].append(StreamFrame(k, index - warmup_ticks, position, latency,
                                                            det if keep else None))
            if tick >= warmup_ticks:
                result.tick_ms.append((time.perf_counter() - t0) * 1e3)
                if on_progress is not None:
                    on_progress(tick - warmup_ticks + 1)
        result.wall_s = time.perf_counter() - start
        return result

