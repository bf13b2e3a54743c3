"""detector.darknet: cfg parsing and validation, .weights reading/writing (real files in tmp_path)."""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detector.darknet import (
    ConvSpec,
    ConvWeights,
    DarknetWeights,
    NetConfig,
    RouteSpec,
    YoloSpec,
    parse_cfg,
    read_weights,
    write_weights,
)
from detector.errors import CfgError, WeightsError

DATA = Path(__file__).resolve().parents[2] / "detector" / "data"
CFG = DATA / "yolov4-tiny.cfg"
CFG_TEXT = CFG.read_text(encoding="utf-8")


def _variant(tmp_path: Path, old: str, new: str, *, count: int = 1, name: str = "variant.cfg") -> Path:
    """A copy of the shipped cfg with ``old`` replaced by ``new`` (``count`` times; -1: all)."""
    if old not in CFG_TEXT:
        raise ValueError(f"{old!r} is not in the shipped cfg")
    path = tmp_path / name
    path.write_text(CFG_TEXT.replace(old, new, count), encoding="utf-8")
    return path


def _line_of(path: Path, text: str, occurrence: int = 1) -> int:
    """1-based line number of the ``occurrence``-th line containing ``text``."""
    hits = [n for n, line in enumerate(path.read_text().splitlines(), start=1) if text in line]
    return hits[occurrence - 1]


def _random_weights(cfg: NetConfig, seed: int = 0, seen: int = 0) -> DarknetWeights:
    rng = np.random.default_rng(seed)
    convs = []
    for _, spec in cfg.convs:
        n = spec.filters
        arrays = [rng.standard_normal(n).astype(np.float32) for _ in range(4 if spec.batch_normalize else 1)]
        weights = rng.standard_normal(spec.weight_shape).astype(np.float32)
        convs.append(ConvWeights(arrays[0], weights, *arrays[1:]))
    return DarknetWeights(tuple(convs), seen=seen)


@pytest.fixture(scope="module")
def cfg() -> NetConfig:
    return parse_cfg(CFG)


