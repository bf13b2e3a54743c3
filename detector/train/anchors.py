"""Anchor boxes fitted to the training boxes: k-means with 1 - IoU as the distance (YOLOv2's method, Darknet's
``detector calc_anchors``).

The stock YOLOv4-tiny anchors are COCO's. On the synthetic video a median person is about 8x21 network pixels
and a quarter are under 4x11, while the smallest anchor a stock head uses is 23x27 (shape IoU 0.07 with 4x11):
fitted anchors raise the mean best-anchor IoU of the training boxes from 0.36 to 0.66. The shipped cfg carries
the anchors this module printed (``python3 -m detector.train anchors``), smallest three on the 26x26 head.

All sizes are ``(width, height)`` in network-input pixels.
"""

from __future__ import annotations

import numpy as np

from detector.errors import DetectorError

__all__ = ["kmeans_anchors", "mean_best_iou", "shape_iou"]


def shape_iou(boxes: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """IoU of box shapes placed on a common centre: ``boxes [N, 2]`` x ``anchors [K, 2]`` -> ``[N, K]``."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 2)
    anchors = np.asarray(anchors, np.float64).reshape(-1, 2)
    inter = np.minimum(boxes[:, None, 0], anchors[None, :, 0]) * np.minimum(boxes[:, None, 1], anchors[None, :, 1])
    union = boxes[:, None].prod(-1) + anchors[None].prod(-1) - inter
    return inter / union


def mean_best_iou(boxes: np.ndarray, anchors: np.ndarray) -> float:
    """Mean over ``boxes [N, 2]`` of the shape IoU with the best of ``anchors [K, 2]`` (Darknet's 'avg IoU')."""
    return float(shape_iou(boxes, anchors).max(1).mean())


def kmeans_anchors(boxes: np.ndarray, k: int = 6, *, seed: int = 0, restarts: int = 10,
                   max_iter: int = 300) -> np.ndarray:
    """``k`` anchors ``[k, 2]`` (sorted by area, rounded to whole pixels) for box sizes ``boxes [N, 2]``.

    Lloyd's k-means with distance ``1 - shape IoU`` and the median as the cluster centre; ``restarts`` seeded
    initialisations, the one with the highest mean best IoU wins. Raises DetectorError with fewer than ``k``
    distinct positive sizes or a negative ``seed``.
    """
    boxes = np.asarray(boxes, np.float64).reshape(-1, 2)
    boxes = boxes[(boxes > 0).all(1)]
    distinct = np.unique(boxes, axis=0)
    if k < 1 or len(distinct) < k:
        raise DetectorError(f"need at least {k} distinct positive box sizes for {k} anchors, got {len(distinct)}")
    if seed < 0:
        raise DetectorError(f"k-means anchors: seed must be an integer >= 0, got {seed!r}")
    rng = np.random.default_rng(seed)
    best: tuple[float, np.ndarray] | None = None
    for _ in range(restarts):
        centres = distinct[rng.choice(len(distinct), k, replace=False)]
        for _ in range(max_iter):
            label = shape_iou(boxes, centres).argmax(1)
            moved = np.array([np.median(boxes[label == j], 0) if (label == j).any() else centres[j]
                              for j in range(k)])
            if np.allclose(moved, centres):
                break
            centres = moved
        score = mean_best_iou(boxes, centres)
        if best is None or score > best[0]:
            best = (score, centres)
    assert best is not None
    anchors = np.maximum(np.round(best[1]), 1.0)
    return anchors[np.argsort(anchors.prod(1), kind="stable")]
