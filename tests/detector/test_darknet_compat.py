"""Darknet compatibility: the cfg keys and defaults Darknet's own parser reads, with cfgs written here.

The networks are small YOLOv4-tiny-shaped cfgs (8-64 filters) so that building and running them on the CPU is
quick: a 3-head cfg (yolov4-tiny-3l style, heads at strides 32, 16, 8), at 320 and 608 input, with 3 classes.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from detector.boxes import Letterbox, batched_diou_nms
from detector.cli import main
from detector.darknet import MaxPoolSpec, NmsConfig, parse_cfg
from detector.darknet_keys import (
    DARKNET_ACTIVATIONS,
    IGNORED,
    SECTION_KEYS,
    UNSUPPORTED,
    UNSUPPORTED_LAYERS,
    DarknetKey,
)
from detector.errors import CfgError, DetectorError
from detector.model import DarknetModel, load_model
from detector.postprocess import postprocess
from detector.spec import ModelSpec

SHIPPED = Path(__file__).resolve().parents[2] / "detector" / "data" / "yolov4-tiny.cfg"
ANCHORS = "10,14, 23,27, 37,58, 81,82, 135,169, 344,319, 20,20, 40,40, 60,60"


def _conv(filters: int, size: int = 3, stride: int = 1, extra: str = "") -> str:
    return f"[convolutional]\nbatch_normalize=1\nfilters={filters}\nsize={size}\nstride={stride}\npad=1\n" \
           f"activation=leaky\n{extra}"


def _head(classes: int, mask: str, extra: str = "") -> str:
    return (f"[convolutional]\nsize=1\nstride=1\npad=1\nfilters={3 * (classes + 5)}\nactivation=linear\n\n"
            f"[yolo]\nmask = {mask}\nanchors = {ANCHORS}\nclasses={classes}\nnum=9\nscale_x_y = 1.05\n{extra}")


def three_head_cfg(size: int = 320, classes: int = 3, *, net: str = "", pool: str = "stride=2", conv: str = "",
                   yolo: str = "", last_yolo: str = "") -> str:
    """A yolov4-tiny-3l-shaped cfg. Layer 6 is ``[maxpool]`` with only ``pool``; 7 feeds the stride-8 head."""
    sections = [
        f"[net]\nwidth={size}\nheight={size}\nchannels=3\n{net}",
        _conv(8, stride=2, extra=conv),                       # 0: /2
        _conv(16, stride=2),                                  # 1: /4
        _conv(16),                                            # 2
        "[route]\nlayers=-1\ngroups=2\ngroup_id=1\n",         # 3: 8 channels
        _conv(8),                                             # 4
        "[route]\nlayers = -1,-2\n",                          # 5: 16 channels
        f"[maxpool]\n{pool}\n",                               # 6: /8 with Darknet's defaults
        _conv(32),                                            # 7
        "[maxpool]\nsize=2\nstride=2\n",                      # 8: /16
        _conv(32),                                            # 9
        "[maxpool]\nsize=2\nstride=2\n",                      # 10: /32
        _conv(64),                                            # 11
        _head(classes, "6,7,8", yolo),                        # 12, 13
        "[route]\nlayers = -3\n", _conv(16, size=1),          # 14, 15
        "[upsample]\nstride=2\n", "[route]\nlayers = -1, 9\n",  # 16, 17: /16
        _conv(32),                                            # 18
        _head(classes, "3,4,5", yolo),                        # 19, 20
        "[route]\nlayers = -3\n", _conv(16, size=1),          # 21, 22
        "[upsample]\nstride=2\n", "[route]\nlayers = -1, 7\n",  # 23, 24: /8
        _conv(16),                                            # 25
        _head(classes, "0,1,2", yolo + last_yolo),            # 26, 27
    ]
    return "\n".join(sections)


def _write(tmp_path: Path, text: str, name: str = "test.cfg") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), start=1) if text in line)


# ------------------------------------------------------------------------------------------- shapes and defaults
@pytest.mark.parametrize(("size", "grids"), [(320, (10, 20, 40)), (608, (19, 38, 76))])
def test_three_head_cfg_has_darknet_shapes_at_320_and_608(tmp_path: Path, size: int, grids: tuple[int, ...]) -> None:
    cfg = parse_cfg(_write(tmp_path, three_head_cfg(size)))
    assert cfg.classes == 3 and len(cfg.yolo_layers) == 3
    assert [cfg.shapes[i][1:] for i, _ in cfg.yolo_layers] == [(g, g) for g in grids]
    assert cfg.num_candidates == 3 * sum(g * g for g in grids)
    assert cfg.shapes[6] == (16, size // 8, size // 8)


def test_maxpool_with_only_stride_is_darknets_2x2_pool(tmp_path: Path) -> None:
    cfg = parse_cfg(_write(tmp_path, three_head_cfg(320)))
    assert cfg.layers[6] == MaxPoolSpec(size=2, stride=2, padding=1)  # parse_maxpool: size = stride, padding = size-1
    assert cfg.layers[6] == parse_cfg(_write(tmp_path, three_head_cfg(320, pool="size=2\nstride=2"), "b.cfg")).layers[6]
    model = DarknetModel(cfg).eval()
    x = torch.randn(1, 16, 40, 40)
    torch.testing.assert_close(model.layers[6](x), torch.nn.functional.max_pool2d(x, 2, 2), rtol=0, atol=0)


@pytest.mark.parametrize(("pool", "expected", "hw"), [
    ("size=2", MaxPoolSpec(2, 1, 1), 80),     # Darknet's default stride is 1, whatever the size
    ("size=3\nstride=2", MaxPoolSpec(3, 2, 2), 40),
    ("stride=2\nstride_x=2\nstride_y=2", MaxPoolSpec(2, 2, 1), 40),
    ("stride=1\nstride_x=2\nstride_y=2", MaxPoolSpec(1, 2, 0), 40),  # size defaults to stride, not stride_x
])  # fmt: skip
def test_maxpool_defaults_follow_parse_maxpool(tmp_path: Path, pool: str, expected: MaxPoolSpec, hw: int) -> None:
    cfg = parse_cfg(_write(tmp_path, three_head_cfg(320, pool=pool)))  # layer 6's input is 80x80
    assert cfg.layers[6] == expected and cfg.shapes[6][1:] == (hw, hw)


@pytest.mark.parametrize(("conv", "hw"),
                         [("padding=1", 8), ("padding=0", 6), ("padding=2", 10), ("pad=1\npadding=0", 8)])
def test_a_convs_padding_is_read_unless_pad_sets_it_to_half_the_size(tmp_path: Path, conv: str, hw: int) -> None:
    """parse_convolutional: ``padding`` (default 0) pixels on each side, replaced by size // 2 when pad=1."""
    path = tmp_path / "pad.cfg"
    path.write_text(f"[net]\nwidth=8\nheight=8\nchannels=3\n\n[convolutional]\nfilters=6\nsize=3\n{conv}\n"
                    "activation=linear\n\n[yolo]\nmask=0\nanchors=10,10\nclasses=1\nnum=1\n")
    assert parse_cfg(path).shapes[0] == (6, hw, hw)
    model = load_model(path, None, seed=0)
    with torch.no_grad():
        (head,) = model.forward_heads(torch.rand(1, 3, 8, 8))
    assert tuple(head.shape) == (1, 6, hw, hw)


