"""A light multi-object tracker: IoU association and constant-velocity motion, for frames the detector skips.

DeepStream's ``interval`` (:attr:`detector.pipeline.LoopSettings.skip_interval`) runs the detector on one frame
in ``N + 1`` and lets a tracker carry the boxes over the ``N`` frames in between: N=0 infers every frame, N=1
frames 0,2,4,..., N=2 frames 0,3,6,..., N=4 frames 0,5,10,.... :class:`IouTracker` is that tracker, kept
small: not DeepStream's NvDCF or IOU tracker (no visual features, no Kalman filter, no shadow tracks).

* :meth:`IouTracker.update` on an inferred frame: each track's box is first advanced to the frame by its velocity;
  tracks and detections of the same class are then matched one-to-one by Hungarian assignment
  (``scipy.optimize.linear_sum_assignment``) on their IoU, pairs below ``iou_threshold`` never matching -- the
  same assignment as minimising ``1 - IoU`` over the allowed pairs (:func:`detector.boxes.match_detections`, the
  package's one detection matcher, on host arrays). A matched track takes the detection's box, score and class;
  an unmatched detection starts a track; a track left unmatched by ``max_age`` inferences in a row is dropped.
* Velocity: each coordinate of the box ``(x1, y1, x2, y2)`` moves by a constant number of pixels per frame. A
  track's velocity is its displacement between its first two observations divided by the frames between them,
  then an exponential blend: ``v = velocity_weight * observed + (1 - velocity_weight) * v``. An object moving at
  a constant velocity is thus predicted exactly from its second observation on.
* :meth:`IouTracker.predict` on a skipped frame: every track's last observed box moved by ``velocity x frames
  since that observation``, clipped to the frame, with the track's last score and class.

Boxes are ``(x1, y1, x2, y2)`` in frame pixels throughout (:class:`~detector.postprocess.Detections`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import scipy.optimize  # noqa: F401 -- match_detections imports it at its first call, 0.3 s: here, before a timed loop

from detector.boxes import clip_boxes, match_detections
from detector.postprocess import Detections

#: IoU a predicted track box and a detection must reach to be matched.
DEFAULT_IOU_THRESHOLD = 0.3
#: Inferences in a row without a match after which a track is dropped (1: a track the detector lost at an
#: inference is gone at once, so skipped frames show what the last inference saw, moved on).
DEFAULT_MAX_AGE = 1
#: Weight of the newest observed velocity in the exponential blend.
DEFAULT_VELOCITY_WEIGHT = 0.5


@dataclass
class Track:
    """One tracked object.

    Attributes:
        track_id: a number unique within its tracker, in order of creation.
        box: float64 ``[4]`` last observed box ``(x1, y1, x2, y2)``, frame pixels.
        velocity: float64 ``[4]`` pixels per frame of each box coordinate (zeros until a second observation).
        frame: index of the frame of the last observation.
        score: the last observation's score; cls: its 0-based class.
        observations: matched detections so far (1 for a new track).
        misses: inferences in a row since the last match.
    """

    track_id: int
    box: np.ndarray
    score: float
    cls: int
    frame: int
    velocity: np.ndarray = field(default_factory=lambda: np.zeros(4))
    observations: int = 1
    misses: int = 0

    def box_at(self, frame_index: int) -> np.ndarray:
        """float64 ``[4]``: the box moved at the track's velocity to ``frame_index`` (not clipped)."""
        return self.box + self.velocity * (frame_index - self.frame)


