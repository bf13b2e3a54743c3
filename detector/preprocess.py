"""Frames to network input: resize or letterbox, BGR -> RGB, [0, 255] -> [0, 1], HWC -> CHW.

Two implementations of one operation: :func:`preprocess` (OpenCV on the host, the reference) and
:func:`preprocess_torch` (``torch.nn.functional.interpolate`` on any device, for a GPU pipeline). Each returns
the :class:`~detector.boxes.Letterbox` of every frame, which maps detections back to frame pixels.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from detector.boxes import Letterbox
from detector.errors import DetectorError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

MODES = ("letterbox", "resize")


def _check_options(net_size: tuple[int, int], mode: str, pad_value: int) -> tuple[int, int]:
    if mode not in MODES:
        raise DetectorError(f"unknown preprocess mode {mode!r}; allowed: {', '.join(MODES)}")
    try:
        net_h, net_w = (int(v) for v in net_size)
    except (TypeError, ValueError) as e:
        raise DetectorError(f"net_size must be (height, width), got {net_size!r}") from e
    if net_h <= 0 or net_w <= 0 or (net_h, net_w) != tuple(net_size):
        raise DetectorError(f"net_size must be two positive integers (height, width), got {net_size!r}")
    if not (isinstance(pad_value, (int, np.integer)) and 0 <= pad_value <= 255):
        raise DetectorError(f"pad_value must be an integer in 0..255, got {pad_value!r}")
    return net_h, net_w


def _transform(mode: str, frame_w: int, frame_h: int, net_w: int, net_h: int) -> Letterbox:
    make = Letterbox.letterbox if mode == "letterbox" else Letterbox.resize
    return make(frame_w, frame_h, net_w, net_h)


def preprocess(
    frames: Sequence[np.ndarray],
    net_size: tuple[int, int] = (416, 416),
    mode: str = "letterbox",
    pad_value: int = 127,
) -> tuple[np.ndarray, list[Letterbox]]:
    """Prepare BGR frames for the network with OpenCV (``cv2.resize``, ``INTER_LINEAR``).

    Args:
        frames: frames as ``H x W x 3`` uint8 BGR arrays (sizes may differ between frames).
        net_size: network input ``(height, width)`` in pixels.
        mode: ``"letterbox"`` (keep the aspect ratio, centre, pad with ``pad_value``) or ``"resize"`` (stretch).
        pad_value: 0..255 value of the padding pixels in every channel (``pad_value / 255`` in the output).

    Returns:
        ``(batch, transforms)``: ``batch`` is a C-contiguous float32 ``[B, 3, height, width]`` RGB array in
        ``[0, 1]``; ``transforms[i]`` maps boxes between network pixels and frame ``i``'s pixels.

    Raises:
        DetectorError: a frame that is not an ``H x W x 3`` uint8 array (names its index, shape and dtype),
            an unknown mode, a bad ``net_size`` or ``pad_value``.
    """
    import cv2

    net_h, net_w = _check_options(net_size, mode, pad_value)
    batch = np.empty((len(frames), 3, net_h, net_w), dtype=np.float32)
    transforms = []
    canvas = np.empty((net_h, net_w, 3), dtype=np.uint8)
    for i, frame in enumerate(frames):
        if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
            shape = getattr(frame, "shape", None)
            dtype = getattr(frame, "dtype", type(frame).__name__)
            raise DetectorError(f"frame {i}: expected an HxWx3 uint8 BGR image, got shape {shape} dtype {dtype}")
        if frame.shape[0] == 0 or frame.shape[1] == 0:
            raise DetectorError(f"frame {i}: empty image of shape {frame.shape}")
        lb = _transform(mode, frame.shape[1], frame.shape[0], net_w, net_h)
        new_w, new_h = lb.resized_size
        if (new_w, new_h) == (frame.shape[1], frame.shape[0]):
            resized = frame
        else:
            resized = cv2.resize(np.ascontiguousarray(frame), (new_w, new_h), interpolation=cv2.INTER_LINEAR)
        if (new_w, new_h) == (net_w, net_h):
            image = resized
        else:
            canvas.fill(pad_value)
            canvas[lb.pad_y : lb.pad_y + new_h, lb.pad_x : lb.pad_x + new_w] = resized
            image = canvas
        # BGR -> RGB and HWC -> CHW in one strided copy, then scale in place.
        np.copyto(batch[i], image.transpose(2, 0, 1)[::-1], casting="unsafe")
        transforms.append(lb)
    batch /= np.float32(255)
    return batch, transforms


def preprocess_torch(
    frames: torch.Tensor,
    net_size: tuple[int, int] = (416, 416),
    mode: str = "letterbox",
    pad_value: int = 127,
    *,
    dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, list[Letterbox]]:
    """:func:`preprocess` on the frames' own device (a GPU, typically), with ``torch.nn.functional.interpolate``.

    Bilinear, ``align_corners=False``, no antialiasing -- the same sampling as ``cv2.INTER_LINEAR`` -- and the
    result is rounded to whole 0..255 levels as OpenCV does for uint8 images. OpenCV interpolates in 11-bit
    fixed point, so the two differ by rounding only: a value differs by at most one level (1/255), and on
    noisy images about one value in ten does (mean absolute difference < 0.15/255); copies without resizing
    and the padding are identical (``tests/detector/test_preprocess.py`` checks these bounds).

    Args:
        frames: ``[B, H, W, 3]`` uint8 BGR tensor on any device (all frames one size).
        net_size: network input ``(height, width)`` in pixels.
        mode: ``"letterbox"`` or ``"resize"``.
        pad_value: 0..255 padding value.
        dtype: floating dtype of the result (default float32).

    Returns:
        ``(batch, transforms)``: ``[B, 3, height, width]`` RGB tensor in ``[0, 1]`` on ``frames.device``
        (contiguous), and one :class:`Letterbox` per frame.
    """
    import torch
    import torch.nn.functional as F

    net_h, net_w = _check_options(net_size, mode, pad_value)
    if not isinstance(frames, torch.Tensor) or frames.ndim != 4 or frames.shape[3] != 3 or frames.dtype != torch.uint8:
        shape = list(getattr(frames, "shape", [])) or None
        raise DetectorError(
            f"frames: expected a [B, H, W, 3] uint8 BGR tensor, got {type(frames).__name__} "
            f"shape {shape} dtype {getattr(frames, 'dtype', None)}"
        )
    b, frame_h, frame_w, _ = frames.shape
    if frame_h == 0 or frame_w == 0:
        raise DetectorError(f"frames: empty images of shape {list(frames.shape)}")
    lb = _transform(mode, frame_w, frame_h, net_w, net_h)
    new_w, new_h = lb.resized_size
    x = frames.permute(0, 3, 1, 2).flip(1).float()  # [B, 3, H, W] RGB, 0..255
    if (new_w, new_h) != (frame_w, frame_h):
        x = F.interpolate(x, size=(new_h, new_w), mode="bilinear", align_corners=False, antialias=False)
        x = x.round_().clamp_(0, 255)
    if (new_w, new_h) != (net_w, net_h):
        pad = (lb.pad_x, net_w - new_w - lb.pad_x, lb.pad_y, net_h - new_h - lb.pad_y)
        x = F.pad(x, pad, mode="constant", value=float(pad_value))
    x = x.div_(255)  # x is a fresh float copy of the frames
    return x.to(dtype or torch.float32).contiguous(), [lb] * b
