"""detector.model: shapes, the yolo decode against a slow reference, Darknet pooling, weights I/O, BN fusion."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from detector.darknet import RouteSpec, parse_cfg
from detector.errors import WeightsError
from detector.model import (
    DarknetModel,
    Route,
    decode_head,
    default_cfg_path,
    default_names,
    default_weights_path,
    load_model,
    random_weights_file,
)


@pytest.fixture(scope="module")
def small_cfg(tmp_path_factory: pytest.TempPathFactory, packaged_cfg: Callable[[Path, int], Path]) -> Path:
    return packaged_cfg(tmp_path_factory.mktemp("cfg"), 128)


@pytest.fixture(scope="module")
def small_model(small_cfg: Path) -> DarknetModel:
    return load_model(small_cfg, seed=1)


def _slow_decode(raw: np.ndarray, anchors: list[tuple[float, float]], s: float, net_h: int, net_w: int) -> np.ndarray:
    """Darknet's yolo decode, one cell at a time in float64, in the contract's candidate order."""
    b_n, channels, h, w = raw.shape
    per = channels // len(anchors)

    def sig(v: float) -> float:
        return 1.0 / (1.0 + math.exp(-v))

    rows = []
    for b in range(b_n):
        batch_rows = []
        for a, (aw, ah) in enumerate(anchors):
            for y in range(h):
                for x in range(w):
                    t = [float(v) for v in raw[b, a * per:(a + 1) * per, y, x]]
                    cx = (x + sig(t[0]) * s - (s - 1) / 2) / w * net_w
                    cy = (y + sig(t[1]) * s - (s - 1) / 2) / h * net_h
                    bw = math.exp(t[2]) * aw / net_w * net_w
                    bh = math.exp(t[3]) * ah / net_h * net_h
                    scores = [sig(t[4]) * sig(c) for c in t[5:]]
                    batch_rows.append([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2, *scores])
        rows.append(batch_rows)
    return np.asarray(rows)


@settings(max_examples=40, deadline=None)
@given(
    batch=st.integers(1, 2),
    grid_h=st.integers(1, 4),
    grid_w=st.integers(1, 4),
    classes=st.integers(1, 3),
    anchors=st.lists(st.tuples(st.floats(1, 400), st.floats(1, 400)), min_size=1, max_size=3),
    stride=st.sampled_from([8, 16, 32]),
    stride_y=st.sampled_from([None, 6.8, 8, 16, 32]),
    scale_x_y=st.floats(1.0, 2.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_decode_head_matches_slow_per_cell_loop(batch: int, grid_h: int, grid_w: int, classes: int,
                                               anchors: list[tuple[float, float]], stride: int,
                                               stride_y: float | None, scale_x_y: float, seed: int) -> None:
    """``stride_y``: a net whose rows and columns have different strides (a cfg size that is not a multiple of
    its downsampling, e.g. width 34 over 3 ceil-mode pools): x divides by the grid width, y by its height."""
    rng = np.random.default_rng(seed)
    raw = (rng.standard_normal((batch, len(anchors) * (5 + classes), grid_h, grid_w)) * 3).astype(np.float32)
    net_h, net_w = grid_h * (stride if stride_y is None else stride_y), grid_w * stride
    got = decode_head(torch.from_numpy(raw), anchors, scale_x_y, (net_h, net_w))
    want = _slow_decode(raw, anchors, scale_x_y, net_h, net_w)
    assert got.shape == (batch, len(anchors) * grid_h * grid_w, 4 + classes)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-4)


def test_decode_orders_candidates_as_the_contract_permute() -> None:
    raw = torch.randn(2, 3 * 7, 4, 5)
    got = decode_head(raw, [(10, 14), (23, 27), (37, 58)], 1.05, (128, 160))
    flat = raw.view(2, 3, 7, 4, 5).permute(0, 1, 3, 4, 2).reshape(2, 3 * 4 * 5, 7)
    torch.testing.assert_close(got[..., 4:], flat[..., 4:5].sigmoid() * flat[..., 5:].sigmoid())


def test_forward_gives_2535_candidates_at_416() -> None:
    model = load_model(default_cfg_path())
    with torch.no_grad():
        out = model(torch.rand(2, 3, 416, 416))
    assert out.shape == (2, 2535, 4 + 2) and out.dtype == torch.float32
    assert (model.num_classes, model.input_size, model.names) == (2, (416, 416), ["person", "vehicle"])
    assert not model.training


@pytest.mark.parametrize(("size", "rows"), [(320, 1500), (192, 540), (96, 135)])
def test_forward_accepts_other_input_sizes(small_model: DarknetModel, size: int, rows: int) -> None:
    assert small_model.input_size == (128, 128)
    with torch.no_grad():
        assert small_model(torch.rand(1, 3, size, size)).shape == (1, rows, 6)


def test_forward_heads_gives_one_raw_map_per_yolo_layer(small_model: DarknetModel) -> None:
    with torch.no_grad():
        heads = small_model.forward_heads(torch.rand(2, 3, 128, 128))
    assert [tuple(h.shape) for h in heads] == [(2, 21, 4, 4), (2, 21, 8, 8)]


def test_forward_equals_decode_head_of_each_raw_head(small_model: DarknetModel) -> None:
    x = torch.rand(2, 3, 128, 128)
    with torch.no_grad():
        heads = small_model.forward_heads(x)
        decoded = small_model(x)
    specs = [spec for _, spec in small_model.cfg.yolo_layers]
    expected = torch.cat([decode_head(h, s.mask_anchors, s.scale_x_y, (128, 128)) for h, s in zip(heads, specs)], 1)
    torch.testing.assert_close(decoded, expected, rtol=0, atol=0)


@pytest.mark.parametrize("fill", ["gray", "noise"])
def test_boxes_are_in_network_pixels_and_scores_in_unit_interval(small_model: DarknetModel, fill: str) -> None:
    x = torch.full((1, 3, 128, 128), 0.5) if fill == "gray" else torch.rand(1, 3, 128, 128)
    with torch.no_grad():
        out = small_model(x)
    assert torch.isfinite(out).all()
    cx, cy = (out[..., 0] + out[..., 2]) / 2, (out[..., 1] + out[..., 3]) / 2
    margin = 0.05 * 32  # scale_x_y=1.05 lets a centre leave its cell by 2.5% of the largest stride
    assert cx.min() >= -margin and cx.max() <= 128 + margin and cy.min() >= -margin and cy.max() <= 128 + margin
    assert (out[..., 2] > out[..., 0]).all() and (out[..., 3] > out[..., 1]).all()
    scores = out[..., 4:]
    assert scores.min() >= 0 and scores.max() <= 1


def test_random_weights_are_unsaturated_and_follow_image_content(small_model: DarknetModel) -> None:
    with torch.no_grad():
        gray = small_model(torch.full((1, 3, 128, 128), 0.5))
        heads = small_model.forward_heads(torch.rand(2, 3, 128, 128))
        noise = small_model(torch.rand(1, 3, 128, 128))
    assert gray[..., 4:].max() < 0.25  # a blank frame detects nothing
    assert all(h.abs().max() < 15 for h in heads)  # no saturated sigmoid, no exploding exp
    assert noise[..., 4:].std() > gray[..., 4:].std()


def test_random_init_is_deterministic_per_seed(small_cfg: Path) -> None:
    a, b, c = load_model(small_cfg, seed=3), load_model(small_cfg, seed=3), load_model(small_cfg, seed=4)
    for (name, ta), tb, tc in zip(a.state_dict().items(), b.state_dict().values(), c.state_dict().values()):
        assert torch.equal(ta, tb), name
    assert not torch.equal(a.layers[0].conv.weight, c.layers[0].conv.weight)


def test_random_weights_file_holds_the_seeded_init(small_cfg: Path, tmp_path: Path) -> None:
    path = random_weights_file(small_cfg, tmp_path / "r.weights", seed=5)
    from_file, seeded = load_model(small_cfg, path), load_model(small_cfg, seed=5)
    for ta, tb in zip(from_file.state_dict().values(), seeded.state_dict().values()):
        assert torch.equal(ta, tb)


def test_save_load_round_trip_is_bit_exact(small_model: DarknetModel, small_cfg: Path, tmp_path: Path) -> None:
    first = small_model.save_darknet_weights(tmp_path / "a.weights")
    reloaded = load_model(small_cfg, first)
    second = reloaded.save_darknet_weights(tmp_path / "b.weights")
    assert first.read_bytes() == second.read_bytes()
    x = torch.rand(2, 3, 128, 128)
    with torch.no_grad():
        assert torch.equal(small_model(x), reloaded(x))


def test_loading_weights_keeps_seen_images(small_model: DarknetModel, small_cfg: Path, tmp_path: Path) -> None:
    model = copy.deepcopy(small_model)
    model.seen = 64_000
    path = model.save_darknet_weights(tmp_path / "seen.weights")
    assert load_model(small_cfg, path).seen == 64_000


def test_fused_batchnorm_matches_unfused_within_1e_4(small_model: DarknetModel) -> None:
    fused = copy.deepcopy(small_model)
    fused.fuse_batchnorm()
    assert fused.is_fused and not any(isinstance(m, torch.nn.BatchNorm2d) for m in fused.modules())
    x = torch.rand(2, 3, 128, 128)
    with torch.no_grad():
        for a, b in zip(small_model.forward_heads(x), fused.forward_heads(x)):
            torch.testing.assert_close(b, a, rtol=0, atol=1e-4)
        want, got = small_model(x), fused(x)
    torch.testing.assert_close(got[..., 4:], want[..., 4:], rtol=0, atol=1e-4)
    torch.testing.assert_close(got[..., :4], want[..., :4], rtol=1e-4, atol=1e-4 * 128)  # pixels: 1e-4 of net size
    fused.fuse_batchnorm()  # idempotent
    with torch.no_grad():
        assert torch.equal(fused(x), got)


def test_error_when_saving_or_loading_a_fused_model(small_model: DarknetModel, tmp_path: Path) -> None:
    fused = copy.deepcopy(small_model)
    fused.fuse_batchnorm()
    with pytest.raises(WeightsError, match="batch norm is fused"):
        fused.save_darknet_weights(tmp_path / "f.weights")
    assert not (tmp_path / "f.weights").exists()
    path = small_model.save_darknet_weights(tmp_path / "ok.weights")
    with pytest.raises(WeightsError, match="fuse"):
        fused.load_darknet_weights(path)


def test_error_on_weights_for_another_cfg(small_cfg: Path, tmp_path: Path) -> None:
    coco = tmp_path / "coco.cfg"
    coco.write_text(small_cfg.read_text().replace("filters=21", "filters=255").replace("classes=2", "classes=80"))
    path = random_weights_file(coco, tmp_path / "coco.weights", seed=0)
    with pytest.raises(WeightsError, match=r"coco\.weights: .*trailing bytes"):
        load_model(small_cfg, path)


def _pool_cfg(folder: Path, size: int, stride: int, padding: int, n: int) -> Path:
    path = folder / f"pool-{size}-{stride}-{padding}-{n}.cfg"
    path.write_text(f"[net]\nwidth={n}\nheight={n}\nchannels=3\n\n[maxpool]\nsize={size}\nstride={stride}\n"
                    f"padding={padding}\n\n[convolutional]\nfilters=6\nsize=1\nactivation=linear\n\n"
                    f"[yolo]\nmask=0\nanchors=10,10\nclasses=1\nnum=1\n")
    return path


@settings(max_examples=30, deadline=None)
@given(size=st.integers(1, 4), stride=st.integers(1, 3), data=st.data(), n=st.integers(4, 9))
def test_maxpool_follows_darknet_padding(tmp_path_factory: pytest.TempPathFactory, size: int, stride: int,
                                         data: st.DataObject, n: int) -> None:
    padding = data.draw(st.integers(0, size - 1), label="padding")
    cfg = parse_cfg(_pool_cfg(tmp_path_factory.mktemp("pool"), size, stride, padding, n))
    pool = DarknetModel(cfg).layers[0]
    x = torch.randn(2, 3, n, n)
    before = padding // 2
    want = F.max_pool2d(F.pad(x, (before, padding - before) * 2, value=-math.inf), size, stride)
    got = pool(x)
    assert tuple(got.shape[1:]) == cfg.shapes[0]
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_route_concatenates_the_chosen_group_of_each_source() -> None:
    route = Route(RouteSpec((0, 1), groups=2, group_id=1), channels=[4, 6])
    a, b = torch.randn(1, 4, 2, 2), torch.randn(1, 6, 2, 2)
    torch.testing.assert_close(route([a, b]), torch.cat([a[:, 2:], b[:, 3:]], 1), rtol=0, atol=0)
    whole = Route(RouteSpec((1, 0)), channels=[6, 4])
    torch.testing.assert_close(whole([a, b]), torch.cat([b, a], 1), rtol=0, atol=0)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_model_exports_to_onnx_with_dynamic_batch(small_model: DarknetModel, tmp_path: Path) -> None:
    onnxruntime = pytest.importorskip("onnxruntime")
    path = tmp_path / "m.onnx"
    torch.onnx.export(small_model, (torch.rand(1, 3, 128, 128),), str(path), opset_version=17, dynamo=False,
                      input_names=["images"], output_names=["decoded"],
                      dynamic_axes={"images": {0: "batch"}, "decoded": {0: "batch"}})
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = torch.rand(3, 3, 128, 128)
    (got,) = session.run(None, {"images": x.numpy()})
    with torch.no_grad():
        want = small_model(x)
    torch.testing.assert_close(torch.from_numpy(got), want, rtol=1e-4, atol=1e-2)


def test_defaults_point_at_the_shipped_files() -> None:
    assert default_cfg_path().is_file() and parse_cfg(default_cfg_path()).classes == len(default_names())
    assert default_names() == ["person", "vehicle"]
    weights = default_weights_path()
    assert weights is None or weights.name == "yolov4-tiny.weights" and weights.is_file()
