"""detector.evaluate: COCO mAP through pycocotools, on real ground-truth files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from detector.errors import DetectorError
from detector.evaluate import EvalResult, evaluate_coco
from detector.postprocess import Detections

CATEGORIES = [{"id": 1, "name": "person"}, {"id": 2, "name": "vehicle"}]


def make_gt(n_images: int = 6, seed: int = 0) -> dict:
    """A small COCO ground truth: 960x540 frames, image id = frame + 1, 1-3 boxes of each class per frame."""
    rng = np.random.default_rng(seed)
    images = [{"id": i + 1, "width": 960, "height": 540, "file_name": f"frame{i}"} for i in range(n_images)]
    annotations = []
    for img in images:
        for cat in (1, 2):
            for _ in range(rng.integers(1, 4)):
                x, y = rng.uniform(0, 700), rng.uniform(0, 350)
                w, h = rng.uniform(20, 200), rng.uniform(20, 150)
                annotations.append({"id": len(annotations) + 1, "image_id": img["id"], "category_id": cat,
                                    "bbox": [x, y, w, h], "area": w * h, "iscrowd": 0})
    return {"images": images, "annotations": annotations, "categories": CATEGORIES}


def write_gt(tmp_path: Path, gt: dict) -> Path:
    path = tmp_path / "gt.json"
    path.write_text(json.dumps(gt))
    return path


def detections_from_gt(gt: dict, shift: float = 0.0) -> dict[int, Detections]:
    out: dict[int, list] = {img["id"]: [] for img in gt["images"]}
    for ann in gt["annotations"]:
        x, y, w, h = ann["bbox"]
        out[ann["image_id"]].append(([x + shift, y, x + w + shift, y + h], 0.9, ann["category_id"] - 1))
    return {i: Detections([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]) for i, rows in out.items()}


def test_perfect_detections_score_one(tmp_path: Path) -> None:
    gt = make_gt()
    result = evaluate_coco(write_gt(tmp_path, gt), detections_from_gt(gt))
    assert isinstance(result, EvalResult)
    assert result.map50 == pytest.approx(1.0) and result.map50_95 == pytest.approx(1.0)
    assert list(result.per_class) == ["person", "vehicle"]
    assert all(c.ap50 == pytest.approx(1.0) and c.ap50_95 == pytest.approx(1.0) for c in result.per_class.values())
    assert result.num_images == 6 and result.num_detections == len(gt["annotations"])
    assert sum(c.num_gt for c in result.per_class.values()) == len(gt["annotations"])


def test_image_ids_score_only_those_images(tmp_path: Path) -> None:
    gt = make_gt()
    path = write_gt(tmp_path, gt)
    perfect = detections_from_gt(gt)
    first = {i: perfect[i] for i in (1, 2, 3)}
    result = evaluate_coco(path, first, image_ids=range(1, 4))
    assert result.map50 == pytest.approx(1.0) and result.num_images == 3
    assert sum(c.num_gt for c in result.per_class.values()) == sum(a["image_id"] <= 3 for a in gt["annotations"])
    assert evaluate_coco(path, first).map50 < 0.9  # images 4-6 without detections count as misses
    with pytest.raises(DetectorError, match=r"detections for image ids \[5\] outside the 3 images of ground truth"):
        evaluate_coco(path, {**first, 5: perfect[5]}, image_ids=[1, 2, 3])


def test_badly_shifted_detections_score_about_zero(tmp_path: Path) -> None:
    gt = make_gt()
    result = evaluate_coco(write_gt(tmp_path, gt), detections_from_gt(gt, shift=250.0))
    assert result.map50 < 0.05 and result.map50_95 < 0.05


def test_wrong_class_scores_zero_and_no_detections_score_zero(tmp_path: Path) -> None:
    gt = make_gt()
    path = write_gt(tmp_path, gt)
    swapped = {i: Detections(d.boxes, d.scores, 1 - d.classes) for i, d in detections_from_gt(gt).items()}
    assert evaluate_coco(path, swapped).map50 == pytest.approx(0.0)
    empty = evaluate_coco(path, {})
    assert empty.map50 == 0.0 and empty.num_detections == 0


def test_half_the_boxes_found_gives_coco_interpolated_ap(tmp_path: Path) -> None:
    gt = {"images": [{"id": 1, "width": 100, "height": 100}], "categories": CATEGORIES[:1],
          "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10]},
                          {"id": 2, "image_id": 1, "category_id": 1, "bbox": [50, 50, 10, 10]}]}
    result = evaluate_coco(write_gt(tmp_path, gt), {1: Detections([[0, 0, 10, 10]], [0.9], [0])})
    # recall reaches 0.5 at precision 1: 51 of COCO's 101 recall points
    assert result.map50 == pytest.approx(51 / 101)


def test_an_image_scores_its_100_highest_detections_as_coco_rules(tmp_path: Path) -> None:
    gt = {"images": [{"id": 1, "width": 1000, "height": 100}], "categories": CATEGORIES,
          "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10]}]}
    misses = [[10.0 * i, 50, 10.0 * i + 8, 58] for i in range(100)]  # 50 of each class, all above the hit's score
    scores, classes = [0.9 - 0.001 * i for i in range(100)] + [0.1], [i % 2 for i in range(100)] + [0]
    hit = Detections(misses + [[0, 0, 10, 10]], scores, classes)
    # pycocotools alone keeps 100 an image and class, so it would score the 101st detection, the hit
    assert evaluate_coco(write_gt(tmp_path, gt), {1: hit}).map50 == pytest.approx(0.0)


def test_frames_without_detections_and_classes_without_ground_truth(tmp_path: Path) -> None:
    gt = make_gt()
    gt["categories"] = CATEGORIES + [{"id": 3, "name": "bicycle"}]
    dets = detections_from_gt(gt)
    del dets[1], dets[2]  # two frames with no entry: their boxes count as missed
    result = evaluate_coco(write_gt(tmp_path, gt), dets)
    assert 0.3 < result.map50 < 1.0
    assert math.isnan(result.per_class["bicycle"].ap50) and result.per_class["bicycle"].num_gt == 0
    person, vehicle = result.per_class["person"], result.per_class["vehicle"]
    assert result.map50 == pytest.approx((person.ap50 + vehicle.ap50) / 2)  # NaN class left out of the mean


def test_names_override_category_names_and_table_lists_every_class(tmp_path: Path) -> None:
    gt = make_gt()
    result = evaluate_coco(write_gt(tmp_path, gt), detections_from_gt(gt), names=["pedestrian", "car"])
    assert list(result.per_class) == ["pedestrian", "car"]
    lines = result.table().splitlines()
    assert lines[0].split("|")[0].strip() == "class" and "AP@0.5:0.95" in lines[0]
    assert [ln.split("|")[0].strip() for ln in lines[2:]] == ["pedestrian", "car", "all"]
    assert "1.000" in lines[-1]
    assert json.loads(json.dumps(result.to_dict()))["per_class"]["car"]["AP@0.5"] == pytest.approx(1.0)


def test_missing_ground_truth_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(DetectorError, match="nope.json.*no such file"):
        evaluate_coco(tmp_path / "nope.json", {})


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ('{"images": [', "not valid JSON at line 1"),
        ("[1, 2]", "expected a COCO json object"),
        ('{"images": [], "annotations": []}', "missing list 'categories'"),
        (json.dumps({"images": [{"id": 1}], "categories": CATEGORIES,
                     "annotations": [{"image_id": 1, "category_id": 1, "bbox": [1, 2]}]}), "annotation 0"),
        (json.dumps({"images": [{"id": 1}], "categories": CATEGORIES,
                     "annotations": [{"image_id": 7, "category_id": 1, "bbox": [1, 2, 3, 4]}]}), "annotation 0"),
    ],
)
def test_malformed_ground_truth_is_named(tmp_path: Path, text: str, what: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(DetectorError, match=rf"bad\.json.*{what}"):
        evaluate_coco(path, {})


def test_detections_for_unknown_image_ids_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(DetectorError, match=r"image ids \[99\]"):
        evaluate_coco(write_gt(tmp_path, make_gt()), {99: Detections.empty()})


def test_evaluation_prints_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gt = make_gt()
    evaluate_coco(write_gt(tmp_path, gt), detections_from_gt(gt))
    assert capsys.readouterr().out == ""


def test_eval_of_a_user_video_equals_eval_of_the_same_synthetic_seed(tmp_path: Path) -> None:
    """`detector eval --video` (a file from make-video, its ground truth found beside it, categories checked,
    frames mapped to image ids) scores exactly what `--video-seed` (the cached synthetic video, merged ground
    truth) scores for the same seed and frames."""
    from detector.cli import main

    seed, frames = 7, 6
    video = tmp_path / "mine" / "held-out.mp4"
    video.parent.mkdir()
    assert main(["make-video", "--out", str(video), "--seed", str(seed), "--frames", str(frames)]) == 0
    common = ["--device", "cpu", "--cache-dir", str(tmp_path / "cache"), "--frames", str(frames)]
    assert main(["eval", "--video-seed", str(seed), *common, "--json", str(tmp_path / "seed.json")]) == 0
    assert main(["eval", "--video", str(video), *common, "--json", str(tmp_path / "video.json")]) == 0
    by_seed = json.loads((tmp_path / "seed.json").read_text())
    by_video = json.loads((tmp_path / "video.json").read_text())
    assert [p.parent for p in (tmp_path / "cache").rglob("*.mp4")] == [tmp_path / "cache" / "videos"]  # two files
    assert by_video["frames"] == by_video["num_images"] == by_seed["num_images"] == frames
    assert by_seed["mAP@0.5"] > 0.3  # the shipped model finds things: equal scores are not two zeros
    for key in ("mAP@0.5", "mAP@0.5:0.95", "per_class", "num_detections"):
        assert by_video[key] == by_seed[key], key


def test_boxes_found_at_iou_0_72_score_one_at_0_5_and_half_over_0_5_to_0_95(tmp_path: Path) -> None:
    """AP@0.5 is the first of COCO's ten IoU thresholds and mAP@0.5:0.95 their mean: a box of IoU 0.72 with its
    ground truth passes 0.50..0.70 (five of ten) and fails 0.75..0.95."""
    gt = {"images": [{"id": 1, "width": 200, "height": 200}], "categories": CATEGORIES[:1],
          "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 100, 100], "area": 10000}]}
    result = evaluate_coco(write_gt(tmp_path, gt), {1: Detections([[0, 0, 100, 72]], [0.9], [0])})
    assert result.per_class["person"].ap50 == pytest.approx(1.0) and result.map50 == pytest.approx(1.0)
    assert result.per_class["person"].ap50_95 == pytest.approx(0.5) and result.map50_95 == pytest.approx(0.5)


def test_crowd_regions_are_not_counted_as_ground_truth_boxes(tmp_path: Path) -> None:
    gt = make_gt(n_images=2)
    crowd = {"id": 999, "image_id": 1, "category_id": 1, "bbox": [0, 0, 300, 300], "area": 90000, "iscrowd": 1}
    gt["annotations"].append(crowd)
    result = evaluate_coco(write_gt(tmp_path, gt), detections_from_gt(gt))
    assert result.per_class["person"].num_gt == sum(a["category_id"] == 1 for a in gt["annotations"]) - 1


def test_detections_are_ranked_by_score(tmp_path: Path) -> None:
    """A confident hit ranked before a doubtful false positive gives AP 1, whatever order they are listed in."""
    gt = {"images": [{"id": 1, "width": 200, "height": 200}], "categories": CATEGORIES[:1],
          "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 50, 50], "area": 2500}]}
    dets = Detections([[120, 120, 170, 170], [0, 0, 50, 50]], [0.3, 0.9], [0, 0])  # the miss listed first
    assert evaluate_coco(write_gt(tmp_path, gt), {1: dets}).map50 == pytest.approx(1.0)
