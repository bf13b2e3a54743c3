"""The shipped network against an independent float64 numpy YOLOv4-tiny written from the published layer table.

The reference below does not use the package's cfg parser, weights reader or model: it hard-codes the layer
graph of docs' YOLOv4-tiny table (Darknet's yolov4-tiny.cfg), reads the trained ``.weights`` file with plain numpy
in Darknet's order (per conv: biases, [scales, rolling mean, rolling variance,] kernels), and applies Darknet's
conv (pad size // 2), batch norm (eps 1e-5), leaky ReLU (slope 0.1), route groups, 2x2 max pooling, nearest
upsampling and the yolo decode. The trained weights matter: their first layer's variances (~3e-4) make the
batch-norm epsilon visible, which seeded random weights do not.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from numpy.lib.stride_tricks import sliding_window_view

from detector.model import default_cfg_path, default_weights_path, load_model
from detector.synthetic import render_frames

# (filters, size, stride) of the 19 batch-normalised leaky convs and the two linear heads, by layer index
CONVS = {0: (32, 3, 2), 1: (64, 3, 2), 2: (64, 3, 1), 4: (32, 3, 1), 5: (32, 3, 1), 7: (64, 1, 1),
         10: (128, 3, 1), 12: (64, 3, 1), 13: (64, 3, 1), 15: (128, 1, 1),
         18: (256, 3, 1), 20: (128, 3, 1), 21: (128, 3, 1), 23: (256, 1, 1),
         26: (512, 3, 1), 27: (256, 1, 1), 28: (512, 3, 1), 29: (None, 1, 1),
         32: (128, 1, 1), 35: (256, 3, 1), 36: (None, 1, 1)}
HEADS = (29, 36)


class _Reader:
    """Darknet 0.2.x ``.weights``: a 20-byte header, then float32 arrays in cfg order."""

    def __init__(self, path: Path) -> None:
        data = path.read_bytes()
        major, minor, _ = struct.unpack_from("<iii", data)
        assert major * 10 + minor >= 2, "this reference reads 0.2.x files (64-bit seen)"
        self.values, self.at = np.frombuffer(data, "<f4", offset=20).astype(np.float64), 0

    def take(self, n: int) -> np.ndarray:
        out = self.values[self.at:self.at + n]
        self.at += n
        return out


def _conv(x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
    k = w.shape[-1]
    p = k // 2
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    out_h, out_w = (x.shape[2] + 2 * p - k) // stride + 1, (x.shape[3] + 2 * p - k) // stride + 1
    patches = sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride][:, :, :out_h, :out_w]
    return np.einsum("bchwij,ocij->bohw", patches, w, optimize=True)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def _yolo_options(text: str) -> list[tuple[list[int], list[float], int, float]]:
    """(mask, anchors, classes, scale_x_y) of each [yolo] section, read with regular expressions."""
    out = []
    for section in re.split(r"^\[", text, flags=re.M)[1:]:
        if section.startswith("yolo]"):
            def get(key: str, s: str = section) -> str:
                return re.search(rf"^{key}\s*=\s*(.+)$", s, flags=re.M).group(1)  # type: ignore[union-attr]
            out.append(([int(v) for v in get("mask").split(",")], [float(v) for v in get("anchors").split(",")],
                        int(get("classes")), float(get("scale_x_y"))))
    return out


def _decode(raw: np.ndarray, anchors: list[tuple[float, float]], classes: int, s: float, net_hw: tuple[int, int]
            ) -> np.ndarray:
    b, _, gh, gw = raw.shape
    rows = []
    for a, (aw, ah) in enumerate(anchors):
        t = raw[:, a * (5 + classes):(a + 1) * (5 + classes)]  # [B, 5 + C, gh, gw]
        col, row = np.meshgrid(np.arange(gw), np.arange(gh))
        cx = (col + _sigmoid(t[:, 0]) * s - (s - 1) / 2) / gw * net_hw[1]
        cy = (row + _sigmoid(t[:, 1]) * s - (s - 1) / 2) / gh * net_hw[0]
        w, h = np.exp(t[:, 2]) * aw, np.exp(t[:, 3]) * ah
        scores = _sigmoid(t[:, 4:5]) * _sigmoid(t[:, 5:])
        box = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)
        rows.append(np.concatenate([box, scores], 1).reshape(b, 4 + classes, gh * gw).transpose(0, 2, 1))
    return np.concatenate(rows, 1)


def reference_forward(x: np.ndarray, weights: Path, cfg_text: str) -> np.ndarray:
    """Decoded [B, N, 4 + C] of the YOLOv4-tiny layer table for RGB input ``x`` [B, 3, H, W] in [0, 1]."""
    yolos = _yolo_options(cfg_text)
    classes = yolos[0][2]
    read = _Reader(weights)
    out: dict[int, np.ndarray] = {}
    y = x

    def conv(i: int, inp: np.ndarray) -> np.ndarray:
        filters, size, stride = CONVS[i]
        c = inp.shape[1]
        if i in HEADS:
            n = 3 * (5 + classes)
            bias = read.take(n)
            w = read.take(n * c * size * size).reshape(n, c, size, size)
            return _conv(inp, w, stride) + bias[None, :, None, None]
        bias, scale, mean, var = (read.take(filters)[None, :, None, None] for _ in range(4))
        w = read.take(filters * c * size * size).reshape(filters, c, size, size)
        z = (_conv(inp, w, stride) - mean) / np.sqrt(var + 1e-5) * scale + bias
        return np.where(z > 0, z, 0.1 * z)

    def half(v: np.ndarray) -> np.ndarray:  # route groups=2 group_id=1
        return v[:, v.shape[1] // 2:]

    def pool(v: np.ndarray) -> np.ndarray:
        b, c, h, w = v.shape
        return v.reshape(b, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))

    for i in range(38):
        if i in CONVS:
            y = conv(i, y)
        elif i in (3, 11, 19):
            y = half(out[i - 1])
        elif i in (6, 14, 22):
            y = np.concatenate([out[i - 1], out[i - 2]], 1)
        elif i in (8, 16, 24):
            y = np.concatenate([out[i - 6], out[i - 1]], 1)
        elif i in (9, 17, 25):
            y = pool(y)
        elif i == 31:
            y = out[27]
        elif i == 33:
            y = y.repeat(2, axis=2).repeat(2, axis=3)
        elif i == 34:
            y = np.concatenate([out[33], out[23]], 1)
        out[i] = y
    assert read.at == read.values.size, "the layer table must use every value of the weights file"
    net_hw = x.shape[2:]
    decoded = []
    for head, (mask, anchors, _, s) in zip(HEADS, yolos):
        pairs = [(anchors[2 * m], anchors[2 * m + 1]) for m in mask]
        decoded.append(_decode(out[head], pairs, classes, s, net_hw))
    return np.concatenate(decoded, 1)


@pytest.fixture(scope="module")
def shipped_weights() -> Path:
    path = default_weights_path()
    if path is None:
        pytest.skip("no shipped yolov4-tiny.weights")
    return path


@pytest.mark.parametrize("height, width", [(192, 320)])
def test_shipped_model_equals_independent_numpy_yolov4_tiny(tmp_path: Path, shipped_weights: Path,
                                                            height: int, width: int) -> None:
    text = default_cfg_path().read_text(encoding="utf-8")
    cfg = tmp_path / "tiny.cfg"
    cfg.write_text(text.replace("width=416", f"width={width}").replace("height=416", f"height={height}"),
                   encoding="utf-8")
    model = load_model(cfg, shipped_weights)
    # two frames of the synthetic street scene the weights were trained on: some confident boxes
    frames = [frame for frame, _ in render_frames(seed=3, width=width, height=height, frames=2)]
    x = np.stack([f[..., ::-1].transpose(2, 0, 1) for f in frames]) / 255.0  # BGR -> RGB, [0, 1]
    with torch.no_grad():
        got = model(torch.from_numpy(x.astype(np.float32))).numpy()
    want = reference_forward(x.astype(np.float32).astype(np.float64), shipped_weights, text)
    assert got.shape == want.shape == (2, 3 * (6 * 10 + 12 * 20), 4 + 2)
    np.testing.assert_allclose(got[..., 4:], want[..., 4:], rtol=0, atol=2e-4)
    relevant = want[..., 4:].max(-1) > 0.01  # boxes of candidates that could ever be kept
    np.testing.assert_allclose(got[relevant, :4], want[relevant, :4], rtol=1e-3, atol=0.05)
    assert relevant.sum() > 5 and want[..., 4:].max() > 0.25, "the input must give some confident candidates"
