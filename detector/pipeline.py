"""The video pipeline: read -> preprocess -> infer -> postprocess -> draw + write, timed per stage.

This is the sequential reference loop, the lab's "end-to-end" measurement: every stage runs on the calling
thread, so end-to-end FPS is frames over the sum of all stages (plus loop overhead), and inference FPS is
frames over the infer stage alone. Drawing boxes is counted in the ``write`` stage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import numbers
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from detector.errors import VideoError
from detector.frames import DECODERS
from detector.progress import spinner
from detector.stages import Progress
from detector.timing import STAGES, StageTimer

if TYPE_CHECKING:
    import numpy as np

    from detector.backends.base import Runner
    from detector.darknet import NmsConfig
    from detector.postprocess import Detections
    from detector.spec import ModelSpec

log = logging.getLogger(__name__)

#: BGR colours per class index for drawn boxes.
_COLOURS = ((0, 200, 255), (255, 120, 0), (80, 220, 80), (200, 80, 220))

_Result = TypeVar("_Result", bound="PipelineResult")


@dataclass
class PipelineResult:
    """What one pass over a video measured.

    ``stage_ms`` holds total milliseconds per stage (keys of :data:`detector.timing.STAGES`);
    ``stage_samples_ms`` each stage's milliseconds per loop iteration; ``iteration_ms`` the wall time of each
    loop iteration (``batch`` frames; in the pipelined loop, the time between one frame leaving the writer and
    the next); ``detections`` holds one :class:`~detector.postprocess.Detections` per frame, in frame pixels.
    ``preprocess`` is ``"letterbox"`` or ``"resize"`` and ``nms`` the NMS kind, as the run used them.
    ``skip_interval`` is :attr:`LoopSettings.skip_interval` (frames skipped between inferences) and
    ``inferred_frames`` the frames the detector ran on (None given: every frame, ``frames``).
    """

    video: Path
    output: Path | None
    backend: str
    precision: str
    device: str
    batch: int
    frames: int
    width: int
    height: int
    net_size: tuple[int, int]
    wall_s: float
    stage_ms: dict[str, float]
    stage_samples_ms: dict[str, list[float]] = field(repr=False, default_factory=dict)
    detections: list[Detections] = field(repr=False, default_factory=list)
    iteration_ms: list[float] = field(repr=False, default_factory=list)
    preprocess: str = "letterbox"
    nms: str = "default"
    decoder: str = "opencv"
    skip_interval: int = 0
    inferred_frames: int | None = None

    def __post_init__(self) -> None:
        if self.inferred_frames is None:
            self.inferred_frames = self.frames

    @classmethod
    def of_pass(cls: type[_Result], runner: Runner, video: str | os.PathLike[str],
                output: str | os.PathLike[str] | None, *, batch: int, frames: int, frame_size: tuple[int, int],
                wall_s: float, timer: StageTimer, detections: list[Detections], iteration_ms: list[float],
                preprocess: str, nms: NmsConfig, decoder: str = "opencv", **fields: Any) -> _Result:
        """The result of one pass of ``runner`` over ``video``: ``frame_size`` is the video's ``(width, height)``
        in pixels, ``timer`` holds the pass's stage times (ms, keys of :data:`~detector.timing.STAGES`),
        ``fields`` are the fields a subclass adds."""
        width, height = frame_size
        net_h, net_w = runner.spec.input_size
        return cls(
            video=Path(video),
            output=Path(output) if output is not None else None,
            backend=runner.name,
            precision=runner.precision,
            device=runner.device,
            batch=batch,
            frames=frames,
            width=width,
            height=height,
            net_size=(net_h, net_w),
            wall_s=wall_s,
            stage_ms={name: timer.total_ms(name) for name in STAGES},
            stage_samples_ms=dict(timer.samples_ms),
            detections=detections,
            iteration_ms=iteration_ms,
            preprocess=preprocess,
            nms=str(nms),
            decoder=decoder,
            **fields,
        )

    @property
    def e2e_fps(self) -> float:
        """Frames per second over the whole loop (read to write), wall clock."""
        return self.frames / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def infer_fps(self) -> float:
        """Frames per second of the infer stage alone (host time of ``runner.infer``, synchronized)."""
        infer_s = self.stage_ms.get("infer", 0.0) / 1e3
        return self.frames / infer_s if infer_s > 0 else 0.0

    def stage_fps(self) -> dict[str, float]:
        """Frames per second each stage alone would sustain (frames / stage time)."""
        return {k: (self.frames / (v / 1e3) if v > 0 else 0.0) for k, v in self.stage_ms.items()}

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary (no per-frame data)."""
        return {
            "video": str(self.video),
            "output": str(self.output) if self.output else None,
            "backend": self.backend,
            "precision": self.precision,
            "device": self.device,
            "batch": self.batch,
            "frames": self.frames,
            "frame_size": [self.width, self.height],
            "net_size": list(self.net_size),
            "preprocess": self.preprocess,
            "nms": self.nms,
            "decoder": self.decoder,
            "skip_interval": self.skip_interval,
            "inferred_frames": self.inferred_frames,
            "wall_s": self.wall_s,
            "e2e_fps": self.e2e_fps,
            "infer_fps": self.infer_fps,
            "stage_ms": self.stage_ms,
            "stage_fps": self.stage_fps(),
            "detections": int(sum(len(d) for d in self.detections)),
        }


