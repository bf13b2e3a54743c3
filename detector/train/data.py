"""Training frames: rendered by the synthetic generator, optionally round-tripped through the video codec,
letterboxed to the network size, kept in memory as uint8 with padded box tables.

The seed split (never mixed):

* training data uses generator seeds ``TRAIN_SEED_BASE`` (1000) and up, one scene per seed;
* ``HELD_OUT_SEEDS`` (0, 7, 8, 9) are never trained on: seed 0 is the default demo/benchmark video, 7, 8 and 9
  are the held-out evaluation videos (:func:`check_training_seeds` refuses them).

Frames are made exactly as the evaluation sees them: rendered at 960x540, written to an ``mp4v`` video and
decoded again (the codec's blur and blocking are part of the input distribution: about 5 levels of mean
absolute difference), then resized with ``cv2.INTER_LINEAR`` to the letterbox size of
:meth:`detector.boxes.Letterbox.letterbox`. Only the resized content is stored (``[N, h, w, 3]`` uint8 RGB,
416x234 for 960x540 into 416x416); the grey padding is added on the device by :mod:`detector.train.augment`.

This module does not import torch at module level: its render worker runs in ``spawn`` processes that only
need numpy and OpenCV.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from detector.errors import DetectorError
from detector.memory import check_fits
from detector.progress import progress

if TYPE_CHECKING:
    import torch

    from detector.boxes import Letterbox

log = logging.getLogger(__name__)

__all__ = [
    "HELD_OUT_SEEDS", "TRAIN_SEED_BASE", "DataParams", "FrameSet", "RenderedSeed", "check_training_seeds",
    "default_workers", "frameset_from_seeds", "render_frames_parallel", "render_seed",
]

TRAIN_SEED_BASE = 1000
"""First generator seed of the training data; seeds ``TRAIN_SEED_BASE + i`` for i = 0, 1, ..."""
HELD_OUT_SEEDS = frozenset({0, 7, 8, 9})
"""Generator seeds never used for training: 0 (default video of the CLI and the suite), 7, 8, 9 (evaluation)."""
PAD_VALUE = 127  # letterbox padding, as detector.preprocess uses by default


def check_training_seeds(seeds: Sequence[int]) -> Sequence[int]:
    """Return ``seeds``; DetectorError if any is a held-out seed (0, 7, 8, 9). A range is asked, never listed."""
    bad = sorted(seed for seed in HELD_OUT_SEEDS if seed in seeds)
    if bad:
        raise DetectorError(f"training seeds {bad} are held out for evaluation (held out: "
                            f"{sorted(HELD_OUT_SEEDS)}); use seeds from {TRAIN_SEED_BASE} up")
    return seeds


@dataclasses.dataclass(frozen=True)
class DataParams:
    """What the training frames are made from.

    Attributes:
        frames: total frames kept (the last seed may contribute fewer).
        frames_per_seed: frames kept per generator seed (one scene each).
        stride: keep every ``stride``-th rendered frame (consecutive frames are near duplicates).
        seed_base: first generator seed; seeds ``seed_base .. seed_base + ceil(frames / frames_per_seed) - 1``.
        width, height: rendered frame size in pixels (the evaluation video's, 960x540).
        net_size: network input ``(height, width)`` in pixels.
        codec: fourcc of the video round trip (``"mp4v"``, as the evaluation video), or None to skip it.
    """

    frames: int = 16000
    frames_per_seed: int = 25
    stride: int = 2
    seed_base: int = TRAIN_SEED_BASE
    width: int = 960
    height: int = 540
    net_size: tuple[int, int] = (416, 416)
    codec: str | None = "mp4v"

    def __post_init__(self) -> None:
        for name in ("frames", "frames_per_seed", "stride", "width", "height"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DetectorError(f"data parameter {name} must be a positive integer, got {value!r}")
        if len(self.net_size) != 2 or any(int(v) < 32 for v in self.net_size):
            raise DetectorError(f"net_size must be (height, width) of at least 32 pixels, got {self.net_size!r}")
        check_training_seeds(self.seeds)

    @property
    def seeds(self) -> range:
        """The generator seeds this data is rendered from (a range: --frames 10^12 once listed them all first)."""
        n = -(-self.frames // self.frames_per_seed)
        return range(self.seed_base, self.seed_base + n)

    def check_memory(self) -> None:
        """MemoryError, before a frame is rendered, when the kept frames (uint8 letterbox content, all held in
        memory) need more than the machine's memory: past it, the kernel killed the process after hours of rendering."""
        new_w, new_h = self.geometry()[:2]
        check_fits(self.frames * new_w * new_h * 3,
                   f"the {self.frames} training frames ({new_w}x{new_h} each, --frames)")

    @property
    def letterbox(self) -> Letterbox:
        """How every frame maps into the network input (:meth:`detector.boxes.Letterbox.letterbox`)."""
        from detector.boxes import Letterbox

        return Letterbox.letterbox(self.width, self.height, self.net_size[1], self.net_size[0])

    def geometry(self) -> tuple[int, int, float, float, int, int]:
        """The letterbox as plain numbers ``(new_w, new_h, scale_x, scale_y, pad_x, pad_y)`` for the render
        workers, which must not import torch (``detector.boxes`` does)."""
        lb = self.letterbox
        new_w, new_h = lb.resized_size
        return new_w, new_h, lb.scale_x, lb.scale_y, lb.pad_x, lb.pad_y

    def kept_per_seed(self, index: int) -> int:
        """Frames kept from the ``index``-th seed (all but the last keep ``frames_per_seed``)."""
        return min(self.frames_per_seed, self.frames - index * self.frames_per_seed)

    def describe(self) -> str:
        """One line for logs and the provenance file."""
        seeds = self.seeds
        codec = f"through {self.codec}" if self.codec else "no codec round trip"
        return (f"synthetic generator seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} scenes), {self.frames} frames: "
                f"every {self.stride}. of the first {self.frames_per_seed * self.stride} frames per scene, "
                f"{self.width}x{self.height}, {codec}, letterboxed to {self.net_size[1]}x{self.net_size[0]} "
                f"(pad {PAD_VALUE})")


@dataclasses.dataclass
class RenderedSeed:
    """The kept frames of one seed: ``images`` uint8 ``[n, h, w, 3]`` RGB letterbox content, and per frame a
    float32 ``[k, 5]`` array of boxes ``(class, x1, y1, x2, y2)``: 0-based class (0 person, 1 vehicle),
    corners in network-input pixels (padding offset included)."""

    seed: int
    images: np.ndarray
    boxes: list[np.ndarray]


def _annotations_to_net(annotations: Sequence[dict[str, Any]],
                        geometry: tuple[int, int, float, float, int, int]) -> np.ndarray:
    """COCO annotations (frame pixels) -> float32 ``[k, 5]`` (class, x1, y1, x2, y2 network pixels), the
    mapping of :meth:`detector.boxes.Letterbox.to_net` (net = frame * scale + pad)."""
    if not annotations:
        return np.zeros((0, 5), np.float32)
    _, _, sx, sy, px, py = geometry
    xywh = np.array([a["bbox"] for a in annotations], dtype=np.float64).reshape(-1, 4)
    xyxy = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)
    xyxy = xyxy * np.array([sx, sy, sx, sy]) + np.array([px, py, px, py], dtype=np.float64)
    cls = np.array([int(a["category_id"]) - 1 for a in annotations], dtype=np.float64)
    return np.concatenate([cls[:, None], xyxy], axis=1).astype(np.float32)


