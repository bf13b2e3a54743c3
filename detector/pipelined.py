"""The pipelined video loop: decode, GPU work and encode overlap on three threads.

:func:`detector.pipeline.run_pipeline` is the sequential reference; :func:`run_pipelined` computes the same
detections with the stages overlapped::

    reader thread    decode (OpenCV) into a frame buffer of a pool (page-locked on CUDA)  -> decoded queue
    calling thread   upload (non_blocking from the pinned buffer) -> letterbox + normalise on the device
                     (preprocess_torch) -> runner.infer(to_host=False) -> postprocess on the device
                     (threshold + class-aware NMS; one device-to-host copy of the survivors) -> draw the
                     boxes into the frame buffer -> detected queue
    writer thread    encode (OpenCV), give the buffer back to the pool

With ``decoder="nvdec"`` the reader thread decodes on the GPU's hardware decoder into a device twin of the pool
(:class:`detector.gpudecode.NvdecReader`, on its own stream); the calling thread preprocesses from there, and copies
a frame to its host buffer (counted in ``write``) only when a video is written.

The encoder is the slowest stage (mp4v at 960x540: about 3.4 ms a frame on the GPU machine), so its thread
does nothing else; drawing goes to the calling thread, which waits on the GPU most of the time.

Frames can be batched: ``batch`` consecutive frames go through one inference (the last batch is padded with
copies of its last frame, so a CUDA-graph runner only ever sees one batch size). Both queues are bounded,
and every frame occupies one pool buffer from decode until it is written, so at most ``pool_size`` frames
are in flight: a slow encoder throttles the decoder instead of filling memory.

An exception on any thread stops the other two (within :data:`detector.handoff.POLL_S`) and is re-raised in
the caller; the output video is written atomically (see :class:`detector.video.VideoWriter`), so a failed run
leaves no partial file. On the CPU (``runner.device == "cpu"``) the same code runs with ordinary buffers.

Stage times: ``read`` and ``write`` are the busy time of the reader and writer threads (``write`` per frame
includes drawing its boxes on the calling thread). ``preprocess``,
``infer`` and ``postprocess`` are host times on the calling thread; on CUDA the first two only enqueue work,
so GPU time shows up in ``postprocess``, which waits for the results. The stages overlap: their sum exceeds
the wall time, and ``e2e_fps`` (frames / wall time) is the pipeline's throughput.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from detector.errors import VideoError
from detector.frames import frame_device
from detector.handoff import BoundedQueue, BufferPool, Control, start_worker
from detector.pipeline import LoopSettings, PipelineResult, draw_detections
from detector.progress import spinner
from detector.stages import Progress, StageChain
from detector.timing import StageTimer

if TYPE_CHECKING:
    import numpy as np
    import torch

    from detector.backends.base import Runner
    from detector.postprocess import Detections

log = logging.getLogger(__name__)

__all__ = ["PipelinedResult", "pool_size_for", "run_pipelined"]

_END = object()  # end-of-stream marker on both queues


@dataclass
class PipelinedResult(PipelineResult):
    """:class:`~detector.pipeline.PipelineResult` plus the bounds of the pipelined loop.

    ``pool_size``: frame buffers (the most frames in flight); ``peak_in_flight``: the most that were out at
    once; ``queue_sizes`` / ``queue_peaks``: capacity and largest fill of the ``decoded`` (frames) and
    ``detected`` (batches) queues; ``gpu_preprocess``: letterbox ran on the runner's device.
    """

    pool_size: int = 0
    peak_in_flight: int = 0
    queue_sizes: dict[str, int] = field(default_factory=dict)
    queue_peaks: dict[str, int] = field(default_factory=dict)
    gpu_preprocess: bool = True

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "pipelined": True, "pool_size": self.pool_size,
                "peak_in_flight": self.peak_in_flight, "queue_sizes": self.queue_sizes,
                "queue_peaks": self.queue_peaks, "gpu_preprocess": self.gpu_preprocess}


def pool_size_for(batch: int, queue_depth: int) -> int:
    """Frame buffers for ``batch`` and ``queue_depth``: a full decoded queue, a batch being gathered, a
    batch on the device, a full detected queue (``queue_depth`` frames) and one frame being written."""
    return 2 * queue_depth + 2 * batch + 1


def run_pipelined(
    runner: Runner,
    video: str | os.PathLike[str],
    output: str | os.PathLike[str] | None,
    *,
    settings: LoopSettings | None = None,
    queue_depth: int = 8,
    gpu_preprocess: bool | None = None,
    frames: Iterable[np.ndarray] | None = None,
    fps: float = 30.0,
    on_frame: Callable[[int, np.ndarray, Detections], None] | None = None,
    on_progress: Progress | None = None,
    **keywords: Any,
) -> PipelinedResult:
    """Run the pipelined loop over ``video`` with an activated ``runner``; see the module docstring.

    ``settings`` and ``keywords`` (``batch``, ``names``, ``conf_threshold``, ``iou_threshold``, ``max_frames``,
    ``letterbox``, ``nms``, ``warmup``, ``keep_detections``) are the pass's
    :class:`~detector.pipeline.LoopSettings`, as for :func:`~detector.pipeline.run_pipeline`; the detections are
    the same as its detections up to the preprocessing: with ``gpu_preprocess=False`` the frames are prepared
    by the same OpenCV code (identical input tensors), with ``True`` by
    :func:`~detector.preprocess.preprocess_torch` (each input value within one level of OpenCV's).

    Args:
        gpu_preprocess: letterbox and normalise with ``preprocess_torch`` on the runner's device (True) or
            with OpenCV on the host (False). None (default): on the device on CUDA, with OpenCV on the CPU,
            where OpenCV's uint8 resize is several times faster than torch's float one.
        queue_depth: capacity of the decoded queue (frames); the detected queue holds
            ``max(1, queue_depth // batch)`` batches. The pool has :func:`pool_size_for` buffers.
        frames: frames to process instead of decoding ``video`` (all one size, BGR uint8 ``H x W x 3``), e.g.
            a generator reading a camera; it is iterated on the reader thread and ``video`` only names the
            run. ``fps`` is then the output's frame rate.
        on_frame: called on the writer thread as ``on_frame(index, frame, detections)`` for every frame in
            order, after drawing (``frame`` is a pool buffer: copy it to keep it). An exception it raises
            stops the run like any other.
        on_progress: called on the calling thread after each batch went to the writer, with the frames handed on
            so far (:data:`detector.stages.Progress`); the writer works on meanwhile.

    Returns:
        A :class:`PipelinedResult`; ``detections`` (when kept) in frame order, frame pixels.

    Raises:
        VideoError: the video cannot be opened or has no frames, or the output cannot be written; any
            exception raised on the reader or writer thread (the first one, if several failed).
    """
    import torch

    from detector.frames import HostFrames, open_frames
    from detector.video import VideoWriter, writable_fps

    settings = LoopSettings.of(settings, keywords)
    if settings.skip_interval:
        raise ValueError(f"skip_interval={settings.skip_interval}: skipping frames is the sequential loop's "
                         "(run_pipeline); the pipelined loop infers every frame")
    if queue_depth < 1:
        raise ValueError(f"queue_depth must be >= 1, got {queue_depth}")
    device = frame_device(runner)
    if gpu_preprocess is None:
        gpu_preprocess = device.type == "cuda"
    nvdec = settings.decoder == "nvdec"
    if nvdec and (frames is not None or not gpu_preprocess):
        raise ValueError("decoder='nvdec' decodes the video file into device memory: it takes no host frames and "
                         "preprocesses on the device (gpu_preprocess=False is not allowed)")
    with contextlib.ExitStack() as stack:
        read_stream = torch.cuda.Stream(device) if nvdec else None
        if frames is not None:
            source = HostFrames(frames, fps=fps, name=str(video))
        else:  # NVDEC decodes on the reader thread's stream, read_stream, from its opening on
            with torch.cuda.device(device) if nvdec else contextlib.nullcontext(), \
                    torch.cuda.stream(read_stream) if nvdec else contextlib.nullcontext():
                source = stack.enter_context(open_frames(video, settings.decoder, device))
            fps = writable_fps(source.fps)
        height, width = source.height, source.width
        frame_iter: Iterator[Any] = iter(source)
        if settings.max_frames is not None:
            frame_iter = itertools.islice(frame_iter, settings.max_frames)
        writer = None
        if output is not None:
            writer = stack.enter_context(VideoWriter(output, fps=fps, size=(width, height)))
        if device.type == "cuda":
            stack.enter_context(torch.cuda.device(device))
            stack.enter_context(torch.cuda.stream(torch.cuda.Stream(device)))
        loop = _Loop(runner, device, settings, queue_depth, (height, width), gpu_preprocess, read_stream)
        loop.warm_up(settings.warmup)
        start = time.perf_counter()
        written = loop.run(frame_iter, writer, settings.names if writer is not None else None, on_frame, on_progress)
        wall_s = time.perf_counter() - start
        if written == 0:
            raise VideoError(f"{video}: no frames could be read")
    log.info("pipelined %s/%s b%d: %d frames, e2e %.1f FPS", runner.name, runner.precision, settings.batch, written,
             written / wall_s if wall_s > 0 else 0.0)
    return PipelinedResult.of_pass(
        runner, video, output, batch=settings.batch, frames=written, frame_size=(width, height), wall_s=wall_s,
        timer=loop.timer, detections=loop.detections,
        iteration_ms=[(b - a) * 1e3 for a, b in zip([start, *loop.written_at], loop.written_at)],
        preprocess=loop.chain.mode, nms=loop.chain.nms, pool_size=loop.pool.size,
        peak_in_flight=loop.pool.peak_in_use,
        queue_sizes={"decoded": loop.decoded.maxsize, "detected": loop.detected.maxsize},
        queue_peaks={"decoded": loop.decoded.peak, "detected": loop.detected.peak},
        gpu_preprocess=gpu_preprocess, decoder=settings.decoder,
    )  # fmt: skip


class _Loop:
    """State of one pipelined run: the control, queues, pool, device frame batch and timers.

    With a ``read_stream`` (NVDEC decoding) the reader thread receives device frames: it copies each into a slot of
    ``pool_dev`` (a device twin of the host pool) on that stream and waits for it; the calling thread preprocesses
    from there and, only when a video is written, copies the frames to their host pool buffers to draw and encode.
    """

    def __init__(self, runner: Runner, device: torch.device, settings: LoopSettings, queue_depth: int,
                 frame_hw: tuple[int, int], gpu_preprocess: bool, read_stream: torch.cuda.Stream | None = None) -> None:
        import torch

        batch = settings.batch
        self.runner, self.device, self.batch, self.keep = runner, device, batch, settings.keep_detections
        self.chain, self.gpu_preprocess = StageChain.of(runner.spec, settings), gpu_preprocess
        self.control = Control()
        self.pool = BufferPool(pool_size_for(batch, queue_depth), (*frame_hw, 3), self.control,
                               pinned=device.type == "cuda")
        self.decoded: BoundedQueue[Any] = BoundedQueue(queue_depth, self.control, "decoded")
        self.detected: BoundedQueue[Any] = BoundedQueue(max(1, queue_depth // batch), self.control, "detected")
        self.frames_dev = torch.zeros((batch, *frame_hw, 3), dtype=torch.uint8, device=device)
        self.read_stream = read_stream
        self.pool_dev = (torch.empty((self.pool.size, *frame_hw, 3), dtype=torch.uint8, device=device)
                         if read_stream is not None else None)  # fmt: skip
        self.timer = StageTimer()  # calling thread
        self.read_timer = StageTimer()
        self.write_timer = StageTimer()
        self.detections: list[Detections] = []
        self.written = 0
        self.written_at: list[float] = []  # perf_counter when each frame left the writer

    def warm_up(self, iterations: int) -> None:
        """Run preprocess, infer and postprocess on the (blank) device batch: graph capture, autotuning."""
        with spinner(f"warming up {self.runner.name}"):
            for _ in range(iterations):
                self.chain.postprocess(*self._infer_batch([0] * self.batch, upload=False))
        self.timer = StageTimer()

    def run(self, source: Iterator[np.ndarray], writer: Any, names: Sequence[str] | None,
            on_frame: Callable[..., None] | None, on_progress: Progress | None = None) -> int:
        """``names`` None: nothing is drawn (no output video)."""
        threads = [
            start_worker("pipelined-read", lambda: self._read(source), self.control),
            start_worker("pipelined-write", lambda: self._write(writer, on_frame), self.control),
        ]
        try:
            self._process(names, on_progress)
        except BaseException as e:  # noqa: BLE001 -- re-raised below, after the threads have stopped
            self.control.fail(e)
        for thread in threads:
            thread.join()
        if self.control.error is not None:
            raise self.control.error
        for name in ("read", "write"):
            for ms in (self.read_timer if name == "read" else self.write_timer).samples_ms.get(name, []):
                self.timer.add(name, ms)
        return self.written

    # -- reader thread ------------------------------------------------------------------------------
    def _read(self, source: Iterator[Any]) -> None:
        import numpy as np
        import torch

        on_device = self.read_stream is not None
        with torch.cuda.stream(self.read_stream) if on_device else contextlib.nullcontext():
            index = 0
            while True:
                slot = self.pool.acquire()
                start = time.perf_counter()
                frame = next(source, None)
                if frame is None:
                    self.pool.release(slot)
                    break
                if on_device:
                    self.pool_dev[slot].copy_(frame)
                    self.read_stream.synchronize()  # the frame is complete before the calling thread sees it
                else:
                    buffer = self.pool.arrays[slot]
                    if frame.shape != buffer.shape or frame.dtype != np.uint8:
                        raise VideoError(f"frame {index}: shape {frame.shape} dtype {frame.dtype} differs from the "
                                         f"first frame's {buffer.shape} uint8; every frame must have the same size")
                    np.copyto(buffer, frame)
                self.read_timer.add("read", (time.perf_counter() - start) * 1e3)
                self.decoded.put((index, slot))
                index += 1
        self.decoded.put(_END)

    # -- calling thread -----------------------------------------------------------------------------
    def _process(self, names: Sequence[str] | None, on_progress: Progress | None = None) -> None:
        """Batch, infer, postprocess; then draw each frame's boxes into its pool buffer here, so the writer
        thread -- the slowest stage with an mp4v encoder -- only encodes (the draw time goes with the frame
        and is counted in its write stage)."""
        pending: list[tuple[int, int]] = []
        done = False
        while not done:
            item = self.decoded.get()
            done = item is _END
            if not done:
                pending.append(item)
            if pending and (done or len(pending) == self.batch):
                slots = [slot for _, slot in pending]
                decoded, transforms = self._infer_batch(slots, upload=True)
                with self.timer.stage("postprocess"):
                    n = len(pending)
                    dets = self.chain.postprocess(decoded[:n], transforms[:n])
                if self.keep:
                    self.detections.extend(dets)
                # postprocess waited for the stream, so the uploads out of the buffers are complete: draw in place
                download_ms = 0.0
                if self.pool_dev is not None and names is not None:  # device frames: to the host, to be written
                    download_ms = self._download([slot for _, slot in pending]) / len(pending)
                items = []
                for (index, slot), det in zip(pending, dets):
                    start = time.perf_counter()
                    if names is not None:
                        draw_detections(self.pool.arrays[slot], det, names)
                    items.append((index, slot, det, download_ms + (time.perf_counter() - start) * 1e3))
                self.detected.put(items)
                handed = items[-1][0] + 1
                pending = []
                if on_progress is not None:
                    on_progress(handed)
        self.detected.put(_END)

    def _download(self, slots: list[int]) -> float:
        """Copy the device frames of ``slots`` into their page-locked host buffers and wait; return the ms it took
        (counted in the frames' ``write`` stage, as drawing is)."""
        import torch

        start = time.perf_counter()
        for slot in slots:
            self.pool.tensors[slot].copy_(self.pool_dev[slot], non_blocking=True)
        torch.cuda.current_stream(self.device).synchronize()
        return (time.perf_counter() - start) * 1e3

    def _infer_batch(self, slots: list[int], *, upload: bool) -> tuple[torch.Tensor, list[Any]]:
        """Upload (or reuse) the frames of ``slots``, pad to the batch size, preprocess, infer (no sync)."""
        import torch

        n = len(slots)
        with self.timer.stage("preprocess"):
            if self.gpu_preprocess:
                if upload:
                    frames = self.pool.tensors if self.pool_dev is None else self.pool_dev
                    for i, slot in enumerate(slots):
                        self.frames_dev[i].copy_(frames[slot], non_blocking=True)
                    for i in range(n, self.batch):  # pad: one batch size for the whole run
                        self.frames_dev[i].copy_(self.frames_dev[n - 1])
                x, transforms = self.chain.prepare_device(self.frames_dev)
            else:
                arrays = [self.pool.arrays[s] for s in slots]
                arrays += [arrays[-1]] * (self.batch - n)
                host, transforms = self.chain.prepare_host(arrays)
                x = torch.from_numpy(host)
        with self.timer.stage("infer"):
            decoded = self.runner.infer(x, to_host=False)
        return decoded, transforms

    # -- writer thread ------------------------------------------------------------------------------
    def _write(self, writer: Any, on_frame: Callable[..., None] | None) -> None:
        while True:
            item = self.detected.get()
            if item is _END:
                return
            for index, slot, det, draw_ms in item:
                start = time.perf_counter()
                frame = self.pool.arrays[slot]
                if writer is not None:
                    writer.write(frame)
                done = time.perf_counter()
                self.write_timer.add("write", draw_ms + (done - start) * 1e3)
                self.written_at.append(done)
                if on_frame is not None:
                    on_frame(index, frame, det)
                self.pool.release(slot)
                self.written += 1
