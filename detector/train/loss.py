"""The YOLOv4 training loss over the raw head maps of :meth:`detector.model.DarknetModel.forward_heads`.

Target assignment (per ground-truth box, per head, as Darknet's yolo layer with ``iou_thresh``):

* the anchor-shape IoU (``wh`` IoU: boxes aligned at a corner) of the box with every anchor in use;
* the box is assigned to the anchor with the best such IoU, and also to every anchor of the head's mask whose
  IoU exceeds ``iou_thresh`` (0.213, Darknet's value);
* in the grid cell holding the box centre (``scale_x_y`` = 1.05 reaches 2.5% past a cell's edges only, so
  no neighbouring cells).

"Anchors in use" are those listed in some head's mask: the stock cfg lists anchor 0 (10,14) in none, and
Darknet would leave a box whose best anchor is 0 unassigned (tiny people, 3x7 network pixels, are such
boxes); here the best anchor is chosen among anchors 1..5.

Loss terms (weights in :class:`LossParams`):

* box: ``1 - CIoU`` (or GIoU) of the decoded prediction with the target, mean over assignments;
* objectness: BCE over every candidate, target = IoU of the decoded prediction with its target (detached,
  clamped at 0) for assigned candidates and 0 elsewhere; unassigned candidates whose prediction overlaps a
  ground-truth box by IoU > ``ignore_thresh`` (0.7) are ignored; mean per head, weighted per head by
  ``balance``;
* class: BCE of each class logit against the one-hot class, mean over assignments and classes.

Decoding is the model's (:func:`detector.model.decode_head`): ``x = (sigmoid(tx) * s - (s - 1) / 2 + col) *
stride``, ``w = exp(tw) * anchor_w`` in network pixels.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from detector.darknet import NetConfig
from detector.errors import DetectorError

__all__ = ["HeadTargets", "LossParams", "YoloLoss", "bbox_iou", "wh_iou"]

_EPS = 1e-7


def wh_iou(wh1: torch.Tensor, wh2: torch.Tensor) -> torch.Tensor:
    """IoU of box shapes aligned at a corner: ``wh1 [N, 2]`` against ``wh2 [M, 2]`` (same units) -> ``[N, M]``."""
    inter = torch.minimum(wh1[:, None, 0], wh2[None, :, 0]) * torch.minimum(wh1[:, None, 1], wh2[None, :, 1])
    return inter / (wh1.prod(1)[:, None] + wh2.prod(1)[None, :] - inter + _EPS)


def bbox_iou(box1: torch.Tensor, box2: torch.Tensor, kind: str = "ciou") -> torch.Tensor:
    """Element-wise IoU variant of boxes ``[..., 4]`` given as ``(cx, cy, w, h)`` (any unit, same for both).

    ``kind``: ``"iou"``, ``"giou"`` (IoU - (hull - union) / hull, in [-1, 1]) or ``"ciou"`` (IoU - d^2 / c^2 -
    alpha * v, with d the centre distance, c the hull diagonal, v the aspect term; in [-1.5, 1]). All equal 1
    for identical boxes (up to eps). Differentiable; returns ``[...]``.
    """
    (x1, y1, w1, h1), (x2, y2, w2, h2) = box1.unbind(-1), box2.unbind(-1)
    b1x1, b1x2, b1y1, b1y2 = x1 - w1 / 2, x1 + w1 / 2, y1 - h1 / 2, y1 + h1 / 2
    b2x1, b2x2, b2y1, b2y2 = x2 - w2 / 2, x2 + w2 / 2, y2 - h2 / 2, y2 + h2 / 2
    inter = (torch.minimum(b1x2, b2x2) - torch.maximum(b1x1, b2x1)).clamp(0) * \
            (torch.minimum(b1y2, b2y2) - torch.maximum(b1y1, b2y1)).clamp(0)
    union = w1 * h1 + w2 * h2 - inter + _EPS
    iou = inter / union
    if kind == "iou":
        return iou
    cw = torch.maximum(b1x2, b2x2) - torch.minimum(b1x1, b2x1)
    ch = torch.maximum(b1y2, b2y2) - torch.minimum(b1y1, b2y1)
    if kind == "giou":
        hull = cw * ch + _EPS
        return iou - (hull - union) / hull
    if kind == "ciou":
        c2 = cw**2 + ch**2 + _EPS
        d2 = (x2 - x1) ** 2 + (y2 - y1) ** 2
        v = (4 / math.pi**2) * (torch.atan(w2 / (h2 + _EPS)) - torch.atan(w1 / (h1 + _EPS))) ** 2
        with torch.no_grad():
            alpha = v / (v - iou + (1 + _EPS))
        return iou - (d2 / c2 + v * alpha)
    raise DetectorError(f"unknown IoU kind {kind!r}; allowed: iou, giou, ciou")


@dataclasses.dataclass(frozen=True)
class LossParams:
    """Weights and thresholds of :class:`YoloLoss`.

    Attributes:
        box, obj, cls: gains of the box (1 - CIoU), objectness and class terms.
        balance: objectness weight per head from the finest grid to the coarsest (the model's head order is
            coarse first; the weights are matched by stride). Default (1.0, 0.4) as YOLOv5's P4/P5.
        iou_kind: ``"ciou"`` or ``"giou"``.
        iou_thresh: extra anchors whose shape IoU exceeds this are assigned too (Darknet 0.213).
        ignore_thresh: unassigned predictions with IoU above this to a ground-truth box get no objectness loss.
        obj_iou_ratio: objectness target = (1 - r) + r * IoU(prediction, target) for assigned candidates.
    """

    box: float = 0.05
    obj: float = 1.0
    cls: float = 0.1
    balance: tuple[float, ...] = (1.0, 0.4)
    iou_kind: str = "ciou"
    iou_thresh: float = 0.213
    ignore_thresh: float = 0.7
    obj_iou_ratio: float = 1.0


@dataclasses.dataclass
class HeadTargets:
    """Assignments of one head: index tensors ``[M]`` (image, anchor-in-mask, row, column), the target box
    ``[M, 4]`` ``(cx, cy, w, h)`` in network pixels and the 0-based class ``[M]``."""

    image: torch.Tensor
    anchor: torch.Tensor
    row: torch.Tensor
    col: torch.Tensor
    box: torch.Tensor
    cls: torch.Tensor

    def __len__(self) -> int:
        return int(self.image.numel())


class YoloLoss:
    """YOLOv4 loss for the ``[yolo]`` heads of ``cfg`` (see the module docstring).

    The loss itself runs on fixed shapes (every (image, box slot, anchor) triple, masked), so a CUDA step never
    waits for the host; :meth:`build_targets` lists the same assignments as index tensors.
    """

    def __init__(self, cfg: NetConfig, params: LossParams | None = None) -> None:
        self.params = params or LossParams()
        yolos = [spec for _, spec in cfg.yolo_layers]
        if not yolos:
            raise DetectorError(f"{cfg.path}: no [yolo] layer to train")
        anchors = yolos[0].anchors
        if any(y.anchors != anchors for y in yolos):
            raise DetectorError(f"{cfg.path}: the [yolo] layers list different anchors; the loss needs one table")
        self.num_classes = cfg.classes
        self.anchor_table = tuple(tuple(float(v) for v in a) for a in anchors)  # [num] (w, h) network pixels
        self.masks = [tuple(y.mask) for y in yolos]
        self.scale_x_y = [float(y.scale_x_y) for y in yolos]
        self.used = sorted({m for mask in self.masks for m in mask})
        self._consts: dict[str, tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]] = {}

    def _constants(self, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """(anchors [num, 2], used anchor ids, mask ids per head) on ``dev``, made once (no per-step copies)."""
        key = str(dev)
        if key not in self._consts:
            self._consts[key] = (torch.tensor(self.anchor_table, device=dev), torch.tensor(self.used, device=dev),
                                 [torch.tensor(m, device=dev) for m in self.masks])
        return self._consts[key]

    def _balance(self, strides: Sequence[float]) -> list[float]:
        order = sorted(range(len(strides)), key=lambda i: strides[i])  # finest first
        weights = [0.0] * len(strides)
        for rank, i in enumerate(order):
            bal = self.params.balance
            weights[i] = bal[rank] if rank < len(bal) else bal[-1] * 0.4 ** (rank - len(bal) + 1)
        return weights

    @torch.no_grad()
    def _assign(self, targets: torch.Tensor, grids: Sequence[tuple[int, int]], net_hw: tuple[int, int]
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[tuple[torch.Tensor, ...]]]:
        """Dense assignment: box centre/size ``[B, K, 2]`` each, class ``[B, K]``, and per head
        ``(sel [B, K, A] bool, row [B, K], col [B, K])``."""
        dev = targets.device
        anchors, used, masks = self._constants(dev)
        valid = targets[..., 0] >= 0
        t = targets.float()
        cls = t[..., 0].long().clamp(min=0)
        wh = (t[..., 3:5] - t[..., 1:3]).clamp(min=1e-3)
        cxy = (t[..., 1:3] + t[..., 3:5]) / 2
        ious = wh_iou(wh.reshape(-1, 2), anchors).view(*wh.shape[:2], -1)  # [B, K, num]
        best = used[ious[..., used].argmax(-1)]  # [B, K] best anchor among those some head uses
        heads = []
        for mask, (gh, gw) in zip(masks, grids):
            sel = valid[..., None] & ((best[..., None] == mask) | (ious[..., mask] > self.params.iou_thresh))
            col = (cxy[..., 0] * (gw / net_hw[1])).long().clamp(0, gw - 1)
            row = (cxy[..., 1] * (gh / net_hw[0])).long().clamp(0, gh - 1)
            heads.append((sel, row, col))
        return cxy, wh, cls, heads

    def build_targets(self, targets: torch.Tensor, grids: Sequence[tuple[int, int]],
                      net_hw: tuple[int, int]) -> list[HeadTargets]:
        """Assign ``targets`` ``[B, K, 5]`` ``(class, x1, y1, x2, y2)`` network pixels (class -1 = padding) to
        anchors and cells of each head; ``grids`` = (rows, cols) per head, ``net_hw`` = input (h, w) pixels."""
        cxy, wh, cls, heads = self._assign(targets, grids, net_hw)
        out = []
        for sel, row, col in heads:
            b, k, a = torch.nonzero(sel, as_tuple=True)
            out.append(HeadTargets(b, a, row[b, k], col[b, k], torch.cat([cxy[b, k], wh[b, k]], -1), cls[b, k]))
        return out

    def __call__(self, heads: Sequence[torch.Tensor], targets: torch.Tensor,
                 net_hw: tuple[int, int]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Loss of raw head maps ``[B, A*(5+C), H, W]`` (model order) against ``targets`` ``[B, K, 5]``.

        Returns ``(loss, parts)``: the scalar to minimise and the detached ``box``, ``obj``, ``cls`` terms
        (weighted) and ``assigned`` (number of assignments, all heads), all on the heads' device.
        """
        p = self.params
        dev = heads[0].device
        anchors, _, mask_ids = self._constants(dev)
        grids = [(h.shape[-2], h.shape[-1]) for h in heads]
        balance = self._balance([net_hw[1] / g[1] for g in grids])
        cxy, wh, cls, assigned = self._assign(targets, grids, net_hw)
        tbox = torch.cat([cxy, wh], -1)[:, :, None, :]  # [B, K, 1, 4]
        gt_valid = targets[..., 0] >= 0  # [B, K]
        gt_xyxy = targets[..., 1:5].float()
        l_box = l_obj = l_cls = n_box = torch.zeros((), device=dev)
        for head, mask, sxy, (sel, row, col), bal in zip(heads, mask_ids, self.scale_x_y, assigned, balance):
            b, _, gh, gw = head.shape
            a = len(mask)
            sx, sy = net_hw[1] / gw, net_hw[0] / gh
            pred = head.float().reshape(b, a, 5 + self.num_classes, gh, gw).permute(0, 1, 3, 4, 2)  # [B,A,H,W,5+C]
            head_anchors = anchors[mask]  # [A, 2]
            with torch.no_grad():  # ignore mask: unassigned predictions that already overlap a ground truth well
                ys, xs = torch.meshgrid(torch.arange(gh, device=dev), torch.arange(gw, device=dev), indexing="ij")
                pxy = pred[..., :2].sigmoid() * sxy - 0.5 * (sxy - 1)
                px = (pxy[..., 0] + xs) * sx
                py = (pxy[..., 1] + ys) * sy
                pwh = pred[..., 2:4].clamp(max=8).exp() * head_anchors.view(1, a, 1, 1, 2)
                pb = torch.stack([px - pwh[..., 0] / 2, py - pwh[..., 1] / 2, px + pwh[..., 0] / 2,
                                  py + pwh[..., 1] / 2], -1).view(b, -1, 4)
                obj_weight = (_max_iou(pb, gt_xyxy, gt_valid) <= p.ignore_thresh).float().view(-1)
            # Every (image, box slot, anchor) triple; `sel` masks the assigned ones.
            k = sel.shape[1]
            img = torch.arange(b, device=dev).view(b, 1, 1)
            anc = torch.arange(a, device=dev).view(1, 1, a)
            flat = ((img * a + anc) * gh + row[..., None]) * gw + col[..., None]  # [B, K, A]
            ps = pred.reshape(-1, 5 + self.num_classes)[flat.view(-1)].view(b, k, a, -1)
            cell = torch.stack([col, row], -1)[:, :, None, :].float()  # [B, K, 1, 2]
            pxy = ps[..., :2].sigmoid() * sxy - 0.5 * (sxy - 1) + cell
            pxy = torch.stack([pxy[..., 0] * sx, pxy[..., 1] * sy], -1)
            pwh = ps[..., 2:4].clamp(max=8).exp() * head_anchors
            iou = bbox_iou(torch.cat([pxy, pwh], -1), tbox.expand(b, k, a, 4), p.iou_kind)  # [B, K, A]
            w = sel.float()
            l_box = l_box + ((1.0 - iou) * w).sum()
            n_box = n_box + w.sum()
            score = (1 - p.obj_iou_ratio) + p.obj_iou_ratio * iou.detach().clamp(0)
            obj_target = torch.zeros_like(obj_weight).scatter_reduce_(0, flat.view(-1), (score * w).view(-1), "amax")
            obj_weight = obj_weight.scatter_reduce_(0, flat.view(-1), w.view(-1), "amax")
            if self.num_classes > 1:
                onehot = F.one_hot(cls, self.num_classes).float()[:, :, None, :].expand(b, k, a, -1)
                bce = F.binary_cross_entropy_with_logits(ps[..., 5:], onehot, reduction="none").sum(-1)
                l_cls = l_cls + (bce * w).sum() / self.num_classes
            bce = F.binary_cross_entropy_with_logits(pred[..., 4].reshape(-1), obj_target, reduction="none")
            l_obj = l_obj + bal * (bce * obj_weight).sum() / obj_weight.numel()
        n = n_box.clamp(min=1)
        l_box = p.box * l_box / n
        l_cls = p.cls * l_cls / n
        l_obj = p.obj * l_obj
        parts = {"box": l_box.detach(), "obj": l_obj.detach(), "cls": l_cls.detach(), "assigned": n_box.detach()}
        return l_box + l_obj + l_cls, parts


