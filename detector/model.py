"""YOLOv4-tiny (any cfg :func:`detector.darknet.parse_cfg` accepts) as a ``torch.nn.Module``, decode included.

``DarknetModel.forward`` returns the decoded tensor every runner returns: float [B, N, 4 + C], columns
x1, y1, x2, y2 in network-input pixels then per-class scores sigmoid(obj) * sigmoid(cls_j); rows ordered
head by head (cfg order), then anchor (mask order), then grid row, then column. The decode is plain tensor
arithmetic on constant tables built at construction, so it exports to ONNX (opset 17) with a dynamic batch.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from detector.darknet import (
    ConvSpec,
    ConvWeights,
    DarknetWeights,
    MaxPoolSpec,
    NetConfig,
    RouteSpec,
    UpsampleSpec,
    YoloSpec,
    parse_cfg,
    read_weights,
    write_weights,
)
from detector.errors import WeightsError
from detector.shipped import default_cfg_path, default_names, default_weights_path, read_names

__all__ = [
    "DarknetModel", "decode_head", "default_cfg_path", "default_names", "default_weights_path", "load_model",
    "random_weights", "random_weights_file",
]
log = logging.getLogger(__name__)
BN_EPS = 1e-5
LEAKY_SLOPE = 0.1


def _decode_tables(grid_hw: tuple[int, int], anchors_px: Sequence[Sequence[float]], net_hw: tuple[float, float],
                   device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Constant tables for one head: cell (col, row) [1, A*H*W, 2], anchor (w, h) px [1, A*H*W, 2] and
    stride (x, y) px per cell [2], in candidate order (anchor, row, col)."""
    h, w = grid_hw
    a = len(anchors_px)
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32, device=device),
                            torch.arange(w, dtype=torch.float32, device=device), indexing="ij")
    cells = torch.stack([xs, ys], dim=-1).reshape(1, 1, h * w, 2).expand(1, a, h * w, 2).reshape(1, a * h * w, 2)
    anchors = torch.as_tensor(anchors_px, dtype=torch.float32, device=device).reshape(1, a, 1, 2)
    anchors = anchors.expand(1, a, h * w, 2).reshape(1, a * h * w, 2)
    stride = torch.tensor([net_hw[1] / w, net_hw[0] / h], dtype=torch.float32, device=device)
    return cells, anchors, stride


def _decode(raw: torch.Tensor, num_anchors: int, cells: torch.Tensor, anchors: torch.Tensor,
            stride: torch.Tensor, scale_x_y: float) -> torch.Tensor:
    h, w = raw.shape[-2], raw.shape[-1]
    per = raw.shape[1] // num_anchors
    p = raw.reshape(-1, num_anchors, per, h, w).permute(0, 1, 3, 4, 2).reshape(-1, num_anchors * h * w, per)
    xy = (p[..., 0:2].sigmoid() * scale_x_y - 0.5 * (scale_x_y - 1.0) + cells.to(p.dtype)) * stride.to(p.dtype)
    half = p[..., 2:4].exp() * anchors.to(p.dtype) * 0.5
    scores = p[..., 4:5].sigmoid() * p[..., 5:].sigmoid()
    return torch.cat([xy - half, xy + half, scores], dim=-1)


def decode_head(raw: torch.Tensor, anchors_px: Sequence[Sequence[float]], scale_x_y: float,
                net_size: tuple[float, float]) -> torch.Tensor:
    """Decode one raw yolo head map as Darknet does.

    Args:
        raw: [B, A*(5+C), H, W] conv output; channel a*(5+C)+e holds tx, ty, tw, th, obj, cls_0.. for e = 0..
        anchors_px: A (w, h) anchors of this head (its mask), network-input pixels.
        scale_x_y: Darknet's ``scale_x_y``: x' = sigmoid(tx) * s - (s - 1) / 2.
        net_size: (height, width) of the network input, pixels; stride = net / grid.
    Returns:
        [B, A*H*W, 4+C]: x1, y1, x2, y2 in network-input pixels (cx = (col + x') * stride_x,
        w = exp(tw) * anchor_w), then sigmoid(obj) * sigmoid(cls_j); rows ordered (anchor, row, col).
    """
    tables = _decode_tables((raw.shape[-2], raw.shape[-1]), anchors_px, net_size, raw.device)
    return _decode(raw, len(anchors_px), *tables, scale_x_y)


