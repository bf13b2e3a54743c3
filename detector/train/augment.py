"""Batch augmentation on the device (torch): colour jitter, random scale / translate / horizontal flip.

Everything runs on the frames' device with a seeded ``torch.Generator``, so a GPU run draws its augmentation
without host round trips. Boxes are ``(class, x1, y1, x2, y2)`` rows in network-input pixels, padded with
class -1 rows (see :class:`detector.train.data.FrameSet`); the geometric transform moves them exactly as it
moves the pixels (continuous pixel coordinates, ``align_corners=False``).

The geometric transform of sample i maps an input point (x, y) to
``x' = f_i * s_i * (x - W/2) + W/2 + t_xi``, ``y' = s_i * (y - H/2) + H/2 + t_yi`` with scale s, flip f = +-1
and translation t in pixels. Uncovered pixels get the letterbox grey (127), as the evaluation's padding.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F

from detector.boxes import Letterbox

__all__ = ["AugmentParams", "augment_batch", "color_jitter", "compose_letterbox", "warp"]

PAD = 127 / 255


@dataclasses.dataclass(frozen=True)
class AugmentParams:
    """Augmentation strengths.

    Attributes:
        p_affine: probability that a sample is scaled / translated (else only flipped and jittered).
        scale: (min, max) zoom factor, drawn log-uniformly; > 1 enlarges.
        translate: maximum shift as a fraction of the network width / height.
        flip: probability of a horizontal flip.
        brightness, contrast, saturation: jitter amplitudes: factors drawn uniformly in [1 - a, 1 + a].
        min_box_px: boxes narrower or lower than this (network pixels) after the transform are dropped.
    """

    p_affine: float = 0.7
    scale: tuple[float, float] = (0.7, 1.45)
    translate: float = 0.12
    flip: float = 0.5
    brightness: float = 0.25
    contrast: float = 0.25
    saturation: float = 0.4
    min_box_px: float = 1.5

    @classmethod
    def none(cls) -> AugmentParams:
        """No augmentation at all (identity)."""
        return cls(p_affine=0.0, flip=0.0, brightness=0.0, contrast=0.0, saturation=0.0, min_box_px=0.0)


def _uniform(n: int, lo: float, hi: float, gen: torch.Generator | None, device: torch.device) -> torch.Tensor:
    return torch.rand(n, generator=gen, device=device) * (hi - lo) + lo


def color_jitter(x: torch.Tensor, params: AugmentParams, gen: torch.Generator | None = None) -> torch.Tensor:
    """Random brightness (gain), contrast (about the image mean) and saturation (about the grey value) per
    sample of ``x`` float ``[B, 3, H, W]`` RGB in [0, 1]; result clamped to [0, 1]."""
    b = x.shape[0]
    dev = x.device
    if params.brightness:
        x = x * _uniform(b, 1 - params.brightness, 1 + params.brightness, gen, dev).view(b, 1, 1, 1)
    if params.contrast:
        mean = x.mean(dim=(1, 2, 3), keepdim=True)
        x = (x - mean) * _uniform(b, 1 - params.contrast, 1 + params.contrast, gen, dev).view(b, 1, 1, 1) + mean
    if params.saturation:
        grey = x[:, 0:1] * 0.299 + x[:, 1:2] * 0.587 + x[:, 2:3] * 0.114
        x = (x - grey) * _uniform(b, 1 - params.saturation, 1 + params.saturation, gen, dev).view(b, 1, 1, 1) + grey
    return x.clamp(0.0, 1.0)


def compose_letterbox(content: torch.Tensor, lb: Letterbox) -> torch.Tensor:
    """Place ``content`` float ``[B, 3, h, w]`` (h, w = ``lb.resized_size``) into the network canvas
    ``[B, 3, lb.net_h, lb.net_w]`` at (``pad_x``, ``pad_y``), grey (127/255) elsewhere -- what
    :func:`detector.preprocess.preprocess` produces for the same frame."""
    h, w = content.shape[-2:]
    pad = (lb.pad_x, lb.net_w - w - lb.pad_x, lb.pad_y, lb.net_h - h - lb.pad_y)
    return F.pad(content, pad, mode="constant", value=PAD)


def warp(x: torch.Tensor, boxes: torch.Tensor, scale: torch.Tensor, translate: torch.Tensor, flip: torch.Tensor,
         *, valid_rect: tuple[float, float, float, float] | None = None,
         min_box_px: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale, translate and flip images and their boxes (see the module docstring for the map).

    Args:
        x: float ``[B, 3, H, W]`` images in [0, 1].
        boxes: ``[B, K, 5]`` ``(class, x1, y1, x2, y2)`` network pixels; class -1 rows are padding.
        scale: ``[B]`` zoom factors (> 0); translate: ``[B, 2]`` shifts (x, y) in pixels; flip: ``[B]`` bool.
        valid_rect: ``(x1, y1, x2, y2)`` of the image content before the transform (the letterbox content);
            boxes are clipped to its transformed rectangle and to the image. Default: the whole image.
        min_box_px: boxes narrower or lower than this after clipping become padding rows.

    Returns:
        ``(images, boxes)`` of the same shapes; uncovered pixels are 127/255 grey.
    """
    b, _, h, w = x.shape
    dev, dt = x.device, x.dtype
    s = scale.to(dev, torch.float32)
    f = torch.where(flip.to(dev), -1.0, 1.0)
    tx, ty = translate[:, 0].to(dev, torch.float32), translate[:, 1].to(dev, torch.float32)
    # Output normalized coords -> input normalized coords (align_corners=False: u_norm = 2 u / W - 1).
    theta = torch.zeros(b, 2, 3, device=dev, dtype=torch.float32)
    theta[:, 0, 0] = 1 / (f * s)
    theta[:, 0, 2] = -2 * tx / (w * f * s)
    theta[:, 1, 1] = 1 / s
    theta[:, 1, 2] = -2 * ty / (h * s)
    grid = F.affine_grid(theta, [b, 3, h, w], align_corners=False)
    out = F.grid_sample(x.float() - PAD, grid, mode="bilinear", padding_mode="zeros", align_corners=False) + PAD
    out = out.clamp_(0.0, 1.0).to(dt)

    def map_x(v: torch.Tensor) -> torch.Tensor:
        return (f * s)[:, None] * (v - w / 2) + w / 2 + tx[:, None]

    def map_y(v: torch.Tensor) -> torch.Tensor:
        return s[:, None] * (v - h / 2) + h / 2 + ty[:, None]

    vx1, vy1, vx2, vy2 = valid_rect if valid_rect is not None else (0.0, 0.0, float(w), float(h))
    # The content rectangle after the transform, clipped to the image ([B, 1] each; python scalars in, so no
    # host-to-device copies: a CUDA step never waits for the host).
    ones = torch.ones(b, 1, device=dev)
    rx = map_x(torch.cat([ones * vx1, ones * vx2], 1))
    ry = map_y(torch.cat([ones * vy1, ones * vy2], 1))
    rx1, rx2 = rx.min(1, keepdim=True).values.clamp(0, w), rx.max(1, keepdim=True).values.clamp(0, w)
    ry1, ry2 = ry.min(1, keepdim=True).values.clamp(0, h), ry.max(1, keepdim=True).values.clamp(0, h)

    cls = boxes[..., 0]
    xs = map_x(boxes[..., [1, 3]].reshape(b, -1).float()).reshape(b, -1, 2)
    ys = map_y(boxes[..., [2, 4]].reshape(b, -1).float()).reshape(b, -1, 2)
    x1 = torch.minimum(xs[..., 0], xs[..., 1]).clamp(min=rx1, max=rx2)
    x2 = torch.maximum(xs[..., 0], xs[..., 1]).clamp(min=rx1, max=rx2)
    y1 = ys.min(-1).values.clamp(min=ry1, max=ry2)
    y2 = ys.max(-1).values.clamp(min=ry1, max=ry2)
    keep = (cls >= 0) & (x2 - x1 >= max(min_box_px, 1e-6)) & (y2 - y1 >= max(min_box_px, 1e-6))
    new = torch.stack([torch.where(keep, cls, -1.0), *(torch.where(keep, v, 0.0) for v in (x1, y1, x2, y2))], -1)
    return out, new.to(boxes.dtype)


