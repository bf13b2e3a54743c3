"""detector.boxes: IoU, DIoU, NMS, letterbox mapping and matching against slow references."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from detector.boxes import (
    Letterbox,
    batched_diou_nms,
    batched_nms,
    box_area,
    box_diou,
    box_iou,
    clip_boxes,
    match_detections,
    nms,
)
from detector.boxes import _greedy_sorted  # the device algorithm, exercised on the CPU
from detector.errors import DetectorError

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


# ----------------------------------------------------------------------------------------------- references
def ref_iou(a: list[float], b: list[float]) -> float:
    """IoU of two boxes in plain Python floats (double precision)."""
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def ref_iou_f32(a: np.ndarray, b: np.ndarray) -> np.float32:
    """The same formula one float32 scalar operation at a time: the documented float32 semantics."""
    f = np.float32
    w = max(f(0), min(a[2], b[2]) - max(a[0], b[0]))
    h = max(f(0), min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else f(0)


def ref_nms(boxes: np.ndarray, scores: np.ndarray, thr: float, classes: np.ndarray | None = None) -> list[int]:
    """Textbook greedy NMS, one pair at a time: stable sort by descending score, suppress IoU > thr."""
    boxes = np.asarray(boxes, dtype=np.float32)
    order = sorted(range(len(scores)), key=lambda i: -float(scores[i]))  # sorted() is stable
    keep: list[int] = []
    for i in order:
        if all(
            (classes is not None and classes[i] != classes[k]) or not ref_iou_f32(boxes[i], boxes[k]) > np.float32(thr)
            for k in keep
        ):
            keep.append(i)
    return keep


def ref_nms_vectorised(boxes: np.ndarray, scores: np.ndarray, thr: float) -> np.ndarray:
    """The classic py-faster-rcnn loop (one vectorised IoU per kept box) for larger inputs."""
    order = np.argsort(-scores, kind="stable")
    b = boxes.astype(np.float32)
    keep = []
    while order.size:
        i, rest = order[0], order[1:]
        keep.append(i)
        w = np.maximum(np.float32(0), np.minimum(b[i, 2], b[rest, 2]) - np.maximum(b[i, 0], b[rest, 0]))
        h = np.maximum(np.float32(0), np.minimum(b[i, 3], b[rest, 3]) - np.maximum(b[i, 1], b[rest, 1]))
        inter = w * h
        union = (b[i, 2] - b[i, 0]) * (b[i, 3] - b[i, 1]) + (b[rest, 2] - b[rest, 0]) * (b[rest, 3] - b[rest, 1])
        iou = inter / (union - inter)
        order = rest[~(iou > np.float32(thr))]
    return np.array(keep, dtype=np.int64)


# ----------------------------------------------------------------------------------------------- strategies
@st.composite
def box_st(draw: st.DrawFn, lo: int = 0, hi: int = 100) -> list[float]:
    x1 = draw(st.integers(lo, hi - 1))
    y1 = draw(st.integers(lo, hi - 1))
    return [float(x1), float(y1), float(draw(st.integers(x1 + 1, hi))), float(draw(st.integers(y1 + 1, hi)))]


@st.composite
def nms_case(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, float]:
    """Boxes with duplicates and tied scores, plus pairs built just either side of the threshold."""
    thr = draw(st.sampled_from([0.3, 0.45, 0.5, 0.7]))
    pool = draw(st.lists(box_st(), min_size=1, max_size=12))
    boxes = [draw(st.sampled_from(pool)) for _ in range(draw(st.integers(1, 25)))]
    for _ in range(draw(st.integers(0, 4))):  # nested pair with IoU = thr +- 0.002 (w / 100)
        x, y = draw(st.integers(0, 50)), draw(st.integers(0, 50))
        w = 100 * thr + draw(st.sampled_from([-0.2, 0.2]))
        boxes += [[x, y, x + 100.0, y + 1.0], [x, y, x + w, y + 1.0]]
    scores = [draw(st.sampled_from([0.1, 0.3, 0.3, 0.5, 0.9])) for _ in boxes]
    return np.array(boxes, np.float32), np.array(scores, np.float32), thr


def clustered_boxes(n: int, seed: int, size: float = 416.0) -> tuple[np.ndarray, np.ndarray]:
    """YOLO-like boxes: jittered copies around a few dozen centres, so most are suppressed."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, size, (max(1, n // 20), 2))
    c = centres[rng.integers(0, len(centres), n)] + rng.normal(0, 6, (n, 2))
    wh = rng.uniform(10, 120, (n, 2))
    boxes = np.concatenate([c - wh / 2, c + wh / 2], 1).astype(np.float32)
    return boxes, rng.uniform(0, 1, n).astype(np.float32)


