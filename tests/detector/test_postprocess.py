"""detector.postprocess: thresholds, multi-label, NMS, top-k and the mapping back to frame pixels."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from detector.boxes import Letterbox, box_iou
from detector.errors import DetectorError
from detector.postprocess import Detections, postprocess

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]
LB = Letterbox.letterbox(960, 540, 416, 416)  # scale 416/960, 91 rows of padding on top


def decoded_from_frame(lb: Letterbox, rows: list[tuple[list[float], list[float]]], n_pad: int = 0) -> torch.Tensor:
    """A [1, N, 4 + C] decoded tensor from (frame-pixel box, class scores) rows, plus ``n_pad`` empty rows."""
    boxes = lb.to_net(np.array([r[0] for r in rows], np.float64))
    scores = np.array([r[1] for r in rows], np.float64)
    x = np.concatenate([boxes, scores], 1)
    x = np.concatenate([x, np.zeros((n_pad, x.shape[1]))])
    return torch.from_numpy(x).float()[None]


def ref_postprocess(decoded: np.ndarray, lb: Letterbox, conf: float, iou: float, k: int) -> list[tuple]:
    """Slow reference for one image: threshold pairs, greedy NMS per class, top k, map, clip."""
    dec = decoded.astype(np.float32)
    pairs = [(float(dec[n, 4 + c]), n, c) for n in range(len(dec)) for c in range(dec.shape[1] - 4)
             if dec[n, 4 + c] > np.float32(conf)]
    pairs.sort(key=lambda p: -p[0])  # stable: ties keep (candidate, class) order
    kept: list[tuple[float, int, int]] = []
    for s, n, c in pairs:
        if all(kc != c or not box_iou(dec[None, n, :4], dec[None, kn, :4])[0, 0] > np.float32(iou) for _, kn, kc in kept):
            kept.append((s, n, c))
    out = []
    for s, n, c in kept[:k]:
        b = lb.to_frame(dec[n, :4].astype(np.float64))
        out.append((np.clip(b, 0, [lb.frame_w, lb.frame_h] * 2), s, c))
    return out


def test_crafted_output_gives_expected_detections_in_frame_pixels() -> None:
    decoded = decoded_from_frame(LB, [
        ([100, 50, 300, 250], [0.90, 0.05]),   # person
        ([104, 52, 302, 250], [0.80, 0.10]),   # same person, lower score: suppressed
        ([104, 52, 302, 250], [0.10, 0.70]),   # same place, other class: kept (class-aware NMS)
        ([500, 300, 700, 400], [0.05, 0.60]),  # vehicle
        ([-40, 500, 100, 600], [0.50, 0.00]),  # partly outside the frame: clipped to 0..960 x 0..540
        ([800, 10, 900, 60], [0.25, 0.20]),    # exactly at the threshold: dropped (strict)
    ], n_pad=10)
    (det,) = postprocess(decoded, [LB], conf_threshold=0.25, iou_threshold=0.45)
    assert isinstance(det, Detections) and len(det) == 4
    assert det.boxes.dtype == np.float32 and det.scores.dtype == np.float32 and det.classes.dtype == np.int64
    np.testing.assert_array_equal(det.classes, [0, 1, 1, 0])
    np.testing.assert_allclose(det.scores, [0.9, 0.7, 0.6, 0.5], rtol=0, atol=1e-7)
    expected = [[100, 50, 300, 250], [104, 52, 302, 250], [500, 300, 700, 400], [0, 500, 100, 540]]
    np.testing.assert_allclose(det.boxes, expected, rtol=0, atol=1e-3)


def test_one_candidate_yields_one_detection_per_class_above_threshold() -> None:
    (det,) = postprocess(decoded_from_frame(LB, [([10, 10, 50, 50], [0.6, 0.4, 0.3])]), [LB])
    np.testing.assert_array_equal(det.classes, [0, 1, 2])


def test_conf_threshold_is_strict() -> None:
    at = np.float32(0.25)
    above = np.nextafter(at, np.float32(1))
    decoded = decoded_from_frame(LB, [([10, 10, 50, 50], [float(at)]), ([100, 100, 150, 150], [float(above)])])
    (det,) = postprocess(decoded, [LB], conf_threshold=0.25)
    assert det.scores.tolist() == [above]


def test_max_detections_keeps_the_highest_scores() -> None:
    rows = [([20.0 * i, 0, 20.0 * i + 10, 10], [0.3 + 0.01 * i]) for i in range(40)]  # disjoint boxes
    decoded = decoded_from_frame(LB, rows)
    (det,) = postprocess(decoded, [LB], max_detections=5)
    np.testing.assert_allclose(det.scores, [0.69, 0.68, 0.67, 0.66, 0.65], atol=1e-6)
    assert len(postprocess(decoded, [LB], max_detections=None)[0]) == 40
    assert len(postprocess(decoded, [LB], max_detections=0)[0]) == 0


def test_a_crowded_frame_keeps_every_detection_as_darknet_does() -> None:
    corners = [(16.0 * (i % 24), 16.0 * (i // 24)) for i in range(240)]
    rows = [([x, y, x + 8, y + 8], [0.5]) for x, y in corners]
    (det,) = postprocess(decoded_from_frame(LB, rows), [LB])  # 240 disjoint boxes: Darknet's `detector test` keeps all
    assert len(det.scores) == 240


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_and_device_inputs_match_float32(device: str, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    boxes = torch.rand(2, 300, 2, generator=gen) * 350
    decoded = torch.cat([boxes, boxes + 10 + torch.rand(2, 300, 2, generator=gen) * 60,
                         torch.rand(2, 300, 2, generator=gen)], 2)
    lbs = [LB, Letterbox.resize(640, 480, 416, 416)]
    reference = postprocess(decoded, lbs)
    got = postprocess(decoded.to(device, dtype), lbs)
    scale_err = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 0}[dtype]
    for r, g in zip(reference, got):
        assert isinstance(g.boxes, np.ndarray)
        if dtype == torch.float32:
            np.testing.assert_array_equal(g.boxes, r.boxes)
            np.testing.assert_array_equal(g.classes, r.classes)
        else:  # rounding may flip near-threshold decisions; the confident ones agree
            assert abs(len(g) - len(r)) <= 0.1 * len(r)
            assert np.abs(g.scores[:5] - r.scores[:5]).max() <= scale_err
            np.testing.assert_allclose(g.boxes[0], r.boxes[0], atol=1000 * scale_err)


def test_numpy_input_equals_tensor_input() -> None:
    decoded = torch.rand(1, 50, 6, generator=torch.Generator().manual_seed(1)) * 400
    decoded[..., 2:4] += decoded[..., :2]
    decoded[..., 4:] /= 400
    a, b = postprocess(decoded, [LB])[0], postprocess(decoded.numpy(), [LB])[0]
    np.testing.assert_array_equal(a.boxes, b.boxes)
    np.testing.assert_array_equal(a.scores, b.scores)


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.sampled_from([0.1, 0.25, 0.5]),
    st.sampled_from([0.3, 0.45, 0.7]),
    st.integers(1, 20),
    st.sampled_from([(960, 540), (480, 640), (417, 233)]),
    st.booleans(),
)
def test_postprocess_matches_slow_reference(
    seed: int, conf: float, iou: float, k: int, frame: tuple[int, int], letterbox: bool
) -> None:
    rng = np.random.default_rng(seed)
    n, c = 60, 3
    xy = rng.uniform(-20, 400, (n, 2))
    decoded = np.concatenate([xy, xy + rng.uniform(5, 150, (n, 2)), rng.uniform(0, 1, (n, c)) ** 2], 1)
    decoded[rng.integers(0, n, 10), 4:] = 0.5  # ties
    lb = (Letterbox.letterbox if letterbox else Letterbox.resize)(*frame, 416, 416)
    (det,) = postprocess(decoded[None].astype(np.float32), [lb], conf, iou, k)
    expected = ref_postprocess(decoded, lb, conf, iou, k)
    assert det.classes.tolist() == [e[2] for e in expected]
    np.testing.assert_array_equal(det.scores, np.array([e[1] for e in expected], np.float32))
    np.testing.assert_allclose(det.boxes, np.array([e[0] for e in expected]).reshape(-1, 4), atol=1e-3, rtol=0)


def test_batch_maps_each_frame_with_its_own_transform() -> None:
    lbs = [LB, Letterbox.letterbox(540, 960, 416, 416), Letterbox.resize(100, 100, 416, 416)]
    box = [20.0, 30.0, 80.0, 90.0]
    decoded = torch.cat([decoded_from_frame(lb, [(box, [0.9])]) for lb in lbs[:2]] + [torch.zeros(1, 1, 5)])
    dets = postprocess(decoded, lbs)
    np.testing.assert_allclose(dets[0].boxes, [box], atol=1e-3)
    np.testing.assert_allclose(dets[1].boxes, [box], atol=1e-3)
    assert len(dets[2]) == 0 and dets[2].boxes.shape == (0, 4)


@pytest.mark.parametrize(
    ("decoded", "transforms", "what"),
    [
        (torch.zeros(2, 10), [LB, LB], r"\[B, N, 4 \+ C\]"),
        (torch.zeros(1, 10, 4), [LB], r"\[B, N, 4 \+ C\]"),
        (torch.zeros(2, 10, 6), [LB], "1 transforms for a batch of 2"),
        (torch.zeros(1, 10, 6, dtype=torch.int32), [LB], "floating"),
    ],
)
def test_postprocess_rejects_bad_input(decoded: torch.Tensor, transforms: list, what: str) -> None:
    with pytest.raises(DetectorError, match=what):
        postprocess(decoded, transforms)


def test_detections_round_trip_through_dict() -> None:
    det = Detections([[1, 2, 3, 4]], [0.5], [1])
    assert len(det) == 1 and det.boxes.dtype == np.float32 and det.classes.dtype == np.int64
    back = Detections.from_dict(det.to_dict())
    np.testing.assert_array_equal(back.boxes, det.boxes)
    assert back.classes.tolist() == [1] and len(Detections.empty()) == 0
    with pytest.raises(DetectorError, match="differ in length"):
        Detections([[1, 2, 3, 4]], [0.5, 0.6], [1])


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 3))
def test_frames_of_a_batch_never_suppress_each_other(seed: int, batch: int) -> None:
    """A batch is its frames processed one by one: NMS runs per frame and class, never across frames (one shared
    NMS call must not let frame 0's box remove the same box of frame 1)."""
    rng = np.random.default_rng(seed)
    n, c = 40, 3
    xy = rng.uniform(0, 350, (n, 2))
    one = np.concatenate([xy, xy + rng.uniform(10, 120, (n, 2)), rng.uniform(0, 1, (n, c)) ** 2], 1)
    frames = [one] + [one if rng.random() < 0.5 else rng.permutation(one) for _ in range(batch - 1)]
    decoded = np.stack(frames).astype(np.float32)
    together = postprocess(decoded, [LB] * batch)
    for i in range(batch):
        (alone,) = postprocess(decoded[i : i + 1], [LB])
        np.testing.assert_array_equal(together[i].boxes, alone.boxes)
        np.testing.assert_array_equal(together[i].scores, alone.scores)
        np.testing.assert_array_equal(together[i].classes, alone.classes)
    assert len(together[0]) > 0
