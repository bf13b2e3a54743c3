"""A COCO ground-truth file: read and checked (:func:`load_ground_truth`), its categories checked against a
model's class names (:func:`check_categories`). Cheap: neither torch nor pycocotools is imported, so a command or
the suite checks a given file this way at start-up.

The convention this package scores by (:func:`detector.evaluate.evaluate_coco`, and what
:func:`detector.synthetic.make_synthetic_video` writes): image id = frame index + 1, category id = class index + 1.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from detector.errors import DetectorError

__all__ = ["check_categories", "load_ground_truth"]


def load_ground_truth(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a COCO json; fills ``area`` / ``iscrowd`` / ``id`` where absent (pycocotools needs them).

    Raises:
        DetectorError: (one line naming the file) missing, unreadable, not JSON, or not a COCO object whose
            annotations name listed images and categories.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise DetectorError(f"cannot read ground truth '{path}': no such file") from e
    except (OSError, UnicodeDecodeError) as e:
        raise DetectorError(f"cannot read ground truth '{path}': {e}") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DetectorError(f"ground truth '{path}': not valid JSON at line {e.lineno} column {e.colno}: {e.msg}") from e
    if not isinstance(data, dict):
        raise DetectorError(f"ground truth '{path}': expected a COCO json object, got {type(data).__name__}")
    for key in ("images", "annotations", "categories"):
        if not isinstance(data.get(key), list):
            raise DetectorError(f"ground truth '{path}': missing list {key!r} (a COCO json has images, annotations, "
                                "categories)")
    try:
        image_ids = {int(img["id"]) for img in data["images"]}
        category_ids = {int(cat["id"]) for cat in data["categories"]}
    except (KeyError, TypeError, ValueError) as e:
        raise DetectorError(f"ground truth '{path}': every image and category needs an integer 'id' ({e!r})") from e
    for i, ann in enumerate(data["annotations"]):
        try:
            bbox = [float(v) for v in ann["bbox"]]
            ok = len(bbox) == 4 and int(ann["image_id"]) in image_ids and int(ann["category_id"]) in category_ids
        except (KeyError, TypeError, ValueError) as e:
            raise DetectorError(f"ground truth '{path}': annotation {i} is malformed ({e!r})") from e
        if not ok:
            raise DetectorError(f"ground truth '{path}': annotation {i} needs bbox [x, y, w, h] and an image_id and "
                                "category_id listed in images / categories")
        ann.setdefault("area", bbox[2] * bbox[3])
        ann.setdefault("iscrowd", 0)
        ann.setdefault("id", i + 1)
    return data


def check_categories(data: dict[str, Any], names: Sequence[str], path: str | os.PathLike[str], *,
                     fix: str = "give the --cfg whose classes.names lists its categories") -> None:  # fmt: skip
    """DetectorError (naming ``path``) unless the COCO ``categories`` of ``data`` (from :func:`load_ground_truth`)
    are the model's classes: ids ``1..C`` for the ``C`` ``names``, category id ``k + 1`` named ``names[k]``.
    ``fix`` ends the message: how the caller's user gives other class names."""
    found = sorted((int(c["id"]), str(c.get("name", ""))) for c in data["categories"])
    wanted = [(k + 1, str(name)) for k, name in enumerate(names)]
    if found != wanted:
        raise DetectorError(f"ground truth '{path}': its {len(found)} categories ({_id_names(found)}) do not match the "
                            f"model's {len(wanted)} classes ({_id_names(wanted)}; category id = class index + 1); "
                            f"relabel the file or {fix}")


def _id_names(pairs: Sequence[tuple[int, str]], most: int = 6) -> str:
    text = ", ".join(f"{i}={n!r}" for i, n in pairs[:most])
    return text + (f", ... {len(pairs) - most} more" if len(pairs) > most else "")