# ----------------------------------------------------------------------------------------------- box_iou
@settings(max_examples=60, deadline=None)
@given(st.lists(box_st(), min_size=1, max_size=6), st.lists(box_st(), min_size=1, max_size=6))
def test_box_iou_matches_reference_symmetric_and_bounded(a: list[list[float]], b: list[list[float]]) -> None:
    iou = box_iou(torch.tensor(a), torch.tensor(b))
    expected = torch.tensor([[ref_iou(x, y) for y in b] for x in a], dtype=torch.float32)
    torch.testing.assert_close(iou, expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(box_iou(torch.tensor(b), torch.tensor(a)), iou.T, rtol=0, atol=0)
    assert bool(((iou >= 0) & (iou <= 1)).all())
    torch.testing.assert_close(torch.diagonal(box_iou(torch.tensor(a), torch.tensor(a))), torch.ones(len(a)))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_box_iou_any_float_dtype_returns_float32_on_input_device(dtype: torch.dtype, device: str) -> None:
    a = torch.tensor([[0, 0, 10, 10], [5, 5, 15, 15]], dtype=dtype, device=device)
    iou = box_iou(a, a[:1])
    assert iou.dtype == torch.float32 and iou.device.type == device and iou.shape == (2, 1)
    torch.testing.assert_close(iou.cpu(), torch.tensor([[1.0], [25 / 175]]))


def test_box_iou_and_area_accept_numpy_and_return_numpy() -> None:
    a = np.array([[0, 0, 4, 2], [1, 1, 3, 3]], np.float64)
    assert isinstance(box_iou(a, a), np.ndarray) and box_iou(a, a).dtype == np.float32
    np.testing.assert_allclose(box_area(a), [8, 4])
    np.testing.assert_allclose(box_iou(a, a)[0, 1], 2 / 10, rtol=1e-6)


def test_box_iou_of_degenerate_boxes_is_zero_not_nan() -> None:
    a = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    assert box_iou(a, a).item() == 0.0


def test_box_iou_rejects_wrong_shape() -> None:
    with pytest.raises(DetectorError, match=r"\[N, 4\]"):
        box_iou(torch.zeros(3, 5), torch.zeros(2, 4))


# ----------------------------------------------------------------------------------------------- nms
@settings(max_examples=150, deadline=None)
@given(nms_case())
def test_nms_matches_reference_greedy_with_ties_duplicates_and_near_threshold_pairs(
    case: tuple[np.ndarray, np.ndarray, float],
) -> None:
    boxes, scores, thr = case
    keep = nms(torch.from_numpy(boxes), torch.from_numpy(scores), thr)
    assert keep.dtype == torch.int64
    assert keep.tolist() == ref_nms(boxes, scores, thr)


@pytest.mark.parametrize("thr", [0.2, 0.45, 0.5, 0.8])
@pytest.mark.parametrize("delta", [-1e-3, 1e-3])
def test_nms_suppresses_only_strictly_above_threshold(thr: float, delta: float) -> None:
    # a nested box of width 100 * (thr + delta) inside a 100-wide box: IoU = thr + delta exactly.
    boxes = torch.tensor([[0.0, 0.0, 100.0, 10.0], [0.0, 0.0, 100 * (thr + delta), 10.0]])
    keep = nms(boxes, torch.tensor([0.9, 0.8]), thr)
    assert keep.tolist() == ([0] if delta > 0 else [0, 1])


def test_nms_at_exactly_the_threshold_keeps_both() -> None:
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 5.0, 10.0]])  # IoU exactly 0.5
    assert nms(boxes, torch.tensor([0.9, 0.8]), 0.5).tolist() == [0, 1]


def test_nms_keeps_highest_score_per_cluster_and_first_of_tied_duplicates() -> None:
    boxes = torch.tensor([[0, 0, 10, 10], [0, 0, 10, 10], [1, 1, 10, 10], [50, 50, 60, 60]], dtype=torch.float32)
    assert nms(boxes, torch.tensor([0.5, 0.5, 0.9, 0.1]), 0.5).tolist() == [2, 3]
    assert nms(boxes[:2], torch.tensor([0.5, 0.5]), 0.5).tolist() == [0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("n", "seed"), [(300, 0), (1500, 1), (3000, 2)])
