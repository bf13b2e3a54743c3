"""The device (torch) NMS that GPU postprocessing runs equals the numpy one, box for box, classes included.

``detector.boxes`` has two implementations of greedy NMS: numpy on the host and a blocked fixed-point
algorithm on torch tensors, used on CUDA above a few hundred candidates. The torch algorithm runs on CPU
tensors as well, so CI compares the two on every kind of input the pipelined loop can produce.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from detector.boxes import Letterbox, _greedy_sorted
from detector.postprocess import postprocess


@st.composite
def candidates(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Boxes sorted by descending score: clusters of jittered copies (duplicates and near-threshold pairs
    included), with classes from a few values."""
    thr = draw(st.sampled_from([0.3, 0.45, 0.5, 0.7]))
    n = draw(st.integers(1, 300))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 400, (max(1, n // draw(st.integers(3, 30))), 2))
    c = centres[rng.integers(0, len(centres), n)] + rng.normal(0, draw(st.sampled_from([0.0, 2.0, 8.0])), (n, 2))
    wh = rng.uniform(5, 80, (n, 2))
    boxes = np.concatenate([c - wh / 2, c + wh / 2], 1).astype(np.float32)
    boxes = np.round(boxes, draw(st.sampled_from([0, 3])))  # whole pixels make exact duplicates and ties
    classes = rng.integers(0, draw(st.integers(1, 4)), n)
    return boxes, classes, rng.uniform(0, 1, n).astype(np.float32), thr


@settings(max_examples=60, deadline=None)
@given(candidates(), st.booleans())
def test_torch_nms_keeps_exactly_the_boxes_numpy_keeps(
    case: tuple[np.ndarray, np.ndarray, np.ndarray, float], class_aware: bool
) -> None:
    boxes, classes, scores, thr = case
    order = np.argsort(-scores, kind="stable")
    b, c = boxes[order], classes[order] if class_aware else None
    host = _greedy_sorted(b, c, thr)
    device = _greedy_sorted(torch.from_numpy(b), None if c is None else torch.from_numpy(c), thr)
    np.testing.assert_array_equal(device.numpy(), host)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the device path of postprocess needs one")
def test_postprocess_on_cuda_equals_postprocess_on_the_host() -> None:
    rng = np.random.default_rng(0)
    decoded = np.zeros((2, 2000, 6), np.float32)
    xy = rng.uniform(0, 380, (2, 2000, 2))
    decoded[..., :2], decoded[..., 2:4] = xy, xy + rng.uniform(5, 40, (2, 2000, 2))
    decoded[..., 4:] = rng.uniform(0, 1, (2, 2000, 2))
    transforms = [Letterbox.letterbox(960, 540, 416, 416)] * 2
    host = postprocess(decoded, transforms)
    device = postprocess(torch.from_numpy(decoded).cuda(), transforms)
    for h, d in zip(host, device):
        np.testing.assert_array_equal(h.classes, d.classes)
        np.testing.assert_allclose(h.boxes, d.boxes, atol=1e-3)