def _max_iou(pred: torch.Tensor, gt: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Best IoU of each predicted box ``[B, N, 4]`` x1y1x2y2 with the valid ground truths ``[B, K, 4]`` of its
    image (``valid [B, K]`` bool) -> ``[B, N]`` (0 where an image has none)."""
    p = pred[:, :, None, :]
    g = gt[:, None, :, :]
    inter = (torch.minimum(p[..., 2], g[..., 2]) - torch.maximum(p[..., 0], g[..., 0])).clamp(0) * \
            (torch.minimum(p[..., 3], g[..., 3]) - torch.maximum(p[..., 1], g[..., 1])).clamp(0)
    area_p = (p[..., 2] - p[..., 0]) * (p[..., 3] - p[..., 1])
    area_g = (g[..., 2] - g[..., 0]) * (g[..., 3] - g[..., 1])
    iou = inter / (area_p + area_g - inter + _EPS)
    iou = iou.masked_fill(~valid[:, None, :], 0.0)
    return iou.max(dim=2).values if iou.shape[2] else torch.zeros(iou.shape[:2], device=iou.device)


def init_head_biases(model: torch.nn.Module, net_hw: tuple[int, int]) -> None:
    """YOLOv5-style prior for the head convs' biases: objectness ``log(8 / cells)`` (about 8 objects per
    image), class ``log(0.6 / (C - 0.99))``; speeds up the first steps of training from scratch."""
    from detector.model import ConvBlock, YoloLayer

    layers = list(model.layers)
    for i, layer in enumerate(layers):
        if not isinstance(layer, YoloLayer):
            continue
        conv = layers[i - 1]
        if not isinstance(conv, ConvBlock) or conv.conv.bias is None:
            continue
        gh, gw = layer.grid_hw
        per = 5 + layer.spec.classes
        a = len(layer.spec.mask)
        with torch.no_grad():
            bias = conv.conv.bias.view(a, per)
            bias[:, 4] += math.log(8 / (gh * gw * a))
            bias[:, 5:] += math.log(0.6 / max(layer.spec.classes - 0.99, 0.01))