def test_nms_matches_reference_across_many_blocks(device: str, n: int, seed: int) -> None:
    boxes, scores = clustered_boxes(n, seed)
    keep = nms(torch.from_numpy(boxes).to(device), torch.from_numpy(scores).to(device), 0.45)
    assert keep.device.type == device
    np.testing.assert_array_equal(keep.cpu().numpy(), ref_nms_vectorised(boxes, scores, 0.45))


@pytest.mark.parametrize("device", DEVICES)
def test_nms_keeps_every_disjoint_box_in_score_order(device: str) -> None:
    g = torch.arange(40, dtype=torch.float32) * 10
    xy = torch.cartesian_prod(g, g)
    boxes = torch.cat([xy, xy + 5], 1).to(device)  # 1600 disjoint boxes
    scores = torch.rand(len(boxes), generator=torch.Generator().manual_seed(0)).to(device)
    torch.testing.assert_close(nms(boxes, scores, 0.1), torch.argsort(scores, descending=True, stable=True))


@pytest.mark.parametrize("case", ["clusters", "chain"])
def test_device_algorithm_fixed_point_and_its_fallback_agree_with_host_loop(case: str) -> None:
    # The CUDA path (fixed-point iteration per block) runs on CPU tensors too, so CI checks it without a GPU.
    if case == "clusters":
        boxes, scores = clustered_boxes(3000, 11)
    else:  # each box overlaps only its neighbours: settles one link per iteration, beyond the fixed-point cap
        x = np.arange(200, dtype=np.float32) * 3  # IoU 7/13 with a neighbour, 1/4 with the next
        boxes = np.stack([x, np.zeros_like(x), x + 10, np.ones_like(x)], 1)
        scores = np.linspace(1, 0, 200, dtype=np.float32)
    order = np.argsort(-scores, kind="stable")
    sorted_boxes = boxes[order]
    device_keep = _greedy_sorted(torch.from_numpy(sorted_boxes), None, 0.45)
    np.testing.assert_array_equal(order[device_keep.numpy()], ref_nms_vectorised(boxes, scores, 0.45))
    if case == "chain":
        assert len(device_keep) == 100  # every other box


def test_nms_accepts_numpy_fp16_and_empty_input() -> None:
    boxes, scores = clustered_boxes(200, 3)
    keep = nms(boxes, scores, 0.5)
    assert isinstance(keep, np.ndarray) and keep.dtype == np.int64
    half = nms(torch.from_numpy(boxes).half(), torch.from_numpy(scores).half(), 0.5)
    assert half.tolist() == ref_nms(boxes.astype(np.float16), scores.astype(np.float16), 0.5)
    assert nms(torch.zeros(0, 4), torch.zeros(0), 0.5).shape == (0,)


def test_nms_rejects_mismatched_scores() -> None:
    with pytest.raises(DetectorError, match="scores"):
        nms(torch.zeros(3, 4), torch.zeros(2), 0.5)


# ----------------------------------------------------------------------------------------------- batched_nms
@settings(max_examples=80, deadline=None)
@given(nms_case(), st.data())
def test_batched_nms_equals_per_class_nms_and_never_suppresses_across_classes(
    case: tuple[np.ndarray, np.ndarray, float], data: st.DataObject
) -> None:
    boxes, scores, thr = case
    classes = np.array(data.draw(st.lists(st.integers(0, 2), min_size=len(boxes), max_size=len(boxes))))
    keep = batched_nms(torch.from_numpy(boxes), torch.from_numpy(scores), torch.from_numpy(classes), thr)
    assert keep.tolist() == ref_nms(boxes, scores, thr, classes)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [800, 2400])  # one pass with a class mask / one NMS per class on the CPU
def test_batched_nms_large_inputs_match_per_class_reference(device: str, n: int) -> None:
    boxes, scores = clustered_boxes(n, 7)
    classes = np.random.default_rng(7).integers(0, 3, n)
    keep = batched_nms(*(torch.from_numpy(v).to(device) for v in (boxes, scores, classes)), 0.45)
    expected = np.concatenate(
        [np.flatnonzero(classes == c)[ref_nms_vectorised(boxes[classes == c], scores[classes == c], 0.45)]
         for c in range(3)]
    )
    expected = expected[np.lexsort((expected, -scores[expected]))]  # by score, ties by index
    np.testing.assert_array_equal(keep.cpu().numpy(), expected)


