"""Decoded network output to per-frame detections: threshold, class-aware NMS, top-k, back to frame pixels."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from detector.boxes import Letterbox, batched_diou_nms, batched_nms, clip_boxes
from detector.errors import DetectorError

if TYPE_CHECKING:
    import torch

    from detector.darknet import NmsConfig


@dataclasses.dataclass
class Detections:
    """The detections of one frame, on the host, sorted by descending score.

    Attributes:
        boxes: float32 ``[K, 4]`` boxes ``(x1, y1, x2, y2)`` in frame pixels.
        scores: float32 ``[K]`` scores (objectness * class probability) in ``[0, 1]``.
        classes: int64 ``[K]`` 0-based class indices.
    """

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray

    def __post_init__(self) -> None:
        self.boxes = np.asarray(self.boxes, dtype=np.float32).reshape(-1, 4)
        self.scores = np.asarray(self.scores, dtype=np.float32).reshape(-1)
        self.classes = np.asarray(self.classes, dtype=np.int64).reshape(-1)
        if not len(self.boxes) == len(self.scores) == len(self.classes):
            raise DetectorError(
                f"Detections: boxes, scores and classes differ in length "
                f"({len(self.boxes)}, {len(self.scores)}, {len(self.classes)})"
            )

    @classmethod
    def empty(cls) -> Detections:
        """No detections."""
        return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64))

    def __len__(self) -> int:
        return len(self.scores)

    def to_dict(self) -> dict[str, list[Any]]:
        """JSON-ready ``{"boxes": [[x1, y1, x2, y2], ...], "scores": [...], "classes": [...]}`` (frame pixels)."""
        return {"boxes": self.boxes.tolist(), "scores": self.scores.tolist(), "classes": self.classes.tolist()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Detections:
        """Inverse of :meth:`to_dict`."""
        try:
            return cls(data["boxes"], data["scores"], data["classes"])
        except (KeyError, TypeError, ValueError) as e:
            raise DetectorError(f"Detections.from_dict: expected keys boxes, scores, classes: {e}") from e


def _as_tensor(decoded: torch.Tensor | np.ndarray) -> torch.Tensor:
    import torch

    if isinstance(decoded, torch.Tensor):
        return decoded
    if isinstance(decoded, np.ndarray):
        if not decoded.flags.writeable:  # torch.from_numpy warns on read-only arrays
            decoded = decoded.copy()
        return torch.from_numpy(np.ascontiguousarray(decoded))
    raise DetectorError(f"decoded must be a torch.Tensor or numpy.ndarray, got {type(decoded).__name__}")


def postprocess(
    decoded: torch.Tensor | np.ndarray,
    transforms: Sequence[Letterbox],
    conf_threshold: float = 0.25,
    iou_threshold: float = 0.45,
    max_detections: int | None = None,
    nms: NmsConfig | None = None,
) -> list[Detections]:
    """Turn decoded network output into detections in frame pixels, one :class:`Detections` per frame.

    Per frame: every (candidate, class) pair whose score is strictly greater than ``conf_threshold`` becomes a
    detection (multi-label, as Darknet: one candidate can yield one detection per class), then class-aware NMS
    (:func:`~detector.boxes.batched_nms`, suppress on IoU > ``iou_threshold``: Darknet's default do_nms_sort; or
    with a DIoU ``nms``, :func:`~detector.boxes.batched_diou_nms` on DIoU > ``iou_threshold``, computed as Darknet
    does on boxes relative to the frame, x / frame width and y / frame height), then the ``max_detections``
    highest scores, then boxes are mapped to frame pixels (``Letterbox.to_frame``) and clipped to the frame.
    Thresholding runs first, on the input's device, so NMS only sees survivors; all frames share one NMS call.
    Equal scores keep candidate order (then class order).

    Args:
        decoded: ``[B, N, 4 + C]`` tensor (cpu or cuda, float16/bfloat16/float32) or numpy array: columns
            0..3 are ``(x1, y1, x2, y2)`` in network-input pixels, columns 4.. the per-class scores.
            Scores are compared in float32.
        transforms: the ``B`` :class:`Letterbox` transforms from preprocessing, one per frame.
        conf_threshold: keep scores ``> conf_threshold`` (strict, like Darknet).
        iou_threshold: NMS IoU threshold.
        max_detections: at most this many detections per frame; ``None`` (the default, as Darknet) keeps all.
        nms: which NMS (:class:`detector.darknet.NmsConfig`, e.g. a cfg's ``ModelSpec.nms``); None: IoU NMS.

    Returns:
        ``B`` :class:`Detections` (numpy, host), each sorted by descending score.
    """
    import torch

    x = _as_tensor(decoded)
    if x.ndim != 3 or x.shape[2] < 5:
        raise DetectorError(f"decoded must have shape [B, N, 4 + C] with C >= 1, got {list(x.shape)}")
    if not x.is_floating_point():
        raise DetectorError(f"decoded must be a floating-point tensor, got {x.dtype}")
    if len(transforms) != x.shape[0]:
        raise DetectorError(f"got {len(transforms)} transforms for a batch of {x.shape[0]} frames; need one per frame")
    if max_detections is not None and (int(max_detections) != max_detections or max_detections < 0):
        raise DetectorError(f"max_detections must be a non-negative integer or None, got {max_detections!r}")
    num_classes = x.shape[2] - 4
    scores = x[..., 4:].float()
    image, cand, cls = torch.nonzero(scores > conf_threshold, as_tuple=True)
    boxes = x[image, cand, :4].float()
    score = scores[image, cand, cls]
    if nms is None or nms.diou_exponent is None:
        keep = batched_nms(boxes, score, image * num_classes + cls, iou_threshold)
    else:  # DIoU is not invariant to stretching an axis: compare in Darknet's frame-relative coordinates
        per_px = torch.tensor([[1 / (lb.scale_x * lb.frame_w), 1 / (lb.scale_y * lb.frame_h)] for lb in transforms],
                              dtype=torch.float32, device=boxes.device).reshape(-1, 2).repeat(1, 2)
        keep = batched_diou_nms(boxes * per_px[image], score, image * num_classes + cls, iou_threshold,
                                nms.diou_exponent)
    # one device-to-host copy; frame and class indices are small integers, exact in float32
    host = torch.cat([boxes[keep], score[keep, None], cls[keep, None].float(), image[keep, None].float()], 1)
    host = host.cpu().numpy()
    boxes_h, score_h, cls_h, image_h = host[:, :4], host[:, 4], host[:, 5].astype(np.int64), host[:, 6].astype(np.int64)

    order = np.argsort(image_h, kind="stable")  # group by frame, keeping descending score within each
    starts = np.searchsorted(image_h[order], np.arange(len(transforms) + 1))
    result = []
    for i, lb in enumerate(transforms):
        rows = order[starts[i] : starts[i + 1]][:max_detections]
        frame_boxes = clip_boxes(lb.to_frame(boxes_h[rows].astype(np.float64)), lb.frame_w, lb.frame_h)
        result.append(Detections(frame_boxes, score_h[rows], cls_h[rows]))
    return result