def render_seed(seed: int, params: DataParams, index: int = 0,
                geometry: tuple[int, int, float, float, int, int] | None = None) -> RenderedSeed:
    """Render, round-trip through the codec, letterbox and subsample the frames of generator ``seed``.

    ``index`` is the seed's position in ``params.seeds`` (it sets how many frames are kept); ``geometry``
    is ``params.geometry()`` (computed here when not given). Runs in a worker process; OpenCV is limited to
    one thread there.
    """
    import cv2

    from detector.synthetic import render_frames
    from detector.video import VideoWriter, open_video

    cv2.setNumThreads(1)
    keep = params.kept_per_seed(index)
    rendered = keep * params.stride
    geometry = geometry or params.geometry()
    size = geometry[:2]
    images = np.empty((keep, size[1], size[0], 3), np.uint8)
    boxes: list[np.ndarray] = []
    frames = render_frames(seed, params.width, params.height, rendered)
    if params.codec:
        annotations = []
        with tempfile.TemporaryDirectory(prefix="detector-train-") as tmp:
            path = Path(tmp) / f"seed{seed}.{'avi' if params.codec.upper() in ('MJPG', 'XVID') else 'mp4'}"
            with VideoWriter(path, 30, (params.width, params.height), params.codec) as writer:
                for frame, ann in frames:
                    writer.write(frame)
                    annotations.append(ann)
            with open_video(path) as reader:
                pairs = list(zip(reader, annotations))
    else:
        pairs = list(frames)
    if len(pairs) != rendered:
        raise DetectorError(f"training seed {seed}: decoded {len(pairs)} of {rendered} frames from the codec "
                            f"round trip ({params.codec})")
    for i, (frame, ann) in enumerate(pairs[:: params.stride][:keep]):
        resized = cv2.resize(frame, size, interpolation=cv2.INTER_LINEAR)
        cv2.cvtColor(resized, cv2.COLOR_BGR2RGB, dst=images[i])
        boxes.append(_annotations_to_net(ann, geometry))
    return RenderedSeed(seed, images, boxes)


