"""A COCO ground-truth file: read and checked (:func:`load_ground_truth`), its categories checked against a
model's class names (:func:`check_categories`). Cheap: neither torch nor pycocotools is imported, so a command or
the suite checks a given file this way at start-up.

The convention this package scores by (:func:`detector.evaluate.evaluate_coco`, and what
:func:`detector.synthetic.make_synthetic_video` writes): image id = frame index + 1, category id = class index + 1.
"""

from __future__ import annotations

import json
import os
import reprlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from detector.errors import DetectorError
from detector.fileio import os_reason, parse_json, read_text

__all__ = ["MAX_AREA", "check_categories", "check_labels", "load_ground_truth"]

#: The largest box area pycocotools scores (its area range "all", 0 to 1e5 ** 2): a box outside counts for nothing.
MAX_AREA = 1e5**2


def load_ground_truth(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a COCO json; fills ``area`` / ``iscrowd`` / ``id`` where absent (pycocotools needs them).

    Every annotation needs ``bbox`` ``[x, y, w, h]`` (4 finite numbers, ``w, h >= 0``) and an integer ``image_id``
    and ``category_id`` listed in ``images`` / ``categories``; ``id`` (an integer), ``area`` (a finite number) and
    ``iscrowd`` (0 or 1) are optional.

    Raises:
        DetectorError: (one line naming the file) missing, unreadable, not JSON, or not a COCO object whose
            annotations name listed images and categories; for a bad annotation, the first one, by index (and id)
            and field.
    """
    path = Path(path)
    try:
        text = read_text(path)  # a FIFO would block, /dev/zero never end: refused unread
    except OSError as e:
        raise DetectorError(f"cannot read ground truth '{path}': {os_reason(e)}") from e
    except UnicodeDecodeError as e:
        raise DetectorError(f"cannot read ground truth '{path}': {e}") from e
    try:
        data = parse_json(text)
    except json.JSONDecodeError as e:
        raise DetectorError(f"ground truth '{path}': not valid JSON at line {e.lineno} column {e.colno}: "
                            f"{e.msg}") from e
    except ValueError as e:  # what Python's parser refuses (`detector.fileio.parse_json`): too deep, too long
        raise DetectorError(f"ground truth '{path}': {e}") from e
    if not isinstance(data, dict):
        raise DetectorError(f"ground truth '{path}': expected a COCO json object, got {type(data).__name__}")
    for key in ("images", "annotations", "categories"):
        if not isinstance(data.get(key), list):
            raise DetectorError(f"ground truth '{path}': missing list {key!r} (a COCO json has images, annotations, "
                                "categories)")
    ids: dict[str, set[int]] = {}
    for key, one in (("images", "image"), ("categories", "category")):
        for i, item in enumerate(data[key]):
            if not isinstance(item, dict) or not _is_int(item.get("id")):
                got = reprlib.repr(item.get("id")) if isinstance(item, dict) else f"a {type(item).__name__}"
                raise DetectorError(f"ground truth '{path}': {one} {i}: every image and category needs an integer "
                                    f"'id' (got {got})")
            if not -(2**63) <= item["id"] < 2**63:  # numpy reads 2^63..2^64-1 as uint64: pycocotools' TypeError
                raise DetectorError(f"ground truth '{path}': {one} {i}: id {reprlib.repr(item['id'])} is outside the "
                                    "64-bit integers pycocotools scores by")
        _check_unique(path, one, [item["id"] for item in data[key]])
        ids[key] = {item["id"] for item in data[key]}
    for i, ann in enumerate(data["annotations"]):
        problem = _annotation_problem(ann, ids["images"], ids["categories"])
        if problem is not None:
            known = isinstance(ann, dict) and _is_int(ann.get("id"))
            which = f"annotation {i}" + (f" (id {reprlib.repr(ann['id'])})" if known else "")
            raise DetectorError(f"ground truth '{path}': {which}: {problem}")
        ann.setdefault("area", ann["bbox"][2] * ann["bbox"][3])
        ann.setdefault("iscrowd", 0)
    # pycocotools indexes annotations by id: two of one id score as one box twice, the other box lost
    _check_unique(path, "annotation", [ann.get("id") for ann in data["annotations"]])
    used = {ann["id"] for ann in data["annotations"] if "id" in ann}
    free = max(used, default=0) + 1
    for i, ann in enumerate(data["annotations"]):
        if "id" not in ann:  # its position + 1, unless another annotation has that id
            ann["id"] = i + 1 if i + 1 not in used else free
            used.add(ann["id"])
            free = max(free, ann["id"] + 1)
    return data


def _check_unique(path: Path, one: str, ids: Sequence[object]) -> None:
    """DetectorError naming the first ``one`` (by index) whose id an earlier one has (None: no id, not compared)."""
    first: dict[object, int] = {}
    for i, value in enumerate(ids):
        if value is not None and first.setdefault(value, i) != i:
            raise DetectorError(f"ground truth '{path}': {one} {i}: id {reprlib.repr(value)} is also {one} "
                                f"{first[value]}'s; ids must be unique (pycocotools keeps one {one} of each id)")


def _is_int(value: object) -> bool:
    """An integer, not a bool (JSON ``true`` is no id) nor a float (``1.7``)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    """A finite int or float, not a bool (JSON ``NaN`` and ``Infinity`` parse as floats), in float's range (a JSON
    integer of 310 digits is no float: ``math.isfinite`` and pycocotools raise OverflowError)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= sys.float_info.max


def _annotation_problem(ann: object, image_ids: set[int], category_ids: set[int]) -> str | None:
    """What is wrong with one COCO annotation (its first bad field), or None: pycocotools and the scoring read
    these fields as numbers, so a string, a list, NaN or a float id would fail there or score silently wrong."""
    if not isinstance(ann, dict):
        return f"expected an object with bbox, image_id and category_id, got a {type(ann).__name__}"
    for key in ("bbox", "image_id", "category_id"):
        if key not in ann:
            return f"no '{key}' (an annotation needs bbox [x, y, w, h], image_id and category_id)"
    if "id" in ann and not _is_int(ann["id"]):
        return f"id {reprlib.repr(ann['id'])}: expected an integer"
    bbox = ann["bbox"]
    if not (isinstance(bbox, list) and len(bbox) == 4 and all(map(_is_number, bbox)) and min(bbox[2:]) >= 0):
        return f"bbox {reprlib.repr(bbox)}: expected [x, y, w, h], 4 finite numbers with w and h >= 0"
    for key, listed, where in (("image_id", image_ids, "images"), ("category_id", category_ids, "categories")):
        if not _is_int(ann[key]):
            return f"{key} {reprlib.repr(ann[key])}: expected an integer id listed in {where}"
        if ann[key] not in listed:
            return f"{key} {reprlib.repr(ann[key])} is not listed in {where}"
    if "area" in ann and not _is_number(ann["area"]):
        return f"area {reprlib.repr(ann['area'])}: expected a finite number"
    # pycocotools leaves a box whose area is outside its range unscored (w * h as floats: inf past their range)
    area = ann.get("area", float(bbox[2]) * float(bbox[3]))
    if not 0 <= area <= MAX_AREA:
        given = "area" if "area" in ann else f"bbox {reprlib.repr(bbox)}: its area w * h"
        return f"{given} {area:g} is outside 0..{MAX_AREA:g}, where pycocotools scores a box"
    if "iscrowd" in ann and not (_is_int(ann["iscrowd"]) and ann["iscrowd"] in (0, 1)):
        return f"iscrowd {reprlib.repr(ann['iscrowd'])}: expected 0 or 1"
    return None


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


def check_labels(data: dict[str, Any], path: str | os.PathLike[str], video: str | os.PathLike[str], *,
                 frames: int | None = None) -> set[int]:
    """The image ids of ``data`` (from :func:`load_ground_truth`) that label the first ``frames`` frames (None:
    all) of ``video``; DetectorError (naming ``path``) unless they are frames (id = frame index + 1) the video has
    (counted by decoding, not from the container's count), of its frame size where an image gives one, with at
    least one box to score (a non-crowd annotation) and no box wholly outside the frames: otherwise the mAP is over
    nothing or silently lowered."""
    from detector.video import open_video

    image_ids = {int(img["id"]) for img in data["images"]}
    if image_ids and min(image_ids) < 1:
        raise DetectorError(f"ground truth '{path}': image id {min(image_ids)} is not a frame; image id = frame "
                            "index + 1, so ids start at 1")
    scored = {i for i in image_ids if frames is None or i <= frames}
    if not scored:
        which = "no image" if not image_ids else f"no image of the first {frames} frames"
        raise DetectorError(f"ground truth '{path}' lists {which}, so there is nothing to score (image id = "
                            "frame index + 1)")
    if not any(ann["image_id"] in scored and not ann["iscrowd"] for ann in data["annotations"]):
        raise DetectorError(f"ground truth '{path}' has no box (non-crowd annotation) in the {len(scored)} images "
                            "scored, so there is nothing to score")
    with open_video(video) as reader:
        width, height = reader.width, reader.height
        for img in data["images"]:
            size = (img.get("width", width), img.get("height", height))  # a number, or the frames' size unsaid
            if img["id"] in scored and size != (width, height):
                shown = "x".join(map(reprlib.repr, size))
                raise DetectorError(f"ground truth '{path}': image {img['id']} is {shown} but the frames of '{video}' "
                                    f"are {width}x{height}; its boxes are in another frame size")
        for i, ann in enumerate(data["annotations"]):
            x, y, w, h = ann["bbox"]
            if ann["image_id"] in scored and not (x <= width and y <= height and x + w >= 0 and y + h >= 0):
                raise DetectorError(f"ground truth '{path}': annotation {i} (id {ann['id']}): bbox "
                                    f"{reprlib.repr(ann['bbox'])} lies wholly outside the {width}x{height} frames "
                                    f"of '{video}'; no detection can match it")
        last = max(scored)
        read = sum(1 for _ in zip(range(last), reader))  # decoded up to the last labelled frame
    if read < last:
        raise DetectorError(f"ground truth '{path}' labels image id {last} (frame {last - 1}) but '{video}' has "
                            f"only {read} frames; image id = frame index + 1")
    return scored
