"""COCO-style accuracy of detections against a COCO ground-truth json, through pycocotools.

Category ids in the ground truth are 1-based (1 person, 2 vehicle); :class:`Detections` classes are 0-based,
so class ``k`` is category id ``k + 1``. Every image of the ground truth is evaluated; an image without an
entry in the detections simply has no detections.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from detector.errors import DetectorError
from detector.groundtruth import load_ground_truth
from detector.postprocess import Detections

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ClassAP:
    """Average precision of one class (NaN when the ground truth has no box of it); ``num_gt`` boxes."""

    ap50: float
    ap50_95: float
    num_gt: int


#: COCO's rule: an image's 100 highest-scored detections are scored (pycocotools alone keeps 100 an image and class).
COCO_MAX_DETECTIONS = 100


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """COCO bbox metrics (area "all", at most 100 detections per image).

    Attributes:
        map50: mean over classes of AP at IoU 0.5.
        map50_95: mean over classes of AP averaged over IoU 0.50:0.05:0.95 (the COCO "AP").
        per_class: class name -> :class:`ClassAP`, in category-id order.
        num_images: ground-truth images evaluated; num_detections: detections scored (an image's 100 best).
    """

    map50: float
    map50_95: float
    per_class: dict[str, ClassAP]
    num_images: int
    num_detections: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary: ``{"mAP@0.5", "mAP@0.5:0.95", "per_class": {name: {...}}, ...}``."""
        return {
            "mAP@0.5": self.map50,
            "mAP@0.5:0.95": self.map50_95,
            "per_class": {
                name: {"AP@0.5": c.ap50, "AP@0.5:0.95": c.ap50_95, "num_gt": c.num_gt}
                for name, c in self.per_class.items()
            },
            "num_images": self.num_images,
            "num_detections": self.num_detections,
        }

    def summary(self) -> str:
        """One line: ``mAP@0.5 0.812, mAP@0.5:0.95 0.604 (AP@0.5: person 0.811, vehicle 0.990)`` (a class without
        ground-truth boxes: ``-``)."""

        def fmt(v: float) -> str:
            return "-" if math.isnan(v) else f"{v:.3f}"

        per_class = ", ".join(f"{name} {fmt(c.ap50)}" for name, c in self.per_class.items())
        return f"mAP@0.5 {fmt(self.map50)}, mAP@0.5:0.95 {fmt(self.map50_95)} (AP@0.5: {per_class})"

    def table(self) -> str:
        """A small text table: ``class | AP@0.5 | AP@0.5:0.95``, one row per class and a final ``all`` row."""
        rows = [(name, c.ap50, c.ap50_95) for name, c in self.per_class.items()]
        rows.append(("all", self.map50, self.map50_95))
        width = max(len("class"), *(len(r[0]) for r in rows))

        def fmt(v: float) -> str:
            return "    -" if math.isnan(v) else f"{v:.3f}"

        lines = [f"{'class':<{width}} | AP@0.5 | AP@0.5:0.95", f"{'-' * width}-+--------+------------"]
        lines += [f"{name:<{width}} | {fmt(a):>6} | {fmt(b):>11}" for name, a, b in rows]
        return "\n".join(lines)


def evaluate_coco(
    gt_json_path: str | os.PathLike[str],
    detections: Mapping[int, Detections],
    *,
    names: Sequence[str] | None = None,
    image_ids: Iterable[int] | None = None,
) -> EvalResult:
    """mAP@0.5 and mAP@0.5:0.95, overall and per class, of ``detections`` against a COCO ground truth.

    Args:
        gt_json_path: COCO json (``images``, ``annotations`` with ``bbox`` ``[x, y, w, h]`` in pixels,
            ``categories`` with 1-based ids).
        detections: image id -> :class:`Detections` of that image (boxes ``x1y1x2y2`` in frame pixels,
            0-based classes). Images of the ground truth missing here count as frames with no detections.
        names: class names by 0-based class; default: the ground truth's category names.
        image_ids: score only these images of the ground truth (default: every image), e.g. the frames a short
            pass ran (a video's image id is its frame index + 1).

    Returns:
        :class:`EvalResult`; APs of classes without ground-truth boxes are NaN and left out of the means.

    Raises:
        DetectorError: the ground-truth file is missing or malformed, or a detection names an image id that
            is not in it (or not in ``image_ids``).
    """
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    path = Path(gt_json_path)
    data = load_ground_truth(path)
    if image_ids is not None:
        wanted = {int(i) for i in image_ids}
        data = {**data, "images": [img for img in data["images"] if int(img["id"]) in wanted],
                "annotations": [ann for ann in data["annotations"] if int(ann["image_id"]) in wanted]}
    known = {int(img["id"]) for img in data["images"]}
    unknown = sorted(set(int(k) for k in detections) - known)
    if unknown and image_ids is not None:
        raise DetectorError(f"detections for image ids {unknown[:5]} outside the {len(known)} images of ground truth "
                            f"'{path}' scored (image_ids)")
    if unknown:
        raise DetectorError(f"detections for image ids {unknown[:5]} that ground truth '{path}' does not list "
                            f"(it has {len(known)} images)")
    results = []
    for image_id, det in detections.items():
        top = np.argsort(-det.scores, kind="stable")[:COCO_MAX_DETECTIONS]
        boxes = det.boxes[top]
        for (x1, y1), (w, h), score, cls in zip(boxes[:, :2].tolist(), (boxes[:, 2:] - boxes[:, :2]).tolist(),
                                                det.scores[top].tolist(), det.classes[top].tolist()):
            results.append({"id": len(results) + 1, "image_id": int(image_id), "category_id": int(cls) + 1,
                            "bbox": [x1, y1, w, h], "area": w * h, "score": score, "iscrowd": 0})

    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress
        gt = COCO()
        gt.dataset = data
        gt.createIndex()
        dt = COCO()
        dt.dataset = {"images": data["images"], "categories": data["categories"], "annotations": results}
        dt.createIndex()
        coco_eval = COCOeval(gt, dt, iouType="bbox")
        coco_eval.evaluate()
        coco_eval.accumulate()
    # precision: [IoU thresholds (0.50:0.05:0.95), recall points, categories, area ranges, max dets]; -1 = no GT
    precision = coco_eval.eval["precision"][:, :, :, 0, -1]
    cat_names = {int(c["id"]): str(c.get("name", c["id"])) for c in data["categories"]}
    num_gt = {cid: 0 for cid in cat_names}
    for ann in data["annotations"]:
        num_gt[int(ann["category_id"])] += 0 if ann.get("iscrowd") else 1

    def mean_ap(p: np.ndarray) -> float:
        valid = p[p > -1]
        return float(valid.mean()) if valid.size else float("nan")

    per_class = {}
    for k, cid in enumerate(coco_eval.params.catIds):
        name = names[cid - 1] if names is not None and 0 <= cid - 1 < len(names) else cat_names[cid]
        per_class[name] = ClassAP(mean_ap(precision[0, :, k]), mean_ap(precision[:, :, k]), num_gt[cid])
    result = EvalResult(mean_ap(precision[0]), mean_ap(precision), per_class, len(known), len(results))
    log.debug("COCO evaluation of %s:\n%s", path, result.table())
    return result