class ConvBlock(nn.Module):
    """Darknet ``[convolutional]``: conv (bias only without BN), batch norm (eps 1e-5), activation."""

    def __init__(self, spec: ConvSpec) -> None:
        super().__init__()
        self.spec = spec
        self.conv = nn.Conv2d(spec.in_channels, spec.filters, spec.size, spec.stride, spec.padding,
                              groups=spec.groups, bias=not spec.batch_normalize)
        self.bn: nn.Module = nn.BatchNorm2d(spec.filters, eps=BN_EPS) if spec.batch_normalize else nn.Identity()
        self.act: nn.Module = {"leaky": lambda: nn.LeakyReLU(LEAKY_SLOPE), "linear": nn.Identity, "relu": nn.ReLU,
                               "mish": nn.Mish, "logistic": nn.Sigmoid}[spec.activation]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class Route(nn.Module):
    """Darknet ``[route]``: channel slice ``group_id`` of ``groups`` of each source, concatenated in order."""

    def __init__(self, spec: RouteSpec, channels: Sequence[int]) -> None:
        super().__init__()
        self.sources = spec.layers
        self.slices = [(spec.group_id * c // spec.groups, (spec.group_id + 1) * c // spec.groups) for c in channels]
        self.whole = [hi - lo == c for (lo, hi), c in zip(self.slices, channels)]

    def forward(self, outputs: list[torch.Tensor | None]) -> torch.Tensor:  # type: ignore[override]
        """``outputs[j]``: layer j's output [B, C_j, H, W] -> [B, sum of the slices, H, W]."""
        parts = [outputs[j] if whole else outputs[j][:, lo:hi]
                 for j, (lo, hi), whole in zip(self.sources, self.slices, self.whole)]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


def _maxpool(spec: MaxPoolSpec) -> nn.Module:
    """Darknet max pooling: ``padding`` (< size) pixels in all, ``padding // 2`` of them before;
    out = (n + padding - size) // stride + 1. Stock 2/2 (padding 1) is ``MaxPool2d(2, 2, ceil_mode=True)``,
    which equals ``MaxPool2d(2, 2)`` on even sizes."""
    before, after = spec.padding // 2, spec.padding - spec.padding // 2
    if after == before:
        return nn.MaxPool2d(spec.size, spec.stride, padding=before)
    if after == before + spec.stride - 1:  # ceil_mode lets the last window run stride-1 pixels past the edge
        return nn.MaxPool2d(spec.size, spec.stride, padding=before, ceil_mode=True)
    # Edge replication pads like -inf for a max: every window that reaches the padding holds the edge pixel.
    return nn.Sequential(nn.ReplicationPad2d((before, after, before, after)), nn.MaxPool2d(spec.size, spec.stride))


class YoloLayer(nn.Module):
    """Darknet ``[yolo]`` decode for one head, with its tables precomputed for the cfg input size."""

    def __init__(self, spec: YoloSpec, grid_hw: tuple[int, int], net_hw: tuple[int, int]) -> None:
        super().__init__()
        self.spec = spec
        self.grid_hw, self.net_hw = grid_hw, net_hw
        cells, anchors, stride = _decode_tables(grid_hw, spec.mask_anchors, net_hw)
        self.register_buffer("cells", cells, persistent=False)
        self.register_buffer("anchors", anchors, persistent=False)
        self.register_buffer("stride", stride, persistent=False)

    def _uses_tables(self, raw: torch.Tensor, net_hw: tuple[int, int]) -> bool:
        """Whether the precomputed tables fit (cfg input size). Sizes are static in an ONNX export, so the
        branch traced there is the right one; the tracer's warning about it is silenced."""
        with warnings.catch_warnings():
            if torch.jit.is_tracing():
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
            hw, net = (int(raw.shape[-2]), int(raw.shape[-1])), (int(net_hw[0]), int(net_hw[1]))
        return hw == self.grid_hw and net == self.net_hw

    def forward(self, raw: torch.Tensor, net_hw: tuple[int, int]) -> torch.Tensor:  # type: ignore[override]
        """raw [B, A*(5+C), H, W], network input (h, w) px -> [B, A*H*W, 4+C] (see :func:`decode_head`)."""
        if self._uses_tables(raw, net_hw):
            return _decode(raw, len(self.spec.mask), self.cells, self.anchors, self.stride, self.spec.scale_x_y)
        return decode_head(raw, self.spec.mask_anchors, self.spec.scale_x_y, net_hw)


class DarknetModel(nn.Module):
    """The network a :class:`~detector.darknet.NetConfig` describes; ``forward`` decodes (see module doc).

    Built in training mode with PyTorch's default init; :func:`load_model` gives an eval-mode model with
    Darknet or seeded random weights. Inputs: float [B, channels, H, W], RGB in [0, 1]; H, W default to the
    cfg size and may be any size at which the routes line up (multiples of 32 for YOLOv4-tiny).
    """

    def __init__(self, cfg: NetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.names: list[str] | None = None
        self.seen = 0  # images seen in training, kept from a loaded .weights header
        self._fused = False
        self._saved = {j for spec in cfg.layers if isinstance(spec, RouteSpec) for j in spec.layers}
        layers: list[nn.Module] = []
        for i, spec in enumerate(cfg.layers):
            if isinstance(spec, ConvSpec):
                layers.append(ConvBlock(spec))
            elif isinstance(spec, RouteSpec):
                layers.append(Route(spec, [cfg.shapes[j][0] for j in spec.layers]))
            elif isinstance(spec, MaxPoolSpec):
                layers.append(_maxpool(spec))
            elif isinstance(spec, UpsampleSpec):
                layers.append(nn.Upsample(scale_factor=spec.stride, mode="nearest"))
            else:
                layers.append(YoloLayer(spec, cfg.shapes[i][1:], cfg.input_size))
        self.layers = nn.ModuleList(layers)

    @property
    def num_classes(self) -> int:
        """Classes C per candidate."""
        return self.cfg.classes

    @property
    def input_size(self) -> tuple[int, int]:
        """(height, width) of the cfg network input, pixels."""
        return self.cfg.input_size

    @property
    def is_fused(self) -> bool:
        """True once :meth:`fuse_batchnorm` has folded batch norm into the convs."""
        return self._fused

    def forward_heads(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Raw head maps, one [B, A*(5+C), H_i, W_i] per ``[yolo]`` in cfg order (for a training loss)."""
        saved: list[torch.Tensor | None] = []  # outputs later routes read; None for the rest (frees memory)
        heads: list[torch.Tensor] = []
        y = x
        for i, layer in enumerate(self.layers):
            if isinstance(layer, Route):
                y = layer(saved)
            elif isinstance(layer, YoloLayer):
                heads.append(y)  # a [yolo] layer passes its input on
            else:
                y = layer(y)
            saved.append(y if i in self._saved else None)
        return heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C_in, H, W] float -> decoded [B, N, 4 + classes] (boxes x1y1x2y2 in input pixels, scores)."""
        net_hw = (x.shape[-2], x.shape[-1])
        yolos = [layer for layer in self.layers if isinstance(layer, YoloLayer)]
        return torch.cat([yolo(raw, net_hw) for yolo, raw in zip(yolos, self.forward_heads(x))], dim=1)

    def _conv_blocks(self) -> list[ConvBlock]:
        return [layer for layer in self.layers if isinstance(layer, ConvBlock)]

    @torch.no_grad()
    def load_weights(self, weights: DarknetWeights) -> None:
        """Copy ``weights`` (one entry per conv, cfg order, shapes as the cfg says) into the model."""
        if self._fused:
            raise WeightsError(f"cannot load weights into a model whose batch norm is fused ({self.cfg.path.name}); "
                               f"load first, then fuse_batchnorm()")
        blocks = self._conv_blocks()
        if len(weights.convs) != len(blocks):
            raise WeightsError(f"{len(weights.convs)} conv weight sets for {len(blocks)} convs of {self.cfg.path}")
        for n, (block, w) in enumerate(zip(blocks, weights.convs)):
            if w.batch_normalize != block.spec.batch_normalize or w.weights.shape != block.spec.weight_shape:
                raise WeightsError(f"conv #{n} of {self.cfg.path}: weights {w.weights.shape} (BN {w.batch_normalize}) "
                                   f"do not fit {block.spec.weight_shape} (BN {block.spec.batch_normalize})")
            block.conv.weight.copy_(torch.from_numpy(np.asarray(w.weights, dtype=np.float32)))
            if isinstance(block.bn, nn.BatchNorm2d):
                for dst, src in ((block.bn.bias, w.biases), (block.bn.weight, w.scales),
                                 (block.bn.running_mean, w.mean), (block.bn.running_var, w.var)):
                    dst.copy_(torch.from_numpy(np.asarray(src, dtype=np.float32)))
            else:
                block.conv.bias.copy_(torch.from_numpy(np.asarray(w.biases, dtype=np.float32)))
        self.seen = weights.seen

    @torch.no_grad()
    def to_weights(self) -> DarknetWeights:
        """The model's parameters as :class:`DarknetWeights` (float32 copies); WeightsError once fused."""
        if self._fused:
            raise WeightsError(f"cannot export Darknet weights from a model whose batch norm is fused "
                               f"({self.cfg.path.name}): Darknet files keep BN separate; save before fuse_batchnorm()")

        def arr(t: torch.Tensor) -> np.ndarray:
            return t.detach().to("cpu", torch.float32).numpy().copy()

        convs = []
        for block in self._conv_blocks():
            if isinstance(block.bn, nn.BatchNorm2d):
                bn = block.bn
                convs.append(ConvWeights(arr(bn.bias), arr(block.conv.weight), arr(bn.weight),
                                         arr(bn.running_mean), arr(bn.running_var)))
            else:
                convs.append(ConvWeights(arr(block.conv.bias), arr(block.conv.weight)))
        return DarknetWeights(tuple(convs), seen=self.seen)

    def load_darknet_weights(self, path: str | os.PathLike[str]) -> None:
        """Load a Darknet ``.weights`` file for this cfg (WeightsError naming the file on any mismatch)."""
        self.load_weights(read_weights(path, self.cfg))

    def save_darknet_weights(self, path: str | os.PathLike[str]) -> Path:
        """Write the weights as a Darknet 0.2.5 file, atomically; bit-exact round trip with
        :meth:`load_darknet_weights` of a 0.2.x file. Raises WeightsError after :meth:`fuse_batchnorm`."""
        return write_weights(path, self.to_weights())

    @torch.no_grad()
    def fuse_batchnorm(self) -> None:
        """Fold each batch norm into its conv in place (w' = w * g / sqrt(var + eps), b' = beta - mean * that
        scale), computed in float64; outputs match the unfused eval-mode model within 1e-4. Idempotent.
        Afterwards the model is inference-only: loading/saving Darknet weights raises WeightsError."""
        for block in self._conv_blocks():
            bn = block.bn
            if not isinstance(bn, nn.BatchNorm2d):
                continue
            scale = bn.weight.double() / torch.sqrt(bn.running_var.double() + bn.eps)
            weight = block.conv.weight.double() * scale.reshape(-1, 1, 1, 1)
            bias = bn.bias.double() - bn.running_mean.double() * scale
            dtype = block.conv.weight.dtype
            block.conv.weight.copy_(weight.to(dtype))
            block.conv.bias = nn.Parameter(bias.to(dtype), requires_grad=block.conv.weight.requires_grad)
            block.bn = nn.Identity()
        self._fused = True


def random_weights(cfg: NetConfig, seed: int = 0) -> DarknetWeights:
    """Deterministic random weights for ``cfg`` (numpy PCG64, no torch): same seed, same arrays.

    He-normal kernels; BN running means set so that a uniform gray (0.5) image gives each channel its BN
    beta (found by pushing the gray vector through the net), variances near 1 (0.1 in the first layer, which
    sees image contrast ~0.3). Head biases make gray give tx..th ~ 0, objectness logit -3, classes ~ 0, and
    tw/th kernels are scaled by 0.3: scores then follow image content (gray: none over 0.25; cluttered
    frames: some) and boxes stay within a few hundred pixels, like an untrained but healthy detector.
    """
    rng = np.random.default_rng(seed)
    heads = {i - 1: spec for i, spec in cfg.yolo_layers}
    gray: list[np.ndarray] = []  # each layer's output for a uniform gray input (one value per channel)
    convs = []
    for i, spec in enumerate(cfg.layers):
        v_in = gray[-1] if gray else np.full(cfg.channels, 0.5)
        if isinstance(spec, RouteSpec):
            gray.append(np.concatenate([np.split(gray[j], spec.groups)[spec.group_id] for j in spec.layers]))
            continue
        if not isinstance(spec, ConvSpec):
            gray.append(v_in)
            continue
        shape, n = spec.weight_shape, spec.filters
        gain = 1.4 if spec.activation == "leaky" else 1.0
        w = rng.standard_normal(shape, dtype=np.float32) * np.float32(gain / np.sqrt(np.prod(shape[1:])))
        if i in heads:
            per = heads[i].classes + 5
            w[2::per] *= 0.3
            w[3::per] *= 0.3
        w_groups, v_groups = np.split(w.sum(axis=(2, 3), dtype=np.float64), spec.groups), np.split(v_in, spec.groups)
        pre = np.concatenate([wg @ vg for wg, vg in zip(w_groups, v_groups)])  # conv of gray, before BN/bias
        beta = rng.standard_normal(n) * 0.1
        if spec.batch_normalize:
            scales, var = rng.uniform(0.8, 1.2, n), rng.uniform(0.8, 1.2, n) * (0.1 if i == 0 else 1.0)
            f32 = [a.astype(np.float32) for a in (beta, scales, pre, var)]
            convs.append(ConvWeights(f32[0], w, *f32[1:]))
        else:
            if i in heads:
                beta[4::heads[i].classes + 5] -= 3.0
            convs.append(ConvWeights((beta - pre).astype(np.float32), w))
        gray.append(_np_activation(spec.activation, beta))  # gray in -> exactly beta before the activation
    return DarknetWeights(tuple(convs))


def _np_activation(name: str, v: np.ndarray) -> np.ndarray:
    if name == "leaky":
        return np.where(v > 0, v, LEAKY_SLOPE * v)
    if name == "relu":
        return np.maximum(v, 0.0)
    if name == "mish":
        return v * np.tanh(np.logaddexp(0.0, v))
    return 1.0 / (1.0 + np.exp(-v)) if name == "logistic" else v


def random_weights_file(cfg_path: str | os.PathLike[str], path: str | os.PathLike[str], seed: int = 0) -> Path:
    """Write :func:`random_weights` for the cfg at ``cfg_path`` to ``path`` (atomically, Darknet 0.2.5); return it."""
    return write_weights(path, random_weights(parse_cfg(cfg_path), seed))


def load_model(cfg_path: str | os.PathLike[str], weights_path: str | os.PathLike[str] | None = None, *,
               seed: int = 0) -> DarknetModel:
    """Build the cfg's model in eval mode, fp32, on the CPU.

    ``weights_path`` None -> deterministic seeded random weights (:func:`random_weights`,
    identical to loading ``random_weights_file(cfg_path, p, seed)``). ``names`` comes from a
    ``classes.names`` beside the cfg when it has one line per class, else stays None.
    """
    cfg = parse_cfg(cfg_path)
    if weights_path is None:
        log.info("%s: no weights given; using seeded random weights (seed %d)", cfg.path.name, seed)
        weights = random_weights(cfg, seed)
    else:  # read (size, header, finite values checked) before the model is built: a wrong file costs nothing
        weights = read_weights(weights_path, cfg)
    model = DarknetModel(cfg)
    model.load_weights(weights)
    names_path = cfg.path.parent / "classes.names"
    if names_path.is_file():
        names = read_names(names_path)
        model.names = names if len(names) == cfg.classes else None
    return model.eval()
