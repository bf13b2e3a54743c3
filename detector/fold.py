"""Inference-time rewrites of a batch-norm-fused :class:`~detector.model.DarknetModel` (outputs unchanged up to
float rounding).

:func:`split_group_routes`: a ``[route] groups=G group_id=g`` passes channel group g of a conv's output to the
next layer. In channels-last memory that slice is strided, so every call copies it before the next convolution
(on an H100 at batch 256, three such copies took 0.40 ms of a 8.6 ms compiled call). Computing the conv as G
convs of C/G output channels each gives every group its own dense tensor: the route takes its group as is, and a
route that takes the whole output concatenates the groups (a copy it made anyway).
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from detector.darknet import RouteSpec
from detector.model import ConvBlock, DarknetModel

log = logging.getLogger(__name__)

__all__ = ["SplitConvBlock", "split_group_routes"]


class SplitConvBlock(nn.Module):
    """A fused :class:`~detector.model.ConvBlock` computed as ``groups`` convs over output-channel groups;
    returns their activated outputs as a tuple, in channel order."""

    def __init__(self, block: ConvBlock, groups: int) -> None:
        super().__init__()
        self.spec = block.spec
        conv = block.conv
        n = conv.out_channels // groups
        self.convs = nn.ModuleList()
        for g in range(groups):
            part = nn.Conv2d(conv.in_channels, n, conv.kernel_size, conv.stride, conv.padding, conv.dilation,
                             bias=True, device=conv.weight.device, dtype=conv.weight.dtype)
            with torch.no_grad():
                part.weight.copy_(conv.weight[g * n : (g + 1) * n])
                part.bias.copy_(conv.bias[g * n : (g + 1) * n])
            self.convs.append(part)
        self.act = block.act

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(self.act(conv(x)) for conv in self.convs)


def split_group_routes(model: DarknetModel) -> int:
    """Replace, in place, each conv whose output a grouped route slices by a :class:`SplitConvBlock`; returns
    how many. A conv qualifies when every route slicing it uses one ``groups`` value, its channels divide by it,
    and the layer after it is a route (layers take their predecessor's output as a plain tensor)."""
    if not model.is_fused:
        raise ValueError("split_group_routes needs a model whose batch norm is fused (fuse_batchnorm() first)")
    specs = model.cfg.layers
    split = 0
    for j, layer in enumerate(model.layers):
        if not isinstance(layer, ConvBlock) or layer.conv.groups != 1:
            continue
        groups = {s.groups for s in specs if isinstance(s, RouteSpec) and j in s.layers and s.groups > 1}
        follows = specs[j + 1] if j + 1 < len(specs) else None
        if len(groups) != 1 or not isinstance(follows, RouteSpec) or layer.conv.out_channels % min(groups):
            continue
        model.layers[j] = SplitConvBlock(layer, groups.pop())
        split += 1
    log.info("split %d conv(s) into the channel groups their routes take", split)
    return split