@pytest.fixture(scope="module")
def weights_file(cfg: NetConfig, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_weights(tmp_path_factory.mktemp("w") / "random.weights", _random_weights(cfg, seen=123456789012))


def test_shipped_cfg_is_two_class_yolov4_tiny_at_416(cfg: NetConfig) -> None:
    assert (cfg.width, cfg.height, cfg.channels, cfg.classes) == (416, 416, 3, 2)
    assert cfg.input_size == (416, 416)
    assert cfg.num_convs == 21
    assert sum(s.batch_normalize for _, s in cfg.convs) == 19
    assert len(cfg.sections) == len(cfg.layers) == 38
    assert cfg.num_candidates == 2535
    assert cfg.path == CFG


def test_shipped_cfg_follows_the_reference_layer_table(cfg: NetConfig) -> None:
    expected = {0: (32, 208, 208), 3: (32, 104, 104), 8: (128, 104, 104), 9: (128, 52, 52), 16: (256, 52, 52),
                24: (512, 26, 26), 25: (512, 13, 13), 29: (21, 13, 13), 31: (256, 13, 13), 33: (128, 26, 26),
                34: (384, 26, 26), 36: (21, 26, 26)}
    assert {i: cfg.shapes[i] for i in expected} == expected
    assert cfg.layers[34] == RouteSpec((33, 23))
    assert cfg.layers[3] == RouteSpec((2,), groups=2, group_id=1)
    heads = [spec for _, spec in cfg.yolo_layers]
    assert [h.mask for h in heads] == [(3, 4, 5), (0, 1, 2)]
    assert heads[0].anchors == ((4, 9), (8, 20), (25, 11), (19, 49), (54, 22), (118, 59))
    assert heads[1].mask_anchors == ((4, 9), (8, 20), (25, 11))
    assert all(h.scale_x_y == pytest.approx(1.05) and h.classes == 2 for h in heads)
    assert [i for i, s in cfg.convs if not s.batch_normalize] == [29, 36]
    assert cfg.layers[29] == ConvSpec(512, 21, 1, 1, 0, 1, False, "linear")


def test_shipped_names_list_one_class_per_line(cfg: NetConfig) -> None:
    assert (DATA / "classes.names").read_text().split() == ["person", "vehicle"]


def test_eighty_class_variant_has_the_stock_weight_count(tmp_path: Path) -> None:
    path = tmp_path / "coco.cfg"
    path.write_text(CFG_TEXT.replace("filters=21", "filters=255").replace("classes=2", "classes=80"))
    coco = parse_cfg(path)
    assert coco.classes == 80
    assert coco.num_weights == 6_062_814
    assert 20 + 4 * coco.num_weights == 24_251_276  # the stock yolov4-tiny.weights size


def test_cfg_at_320_gives_1500_candidates(tmp_path: Path, packaged_cfg: Callable[[Path, int], Path]) -> None:
    assert parse_cfg(packaged_cfg(tmp_path, 320)).num_candidates == (10 * 10 + 20 * 20) * 3 == 1500


def test_section_accessors_give_typed_values(cfg: NetConfig) -> None:
    assert cfg.net.get_float("momentum") == pytest.approx(0.9)
    assert cfg.net.get_ints("steps") == [4800, 5400]
    assert cfg.sections[34].get_ints("layers") == [-1, 23]
    assert cfg.sections[0].get_int("groups", 1) == 1
    assert cfg.sections[30].get_floats("anchors")[:2] == [4.0, 9.0]


def test_comments_blank_lines_and_spaces_are_ignored(tmp_path: Path) -> None:
    path = _variant(tmp_path, "[convolutional]\nbatch_normalize=1\nfilters=32\n",
                    "; a comment\n\n[convolutional]\n  batch_normalize = 1   # inline\nfilters=32\n")
    parsed = parse_cfg(path)
    assert parsed.layers == parse_cfg(CFG).layers
    assert parsed.sections[0].line == _line_of(path, "[convolutional]")


def test_error_names_file_and_line_of_wrong_head_filters(tmp_path: Path) -> None:
    path = _variant(tmp_path, "filters=21", "filters=255")
    with pytest.raises(CfgError) as err:
        parse_cfg(path)
    line = _line_of(path, "filters=255")
    assert str(err.value) == (f"{path}:{line}: [convolutional] filters=255 before [yolo] with classes=2 and "
                              f"3 masks: expected 21")


def test_error_when_classes_change_without_filters(tmp_path: Path) -> None:
    path = _variant(tmp_path, "classes=2", "classes=80", count=-1)
    with pytest.raises(CfgError, match=rf"{path.name}:{_line_of(path, 'filters=21')}: .*expected 255"):
        parse_cfg(path)


@pytest.mark.parametrize(
    ("old", "new", "marker", "problem"),
    [
        ("[maxpool]", "[maxpooling]", "[maxpooling]", r"unknown section \[maxpooling\]; allowed: .*yolo"),
        ("stride=2\npad=1", "stride=2\npadd=1", "padd=1", r"unknown key 'padd' in \[convolutional\]; allowed: "),
        ("filters=64", "filters=6x4", "filters=6x4", r"filters='6x4': '6x4' is not an integer"),
        ("momentum=0.9", "momentum=fast", "momentum=fast", r"momentum='fast': 'fast' is not a number"),
        ("layers = -6,-1", "layers = -60,-1", "layers = -60", r"layers=-60 refers to layer -52; allowed: earlier"),
        ("layers = -1, 23", "layers = -1, 34", "layers = -1, 34", r"refers to layer 34; allowed: earlier"),
        ("size=2\nstride=2", "size=2\nstride=0", "stride=0", r"\[maxpool\] stride=0: must be >= 1"),
        ("activation=leaky", "activation=leakyy", "activation=leakyy", r"activation=leakyy: allowed leaky"),
        ("mask = 3,4,5", "mask = 3,4,9", "mask = 3,4,9", r"mask=\[3, 4, 9\]: indices must be in 0..5"),
        ("groups=2", "groups=3", "groups=3", r"groups=3 must divide"),
        ("stride=2\npad=1", "stride=2\nstride=1\npad=1", "stride=1", r"repeats 'stride' \(first set on line \d+\)"),
        ("[net]", "[convolutional]\nfilters=3\n[net]", "[convolutional]", r"a cfg must start with \[net\]"),
        ("width=416", "width416", "width416", r"expected 'key=value'"),
    ],
    ids=["unknown-section", "unknown-key", "bad-int", "bad-float", "route-before-start", "route-forward",
         "zero-stride", "unknown-activation", "mask-out-of-range", "route-groups", "repeated-key", "no-net-first",
         "no-equals"],
)
def test_error_names_file_and_line_of_bad_cfg(tmp_path: Path, old: str, new: str, marker: str, problem: str) -> None:
    path = _variant(tmp_path, old, new)
    with pytest.raises(CfgError, match=rf"^{re.escape(str(path))}:{_line_of(path, marker)}: .*{problem}"):
        parse_cfg(path)


def test_error_on_missing_cfg(tmp_path: Path) -> None:
    with pytest.raises(CfgError, match=r"cannot open cfg '.*nothing\.cfg': no such file"):
        parse_cfg(tmp_path / "nothing.cfg")


@pytest.mark.parametrize("text", ["", "\n# only a comment\n\n"], ids=["zero-bytes", "comments-only"])
def test_error_on_empty_cfg(tmp_path: Path, text: str) -> None:
    path = tmp_path / "empty.cfg"
    path.write_text(text)
    with pytest.raises(CfgError, match=rf"^{path}:1: empty cfg"):
        parse_cfg(path)


def test_error_on_cfg_without_yolo_head(tmp_path: Path) -> None:
    path = tmp_path / "headless.cfg"
    path.write_text("[net]\nwidth=32\nheight=32\n[convolutional]\nfilters=4\nsize=3\n")
    with pytest.raises(CfgError, match=rf"^{path}:1: no \[yolo\] section"):
        parse_cfg(path)


def test_error_when_input_too_small_for_the_routes(tmp_path: Path) -> None:
    path = _variant(tmp_path, "width=416", "width=400")  # 25 -> maxpool 13 -> upsample 26 != 25
    with pytest.raises(CfgError, match=rf"{path}:{_line_of(path, 'layers = -1, 23')}: .* different HxW"):
        parse_cfg(path)


@settings(max_examples=30, deadline=None)
@given(st.integers(1_000, 10**12).map(lambda k: 2 * k + 1))
def test_a_kernel_whose_weight_count_overflows_int64_is_refused_by_its_parameter_count(
        tmp_path_factory: pytest.TempPathFactory, size: int) -> None:
    # pad=1 keeps every output size whatever the odd kernel size: only the parameter bound can refuse it
    path = _variant(tmp_path_factory.mktemp("k"), "size=3\nstride=2", f"size={size}\nstride=2")
    with pytest.raises(CfgError, match=rf"^{re.escape(str(path))}:\d+: \[convolutional\] \(layer 0\) filters=32 brings "
                       rf"the network to {32 * 3 * size * size + 4 * 32:,} parameters"):
        parse_cfg(path)


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(["{}", "[{}", "[{}]", "[net]\n{}=1", "[net]\nwidth={}", "[net]\nwidth=1,{}"]),
       st.sampled_from("x9,"), st.integers(4097, 1 << 20))
