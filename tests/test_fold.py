"""detector.fold: splitting the convs that grouped routes slice leaves every output unchanged."""

from __future__ import annotations

import pytest
import torch

from detector.backends import create_runner
from detector.errors import BackendError
from detector.fold import SplitConvBlock, split_group_routes
from detector.spec import ModelSpec


def _fused() -> torch.nn.Module:
    model = ModelSpec.default().load_torch().eval()
    model.fuse_batchnorm()
    return model


@pytest.mark.parametrize("channels_last", [False, True])
def test_splitting_grouped_route_convs_leaves_the_decoded_output_unchanged(channels_last: bool) -> None:
    model = _fused()
    x = torch.rand(2, 3, 96, 128, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        reference = model(x)
        assert split_group_routes(model) == 3  # YOLOv4-tiny: the three CSP blocks' [route] groups=2 group_id=1
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        out = model(x)
    assert sum(isinstance(layer, SplitConvBlock) for layer in model.layers) == 3
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-3)


def test_split_needs_a_fused_model_and_the_runner_option_needs_fuse_bn() -> None:
    with pytest.raises(ValueError, match="fuse_batchnorm"):
        split_group_routes(ModelSpec.default().load_torch())
    with pytest.raises(BackendError, match="split_routes needs fuse_bn"):
        create_runner("torch", ModelSpec.default(), device="cpu", split_routes=True)


def test_the_split_runner_matches_the_plain_fused_runner() -> None:
    spec = ModelSpec.default()
    x = torch.rand(1, 3, 416, 416, generator=torch.Generator().manual_seed(1))
    with create_runner("torch", spec, device="cpu", fuse_bn=True) as plain, \
            create_runner("torch", spec, device="cpu", fuse_bn=True, split_routes=True) as split:
        torch.testing.assert_close(split.infer(x), plain.infer(x), rtol=1e-5, atol=1e-3)