class IouTracker:
    """Constant-velocity IoU tracker; see the module docstring.

    Args:
        iou_threshold: in ``(0, 1]``, the IoU a predicted track box and a detection need to be matched.
        max_age: >= 1, inferences in a row without a match after which a track is dropped.
        velocity_weight: in ``(0, 1]``, weight of the newest observed velocity in the blend.

    Raises:
        ValueError: a parameter outside its range (the message names it and the range).
    """

    def __init__(self, iou_threshold: float = DEFAULT_IOU_THRESHOLD, max_age: int = DEFAULT_MAX_AGE,
                 velocity_weight: float = DEFAULT_VELOCITY_WEIGHT) -> None:  # fmt: skip
        if not 0 < iou_threshold <= 1:
            raise ValueError(f"iou_threshold must be in (0, 1], got {iou_threshold!r}")
        if isinstance(max_age, bool) or not isinstance(max_age, int) or max_age < 1:
            raise ValueError(f"max_age must be an integer >= 1 (inferences without a match), got {max_age!r}")
        if not 0 < velocity_weight <= 1:
            raise ValueError(f"velocity_weight must be in (0, 1], got {velocity_weight!r}")
        self.iou_threshold, self.max_age, self.velocity_weight = iou_threshold, max_age, velocity_weight
        self.tracks: list[Track] = []
        self._ids = itertools.count()
        self._last_update: int | None = None

    def update(self, detections: Detections, frame_index: int) -> None:
        """Take the detections of inferred frame ``frame_index`` (boxes in frame pixels): match, start, age, drop.

        Raises:
            ValueError: ``frame_index`` is not after the previous update's frame.
        """
        if self._last_update is not None and frame_index <= self._last_update:
            raise ValueError(f"frame_index must increase from update to update: got {frame_index} after "
                             f"{self._last_update}")
        self._last_update = frame_index
        boxes = detections.boxes.astype(np.float64)
        predicted = np.array([t.box_at(frame_index) for t in self.tracks]).reshape(-1, 4)
        classes = np.array([t.cls for t in self.tracks], dtype=np.int64)
        matches = match_detections(predicted, classes, boxes, detections.classes, self.iou_threshold)
        matched = {j: i for i, j, _ in matches}
        for i, j, _ in matches:
            self._observe(self.tracks[i], boxes[j], float(detections.scores[j]), frame_index)
        taken = set(matched.values())
        for i, track in enumerate(self.tracks):
            if i not in taken:
                track.misses += 1
        self.tracks = [t for t in self.tracks if t.misses < self.max_age]
        for j in range(len(boxes)):
            if j not in matched:
                self.tracks.append(Track(next(self._ids), boxes[j].copy(), float(detections.scores[j]),
                                         int(detections.classes[j]), frame_index))

    def _observe(self, track: Track, box: np.ndarray, score: float, frame_index: int) -> None:
        observed = (box - track.box) / (frame_index - track.frame)
        w = 1.0 if track.observations == 1 else self.velocity_weight
        track.velocity = w * observed + (1 - w) * track.velocity
        track.box, track.score, track.frame = box.copy(), score, frame_index
        track.observations += 1
        track.misses = 0

    def predict(self, frame_index: int, frame_size: tuple[int, int]) -> Detections:
        """The tracks at ``frame_index``: each last observed box moved by ``velocity x frames since it was observed``,
        clipped to ``frame_size`` ``(width, height)`` pixels, with the track's last score and class; sorted by
        descending score. A box that leaves no area inside the frame is left out. The tracks do not change.

        Returns:
            :class:`~detector.postprocess.Detections`: boxes float32 ``[K, 4]`` ``(x1, y1, x2, y2)`` with
            ``0 <= x1 < x2 <= width`` and ``0 <= y1 < y2 <= height``.
        """
        if not self.tracks:
            return Detections.empty()
        width, height = frame_size
        boxes = clip_boxes(np.array([t.box_at(frame_index) for t in self.tracks]), width, height)
        scores = np.array([t.score for t in self.tracks])
        classes = np.array([t.cls for t in self.tracks], dtype=np.int64)
        boxes32 = boxes.astype(np.float32)
        inside = (boxes32[:, 2] > boxes32[:, 0]) & (boxes32[:, 3] > boxes32[:, 1])
        order = np.argsort(-scores[inside], kind="stable")
        return Detections(boxes32[inside][order], scores[inside][order], classes[inside][order])