def augment_batch(images: torch.Tensor, boxes: torch.Tensor, lb: Letterbox, params: AugmentParams,
                  gen: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn stored frames into an augmented network batch.

    Args:
        images: uint8 ``[B, h, w, 3]`` RGB letterbox content (as :class:`~detector.train.data.FrameSet` holds).
        boxes: ``[B, K, 5]`` ``(class, x1, y1, x2, y2)`` network pixels, class -1 = padding.
        lb: the letterbox that placed the content; params: strengths; gen: generator on the images' device.

    Returns:
        ``(x, boxes)``: float32 ``[B, 3, net_h, net_w]`` RGB in [0, 1] and the transformed boxes ``[B, K, 5]``.
    """
    b = images.shape[0]
    dev = images.device
    content = images.permute(0, 3, 1, 2).float().div_(255)
    content = color_jitter(content, params, gen)
    x = compose_letterbox(content, lb)
    lo, hi = params.scale
    affine = torch.rand(b, generator=gen, device=dev) < params.p_affine
    log_s = _uniform(b, math.log(lo), math.log(hi), gen, dev)
    scale = torch.where(affine, log_s.exp(), torch.ones_like(log_s))
    t = (torch.rand(b, 2, generator=gen, device=dev) * 2 - 1) * params.translate
    t = torch.stack([t[:, 0] * lb.net_w, t[:, 1] * lb.net_h], 1) * affine[:, None]
    flip = torch.rand(b, generator=gen, device=dev) < params.flip
    new_w, new_h = lb.resized_size
    rect = (float(lb.pad_x), float(lb.pad_y), float(lb.pad_x + new_w), float(lb.pad_y + new_h))
    if not params.p_affine and not params.flip:
        return x, boxes
    return warp(x, boxes, scale, t, flip, valid_rect=rect, min_box_px=params.min_box_px)
