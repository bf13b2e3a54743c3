"""perf/measure/parity.py: tensor statistics and one-to-one detection matching, with inputs built around the criteria."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detector.postprocess import Detections
from perf.measure.parity import (
    TOLERANCES,
    compare_detections,
    compare_frame,
    compare_tensors,
    format_worst_frames,
    report_row,
)


def _dets(boxes: list[list[float]], scores: list[float], classes: list[int]) -> Detections:
    return Detections(np.array(boxes, np.float32).reshape(-1, 4), np.array(scores, np.float32),
                      np.array(classes, np.int64))


def _decoded(seed: int, batch: int = 2, n: int = 50, classes: int = 2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 300, (batch, n, 2))
    wh = rng.uniform(5, 100, (batch, n, 2))
    scores = rng.uniform(0, 1, (batch, n, classes))
    return np.concatenate([xy, xy + wh, scores], axis=-1).astype(np.float32)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), score_err=st.floats(0, 0.05), box_err=st.floats(0, 5))
def test_tensor_stats_report_the_largest_injected_error(seed: int, score_err: float, box_err: float) -> None:
    ref = _decoded(seed)
    ref[0, 3, 4:] = np.maximum(ref[0, 3, 4:], 0.5)  # a candidate the reference scores highly
    cand = ref.copy()
    cand[0, 3, 4] = ref[0, 3, 4] + score_err  # one score and one box coordinate off
    cand[0, 3, 0] = ref[0, 3, 0] + box_err
    stats = compare_tensors(ref, cand)
    assert stats.score_max_abs == pytest.approx(score_err, abs=1e-5)
    assert stats.box_max_abs == pytest.approx(box_err, abs=1e-4)


def test_tensor_tolerance_is_checked_just_past_its_threshold() -> None:
    tol = TOLERANCES["fp32"]
    ref = _decoded(1)
    ref[..., 4:] = np.maximum(ref[..., 4:], 0.1)
    inside, outside = ref.copy(), ref.copy()
    inside[0, 0, 4] += tol.score_abs * 0.9
    outside[0, 0, 4] += tol.score_abs * 1.1
    assert compare_tensors(ref, inside).failures(tol) == []
    assert any("score max abs" in f for f in compare_tensors(ref, outside).failures(tol))


def test_decoded_outputs_without_candidates_agree_and_without_class_scores_are_named() -> None:
    empty = np.zeros((2, 0, 6), dtype=np.float32)  # a model that decodes no candidate at this input size
    stats = compare_tensors(empty, empty.copy())
    assert stats.candidates == 0 and stats.failures(TOLERANCES["fp32"]) == []
    boxes_only = np.zeros((1, 3, 4), dtype=np.float32)
    with pytest.raises(ValueError, match=r"shape \(1, 3, 4\): expected \[B, N, 4 \+ C\]"):
        compare_tensors(boxes_only, boxes_only.copy())


def test_nan_in_the_candidate_fails_every_tensor_criterion() -> None:
    ref = _decoded(2)
    cand = ref.copy()
    cand[1, 7, 2] = np.nan
    assert len(compare_tensors(ref, cand).failures(TOLERANCES["int8"])) == 2


def test_identical_detections_match_fully() -> None:
    d = _dets([[0, 0, 10, 10], [50, 50, 80, 90]], [0.9, 0.6], [0, 1])
    frame = compare_frame(0, d, d)
    assert (frame.matched, frame.borderline, frame.missed, frame.class_disagreements) == (2, 0, 0, 0)
    assert frame.mean_iou == pytest.approx(1.0)


def test_a_class_flip_is_a_disagreement_not_two_misses() -> None:
    ref = _dets([[0, 0, 10, 10]], [0.9], [0])
    cand = _dets([[0, 0, 10, 10]], [0.9], [1])
    frame = compare_frame(0, ref, cand)
    assert frame.matched == 1 and frame.class_disagreements == 1 and frame.missed == 0


def test_unmatched_detection_near_the_threshold_is_borderline_and_far_above_it_is_a_miss() -> None:
    ref = _dets([[0, 0, 10, 10], [100, 100, 120, 120]], [0.9, 0.26], [0, 0])
    cand = _dets([[0, 0, 10, 10]], [0.9], [0])
    near = compare_detections([ref], [cand], conf_threshold=0.25, score_tolerance=0.02)
    assert near.borderline == 1 and near.match_rate == 1.0
    far = compare_detections([ref], [cand], conf_threshold=0.25, score_tolerance=0.001)
    assert far.borderline == 0 and far.match_rate == pytest.approx(0.5)
    assert any("match rate" in f for f in far.failures(TOLERANCES["fp32"]))


def test_boxes_overlapping_below_the_iou_threshold_do_not_match() -> None:
    ref = _dets([[0, 0, 10, 10]], [0.9], [0])
    cand = _dets([[6, 0, 16, 10]], [0.9], [0])  # IoU 4/16 = 0.25
    assert compare_frame(0, ref, cand, iou_threshold=0.5).matched == 0
    assert compare_frame(0, ref, cand, iou_threshold=0.2).matched == 1


def test_worst_frames_come_first_in_the_failure_message() -> None:
    good = _dets([[0, 0, 10, 10]], [0.9], [0])
    parity = compare_detections([good, good, good], [good, Detections.empty(), good])
    assert parity.worst_frames(1)[0].frame == 1
    assert "frame 1: 1/0" in format_worst_frames(parity, 2)


def test_frame_counts_must_agree() -> None:
    with pytest.raises(ValueError, match="frame counts differ"):
        compare_detections([Detections.empty()], [])


def test_report_row_keeps_the_iou_of_every_matched_pair() -> None:
    ref = [_dets([[0, 0, 10, 10], [50, 50, 70, 70]], [0.9, 0.8], [0, 1]), _dets([[0, 0, 10, 10]], [0.9], [0])]
    cand = [_dets([[0, 0, 10, 10], [50, 50, 70, 72]], [0.9, 0.8], [0, 1]), _dets([[1, 0, 11, 10]], [0.9], [0])]
    parity = compare_detections(ref, cand)
    row = report_row("onnxruntime fp16", "onnxruntime", "fp16", [], compare_tensors(_decoded(0), _decoded(0)), parity)
    assert row["ious"] == [1.0, round(400 / 440, 4), round(90 / 110, 4)]  # 20x20 in 20x22; 9x10 in 11x10
    assert row["verdict"] == "pass" and row["mean IoU"] == pytest.approx(sum(row["ious"]) / 3, abs=1e-4)
    assert (row["backend"], row["precision"]) == ("onnxruntime", "fp16")


def test_a_reference_with_no_boxes_fails_parity_and_says_how_many_frames_it_compared() -> None:
    empty = _dets([], [], [])
    parity = compare_detections([empty, empty, empty], [empty, empty, empty])
    assert parity.reference_detections == 0 and parity.match_rate == 1.0  # every rate passes on nothing
    (failure,) = parity.failures(TOLERANCES["fp32"])
    assert failure.startswith("the reference found no boxes on the 3 compared frame(s): nothing to compare")
    one = _dets([[0, 0, 10, 10]], [0.9], [0])
    assert compare_detections([one, empty], [one, empty]).failures(TOLERANCES["fp32"]) == []


def _far_apart(n: int, score: float = 0.9, x0: float = 0.0) -> Detections:
    """``n`` disjoint 10x10 boxes of class 0, 20 px apart."""
    return _dets([[x0 + 20 * i, 0, x0 + 20 * i + 10, 10] for i in range(n)], [score] * n, [0] * n)


def test_extra_candidate_boxes_count_as_misses_like_missing_ones() -> None:
    """Unmatched boxes count on both sides: a candidate that invents a confident box fails like one that drops it."""
    one = _far_apart(1)
    extra = _dets([[0, 0, 10, 10], [200, 200, 240, 240]], [0.9, 0.9], [0, 0])
    for ref, cand in ((one, extra), (extra, one)):
        parity = compare_detections([ref], [cand], conf_threshold=0.25, score_tolerance=0.02)
        assert parity.matched == 1 and parity.borderline == 0 and parity.match_rate == pytest.approx(0.5)
        assert any("match rate" in f for f in parity.failures(TOLERANCES["fp32"]))


def test_matched_boxes_near_the_threshold_are_not_borderline() -> None:
    """Only unmatched detections can be borderline: matched ones near the threshold still count, so they cannot
    hide a confident miss."""
    ref = _dets([[0, 0, 10, 10], [20, 0, 30, 10], [100, 100, 120, 120]], [0.26, 0.26, 0.9], [0, 0, 0])
    cand = _dets([[0, 0, 10, 10], [20, 0, 30, 10]], [0.26, 0.26], [0, 0])
    parity = compare_detections([ref], [cand], conf_threshold=0.25, score_tolerance=0.02)
    assert (parity.matched, parity.borderline) == (2, 0)
    assert parity.match_rate == pytest.approx(2 / 3)


def test_a_match_rate_exactly_at_the_tolerance_passes() -> None:
    tol = TOLERANCES["int8"]  # match rate "at least" 0.85: 17 of 20
    ref, cand = _far_apart(20), _far_apart(17)
    parity = compare_detections([ref], [cand], conf_threshold=0.25, score_tolerance=tol.score_abs)
    assert parity.match_rate == tol.match_rate
    assert not any("match rate" in f for f in parity.failures(tol))
    assert any("match rate" in f for f in compare_detections([ref], [_far_apart(16)]).failures(tol))


def test_box_errors_count_where_any_class_scores_and_nowhere_else() -> None:
    ref = _decoded(3, classes=2)
    ref[..., 4:] = 0.0
    ref[0, 5, 4:] = [0.9, 0.0]  # one class scores: its box matters
    cand = ref.copy()
    cand[0, 5, 1] += 3.0
    cand[1, 9, 2] += 50.0  # a box no class scores: irrelevant
    assert compare_tensors(ref, cand).box_max_abs == pytest.approx(3.0, abs=1e-4)


def test_class_agreement_is_over_matched_pairs_of_all_frames() -> None:
    ref = _far_apart(4)
    flipped = _dets(ref.boxes.tolist(), ref.scores.tolist(), [1, 0, 0, 0])
    parity = compare_detections([ref, ref], [flipped, ref])
    assert parity.matched == 8 and parity.class_agreement == pytest.approx(7 / 8)


def test_default_matching_needs_iou_of_at_least_one_half() -> None:
    ref = _dets([[0, 0, 10, 10]], [0.9], [0])
    half = _dets([[0, 0, 10, 5]], [0.9], [0])  # IoU exactly 0.5
    less = _dets([[0, 0, 10, 4.5]], [0.9], [0])  # IoU 0.45
    assert compare_frame(0, ref, half).matched == 1 and compare_detections([ref], [half]).matched == 1
    assert compare_frame(0, ref, less).matched == 0 and compare_detections([ref], [less]).matched == 0


def test_the_largest_score_difference_of_any_frame_is_reported() -> None:
    ref = _far_apart(2)
    off = _dets(ref.boxes.tolist(), [0.9, 0.8], [0, 0])
    parity = compare_detections([ref, ref], [off, ref])
    assert parity.max_score_diff == pytest.approx(0.1, abs=1e-6)
    assert any("matched score difference" in f for f in parity.failures(TOLERANCES["fp16"]))