def test_batched_nms_keeps_identical_boxes_of_different_classes() -> None:
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0]] * 3)
    keep = batched_nms(boxes, torch.tensor([0.3, 0.9, 0.5]), torch.tensor([0, 1, 0]), 0.5)
    assert keep.tolist() == [1, 2]


# ----------------------------------------------------------------------------------------------- Letterbox
frame_sizes = st.tuples(st.integers(1, 4000), st.integers(1, 4000))
net_sizes = st.tuples(st.integers(1, 40).map(lambda v: 32 * v), st.integers(1, 40).map(lambda v: 32 * v))


@settings(max_examples=200, deadline=None)
@given(frame_sizes, net_sizes)
def test_letterbox_fits_centres_and_preserves_aspect(frame: tuple[int, int], net: tuple[int, int]) -> None:
    lb = Letterbox.letterbox(*frame, *net)
    new_w, new_h = lb.resized_size
    assert new_w == net[0] or new_h == net[1]  # the limiting side fills the input
    assert 1 <= new_w <= net[0] and 1 <= new_h <= net[1]
    assert 0 <= (net[0] - new_w) - 2 * lb.pad_x <= 1 and 0 <= (net[1] - new_h) - 2 * lb.pad_y <= 1
    scale = min(net[0] / frame[0], net[1] / frame[1])
    assert abs(new_w - max(1.0, frame[0] * scale)) <= 0.5 and abs(new_h - max(1.0, frame[1] * scale)) <= 0.5
    whole = lb.to_net(np.array([[0.0, 0.0, frame[0], frame[1]]]))
    np.testing.assert_allclose(whole, [[lb.pad_x, lb.pad_y, lb.pad_x + new_w, lb.pad_y + new_h]], atol=1e-9)


@settings(max_examples=200, deadline=None)
@given(frame_sizes, net_sizes, st.booleans(), st.lists(st.floats(0, 1), min_size=4, max_size=4))
def test_to_frame_and_to_net_are_inverse(
    frame: tuple[int, int], net: tuple[int, int], letterbox: bool, u: list[float]
) -> None:
    lb = (Letterbox.letterbox if letterbox else Letterbox.resize)(*frame, *net)
    box_net = np.array([[u[0] * net[0], u[1] * net[1], u[2] * net[0], u[3] * net[1]]])
    box_frame = np.array([[u[0] * frame[0], u[1] * frame[1], u[2] * frame[0], u[3] * frame[1]]])
    np.testing.assert_allclose(lb.to_net(lb.to_frame(box_net)), box_net, atol=1e-4, rtol=0)
    np.testing.assert_allclose(lb.to_frame(lb.to_net(box_frame)), box_frame, atol=1e-6 * max(frame), rtol=0)
    # float32 torch: same maps, same kind back, within a pixel in the frame
    t = torch.from_numpy(box_frame).float()
    back = lb.to_frame(lb.to_net(t))
    assert isinstance(back, torch.Tensor) and back.dtype == torch.float32
    torch.testing.assert_close(back, t, atol=1.0, rtol=0)
    torch.testing.assert_close(lb.to_net(lb.to_frame(torch.from_numpy(box_net).float())),
                               torch.from_numpy(box_net).float(), atol=1e-3, rtol=0)


@pytest.mark.parametrize(("frame", "expected"), [
    ((960, 540), (0, 91, 416, 234)),   # landscape: pad 91 top, 91 bottom
    ((540, 960), (91, 0, 234, 416)),   # portrait
    ((517, 333), (0, 74, 416, 268)),   # odd: 148 rows of padding split 74 / 74
    ((333, 517), (74, 0, 268, 416)),
    ((641, 479), (0, 52, 416, 311)),   # 105 rows of padding: 52 top (floor), 53 bottom (ceil)
])
def test_letterbox_known_sizes(frame: tuple[int, int], expected: tuple[int, int, int, int]) -> None:
    lb = Letterbox.letterbox(*frame, 416, 416)
    assert (lb.pad_x, lb.pad_y, *lb.resized_size) == expected


