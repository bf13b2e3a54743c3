"""detector.tracker: constant-velocity motion, IoU association by class, track ageing, predictions clipped to the frame.

Objects are drawn on integer pixel grids with integer velocities, so positions, velocities and predictions are exact in
float32 and "predicted exactly" means equal, not close.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detector.postprocess import Detections
from detector.tracker import IouTracker

#: Each object lives in its own CELL x CELL cell of the frame, so no two objects ever overlap.
CELL = 1000
#: Pixels per frame each box coordinate may move: at most 4 px x 5 frames on boxes of >= 200 px keeps the IoU of
#: a new track's box (no velocity yet) with the object's next detection above the default threshold (0.3), and
#: every box inside its cell, wider and taller than 0, for the 20 frames a test follows it.
MAX_SPEED = 4


@st.composite
def moving_objects(draw: st.DrawFn, max_objects: int = 6) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """1 to ``max_objects`` objects: (float64 [4] box at the first observation, float64 [4] pixels per frame, class),
    object i in cell i of a row of cells."""
    out = []
    for i in range(draw(st.integers(1, max_objects))):
        x, y = draw(st.integers(200, 400)), draw(st.integers(200, 400))
        w, h = draw(st.integers(200, 300)), draw(st.integers(200, 300))
        velocity = [draw(st.integers(-MAX_SPEED, MAX_SPEED)) for _ in range(4)]
        out.append((np.array([i * CELL + x, y, i * CELL + x + w, y + h], float), np.array(velocity, float),
                    draw(st.integers(0, 1))))
    return out


def detections_at(objects: list[tuple[np.ndarray, np.ndarray, int]], frames: int,
                  order: list[int] | None = None) -> Detections:  # fmt: skip
    """The objects ``frames`` frames after their first observation as detections (object i scored 0.9 - 0.1 i),
    listed in ``order``."""
    order = list(range(len(objects))) if order is None else order
    return Detections([objects[i][0] + objects[i][1] * frames for i in order], [0.9 - 0.1 * i for i in order],
                      [objects[i][2] for i in order])


def frame_of(objects: list[tuple[np.ndarray, np.ndarray, int]]) -> tuple[int, int]:
    return len(objects) * CELL, CELL


@settings(max_examples=150, deadline=None)
@given(objects=moving_objects(), start=st.integers(0, 50), interval=st.integers(1, 5), observations=st.integers(2, 4),
       ahead=st.integers(1, 5))  # fmt: skip
def test_objects_at_constant_velocity_are_predicted_exactly_from_the_second_observation_on(
    objects: list[tuple[np.ndarray, np.ndarray, int]], start: int, interval: int, observations: int, ahead: int
) -> None:
    tracker = IouTracker()
    for k in range(observations):
        tracker.update(detections_at(objects, k * interval), start + k * interval)
    after = (observations - 1) * interval + ahead
    predicted = tracker.predict(start + after, frame_of(objects))
    expected = detections_at(objects, after)  # scores descend with the object's index, as predict sorts them
    np.testing.assert_array_equal(predicted.boxes, expected.boxes)
    np.testing.assert_array_equal(predicted.scores, expected.scores)
    np.testing.assert_array_equal(predicted.classes, expected.classes)


@settings(max_examples=100, deadline=None)
@given(objects=moving_objects(), data=st.data())
def test_association_matches_a_permuted_detection_list_to_the_tracks_of_the_same_objects(
    objects: list[tuple[np.ndarray, np.ndarray, int]], data: st.DataObject
) -> None:
    order = data.draw(st.permutations(range(len(objects))))
    tracker = IouTracker()
    tracker.update(detections_at(objects, 0), 0)  # track i is object i
    ids = [t.track_id for t in tracker.tracks]
    tracker.update(detections_at(objects, 2, list(order)), 2)
    assert [t.track_id for t in tracker.tracks] == ids
    for track, (box, velocity, cls) in zip(tracker.tracks, objects):
        np.testing.assert_array_equal(track.box, box + 2 * velocity)
        assert track.observations == 2 and track.cls == cls


@settings(max_examples=100, deadline=None)
@given(classes=st.lists(st.integers(0, 79), min_size=2, max_size=2, unique=True), max_age=st.integers(1, 4),
       x=st.integers(0, 500), y=st.integers(0, 500))  # fmt: skip
def test_a_track_never_matches_a_detection_of_another_class(classes: list[int], max_age: int, x: int, y: int) -> None:
    box = [x, y, x + 50, y + 80]
    tracker = IouTracker(max_age=max_age)
    tracker.update(Detections([box], [0.9], [classes[0]]), 0)
    tracker.update(Detections([box], [0.8], [classes[1]]), 1)  # the same box: IoU 1
    assert all(t.observations == 1 for t in tracker.tracks)
    assert tracker.tracks[-1].cls == classes[1] and tracker.tracks[-1].misses == 0
    assert len(tracker.tracks) == (2 if max_age > 1 else 1)


@settings(max_examples=60, deadline=None)
@given(max_age=st.integers(1, 6), misses=st.integers(0, 8))
def test_a_track_is_dropped_after_max_age_inferences_without_a_match(max_age: int, misses: int) -> None:
    tracker = IouTracker(max_age=max_age)
    tracker.update(Detections([[10, 20, 60, 90]], [0.7], [1]), 0)
    for frame in range(1, misses + 1):
        tracker.update(Detections.empty(), frame)
    alive = misses < max_age
    assert len(tracker.tracks) == int(alive)
    assert len(tracker.predict(misses + 1, (640, 480))) == int(alive)


@settings(max_examples=200, deadline=None)
@given(width=st.integers(50, 400), height=st.integers(50, 400), x=st.integers(-100, 400), y=st.integers(-100, 400),
       w=st.integers(60, 200), h=st.integers(60, 200),
       velocity=st.lists(st.integers(-MAX_SPEED, MAX_SPEED), min_size=4, max_size=4), ahead=st.integers(0, 150))
def test_predictions_are_clipped_to_the_frame_and_boxes_wholly_outside_are_left_out(
    width: int, height: int, x: int, y: int, w: int, h: int, velocity: list[int], ahead: int
) -> None:
    box, v = np.array([x, y, x + w, y + h], float), np.array(velocity, float)
    tracker = IouTracker()
    tracker.update(Detections([box], [0.5], [0]), 0)
    tracker.update(Detections([box + 3 * v], [0.5], [0]), 3)
    predicted = tracker.predict(3 + ahead, (width, height))
    unclipped = box + (3 + ahead) * v
    clipped = np.clip(unclipped, 0, [width, height, width, height])
    if clipped[2] > clipped[0] and clipped[3] > clipped[1]:
        np.testing.assert_array_equal(predicted.boxes, [clipped])
    else:
        assert len(predicted) == 0
    b = predicted.boxes
    assert np.all((b[:, 0] >= 0) & (b[:, 0] < b[:, 2]) & (b[:, 2] <= width))
    assert np.all((b[:, 1] >= 0) & (b[:, 1] < b[:, 3]) & (b[:, 3] <= height))


def test_a_new_track_stays_where_it_was_seen_and_an_empty_tracker_predicts_nothing() -> None:
    tracker = IouTracker()
    assert len(tracker.predict(5, (640, 480))) == 0
    tracker.update(Detections([[10, 20, 60, 90], [100, 100, 200, 150]], [0.4, 0.8], [0, 1]), 0)
    predicted = tracker.predict(4, (640, 480))
    np.testing.assert_array_equal(predicted.boxes, [[100, 100, 200, 150], [10, 20, 60, 90]])  # by score
    np.testing.assert_array_equal(predicted.scores, np.float32([0.8, 0.4]))
    np.testing.assert_array_equal(predicted.classes, [1, 0])


def test_an_update_must_come_after_the_previous_one() -> None:
    tracker = IouTracker()
    tracker.update(Detections.empty(), 4)
    with pytest.raises(ValueError, match="frame_index must increase from update to update: got 4 after 4"):
        tracker.update(Detections.empty(), 4)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"iou_threshold": 0.0}, "iou_threshold must be in (0, 1], got 0.0"),
    ({"iou_threshold": 1.5}, "iou_threshold must be in (0, 1], got 1.5"),
    ({"max_age": 0}, "max_age must be an integer >= 1 (inferences without a match), got 0"),
    ({"max_age": 2.5}, "max_age must be an integer >= 1 (inferences without a match), got 2.5"),
    ({"velocity_weight": 0}, "velocity_weight must be in (0, 1], got 0"),
])  # fmt: skip
def test_a_parameter_out_of_range_is_one_error_naming_the_value(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError) as info:
        IouTracker(**kwargs)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_a_fast_object_is_matched_where_its_track_predicts_it_not_where_it_was_last_seen() -> None:
    """A 40 px box moving 15 px a frame, seen at frames 0 and 1 (overlapping: the track gets its velocity), then
    every third frame: each detection lies 45 px from the last one (no overlap) but exactly on the track's
    prediction, so the object keeps one track."""
    tracker = IouTracker()
    for frame in (0, 1, 4, 7, 10):
        x = 100.0 + 15 * frame
        tracker.update(Detections([[x, 100, x + 40, 140]], [0.9], [0]), frame)
    assert [t.track_id for t in tracker.tracks] == [0]
    assert tracker.tracks[0].observations == 5
    np.testing.assert_array_equal(tracker.predict(13, (1000, 1000)).boxes, [[100 + 15 * 13, 100, 140 + 15 * 13, 140]])
