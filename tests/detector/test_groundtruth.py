"""detector.groundtruth: a COCO ground-truth file is read and checked field by field (real files in tmp_path): a bad
annotation, or JSON that Python's parser cannot read, is one DetectorError line naming the file (and the annotation
and field), never a TypeError in the scoring or a silently wrong mAP."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detector.errors import DetectorError
from detector.groundtruth import check_labels, load_ground_truth
from detector.synthetic import make_synthetic_video

CATEGORIES = [{"id": 1, "name": "person"}, {"id": 2, "name": "vehicle"}]
BOX = {"id": 7, "image_id": 2, "category_id": 1, "bbox": [10, 20, 30.5, 40]}


def _gt(*annotations: dict[str, Any]) -> dict[str, Any]:
    """Two images, the two categories, these annotations (the first a good box)."""
    return {"images": [{"id": 1, "width": 64, "height": 64}, {"id": 2, "width": 64, "height": 64}],
            "categories": CATEGORIES, "annotations": [dict(BOX), *annotations]}


def _write(tmp_path: Path, data: object, name: str = "gt.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def _error(path: Path) -> str:
    with pytest.raises(DetectorError) as err:
        load_ground_truth(path)
    return str(err.value)


# -- files that stay accepted -----------------------------------------------------------------------------------


def test_synthetic_ground_truth_is_accepted_unchanged(tmp_path: Path) -> None:
    made = make_synthetic_video(tmp_path / "clip.mp4", seed=1, width=96, height=64, frames=3)
    written = json.loads(made.gt_json.read_text(encoding="utf-8"))
    assert load_ground_truth(made.gt_json) == written  # every optional field already there


def test_optional_fields_are_filled_and_legal_edge_values_accepted(tmp_path: Path) -> None:
    path = _write(tmp_path, _gt({"image_id": 1, "category_id": 2, "bbox": [0, 0, 0, 5.5]},  # zero width: a line
                                {"image_id": 1, "category_id": 2, "bbox": [-3, 1e3, 4, 2], "area": 8, "iscrowd": 1,
                                 "id": 99, "segmentation": [], "track_id": "a"}))  # fmt: skip
    anns = load_ground_truth(path)["annotations"]
    assert [(a["id"], a["area"], a["iscrowd"]) for a in anns] == [(7, 30.5 * 40, 0), (2, 0.0, 0), (99, 8, 1)]


def test_ground_truth_saved_with_a_utf8_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = tmp_path / "gt.json"
    path.write_text(json.dumps(_gt()), encoding="utf-8-sig")  # as PowerShell 5's Out-File -Encoding utf8 saves it
    assert load_ground_truth(path)["annotations"][0]["bbox"] == BOX["bbox"]


# -- bad annotations: the first one, by index (and id) and field --------------------------------------------------


@pytest.mark.parametrize(("field", "value", "problem"), [
    ("area", "big", "area 'big': expected a finite number"),
    ("area", float("nan"), "area nan: expected a finite number"),
    ("area", -5, "area -5 is outside 0..1e+10, where pycocotools scores a box"),
    ("area", 1e12, "area 1e+12 is outside 0..1e+10, where pycocotools scores a box"),
    ("bbox", [0, 0, 1e200, 1e200],
     "bbox [0, 0, 1e+200, 1e+200]: its area w * h inf is outside 0..1e+10, where pycocotools scores a box"),
    ("iscrowd", [1], "iscrowd [1]: expected 0 or 1"),
    ("iscrowd", 2, "iscrowd 2: expected 0 or 1"),
    ("bbox", [1, 2, -3, 4], "bbox [1, 2, -3, 4]: expected [x, y, w, h], 4 finite numbers with w and h >= 0"),
    ("bbox", [1, 2, 3, -0.5], "bbox [1, 2, 3, -0.5]: expected [x, y, w, h], 4 finite numbers with w and h >= 0"),
    ("bbox", [1, float("nan"), 3, 4], "bbox [1, nan, 3, 4]: expected [x, y, w, h], 4 finite numbers with w and h >= 0"),
    ("bbox", [1, 2, float("inf"), 4], "bbox [1, 2, inf, 4]: expected [x, y, w, h], 4 finite numbers with w and h >= 0"),
    ("bbox", ["1", 2, 3, 4], "bbox ['1', 2, 3, 4]: expected [x, y, w, h], 4 finite numbers with w and h >= 0"),
    ("bbox", [1, 2, 3], "bbox [1, 2, 3]: expected [x, y, w, h], 4 finite numbers with w and h >= 0"),
    ("bbox", {"x": 1}, "bbox {'x': 1}: expected [x, y, w, h], 4 finite numbers with w and h >= 0"),
    ("image_id", 1.7, "image_id 1.7: expected an integer id listed in images"),
    ("image_id", "2", "image_id '2': expected an integer id listed in images"),
    ("image_id", 9, "image_id 9 is not listed in images"),
    ("category_id", True, "category_id True: expected an integer id listed in categories"),
    ("category_id", 3, "category_id 3 is not listed in categories"),
])  # fmt: skip
def test_a_bad_annotation_field_is_one_line_naming_the_file_annotation_and_field(
    tmp_path: Path, field: str, value: object, problem: str
) -> None:
    path = _write(tmp_path, _gt({**BOX, "id": 8}, {**BOX, "id": 9, field: value}, {**BOX, "id": 10, field: value}))
    assert _error(path) == f"ground truth '{path}': annotation 2 (id 9): {problem}"


# JSON integers past float's range (about 1.8e308: 310 digits up to the parser's 4300) that pycocotools would read
@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["x", "y", "w", "h", "area", "w*h"]), st.integers(310, 4000), st.booleans())
def test_an_integer_past_floats_range_in_a_box_is_one_line_naming_the_field(
        tmp_path_factory: pytest.TempPathFactory, field: str, digits: int, negative: bool) -> None:
    huge = (-1 if negative and field in "xy" else 1) * 10 ** (digits - 1)
    # w*h: w and h in float's range, w * h not
    bbox = {"w*h": [0, 0, 10**155, 10**155]}.get(field, [huge if field == f else 1 for f in "xywh"])
    annotation = {**BOX, "id": 9, "bbox": bbox, **({"area": huge} if field == "area" else {})}
    path = _write(tmp_path_factory.mktemp("gt"), _gt(annotation))
    error = _error(path)
    assert error.startswith(f"ground truth '{path}': annotation 1 (id 9): ")
    assert error.endswith({"area": "expected a finite number", "w*h": "where pycocotools scores a box"}.get(
        field, "expected [x, y, w, h], 4 finite numbers with w and h >= 0")), error


@pytest.mark.parametrize(("annotation", "problem"), [
    ({"image_id": 2, "category_id": 1},
     "annotation 1: no 'bbox' (an annotation needs bbox [x, y, w, h], image_id and category_id)"),
    ({**BOX, "id": [3]}, "annotation 1: id [3]: expected an integer"),
    ([1, 2, 3, 4], "annotation 1: expected an object with bbox, image_id and category_id, got a list"),
])  # fmt: skip
def test_an_annotation_without_a_usable_shape_is_named_by_index(tmp_path: Path, annotation: object,
                                                                 problem: str) -> None:
    path = _write(tmp_path, _gt(annotation))
    assert _error(path) == f"ground truth '{path}': {problem}"


def test_nan_written_by_pythons_json_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, '{"images": [{"id": 2}], "categories": [{"id": 1, "name": "person"}], "annotations": '
                            '[{"image_id": 2, "category_id": 1, "bbox": [NaN, 0, Infinity, 4]}]}')
    assert _error(path) == (f"ground truth '{path}': annotation 0: bbox [nan, 0, inf, 4]: expected [x, y, w, h], 4 "
                            "finite numbers with w and h >= 0")


@pytest.mark.parametrize(("key", "value", "problem"), [
    ("images", {"id": 1.5}, "image 1: every image and category needs an integer 'id' (got 1.5)"),
    ("images", {"id": "2"}, "image 1: every image and category needs an integer 'id' (got '2')"),
    ("categories", {"id": False, "name": "x"},
     "category 2: every image and category needs an integer 'id' (got False)"),
    ("categories", "bike", "category 2: every image and category needs an integer 'id' (got a str)"),
])  # fmt: skip
def test_an_image_or_category_id_that_is_not_an_integer_is_named(tmp_path: Path, key: str, value: object,
                                                                  problem: str) -> None:
    data = _gt()
    data[key] = [*data[key][:1 if key == "images" else 2], value]
    path = _write(tmp_path, data)
    assert _error(path) == f"ground truth '{path}': {problem}"


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_ground_truth_that_is_no_regular_file_is_refused_unread(tmp_path: Path, kind: str) -> None:
    """A FIFO blocked ``detector eval --ground-truth`` until someone wrote to it; /dev/zero was read until memory
    ran out. A writer stands by for two seconds, so a reader that opens the FIFO reads '{}' instead of hanging."""
    path = Path(kind) if kind.startswith("/") else tmp_path / "gt.json"
    if kind == "fifo":
        os.mkfifo(path)

        def writer() -> None:
            end = time.monotonic() + 2
            while time.monotonic() < end:
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while no reader has it open
                except OSError:
                    time.sleep(0.01)
                    continue
                os.write(fd, b"{}")
                os.close(fd)
                return

        threading.Thread(target=writer, daemon=True).start()
    what = "a FIFO (named pipe)" if kind == "fifo" else "a character device"
    assert _error(path) == f"cannot read ground truth '{path}': it is {what}, not a regular file"


def test_ground_truth_behind_a_symbolic_link_loop_is_one_line_in_the_os_words(tmp_path: Path) -> None:
    path = tmp_path / "gt.json"
    path.symlink_to(path)  # "[Errno 40] Too many levels of symbolic links: 'gt.json'" named the file twice
    assert _error(path) == f"cannot read ground truth '{path}': Too many levels of symbolic links"


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["images", "categories"]),
       st.one_of(st.integers(2**63, 10**30), st.integers(-(10**30), -(2**63) - 1)))
def test_an_image_or_category_id_past_64_bits_is_named(tmp_path_factory: pytest.TempPathFactory, key: str,
                                                       value: int) -> None:
    """pycocotools keeps category ids in numpy arrays: 2^63 made its evaluate() raise TypeError mid-run (perf's
    start-up only warns of categories that are not the model's classes)."""
    data = _gt()
    data[key] = [*data[key][:1 if key == "images" else 2], {"id": value, "name": "x"}]
    path = _write(tmp_path_factory.mktemp("gt"), data)
    one = {"images": "image", "categories": "category"}[key]
    error = _error(path)
    assert error.startswith(f"ground truth '{path}': {one} {len(data[key]) - 1}: id "), error
    assert error.endswith(" is outside the 64-bit integers pycocotools scores by"), error


# -- JSON that Python's parser itself cannot read -----------------------------------------------------------------


def test_json_nested_deeper_than_the_parser_reads_is_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, '{"images": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert _error(path) == f"ground truth '{path}': not valid JSON: nested too deeply"


def test_json_integer_longer_than_python_converts_is_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, '{"images": [{"id": ' + "9" * 5000 + "}], \"annotations\": [], \"categories\": []}")
    assert _error(path) == (f"ground truth '{path}': not valid JSON: Exceeds the limit (4300 digits) for integer "
                            "string conversion: value has 5000 digits")