def test_resize_has_no_padding_and_stretches() -> None:
    lb = Letterbox.resize(960, 540, 416, 416)
    assert (lb.pad_x, lb.pad_y, lb.resized_size) == (0, 0, (416, 416))
    torch.testing.assert_close(lb.to_net(torch.tensor([[0.0, 0.0, 960.0, 540.0]])), torch.tensor([[0.0, 0, 416, 416]]))


def test_letterbox_rejects_non_positive_sizes_and_bad_box_shape() -> None:
    with pytest.raises(DetectorError, match="positive"):
        Letterbox.letterbox(0, 10, 416, 416)
    with pytest.raises(DetectorError, match=r"\[\.\.\., 4\]"):
        Letterbox.resize(10, 10, 416, 416).to_frame(np.zeros((2, 3)))


def test_clip_boxes_clamps_to_frame_for_numpy_and_torch() -> None:
    b = np.array([[-5.0, -1.0, 50.0, 30.0], [3.0, 4.0, 5.0, 6.0]])
    expected = np.array([[0.0, 0.0, 40.0, 20.0], [3.0, 4.0, 5.0, 6.0]])
    np.testing.assert_array_equal(clip_boxes(b, 40, 20), expected)
    assert b[0, 0] == -5.0  # input untouched
    torch.testing.assert_close(clip_boxes(torch.from_numpy(b), 40, 20), torch.from_numpy(expected))


# ----------------------------------------------------------------------------------------------- match_detections
def test_match_detections_is_one_to_one_and_drops_pairs_below_threshold() -> None:
    a = np.array([[0, 0, 10, 10], [1, 0, 11, 10], [100, 100, 110, 110]], np.float32)
    b = np.array([[0, 0, 10, 10], [200, 200, 210, 210]], np.float32)
    pairs = match_detections(a, np.zeros(3), b, np.zeros(2))
    assert [(i, j) for i, j, _ in pairs] == [(0, 0)] and pairs[0][2] == pytest.approx(1.0)


def test_match_detections_maximises_total_iou_not_greedy() -> None:
    # greedy would pair a0-b0 (0.8) and leave a1 unmatched; the assignment matches both
    a = np.array([[0, 0, 10, 10], [0, 0, 10, 6]], np.float32)
    b = np.array([[0, 0, 10, 8], [0, 0, 10, 12]], np.float32)
    pairs = match_detections(a, [0, 0], b, [0, 0], iou_threshold=0.5)
    assert sorted((i, j) for i, j, _ in pairs) == [(0, 1), (1, 0)]


def test_match_detections_matches_a_pair_at_exactly_the_iou_threshold() -> None:
    """IoU >= threshold matches (parity's "IoU >= 0.5"): a box and its top half overlap by exactly 0.5."""
    a, b = np.array([[0.0, 0.0, 10.0, 10.0]]), np.array([[0.0, 0.0, 10.0, 5.0]])
    assert box_iou(a, b)[0, 0] == 0.5
    assert match_detections(a, [0], b, [0], iou_threshold=0.5) == [(0, 0, 0.5)]
    assert match_detections(a, [0], b, [0], iou_threshold=0.5 + 1e-6) == []


def test_match_detections_respects_classes_unless_told_not_to() -> None:
    a = np.array([[0, 0, 10, 10]], np.float32)
    assert match_detections(a, [0], a, [1]) == []
    assert [(i, j) for i, j, _ in match_detections(a, [0], a, [1], class_aware=False)] == [(0, 0)]
    assert match_detections(np.zeros((0, 4)), [], a, [1]) == []


@settings(max_examples=40, deadline=None)
@given(st.lists(box_st(0, 1000), min_size=1, max_size=15, unique_by=tuple), st.randoms())
def test_match_detections_recovers_a_permutation(boxes: list[list[float]], rnd) -> None:  # noqa: ANN001
    perm = list(range(len(boxes)))
    rnd.shuffle(perm)
    a = torch.tensor(boxes)
    pairs = match_detections(a, torch.zeros(len(boxes)), a[perm], torch.zeros(len(boxes)), iou_threshold=0.999)
    assert [(i, perm[j]) for i, j, _ in pairs] == [(i, i) for i in range(len(boxes))]


