"""k-means anchors: the IoU math and the fit on real box sizes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from detector.errors import DetectorError
from detector.train.anchors import kmeans_anchors, mean_best_iou, shape_iou

sizes = st.lists(st.tuples(st.floats(1, 400), st.floats(1, 400)), min_size=1, max_size=20)


@given(boxes=sizes, anchors=sizes)
def test_shape_iou_is_symmetric_and_within_unit_interval(boxes, anchors) -> None:
    iou = shape_iou(np.array(boxes), np.array(anchors))
    assert iou.shape == (len(boxes), len(anchors))
    assert np.all(iou > 0) and np.all(iou <= 1 + 1e-12)
    assert np.allclose(iou, shape_iou(np.array(anchors), np.array(boxes)).T)


@given(w=st.floats(1, 400), h=st.floats(1, 400), s=st.floats(1.01, 5))
def test_shape_iou_of_a_scaled_copy_is_the_area_ratio(w, h, s) -> None:
    assert shape_iou(np.array([[w, h]]), np.array([[w * s, h * s]]))[0, 0] == pytest.approx(1 / s**2)


def test_kmeans_recovers_well_separated_clusters() -> None:
    rng = np.random.default_rng(3)
    centres = np.array([[4, 10], [30, 12], [60, 150]], np.float64)
    boxes = np.concatenate([c * rng.uniform(0.95, 1.05, (200, 2)) for c in centres])
    anchors = kmeans_anchors(boxes, 3, seed=1)
    assert np.allclose(anchors, centres, rtol=0.1)
    assert mean_best_iou(boxes, anchors) > 0.85


def test_kmeans_beats_stock_anchors_on_small_boxes() -> None:
    rng = np.random.default_rng(0)
    boxes = np.stack([rng.uniform(2, 12, 500), rng.uniform(6, 30, 500)], 1)
    stock = np.array([[23, 27], [37, 58], [81, 82], [135, 169], [344, 319]], np.float64)
    fitted = kmeans_anchors(boxes, 6)
    assert np.all(np.diff(fitted.prod(1)) >= 0)  # sorted by area
    assert mean_best_iou(boxes, fitted) > 2 * mean_best_iou(boxes, stock)


def test_kmeans_refuses_fewer_distinct_sizes_than_anchors() -> None:
    with pytest.raises(DetectorError, match="need at least 6 distinct"):
        kmeans_anchors(np.array([[5.0, 5.0]] * 10), 6)