def default_output_path(video: str | os.PathLike[str], backend: str, out_dir: str | os.PathLike[str] | None) -> Path:
    """``<out_dir>/<video stem>-<backend>-detected.mp4`` (``out_dir`` defaults to the video's folder)."""
    video = Path(video)
    folder = Path(out_dir) if out_dir is not None else video.parent
    return folder / f"{video.stem}-{backend}-detected.mp4"


def cfg_processing(spec: ModelSpec, letterbox: bool | None = None,
                   nms: NmsConfig | str | None = None) -> tuple[str, NmsConfig]:
    """The preprocess mode (``"letterbox"`` or ``"resize"``) and NMS of a run: ``letterbox`` / ``nms`` where given,
    else what the model's cfg says, as Darknet follows it (``spec.letterbox``, ``spec.nms``). ``nms`` may be an
    NMS kind alone (``"default"``, ``"greedynms"``, ``"diounms"``), which takes the cfg's ``beta_nms``."""
    from detector.darknet import NmsConfig

    if isinstance(nms, str):
        nms = NmsConfig(nms, spec.nms.beta)
    mode = spec.preprocess_mode if letterbox is None else ("letterbox" if letterbox else "resize")
    return mode, (spec.nms if nms is None else nms)


@dataclass(frozen=True)
class LoopSettings:
    """What a pass over a video does with its frames; the same for the sequential loop (:func:`run_pipeline`), the
    pipelined one (:func:`detector.pipelined.run_pipelined`) and the multi-stream one
    (:func:`detector.multistream.run_multistream`), which take these fields as keywords; a pass's
    :class:`detector.stages.StageChain` is made of them (:meth:`detector.stages.StageChain.of`).

    Attributes:
        batch: frames per inference (>= 1; the pipelined loop pads the last batch).
        names: class names for the labels drawn on the output video.
        conf_threshold: smallest score kept (objectness x class probability).
        iou_threshold: IoU above which NMS drops the lower-scored of two boxes.
        max_frames: stop after this many frames (None: the whole video).
        letterbox: True: letterbox, False: plain resize; None: what the runner's cfg says (:func:`cfg_processing`).
        nms: an :class:`~detector.darknet.NmsConfig` or an NMS kind; None: the cfg's.
        warmup: untimed inferences on a blank batch before timing starts, so that lazy initialisation (cuDNN
            autotune, graph capture) stays out of the stage times.
        keep_detections: keep one :class:`~detector.postprocess.Detections` per frame in the result.
        decoder: ``"opencv"`` (decode on the CPU) or ``"nvdec"`` (the GPU's hardware decoder into the runner's device
            memory, :class:`detector.gpudecode.NvdecReader`; preprocess and postprocess then run on the device too).
        skip_interval: N, the frames skipped between inferences (DeepStream's ``interval``): N=0 infers every
            frame, N=1 frames 0,2,4,..., N=2 frames 0,3,6,..., N=4 frames 0,5,10,...; a skipped frame gets the boxes
            of :class:`detector.tracker.IouTracker`. The sequential loop only (:func:`run_pipeline`); the pipelined
            and multi-stream loops infer every frame. N > 0 needs ``batch`` 1.

    Raises:
        ValueError: ``batch < 1``, an unknown ``decoder``, ``skip_interval`` not an integer >= 0, or > 0 with
            ``batch`` > 1.
    """

    batch: int = 1
    names: Sequence[str] = ()
    conf_threshold: float = 0.25
    iou_threshold: float = 0.45
    max_frames: int | None = None
    letterbox: bool | None = None
    nms: NmsConfig | str | None = None
    warmup: int = 2
    keep_detections: bool = True
    decoder: str = "opencv"
    skip_interval: int = 0

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")
        if isinstance(self.skip_interval, bool) or not isinstance(self.skip_interval, numbers.Integral) or \
                self.skip_interval < 0:
            raise ValueError(f"skip_interval must be an integer >= 0 (frames skipped between inferences), got "
                             f"{self.skip_interval!r}")
        if self.skip_interval > 0 and self.batch != 1:
            raise ValueError(f"skip_interval {self.skip_interval} needs batch 1 (one frame per inference), got batch "
                             f"{self.batch}; use batch 1 or skip_interval 0")
        if self.decoder not in DECODERS:
            raise ValueError(f"decoder must be one of {', '.join(DECODERS)}, got {self.decoder!r}")

    @classmethod
    def of(cls, settings: LoopSettings | None, keywords: Mapping[str, Any]) -> LoopSettings:
        """``settings`` (None: the defaults) with the fields named in ``keywords`` replaced; a ``TypeError``
        names a keyword that is no field."""
        base = settings if settings is not None else cls()
        return dataclasses.replace(base, **keywords) if keywords else base

    def processing(self, spec: ModelSpec) -> tuple[str, NmsConfig]:
        """The preprocess mode and NMS this pass uses for a model of ``spec`` (:func:`cfg_processing`)."""
        return cfg_processing(spec, self.letterbox, self.nms)