# -- ids pycocotools indexes by: one object per id ---------------------------------------------------------------


@pytest.mark.parametrize(("key", "item", "problem"), [
    ("annotations", {**BOX, "bbox": [1, 1, 5, 5]},
     "annotation 1: id 7 is also annotation 0's; ids must be unique (pycocotools keeps one annotation of each id)"),
    ("images", {"id": 2, "width": 32, "height": 32},
     "image 2: id 2 is also image 1's; ids must be unique (pycocotools keeps one image of each id)"),
    ("categories", {"id": 1, "name": "person"},
     "category 2: id 1 is also category 0's; ids must be unique (pycocotools keeps one category of each id)"),
])  # fmt: skip
def test_a_repeated_id_is_refused_naming_both(tmp_path: Path, key: str, item: dict[str, Any], problem: str) -> None:
    data = _gt()
    data[key] = [*data[key], item]  # a new list: CATEGORIES is shared
    path = _write(tmp_path, data)
    assert _error(path) == f"ground truth '{path}': {problem}"


def test_filled_annotation_ids_never_take_an_id_another_annotation_has(tmp_path: Path) -> None:
    box = {"image_id": 1, "category_id": 2, "bbox": [0, 0, 4, 4]}
    data = {**_gt(), "annotations": [dict(box), {**box, "id": 7}, {**box, "id": 2}, dict(box), dict(box),
                                     {**box, "id": 4}]}  # fmt: skip
    ids = [a["id"] for a in load_ground_truth(_write(tmp_path, data))["annotations"]]
    assert ids == [1, 7, 2, 8, 5, 4]  # position + 1 where no annotation has it, else past the largest id