def _render_task(task: tuple[int, int, DataParams, tuple[int, int, float, float, int, int]]) -> RenderedSeed:
    index, seed, params, geometry = task
    return render_seed(seed, params, index, geometry)


@dataclasses.dataclass
class FrameSet:
    """Training frames in memory (host or device).

    Attributes:
        images: uint8 ``[N, h, w, 3]`` RGB letterbox content (no padding).
        boxes: float32 ``[N, K, 5]`` ``(class, x1, y1, x2, y2)`` in network-input pixels; rows with class -1 are
            padding (K = most boxes in any frame, at least 1).
        letterbox: the frame -> network mapping (``pad_x``, ``pad_y`` place the content).
        params: what the frames were made from.
    """

    images: torch.Tensor
    boxes: torch.Tensor
    letterbox: Letterbox
    params: DataParams

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def to(self, device: str | torch.device) -> FrameSet:
        """A copy on ``device`` (images stay uint8)."""
        return FrameSet(self.images.to(device), self.boxes.to(device), self.letterbox, self.params)

    def class_counts(self) -> list[int]:
        """Boxes per class (index = 0-based class)."""
        import torch

        cls = self.boxes[..., 0].flatten()
        cls = cls[cls >= 0].long()
        return torch.bincount(cls.cpu(), minlength=2).tolist()

    def nbytes(self) -> int:
        """Bytes held by images and boxes."""
        return self.images.numel() + self.boxes.numel() * 4


def frameset_from_seeds(rendered: Sequence[RenderedSeed], params: DataParams) -> FrameSet:
    """Stack rendered seeds (in the given order) into one :class:`FrameSet` of host tensors."""
    import torch

    images = np.concatenate([r.images for r in rendered], axis=0)
    per_frame = [b for r in rendered for b in r.boxes]
    k = max(1, max((len(b) for b in per_frame), default=0))
    boxes = np.zeros((len(per_frame), k, 5), np.float32)
    boxes[:, :, 0] = -1
    for i, b in enumerate(per_frame):
        boxes[i, : len(b)] = b
    return FrameSet(torch.from_numpy(images), torch.from_numpy(boxes), params.letterbox, params)


def render_frames_parallel(params: DataParams, pool: Any | None = None) -> list[RenderedSeed]:
    """Render every seed of ``params``, in ``pool`` (a ``multiprocessing`` pool) or in this process.

    Results come back in seed order whatever the pool's scheduling, so the data are deterministic.
    """
    geometry = params.geometry()
    tasks = ((i, seed, params, geometry) for i, seed in enumerate(params.seeds))
    done = map(_render_task, tasks) if pool is None else pool.imap(_render_task, tasks, chunksize=1)
    return list(progress(done, total=len(params.seeds), desc="rendering training scenes", unit="scene"))


def default_workers() -> int:
    """Render processes: the CPUs this process may use, less one for the main process, at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus - 1)