def draw_detections(frame: np.ndarray, detections: Detections, names: Sequence[str]) -> np.ndarray:
    """Draw boxes with ``name score`` labels on a BGR uint8 frame in place; returns the frame."""
    import cv2

    for box, score, cls in zip(detections.boxes, detections.scores, detections.classes):
        x1, y1, x2, y2 = (int(round(float(v))) for v in box)
        colour = _COLOURS[int(cls) % len(_COLOURS)]
        label = f"{names[int(cls)] if int(cls) < len(names) else int(cls)} {float(score):.2f}"
        cv2.rectangle(frame, (x1, y1), (x2, y2), colour, 2)
        cv2.putText(frame, label, (x1, max(y1 - 4, 10)), cv2.FONT_HERSHEY_SIMPLEX, 0.45, colour, 1, cv2.LINE_AA)
    return frame


def run_pipeline(
    runner: Runner,
    video: str | os.PathLike[str],
    output: str | os.PathLike[str] | None,
    *,
    settings: LoopSettings | None = None,
    preprocess_fn: Callable[..., tuple[Any, Any]] | None = None,
    on_progress: Progress | None = None,
    **keywords: Any,
) -> PipelineResult:
    """Run the sequential pipeline over ``video`` with an activated ``runner``.

    Writes the annotated video to ``output`` atomically (nothing is left behind if anything fails), or
    writes nothing when ``output`` is None. ``settings`` and ``keywords`` (``batch``, ``names``,
    ``conf_threshold``, ``iou_threshold``, ``max_frames``, ``letterbox``, ``nms``, ``warmup``,
    ``keep_detections``, ``skip_interval``; each replaces that field of ``settings``) are the pass's
    :class:`LoopSettings`. With ``skip_interval`` N > 0 the detector runs on frames 0, N+1, 2(N+1), ... (N=1:
    0,2,4,...; N=2: 0,3,6,...; N=4: 0,5,10,...) and its own detections are output there; each frame in between
    gets :meth:`detector.tracker.IouTracker.predict` (no preprocess, no inference: those stages record 0 ms) and the
    tracker's time, ``predict`` there and ``update`` on inferred frames, counts in the ``postprocess`` stage.
    ``preprocess_fn(frames, (h, w), mode=...) -> (float32 [B, 3, h, w], transforms)`` replaces
    :func:`detector.preprocess.preprocess` (same contract), e.g. for a custom preprocessing.
    ``on_progress(frames_done)`` is called after each loop iteration, outside the iteration's and the stages'
    times (:data:`detector.stages.Progress`); its time counts in ``wall_s``.

    With ``decoder="nvdec"`` the frames stay on the device (:class:`detector.frames.DeviceFrames`): each stage waits
    for the device before its time ends, so the stage times stay each stage's own (as ``infer`` always did).
    """
    import numpy as np

    from detector.frames import open_frames
    from detector.stages import StageChain
    from detector.video import VideoWriter, writable_fps

    loop = LoopSettings.of(settings, keywords)
    batch, max_frames = loop.batch, loop.max_frames
    if loop.decoder == "nvdec" and preprocess_fn is not None:
        raise ValueError("preprocess_fn takes host frames; decoder='nvdec' decodes into device memory")
    chain = StageChain.of(runner.spec, loop, preprocess_fn)
    net_h, net_w = chain.net_size
    timer = StageTimer()
    detections: list[Detections] = []
    iteration_ms: list[float] = []
    frames_done = 0
    tracker = None
    if loop.skip_interval > 0:
        from detector.tracker import IouTracker

        tracker = IouTracker()
    inferred = 0

    with contextlib.ExitStack() as stack:
        source = stack.enter_context(open_frames(video, loop.decoder, runner.device))
        to_host = not source.on_device  # on the device, postprocess runs there too
        width, height, fps = source.width, source.height, writable_fps(source.fps)  # a 1e5 fps camera too
        writer = None
        if output is not None:
            writer = stack.enter_context(VideoWriter(output, fps=fps, size=(width, height)))
        blank = np.zeros((batch, 3, net_h, net_w), dtype=np.float32)
        with spinner(f"warming up {runner.name}"):
            for _ in range(loop.warmup):
                runner.infer(source.upload(blank), to_host=to_host)
        start = time.perf_counter()
        while max_frames is None or frames_done < max_frames:
            began = time.perf_counter()
            want = batch if max_frames is None else min(batch, max_frames - frames_done)
            with timer.stage("read"):
                frames = source.read(want)
                source.wait()
            if not len(frames):
                timer.samples_ms["read"].pop()  # the read that found the end is no iteration
                break
            if tracker is not None and frames_done % (loop.skip_interval + 1):  # a skipped frame (batch is 1)
                timer.add("preprocess", 0.0)
                timer.add("infer", 0.0)
                with timer.stage("postprocess"):
                    dets = [tracker.predict(frames_done, (width, height))]
            else:
                with timer.stage("preprocess"):
                    tensor, transforms = source.preprocess(frames, chain)
                with timer.stage("infer"):
                    decoded = runner.infer(tensor, to_host=to_host)
                    source.wait()  # the GPU's inference time stays in infer, as the host copy keeps it there
                with timer.stage("postprocess"):
                    dets = chain.postprocess(decoded, transforms)
                    if tracker is not None:
                        tracker.update(dets[0], frames_done)
                inferred += len(frames)
            with timer.stage("write"):
                if writer is not None:
                    for frame, det in zip(source.download(frames), dets):
                        writer.write(draw_detections(frame, det, loop.names))
            if loop.keep_detections:
                detections.extend(dets)
            frames_done += len(frames)
            iteration_ms.append((time.perf_counter() - began) * 1e3)
            if on_progress is not None:
                on_progress(frames_done)
        wall_s = time.perf_counter() - start
        if frames_done == 0:
            raise VideoError(f"{video}: no frames could be read")

    log.info("pipeline %s/%s: %d frames, e2e %.1f FPS", runner.name, runner.precision, frames_done, frames_done / wall_s)
    return PipelineResult.of_pass(runner, video, output, batch=batch, frames=frames_done, frame_size=(width, height),
                                  wall_s=wall_s, timer=timer, detections=detections, iteration_ms=iteration_ms,
                                  preprocess=chain.mode, nms=chain.nms, decoder=loop.decoder,
                                  skip_interval=loop.skip_interval, inferred_frames=inferred)