# ----------------------------------------------------------------------------------------------- DIoU, DIoU-NMS
def ref_darknet_diou(a: list[float], b: list[float], beta: float) -> float:
    """box.c box_diounms transliterated: boxes as Darknet's (x, y, w, h) centres, double precision."""
    (ax, ay, aw, ah), (bx, by, bw, bh) = (((p[0] + p[2]) / 2, (p[1] + p[3]) / 2, p[2] - p[0], p[3] - p[1])
                                          for p in (a, b))
    top, bot = min(ay - ah / 2, by - bh / 2), max(ay + ah / 2, by + bh / 2)
    left, right = min(ax - aw / 2, bx - bw / 2), max(ax + aw / 2, bx + bw / 2)
    c = (right - left) ** 2 + (bot - top) ** 2
    iou = ref_iou(a, b)
    if c == 0:
        return iou
    return iou - (((ax - bx) ** 2 + (ay - by) ** 2) / c) ** beta


def ref_diounms_sort(diou: np.ndarray, probs: np.ndarray, thr: float) -> set[tuple[int, int]]:
    """box.c diounms_sort, loop for loop, on a precomputed pairwise DIoU: per class k, detections by descending
    prob[k] (stable); a detection still > 0 zeroes every later one with DIoU > thr. Returns the surviving
    (detection, class) pairs."""
    probs = probs.copy()
    for k in range(probs.shape[1]):
        order = sorted(range(len(probs)), key=lambda i: -float(probs[i, k]))
        for n, i in enumerate(order):
            if probs[i, k] == 0:
                continue
            for j in order[n + 1:]:
                if diou[i, j] > np.float32(thr):
                    probs[j, k] = 0
    return {(int(i), int(k)) for i, k in zip(*np.nonzero(probs))}


@settings(max_examples=60, deadline=None)
@given(st.lists(box_st(), min_size=1, max_size=6), st.lists(box_st(), min_size=1, max_size=6),
       st.sampled_from([0.3, 0.6, 1.0, 2.5]))