def test_a_conv_without_activation_is_logistic_as_in_parse_convolutional(tmp_path: Path) -> None:
    path = tmp_path / "logistic.cfg"
    path.write_text("[net]\nwidth=8\nheight=8\nchannels=3\n\n[convolutional]\nfilters=6\nsize=1\n\n"
                    "[yolo]\nmask=0\nanchors=10,10\nclasses=1\nnum=1\n")
    cfg = parse_cfg(path)
    assert cfg.layers[0].activation == "logistic"
    model = load_model(path, None, seed=0)
    with torch.no_grad():
        (head,) = model.forward_heads(torch.rand(1, 3, 8, 8))
        conv = model.layers[0].conv(torch.rand(1, 3, 8, 8))
    assert head.min() > 0 and head.max() < 1 and conv.min() < 0  # the sigmoid of a conv that goes negative


@pytest.mark.parametrize("size", [320, 608])
def test_three_head_model_runs_with_seeded_random_weights(tmp_path: Path, size: int) -> None:
    path = _write(tmp_path, three_head_cfg(size))
    model = load_model(path, None, seed=3)
    with torch.no_grad():
        heads = model.forward_heads(torch.rand(1, 3, size, size))
        out = model(torch.rand(2, 3, size, size))
    assert [tuple(h.shape) for h in heads] == [(1, 24, size // s, size // s) for s in (32, 16, 8)]
    assert tuple(out.shape) == (2, parse_cfg(path).num_candidates, 4 + 3)


def test_section_aliases_conv_and_max_are_their_long_names(tmp_path: Path) -> None:
    text = three_head_cfg(320)
    short = text.replace("[convolutional]", "[conv]").replace("[maxpool]", "[max]").replace("[net]", "[network]")
    assert parse_cfg(_write(tmp_path, short, "short.cfg")).layers == parse_cfg(_write(tmp_path, text)).layers


def test_equal_stride_x_and_stride_y_are_the_stride_and_cbn_is_batch_norm(tmp_path: Path) -> None:
    base = parse_cfg(_write(tmp_path, three_head_cfg(320)))
    xy = parse_cfg(_write(tmp_path, three_head_cfg(320).replace("stride=2\npad=1", "stride_x=2\nstride_y=2\npad=1", 1),
                          "xy.cfg"))
    assert xy.layers == base.layers
    no_bn = three_head_cfg(320).replace("batch_normalize=1\nfilters=8", "batch_normalize=0\nfilters=8", 1)
    assert not parse_cfg(_write(tmp_path, no_bn, "nobn.cfg")).layers[0].batch_normalize
    cbn = parse_cfg(_write(tmp_path, no_bn.replace("filters=8", "filters=8\ncbn=1", 1), "cbn.cfg"))
    assert cbn.layers[0].batch_normalize  # parse_convolutional: cbn=1 sets batch_normalize=2
    assert cbn.num_weights == base.num_weights


# ------------------------------------------------------------------------------------------- keys Darknet reads
_VALUES = {"int": "1", "float": "0.5", "str": "giou", "ints": "1,2,3", "floats": "0.5,0.25"}
_ANCHOR = {"route": "[route]\nlayers = -1,-2\n", "upsample": "[upsample]\nstride=2\n"}
_SECTION_OPTION = {"net": "net", "convolutional": "conv", "maxpool": "pool", "yolo": "yolo", **dict.fromkeys(_ANCHOR)}
_IGNORED = [(kind, key, spec.type) for kind, keys in SECTION_KEYS.items() if kind in _SECTION_OPTION
            for key, spec in keys.items() if spec.use == IGNORED]


def _with_key(kind: str, line: str) -> str:
    """The 320-pixel cfg with ``line`` added to its [net], first conv, route, maxpool or upsample, or every [yolo]."""
    option = _SECTION_OPTION[kind]
    if kind in _ANCHOR:
        return three_head_cfg(320).replace(_ANCHOR[kind], f"{_ANCHOR[kind]}{line}\n", 1)
    if option == "pool":
        return three_head_cfg(320, pool=f"stride=2\n{line}")
    return three_head_cfg(320, **{option: f"{line}\n"})


@pytest.mark.parametrize(("kind", "key", "typ"), _IGNORED, ids=[f"{k}-{key}" for k, key, _ in _IGNORED])
def test_every_training_only_key_darknet_reads_is_accepted_and_changes_nothing(
    tmp_path: Path, kind: str, key: str, typ: str
) -> None:
    cfg = parse_cfg(_write(tmp_path, _with_key(kind, f"{key}={_VALUES[typ]}")))
    base = parse_cfg(_write(tmp_path, three_head_cfg(320), "base.cfg"))
    assert (cfg.layers, cfg.shapes, cfg.letterbox, cfg.nms) == (base.layers, base.shapes, base.letterbox, base.nms)


def test_keys_users_reported_refused_are_accepted(tmp_path: Path) -> None:
    text = three_head_cfg(320, net="mosaic_bound=1\ndynamic_minibatch=1\n", conv="stopbackward=1\ndontload=1\n",
                          yolo="max=200\niou_thresh_kind=giou\nmax_delta=5\n")
    assert parse_cfg(_write(tmp_path, text)).num_candidates == 6300
    assert parse_cfg(_write(tmp_path, text.replace("[route]\nlayers=-1\ngroups", "[route]\nstopbackward=1\n"
                                                   "layers=-1\ngroups", 1), "r.cfg")).num_candidates == 6300


def test_a_repeated_training_key_keeps_its_first_value_and_a_repeated_honoured_key_is_refused(tmp_path: Path) -> None:
    text = three_head_cfg(320, net="batch=1\nsubdivisions=1\nbatch=64\n")
    assert parse_cfg(_write(tmp_path, text)).net.options["batch"] == "1"  # parse_net_options: option_find's first
    path = _write(tmp_path, three_head_cfg(320, net="width=416\n"), "w.cfg")
    with pytest.raises(CfgError, match=rf"^{re.escape(str(path))}:{_line_of(path, 'width=416')}: \[net\] repeats "
                       r"'width' \(first set on line 2\)"):
        parse_cfg(path)


def test_docs_list_every_key_and_layer_darknet_reads() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "darknet.md").read_text(encoding="utf-8")
    missing = [f"[{kind}] {key}" for kind, keys in SECTION_KEYS.items() for key in keys if f"`{key}`" not in text]
    missing += [f"[{layer}]" for layer in UNSUPPORTED_LAYERS if f"`[{layer}]`" not in text]
    missing += [a for a in DARKNET_ACTIVATIONS if f"`{a}`" not in text]
    assert not missing


_UNSUPPORTED = [(kind, key, spec) for kind, keys in SECTION_KEYS.items() if kind in _SECTION_OPTION
                for key, spec in keys.items() if spec.use == UNSUPPORTED]


@pytest.mark.parametrize(("kind", "key", "spec"), _UNSUPPORTED, ids=[f"{k}-{key}" for k, key, _ in _UNSUPPORTED])
def test_unsupported_darknet_key_is_refused_by_name_unless_at_its_noop_default(
    tmp_path: Path, kind: str, key: str, spec: DarknetKey
) -> None:
    noop = spec.noop
    value = "2" if noop == "1" else "-2" if noop is None else "1"
    path = _write(tmp_path, _with_key(kind, f"{key}={value}"))
    with pytest.raises(CfgError) as err:
        parse_cfg(path)
    message = str(err.value)
    assert message.startswith(f"{path}:{_line_of(path, f'{key}={value}')}: [{kind}] {key}={value} is a Darknet key "
                              "this package does not support (")
    assert "\n" not in message
    if noop is not None:
        assert f"set {key}={noop}" in message
        assert parse_cfg(_write(tmp_path, _with_key(kind, f"{key}={noop}"), "noop.cfg")).num_candidates == 6300


def test_new_coords_of_yolov7_tiny_is_named_as_unsupported_not_unknown(tmp_path: Path) -> None:
    path = _write(tmp_path, three_head_cfg(320, yolo="new_coords=1\n"))
    with pytest.raises(CfgError, match=r"new_coords=1 is a Darknet key this package does not support \(.*decode"):
        parse_cfg(path)


def test_dilation_of_a_1x1_conv_is_accepted_as_darknet_ignores_it(tmp_path: Path) -> None:
    text = three_head_cfg(320).replace("[convolutional]\nsize=1\nstride=1\npad=1\n",
                                       "[convolutional]\nsize=1\ndilation=2\nstride=1\npad=1\n", 1)
    assert parse_cfg(_write(tmp_path, text)).num_candidates == 6300
    with pytest.raises(CfgError, match=r"dilation=2 is a Darknet key this package does not support"):
        parse_cfg(_write(tmp_path, three_head_cfg(320, conv="dilation=2\n"), "d.cfg"))


@pytest.mark.parametrize("layer", sorted(UNSUPPORTED_LAYERS))
def test_unsupported_darknet_layer_is_refused_by_name(tmp_path: Path, layer: str) -> None:
    path = _write(tmp_path, three_head_cfg(320).replace("[route]\nlayers = -1,-2\n",
                                                        f"[{layer}]\nfrom=-2\n\n[route]\nlayers = -1,-2\n", 1))
    with pytest.raises(CfgError) as err:
        parse_cfg(path)
    assert str(err.value).startswith(f"{path}:{_line_of(path, f'[{layer}]')}: [{layer}] is a Darknet layer this "
                                     "package does not support (")
    assert "supported: [net], [convolutional], [route], [maxpool], [upsample], [yolo]" in str(err.value)


@pytest.mark.parametrize("activation", [a for a in DARKNET_ACTIVATIONS[5:]])
def test_unsupported_darknet_activation_is_refused_by_name(tmp_path: Path, activation: str) -> None:
    path = _write(tmp_path, three_head_cfg(320).replace("activation=leaky", f"activation={activation}", 1))
    with pytest.raises(CfgError, match=rf"^{re.escape(str(path))}:\d+: \[convolutional\] activation={activation} is "
                       "a Darknet activation this package does not support; supported: leaky, linear, relu"):
        parse_cfg(path)


@pytest.mark.parametrize(("kind", "old", "new", "marker", "problem"), [
    ("conv", "stride=2\npad=1", "stride_x=2\nstride_y=1\npad=1", "stride_x=2",
     r"stride_x=2, stride_y=1 is a Darknet setting this package does not support \(different strides"),
    ("upsample", "[upsample]\nstride=2", "[upsample]\nstride=-2", "stride=-2",
     r"stride=-2 is a Darknet setting this package does not support \(a negative stride downsamples\)"),
    ("typo", "stride=2\npad=1", "stride=2\nstopbackwrd=1\npad=1", "stopbackwrd",
     r"unknown key 'stopbackwrd' in \[convolutional\]; allowed: activation, .* did you mean 'stopbackward'\?$"),
    ("typo-section", "[upsample]", "[upsampel]", "[upsampel]", r"unknown section \[upsampel\]; allowed: "),
    ("nms-typo", "scale_x_y = 1.05", "scale_x_y = 1.05\nnms_kind=diou", "nms_kind=diou",
     r"\[yolo\] nms_kind=diou: allowed default, greedynms, diounms \(or cornersnms"),
    ("letter-box", "channels=3", "channels=3\nletter_box=2", "letter_box", r"\[net\] letter_box=2: allowed 0 or 1"),
])  # fmt: skip
def test_unsupported_settings_and_typos_are_one_line_naming_file_and_line(
    tmp_path: Path, kind: str, old: str, new: str, marker: str, problem: str
) -> None:
    path = _write(tmp_path, three_head_cfg(320).replace(old, new, 1))
    with pytest.raises(CfgError) as err:
        parse_cfg(path)
    assert re.match(rf"^{re.escape(str(path))}:{_line_of(path, marker)}: .*{problem}", str(err.value)), str(err.value)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------------------- letter_box, nms_kind
@pytest.mark.parametrize(("net", "letterbox"), [("", False), ("letter_box=0\n", False), ("letter_box=1\n", True)])
def test_letter_box_is_read_from_net(tmp_path: Path, net: str, letterbox: bool) -> None:
    path = _write(tmp_path, three_head_cfg(320, net=net))
    assert parse_cfg(path).letterbox is letterbox
    assert ModelSpec(cfg=path, cache_dir=tmp_path).letterbox is letterbox


@pytest.mark.parametrize(("yolo", "expected", "exponent"), [
    ("", NmsConfig("default", 0.6), None),
    ("nms_kind=default\nbeta_nms=0.3\n", NmsConfig("default", 0.3), None),
    ("nms_kind=greedynms\nbeta_nms=0.3\n", NmsConfig("greedynms", 0.3), 0.6),  # box_diou: exponent fixed at 0.6
    ("nms_kind=diounms\nbeta_nms=0.8\n", NmsConfig("diounms", 0.8), 0.8),
    ("nms_kind=cornersnms\n", NmsConfig("default", 0.6), None),  # parse_yolo reads it as default
])  # fmt: skip
def test_nms_kind_and_beta_nms_are_read_from_yolo(tmp_path: Path, yolo: str, expected: NmsConfig,
                                                  exponent: float | None) -> None:
    path = _write(tmp_path, three_head_cfg(320, yolo=yolo))
    assert parse_cfg(path).nms == expected == ModelSpec(cfg=path, cache_dir=tmp_path).nms
    assert expected.diou_exponent == exponent


def test_nms_of_the_last_yolo_wins_and_a_difference_is_logged(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    path = _write(tmp_path, three_head_cfg(320, last_yolo="nms_kind=greedynms\n"))
    with caplog.at_level(logging.WARNING, logger="detector.darknet"):
        assert parse_cfg(path).nms == NmsConfig("greedynms")
    assert "Darknet uses the last" in caplog.text


def test_nms_config_refuses_unknown_kind_and_non_positive_beta() -> None:
    with pytest.raises(DetectorError, match="unknown NMS kind 'soft'"):
        NmsConfig("soft")
    with pytest.raises(DetectorError, match="must be > 0"):
        NmsConfig("diounms", 0.0)


def test_shipped_cfg_letterboxes_and_keeps_the_default_iou_nms() -> None:
    spec = ModelSpec(cfg=SHIPPED)
    assert spec.letterbox is True and spec.nms == NmsConfig()
    assert parse_cfg(SHIPPED).layers[9] == MaxPoolSpec(2, 2, 1)


def test_postprocess_compares_diou_in_frame_relative_coordinates_as_darknet() -> None:
    """An 8:1 frame letterboxed into 320x320 (a 320x40 band): relative to the frame, y is stretched 8 times over x,
    which raises this pair's DIoU from 0.38 (network pixels) to 0.50 (Darknet's coordinates), over 0.45."""
    lb = Letterbox.letterbox(1600, 200, 320, 320)
    assert (lb.resized_size, lb.pad_y) == ((320, 40), 140)
    boxes = np.array([[100, 150, 140, 170], [112, 150, 152, 170]], np.float32)
    decoded = np.concatenate([boxes, np.array([[0.9], [0.8]], np.float32)], 1)[None]
    one_class = np.zeros(2, np.int64)
    assert len(batched_diou_nms(boxes, decoded[0, :, 4], one_class, 0.45)) == 2  # in network pixels: both kept
    dets = postprocess(decoded, [lb], conf_threshold=0.25, iou_threshold=0.45, nms=NmsConfig("greedynms"))
    np.testing.assert_allclose(dets[0].boxes, lb.to_frame(boxes[:1]), rtol=1e-6)
    assert dets[0].scores.tolist() == pytest.approx([0.9])
    assert len(postprocess(decoded, [lb], conf_threshold=0.25, iou_threshold=0.55)[0]) == 2  # IoU 0.54
    assert len(postprocess(decoded, [lb], conf_threshold=0.25, iou_threshold=0.55, nms=NmsConfig("greedynms"))[0]) == 2


# ------------------------------------------------------------------------------------------- the CLI follows the cfg
@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("clip") / "clip.mp4"
    assert main(["make-video", "--out", str(path), "--width", "192", "--height", "108", "--frames", "3",
                 "--seed", "5"]) == 0
    return path


@pytest.mark.parametrize(("net", "yolo", "options", "preprocess", "nms"), [
    ("", "", [], "resize", "default"),
    ("letter_box=1\n", "nms_kind=diounms\nbeta_nms=0.8\n", [], "letterbox", "diounms (beta 0.8)"),
    ("", "nms_kind=greedynms\n", ["--resize", "letterbox", "--nms", "default"], "letterbox", "default"),
    ("letter_box=1\n", "", ["--plain-resize", "--nms", "diounms"], "resize", "diounms (beta 0.6)"),
])  # fmt: skip
def test_detect_follows_the_cfgs_letter_box_and_nms_unless_overridden(
    tmp_path: Path, clip: Path, net: str, yolo: str, options: list[str], preprocess: str, nms: str,
    capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _write(tmp_path, three_head_cfg(320, 3, net=net, yolo=yolo))
    out = tmp_path / "out"
    args = ["detect", "--cfg", str(cfg), "--seed", "1", "--video", str(clip), "--frames", "3", "--device", "cpu",
            "--out", str(out), "--cache-dir", str(tmp_path / "cache"), *options]
    assert main(args) == 0, capsys.readouterr().err
    run = json.loads((out / "detect-results.json").read_text())["runs"][0]
    assert (run["frames"], run["net_size"], run["preprocess"], run["nms"]) == (3, [320, 320], preprocess, nms)
    assert "| Model Type |" in capsys.readouterr().out


def test_detect_with_an_unsupported_key_is_one_line_exit_2(tmp_path: Path, clip: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _write(tmp_path, three_head_cfg(320, yolo="new_coords=1\n"))
    assert main(["detect", "--cfg", str(cfg), "--video", str(clip), "--device", "cpu", "--out", str(tmp_path / "o"),
                 "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "new_coords=1 is a Darknet key this package does not support" in err[0]
    assert f"{cfg}:" in err[0]


# ------------------------------------------------------------------------------- values as Darknet's parser reads them
@pytest.mark.parametrize(("old", "new", "marker", "problem"), [
    # AlexeyAB's read_cfg has no comments after a value: it strips every blank and hands the rest to get_activation
    # (relu for 'leaky#3x3') or to parse_yolo's nms_kind (default for 'greedynms#diou'); hank-ai's cuts at '#'
    # (leaky, greedynms): the two Darknets disagree
    ("activation=leaky", "activation=leaky # 3x3", "# 3x3", r"activation=leaky#3x3: AlexeyAB's"),
    ("scale_x_y = 1.05", "scale_x_y = 1.05\nnms_kind=greedynms ; DIoU", "; DIoU",
     r"nms_kind=greedynms;DIoU: AlexeyAB's"),
    # parse_route counts every comma, the comment's too: '-3 # from 12, head' is layers -3 and 0 (atoi(''))
    ("layers = -3", "layers = -3 # from 12, head", "# from 12", r"\[route\] layers=-3#from12,head: AlexeyAB's"),
    # atoi('1_6') is 1 and atoi of full-width digits 0, where Python's int reads 16
    ("filters=16", "filters=1_6", "1_6", r"filters='1_6': '1_6' is not an integer"),
    ("filters=16", "filters=\uff11\uff16", "filters=\uff11", r"is not an integer"),
    ("scale_x_y = 1.05", "scale_x_y = 1_0.5", "1_0.5", r"scale_x_y='1_0.5': '1_0.5' is not a number"),
    # an empty item is atoi('') = 0 to parse_yolo_mask and parse_route, atof('') = 0 in anchors (AlexeyAB's);
    # hank-ai's find_int_array / find_float_array skip it
    ("mask = 0,1,2", "mask = 0,1,2,", "0,1,2,", r"\[yolo\] mask='0,1,2,': an empty item, which AlexeyAB's .* as 0"),
    ("layers = -1, 7", "layers = -1,, 7", "-1,, 7", r"\[route\] layers='-1,, 7': an empty item"),
    ("anchors = 10,14, 23,27,", "anchors = 10,14,, 23,27,", "10,14,, 23", r"\[yolo\] anchors='10,14,, 23,27, .*': an "),
])  # fmt: skip
def test_values_darknet_reads_otherwise_are_refused_naming_the_line(
    tmp_path: Path, old: str, new: str, marker: str, problem: str
) -> None:
    path = _write(tmp_path, three_head_cfg(320).replace(old, new, 1))
    with pytest.raises(CfgError) as err:
        parse_cfg(path)
    assert re.match(rf"^{re.escape(str(path))}:{_line_of(path, marker)}: .*{problem}", str(err.value)), str(err.value)


def test_comments_darknet_reads_the_same_and_a_trailing_comma_in_anchors_are_accepted(tmp_path: Path) -> None:
    """atoi / atof stop at '#' or ';', parse_yolo_mask and the anchors loop stop counting commas at '#', and the
    anchors loop reads at most num pairs: these read as without the comment or comma."""
    text = (three_head_cfg(320).replace("filters=16", "filters=16 # 2 x 8, half", 1)
            .replace("mask = 6,7,8", "mask = 6,7,8 # big, anchors").replace(ANCHORS, ANCHORS + ", # COCO, k-means", 1)
            .replace("stride=2", "stride=2 ; down, by 2", 1))
    assert parse_cfg(_write(tmp_path, text)).layers == parse_cfg(_write(tmp_path, three_head_cfg(320), "b.cfg")).layers


def test_yolo_without_num_is_one_anchor_as_in_parse_yolo(tmp_path: Path) -> None:
    """parse_yolo reads num=1 when num= is absent: one anchor pair, mask 0; more pairs is a cfg Darknet reads
    otherwise (a mask past num reads past its anchors), refused naming num."""
    one = ("[net]\nwidth=8\nheight=8\nchannels=3\n\n[convolutional]\nfilters=6\nsize=1\nactivation=linear\n\n"
           "[yolo]\nanchors=10,14\nclasses=1\n")
    assert parse_cfg(_write(tmp_path, one)).yolo_layers[0][1].mask_anchors == ((10.0, 14.0),)
    path = _write(tmp_path, three_head_cfg(320).replace("num=9\n", ""), "b.cfg")
    with pytest.raises(CfgError, match=r":\d+: \[yolo\] has no num=, which Darknet reads as num=1, but anchors "
                                       r"lists 9 pairs; set num=9$"):
        parse_cfg(path)