def test_a_line_too_long_for_a_message_is_refused_by_its_length_not_quoted(
        tmp_path_factory: pytest.TempPathFactory, layout: str, char: str, length: int) -> None:
    path = tmp_path_factory.mktemp("long") / "long.cfg"
    path.write_text(layout.format(char * length))
    line = layout.count("\n") + 1
    with pytest.raises(CfgError) as err:
        parse_cfg(path)
    long = len(layout.format(char * length).splitlines()[-1])
    assert str(err.value) == (f"{path}:{line}: a line of {long:,} characters; a cfg setting takes at most 4,096 (is "
                              "this a Darknet cfg?)")


@pytest.mark.parametrize("missing", [["width"], ["height"], ["width", "height"]], ids=["width", "height", "both"])
def test_net_without_its_input_size_is_refused_naming_the_section(tmp_path: Path, missing: list[str]) -> None:
    path = tmp_path / "no-size.cfg"
    path.write_text("\n".join(line for line in CFG_TEXT.splitlines() if line.split("=")[0] not in missing))
    with pytest.raises(CfgError) as err:  # was KeyError: 'width'
        parse_cfg(path)
    assert str(err.value) == f"{path}:1: [net] needs {missing[0]}="


@pytest.mark.parametrize("channels", [1, 4], ids=["grayscale", "rgba"])
def test_net_of_other_than_3_input_channels_is_refused_naming_its_line(tmp_path: Path, channels: int) -> None:
    path = _variant(tmp_path, "channels=3", f"channels={channels}")
    with pytest.raises(CfgError) as err:
        parse_cfg(path)
    assert str(err.value) == (f"{path}:{_line_of(path, f'channels={channels}')}: [net] channels={channels}: only "
                              "3-channel (RGB) input is supported (frames are fed to the network as RGB)")


