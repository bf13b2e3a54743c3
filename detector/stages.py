"""The stage chain of every video loop: preprocess -> infer -> postprocess for one batch of frames.

:class:`StageChain` holds what a pass decided once (network size, letterbox or resize, thresholds, NMS) and gives
each stage as a call, so that the loops differ only in where they put their clocks and threads: the sequential loop
times each stage on its own (:func:`detector.pipeline.run_pipeline`), the pipelined and multi-stream loops time them
around their own uploads (:mod:`detector.pipelined`, :mod:`detector.multistream`), the evaluation runs
:meth:`StageChain.detect` untimed (:mod:`detector.train.evalrun`).

The callback convention of the loops is here too: :data:`Progress`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

    from detector.darknet import NmsConfig
    from detector.frames import FrameSource
    from detector.pipeline import LoopSettings
    from detector.postprocess import Detections
    from detector.spec import ModelSpec

__all__ = ["Progress", "StageChain"]

#: ``on_progress(done)``: every loop's progress callback, called on the calling thread after each step (an
#: iteration, a batch, a tick) with the count done so far (frames; ticks for the multi-stream loop), outside the
#: stage times; a progress display, or a benchmark's probe.
Progress = Callable[[int], None]

#: ``preprocess(frames, (h, w), mode=...) -> (float32 [B, 3, h, w], transforms)`` on host frames.
HostPreprocess = Callable[..., tuple[Any, Any]]


@dataclass(frozen=True)
class StageChain:
    """Preprocess -> infer -> postprocess of one batch, as a pass does it.

    Attributes:
        net_size: the network input ``(h, w)`` in pixels.
        mode: ``"letterbox"`` or ``"resize"``.
        nms: the NMS (:class:`~detector.darknet.NmsConfig`).
        conf_threshold, iou_threshold: :func:`detector.postprocess.postprocess`'s thresholds.
        host_preprocess: the preprocessing of host frames; None: :func:`detector.preprocess.preprocess`.
        max_detections: at most this many detections a frame (the highest scores); None keeps all, as Darknet.
    """

    net_size: tuple[int, int]
    mode: str
    nms: NmsConfig
    conf_threshold: float = 0.25
    iou_threshold: float = 0.45
    host_preprocess: HostPreprocess | None = None
    max_detections: int | None = None
    _stages: tuple[Any, Any, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from detector.postprocess import postprocess
        from detector.preprocess import preprocess, preprocess_torch

        # resolved once: the stages' calls below import nothing
        object.__setattr__(self, "_stages", (self.host_preprocess or preprocess, preprocess_torch, postprocess))

    @classmethod
    def of(cls, spec: ModelSpec, settings: LoopSettings, host_preprocess: HostPreprocess | None = None) -> StageChain:
        """The chain of a pass with ``settings`` over a model of ``spec`` (letterbox and NMS: the cfg's unless
        ``settings`` says, :func:`detector.pipeline.cfg_processing`)."""
        mode, nms = settings.processing(spec)
        return cls(tuple(spec.input_size), mode, nms, settings.conf_threshold, settings.iou_threshold,
                   host_preprocess)

    def prepare_host(self, frames: Sequence[np.ndarray]) -> tuple[np.ndarray, list[Any]]:
        """Host BGR ``uint8`` frames -> float32 ``[B, 3, h, w]`` RGB in [0, 1] and each frame's transform."""
        return self._stages[0](frames, self.net_size, mode=self.mode)

    def prepare_device(self, frames: torch.Tensor) -> tuple[torch.Tensor, list[Any]]:
        """BGR ``uint8`` ``[B, H, W, 3]`` tensor -> float32 ``[B, 3, h, w]`` on its device, queued, not waited for."""
        return self._stages[1](frames, self.net_size, self.mode)

    def postprocess(self, decoded: Any, transforms: Sequence[Any]) -> list[Detections]:
        """Decoded ``[B, N, 4 + C]`` -> one :class:`~detector.postprocess.Detections` per frame, frame pixels."""
        return self._stages[2](decoded, transforms, conf_threshold=self.conf_threshold,
                               iou_threshold=self.iou_threshold, max_detections=self.max_detections, nms=self.nms)

    def detect(self, source: FrameSource, frames: Any, infer: Callable[[Any], Any]) -> list[Detections]:
        """The whole chain on ``frames`` of ``source``, untimed; ``infer(x) -> decoded`` runs the network."""
        x, transforms = source.preprocess(frames, self)
        return self.postprocess(infer(x), transforms)
