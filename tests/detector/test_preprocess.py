"""detector.preprocess: OpenCV reference path and the torch (GPU) path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from detector.boxes import Letterbox
from detector.errors import DetectorError
from detector.preprocess import preprocess, preprocess_torch

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]
# (height, width): landscape, portrait, odd, square, tiny, exactly the net size
FRAME_SIZES = [(540, 960), (640, 360), (333, 517), (300, 300), (7, 5), (416, 416)]


def noisy_frame(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A smooth pattern plus heavy noise: many values near rounding boundaries, the hard case for parity."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = 127 + 80 * np.sin(xx / 7.0)[..., None] * np.cos(yy / 11.0)[..., None]
    return np.clip(base + rng.normal(0, 30, (h, w, 3)), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("mode", ["letterbox", "resize"])
@pytest.mark.parametrize(("h", "w"), FRAME_SIZES)
def test_preprocess_shape_dtype_range_and_transform(mode: str, h: int, w: int) -> None:
    frames = [noisy_frame(h, w), noisy_frame(h, w, seed=1)]
    batch, transforms = preprocess(frames, (320, 416), mode)
    assert batch.shape == (2, 3, 320, 416) and batch.dtype == np.float32 and batch.flags.c_contiguous
    assert batch.min() >= 0.0 and batch.max() <= 1.0
    make = Letterbox.letterbox if mode == "letterbox" else Letterbox.resize
    assert transforms == [make(w, h, 416, 320)] * 2


@pytest.mark.parametrize("pad_value", [0, 127, 255])
@pytest.mark.parametrize(("h", "w"), [(540, 960), (640, 360), (479, 641)])
def test_letterbox_pads_with_pad_value_outside_the_image_only(pad_value: int, h: int, w: int) -> None:
    frame = np.full((h, w, 3), 200 if pad_value != 200 else 10, np.uint8)
    batch, (lb,) = preprocess([frame], (416, 416), "letterbox", pad_value=pad_value)
    new_w, new_h = lb.resized_size
    inside = np.zeros((416, 416), bool)
    inside[lb.pad_y : lb.pad_y + new_h, lb.pad_x : lb.pad_x + new_w] = True
    assert (lb.pad_x, lb.pad_y) != (0, 0)
    np.testing.assert_array_equal(batch[0][:, ~inside], np.float32(pad_value) / np.float32(255))
    np.testing.assert_array_equal(batch[0][:, inside], np.float32(200) / np.float32(255))


def test_resize_mode_has_no_padding() -> None:
    batch, (lb,) = preprocess([np.zeros((540, 960, 3), np.uint8)], (416, 416), "resize", pad_value=255)
    assert (lb.pad_x, lb.pad_y) == (0, 0)
    assert not batch.any()


def test_preprocess_converts_bgr_to_rgb_and_scales_exactly() -> None:
    frame = noisy_frame(416, 416)
    batch, _ = preprocess([frame], (416, 416))  # same size: no resampling at all
    np.testing.assert_array_equal(batch[0], frame[..., ::-1].transpose(2, 0, 1).astype(np.float32) / np.float32(255))
    blue = np.zeros((8, 8, 3), np.uint8)
    blue[..., 0] = 255
    rgb, _ = preprocess([blue], (8, 8))
    assert rgb[0, 2].min() == 1.0 and rgb[0, :2].max() == 0.0


@pytest.mark.parametrize("mode", ["letterbox", "resize"])
def test_pixels_land_where_the_transform_maps_them(mode: str) -> None:
    frame = np.zeros((540, 960, 3), np.uint8)
    frame[100:300, 200:500] = 255  # a white rectangle: x 200..500, y 100..300 in frame pixels
    batch, (lb,) = preprocess([frame], (416, 416), mode, pad_value=0)
    x1, y1, x2, y2 = lb.to_net(np.array([200.0, 100.0, 500.0, 300.0]))
    ys, xs = np.nonzero(batch[0, 0] > 0.5)
    assert abs(xs.min() - x1) <= 1 and abs(xs.max() + 1 - x2) <= 1
    assert abs(ys.min() - y1) <= 1 and abs(ys.max() + 1 - y2) <= 1


def test_preprocess_handles_frames_of_different_sizes_and_strided_views() -> None:
    frame = noisy_frame(540, 960)
    batch, transforms = preprocess([frame, noisy_frame(100, 50), frame[:, ::-1]], (416, 416))
    assert batch.shape == (3, 3, 416, 416)
    assert [(t.frame_w, t.frame_h) for t in transforms] == [(960, 540), (50, 100), (960, 540)]
    np.testing.assert_array_equal(batch[2], batch[0][:, :, ::-1])  # a mirrored frame gives a mirrored input


@pytest.mark.parametrize(
    ("bad", "what"),
    [
        (np.zeros((10, 10), np.uint8), r"shape \(10, 10\)"),
        (np.zeros((10, 10, 4), np.uint8), r"shape \(10, 10, 4\)"),
        (np.zeros((10, 10, 3), np.float32), "float32"),
        ("not an image", "str"),
    ],
)
def test_preprocess_rejects_bad_frame_naming_index_shape_and_dtype(bad: object, what: str) -> None:
    with pytest.raises(DetectorError, match=rf"frame 1: .*{what}"):
        preprocess([np.zeros((10, 10, 3), np.uint8), bad], (32, 32))


def test_preprocess_rejects_unknown_mode_listing_allowed_ones() -> None:
    with pytest.raises(DetectorError, match="'stretch'.*letterbox, resize"):
        preprocess([np.zeros((10, 10, 3), np.uint8)], (32, 32), mode="stretch")
    with pytest.raises(DetectorError, match="'stretch'.*letterbox, resize"):
        preprocess_torch(torch.zeros(1, 10, 10, 3, dtype=torch.uint8), (32, 32), mode="stretch")


@pytest.mark.parametrize(("kwargs", "what"), [({"pad_value": 256}, "pad_value"), ({"net_size": (0, 32)}, "net_size")])
def test_preprocess_rejects_bad_options(kwargs: dict, what: str) -> None:
    with pytest.raises(DetectorError, match=what):
        preprocess([np.zeros((10, 10, 3), np.uint8)], **{"net_size": (32, 32), **kwargs})


# ------------------------------------------------------------------------------------------- preprocess_torch
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["letterbox", "resize"])
# (99, 60): 165 columns of padding, an odd split (82 left, 83 right)
@pytest.mark.parametrize(("h", "w"), [(270, 480), (333, 517), (100, 60), (99, 60), (416, 416)])
def test_preprocess_torch_matches_opencv_within_one_level(device: str, mode: str, h: int, w: int) -> None:
    frames = [noisy_frame(h, w, seed=s) for s in range(2)]
    expected, transforms = preprocess(frames, (256, 320), mode)
    batch, transforms_t = preprocess_torch(torch.from_numpy(np.stack(frames)).to(device), (256, 320), mode)
    assert transforms_t == transforms
    assert batch.shape == (2, 3, 256, 320) and batch.dtype == torch.float32 and batch.device.type == device
    assert batch.is_contiguous()
    diff = np.abs(batch.cpu().numpy() - expected)
    # measured on these noisy frames: max exactly one level, mean 0.07..0.13 level
    assert diff.max() <= 1 / 255 + 1e-6
    assert diff.mean() <= 0.15 / 255
    if (h, w) == (416, 416) or mode == "letterbox":  # padding is exact (to 1 ulp: CUDA divides by reciprocal)
        new_w, new_h = transforms[0].resized_size
        pad = np.ones((256, 320), bool)
        pad[transforms[0].pad_y : transforms[0].pad_y + new_h, transforms[0].pad_x : transforms[0].pad_x + new_w] = 0
        assert diff[:, :, pad].max(initial=0) <= 6e-8


def test_preprocess_torch_output_dtype_option() -> None:
    batch, _ = preprocess_torch(torch.zeros(1, 20, 30, 3, dtype=torch.uint8), (32, 32), dtype=torch.float16)
    assert batch.dtype == torch.float16


@pytest.mark.parametrize(
    "bad", [torch.zeros(20, 30, 3, dtype=torch.uint8), torch.zeros(1, 20, 30, 3), np.zeros((1, 20, 30, 3), np.uint8)]
)
def test_preprocess_torch_rejects_non_uint8_bhwc_tensors(bad: object) -> None:
    with pytest.raises(DetectorError, match=r"\[B, H, W, 3\] uint8"):
        preprocess_torch(bad, (32, 32))  # type: ignore[arg-type]