@pytest.mark.parametrize(
    ("old", "new", "shown"),
    [
        ("scale_x_y = 1.05", "scale_x_y = nan", "[yolo] scale_x_y='nan': 'nan'"),
        ("anchors = 4,9,  8,20,", "anchors = 4,NaN,  8,20,",
         "[yolo] anchors='4,NaN,  8,20,  25,11,  19,49,  54,22,  118,59': 'NaN'"),
        ("anchors = 4,9,  8,20,", "anchors = inf,9,  8,20,",
         "[yolo] anchors='inf,9,  8,20,  25,11,  19,49,  54,22,  118,59': 'inf'"),
        ("jitter=.3", "jitter=-infinity", "[yolo] jitter='-infinity': '-infinity'"),  # training only, still a number
        ("momentum=0.9", "momentum=nan", "[net] momentum='nan': 'nan'"),
    ],
    ids=["scale_x_y-nan", "anchor-nan", "anchor-inf", "training-key-inf", "net-key-nan"],
)
def test_a_number_that_is_not_finite_is_refused_naming_its_line(tmp_path: Path, old: str, new: str,
                                                                 shown: str) -> None:
    path = _variant(tmp_path, old, new)
    with pytest.raises(CfgError) as err:
        parse_cfg(path)
    assert str(err.value) == f"{path}:{_line_of(path, new.split(',')[0])}: {shown} is not a finite number"


def test_weights_round_trip_is_exact(cfg: NetConfig, weights_file: Path, tmp_path: Path) -> None:
    original = _random_weights(cfg, seen=123456789012)
    loaded = read_weights(weights_file, cfg)
    assert loaded.header == (0, 2, 5, 123456789012)
    assert weights_file.stat().st_size == 20 + 4 * cfg.num_weights
    assert len(loaded.convs) == cfg.num_convs
    for a, b in zip(original.convs, loaded.convs):
        assert a.batch_normalize == b.batch_normalize
        for x, y in zip(a.arrays(), b.arrays()):
            assert x.dtype == y.dtype == np.float32 and x.shape == y.shape
            np.testing.assert_array_equal(x, y)
    again = write_weights(tmp_path / "again.weights", loaded)
    assert again.read_bytes() == weights_file.read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["again.weights"]  # no temporary file left behind


def test_weights_arrays_are_in_darknet_file_order(cfg: NetConfig, weights_file: Path) -> None:
    data = weights_file.read_bytes()
    first = read_weights(weights_file, cfg).convs[0]  # BN conv: biases, scales, mean, var, weights
    values = np.frombuffer(data, "<f4", count=4 * 32 + 32 * 3 * 9, offset=20)
    np.testing.assert_array_equal(values[:32], first.biases)
    np.testing.assert_array_equal(values[96:128], first.var)
    np.testing.assert_array_equal(values[128:], first.weights.ravel())