def test_box_diou_matches_darknet_box_diounms(a: list[list[float]], b: list[list[float]], beta: float) -> None:
    diou = box_diou(torch.tensor(a), torch.tensor(b), beta)
    expected = torch.tensor([[ref_darknet_diou(x, y, beta) for y in b] for x in a], dtype=torch.float32)
    torch.testing.assert_close(diou, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(box_diou(torch.tensor(b), torch.tensor(a), beta), diou.T, rtol=0, atol=0)
    assert bool((diou <= box_iou(torch.tensor(a), torch.tensor(b)) + 1e-7).all())
    np.testing.assert_array_equal(box_diou(np.array(a, np.float32), np.array(b, np.float32), beta), diou.numpy())


def test_box_diou_of_equal_points_is_their_iou_not_nan() -> None:
    points = torch.tensor([[5.0, 5.0, 5.0, 5.0], [5.0, 5.0, 5.0, 5.0]])
    assert box_diou(points, points).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    with pytest.raises(DetectorError, match="beta must be a number > 0"):
        box_diou(points, points, beta=0.0)


@pytest.mark.parametrize("beta", [0.6, 1.0, 3.0])
@pytest.mark.parametrize(("n", "classes", "seed"), [(40, 1, 0), (300, 3, 1), (1200, 4, 2)])
def test_batched_diou_nms_equals_darknet_diounms_sort(n: int, classes: int, seed: int, beta: float) -> None:
    boxes, _ = clustered_boxes(n, seed)
    rng = np.random.default_rng(seed + 100)
    probs = np.where(rng.uniform(0, 1, (n, classes)) < 0.5, rng.uniform(0, 1, (n, classes)), 0).astype(np.float32)
    expected = ref_diounms_sort(box_diou(boxes, boxes, beta), probs, 0.45)
    det, cls = np.nonzero(probs)
    keep = batched_diou_nms(boxes[det], probs[det, cls], cls, 0.45, beta)
    assert {(int(det[k]), int(cls[k])) for k in keep} == expected
    assert list(probs[det, cls][keep]) == sorted(probs[det, cls][keep], reverse=True)


@st.composite
def concentric_case(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Boxes of random sizes around one centre per class: their centre distance is 0, so DIoU = IoU."""
    n, classes = draw(st.integers(1, 40)), draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    centres = rng.uniform(50, 350, (classes, 2)).round()
    cls = rng.integers(0, classes, n)
    half = rng.integers(1, 60, (n, 2)).astype(np.float64) / 2
    boxes = np.concatenate([centres[cls] - half, centres[cls] + half], 1).astype(np.float32)
    scores = rng.choice([0.2, 0.5, 0.5, 0.9], n).astype(np.float32) if draw(st.booleans()) else rng.uniform(0, 1, n)
    return boxes, scores.astype(np.float32), cls, draw(st.sampled_from([0.3, 0.45, 0.6]))


@settings(max_examples=80, deadline=None)
@given(concentric_case(), st.sampled_from([0.6, 2.0]))
def test_diou_nms_of_boxes_sharing_a_centre_equals_iou_nms(case: tuple, beta: float) -> None:
    boxes, scores, cls, thr = case
    np.testing.assert_array_equal(batched_diou_nms(boxes, scores, cls, thr, beta), batched_nms(boxes, scores, cls, thr))


@settings(max_examples=80, deadline=None)
@given(nms_case(), st.data())
def test_diou_nms_with_a_huge_beta_equals_iou_nms(case: tuple[np.ndarray, np.ndarray, float],
                                                  data: st.DataObject) -> None:
    boxes, scores, thr = case  # (d / c) ** 1e9 underflows to 0 for every pair that overlaps
    cls = np.array(data.draw(st.lists(st.integers(0, 2), min_size=len(boxes), max_size=len(boxes))))
    np.testing.assert_array_equal(batched_diou_nms(boxes, scores, cls, thr, 1e9), batched_nms(boxes, scores, cls, thr))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 400), st.integers(0, 2**31 - 1), st.sampled_from([0.3, 0.45, 0.6]), st.sampled_from([0.6, 1.5]))
def test_diou_nms_keeps_no_pair_above_threshold_and_drops_only_what_a_kept_box_suppresses(
    n: int, seed: int, thr: float, beta: float
) -> None:
    boxes, scores = clustered_boxes(n, seed)
    cls = np.random.default_rng(seed).integers(0, 3, n)
    keep = batched_diou_nms(boxes, scores, cls, thr, beta)
    diou = box_diou(boxes, boxes, beta)
    same = cls[:, None] == cls[None, :]
    kept = np.zeros(n, bool)
    kept[keep] = True
    assert not (diou[np.ix_(keep, keep)] > thr)[same[np.ix_(keep, keep)] & ~np.eye(len(keep), dtype=bool)].any()
    for j in np.flatnonzero(~kept):  # each dropped box: a kept box of its class, scored at least as high, suppresses it
        assert ((diou[keep, j] > thr) & same[keep, j] & (scores[keep] >= scores[j])).any()


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 300), st.integers(0, 2**31 - 1), st.randoms(use_true_random=False))
def test_diou_nms_is_invariant_to_the_input_order(n: int, seed: int, rnd: object) -> None:
    boxes, _ = clustered_boxes(n, seed)
    scores = np.random.default_rng(seed).permutation(n).astype(np.float32) / n  # distinct scores
    cls = np.random.default_rng(seed + 1).integers(0, 2, n)
    perm = list(range(n))
    rnd.shuffle(perm)  # type: ignore[attr-defined]
    perm_arr = np.array(perm)
    keep = batched_diou_nms(boxes, scores, cls, 0.45)
    keep_permuted = batched_diou_nms(boxes[perm_arr], scores[perm_arr], cls[perm_arr], 0.45)
    np.testing.assert_array_equal(perm_arr[keep_permuted], keep)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("n", "seed"), [(600, 3), (3000, 4)])
def test_diou_device_algorithm_agrees_with_host_loop(device: str, n: int, seed: int) -> None:
    boxes, scores = clustered_boxes(n, seed)
    order = np.argsort(-scores, kind="stable")
    cls = np.random.default_rng(seed).integers(0, 3, n)
    host = _greedy_sorted(boxes[order], cls[order], 0.45, 0.6)
    dev = _greedy_sorted(torch.from_numpy(boxes[order]).to(device), torch.from_numpy(cls[order]).to(device), 0.45, 0.6)
    np.testing.assert_array_equal(dev.cpu().numpy(), host)
    t = batched_diou_nms(torch.from_numpy(boxes).to(device), torch.from_numpy(scores).to(device),
                         torch.from_numpy(cls).to(device), 0.45)
    np.testing.assert_array_equal(t.cpu().numpy(), order[host])