# -- labels checked against the video: boxes no detection can match, sizes that are no number ----------------------


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 64x64, 3-frame video."""
    return make_synthetic_video(tmp_path_factory.mktemp("clip") / "clip.mp4", seed=1, width=64, height=64,
                                frames=3).video


def _labels_error(tmp_path: Path, clip: Path, data: dict[str, Any]) -> str:
    path = _write(tmp_path, data)
    with pytest.raises(DetectorError) as err:
        check_labels(load_ground_truth(path), path, clip)
    return str(err.value).replace(str(path), "gt.json").replace(str(clip), "clip.mp4")


@pytest.mark.parametrize("bbox", [[1e300, 1e300, 50, 50], [64.5, 10, 5, 5], [-20, 10, 19.5, 5], [10, -1e6, 5, 1e3]])
def test_a_box_wholly_outside_the_frames_is_refused_naming_it(tmp_path: Path, clip: Path, bbox: list[float]) -> None:
    message = _labels_error(tmp_path, clip, _gt({**BOX, "id": 9, "bbox": bbox}))
    assert message == (f"ground truth 'gt.json': annotation 1 (id 9): bbox {bbox!r} lies wholly outside the 64x64 "
                       "frames of 'clip.mp4'; no detection can match it")


def test_boxes_that_overlap_or_touch_the_frames_are_scored(tmp_path: Path, clip: Path) -> None:
    edges = [[-5, -5, 10, 10], [60, 60, 100, 100], [64, 0, 3, 3], [-3, 0, 3, 3], [0, 0, 1e4, 1e4]]
    data = _gt(*({**BOX, "id": 9 + i, "bbox": b} for i, b in enumerate(edges)))
    data["images"][1]["width"] = 64.0  # the frames' width, written as a float
    path = _write(tmp_path, data)
    assert check_labels(load_ground_truth(path), path, clip) == {1, 2}


@pytest.mark.parametrize(("width", "shown"), [("64", "'64'x64"), (None, "Nonex64"), (32.0, "32.0x64")])
def test_an_image_size_that_is_no_integer_is_checked_not_skipped(tmp_path: Path, clip: Path, width: object,
                                                                shown: str) -> None:
    data = _gt()
    data["images"][0]["width"] = width
    assert _labels_error(tmp_path, clip, data) == (f"ground truth 'gt.json': image 1 is {shown} but the frames of "
                                                   "'clip.mp4' are 64x64; its boxes are in another frame size")