def test_reads_version_0_1_0_header_with_32_bit_seen(cfg: NetConfig, weights_file: Path, tmp_path: Path) -> None:
    body = weights_file.read_bytes()[20:]
    old = tmp_path / "old.weights"
    old.write_bytes(struct.pack("<iiiI", 0, 1, 0, 4_000_000_000) + body)
    loaded = read_weights(old, cfg)
    assert loaded.header == (0, 1, 0, 4_000_000_000)
    np.testing.assert_array_equal(loaded.convs[-1].weights, read_weights(weights_file, cfg).convs[-1].weights)


def test_error_on_truncated_weights(cfg: NetConfig, weights_file: Path, tmp_path: Path) -> None:
    data = weights_file.read_bytes()
    cut = tmp_path / "cut.weights"
    cut.write_bytes(data[:-1000])
    last_offset = len(data) - 4 * cfg.convs[-1][1].num_values
    with pytest.raises(WeightsError) as err:
        read_weights(cut, cfg)
    message = str(err.value)
    assert message.startswith(f"{cut}: truncated: expected {4 * cfg.convs[-1][1].num_values} bytes for conv #20")
    assert f"at byte offset {last_offset}, found {4 * cfg.convs[-1][1].num_values - 1000}" in message
    assert f"file has {len(data) - 1000} bytes, cfg 'yolov4-tiny.cfg' needs {len(data)}" in message


def test_error_on_trailing_bytes(cfg: NetConfig, weights_file: Path, tmp_path: Path) -> None:
    data = weights_file.read_bytes()
    long = tmp_path / "long.weights"
    long.write_bytes(data + b"\0" * 12)
    with pytest.raises(WeightsError, match=rf"^{long}: 12 trailing bytes after the last layer at offset {len(data)}"):
        read_weights(long, cfg)


def test_error_when_weights_belong_to_another_cfg(cfg: NetConfig, tmp_path: Path) -> None:
    coco = tmp_path / "coco.cfg"
    coco.write_text(CFG_TEXT.replace("filters=21", "filters=255").replace("classes=2", "classes=80"))
    path = write_weights(tmp_path / "coco.weights", _random_weights(parse_cfg(coco)))
    with pytest.raises(WeightsError, match=r"trailing bytes .* wrong cfg for these weights\?"):
        read_weights(path, cfg)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", r"empty file \(0 bytes\)"),
        (struct.pack("<iiiQ", 123456, 2, 5, 0), r"bad header: version 123456\.2\.5 is not a Darknet weights version"),
        (struct.pack("<iiiQ", 0, -1, 5, 0), r"bad header: version 0\.-1\.5"),
        (struct.pack("<iii", 0, 2, 5) + b"\0\0", r"bad header: version 0\.2\.5 needs 20 header bytes, file has 14"),
        (b"GIF89a", r"bad header"),
    ],
    ids=["empty", "absurd-major", "negative-minor", "short-header", "not-weights"],
)
def test_error_on_bad_weights_file(cfg: NetConfig, tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "bad.weights"
    path.write_bytes(content)
    with pytest.raises(WeightsError, match=rf"^{path}: {problem}"):
        read_weights(path, cfg)


def test_error_on_missing_weights(cfg: NetConfig, tmp_path: Path) -> None:
    with pytest.raises(WeightsError, match=r"cannot open weights '.*none\.weights': no such file"):
        read_weights(tmp_path / "none.weights", cfg)


def test_yolo_spec_exposes_anchors_of_its_mask() -> None:
    spec = YoloSpec((2, 0), ((1.0, 2.0), (3.0, 4.0), (5.0, 6.0)), classes=1)
    assert spec.mask_anchors == ((5.0, 6.0), (1.0, 2.0))
