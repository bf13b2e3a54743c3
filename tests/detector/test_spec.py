"""ModelSpec: cache folder, facts read from the cfg, class names, cache keys, torch model loading."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detector.errors import CfgError, WeightsError
from detector.model import default_cfg_path
from detector.spec import ModelSpec, default_cache_dir

CfgWriter = Callable[[Path, int], Path]  # the packaged_cfg fixture (tests/conftest.py)


def test_default_cache_dir_honours_detector_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DETECTOR_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"


def test_default_cache_dir_falls_back_to_home_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DETECTOR_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / ".cache" / "detector"


def test_spec_reads_cache_dir_when_created_not_when_imported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DETECTOR_CACHE", str(tmp_path / "later"))
    assert ModelSpec(default_cfg_path()).cache_dir == tmp_path / "later"


def test_default_spec_is_the_packaged_two_class_model(tmp_path: Path) -> None:
    spec = ModelSpec.default(cache_dir=tmp_path)
    assert spec.cfg == default_cfg_path()
    assert spec.cache_dir == tmp_path
    assert spec.input_size == (416, 416)
    assert spec.num_classes == 2
    assert spec.names == ["person", "vehicle"]


def test_other_cfg_gets_generic_class_names(tmp_path: Path, packaged_cfg: CfgWriter) -> None:
    spec = ModelSpec(packaged_cfg(tmp_path, 128), cache_dir=tmp_path)
    assert spec.input_size == (128, 128)
    assert spec.names == ["class0", "class1"]


def test_spec_coerces_strings_to_paths_and_is_hashable(tmp_path: Path) -> None:
    a = ModelSpec(str(default_cfg_path()), weights=str(tmp_path / "w.weights"), cache_dir=str(tmp_path))
    b = ModelSpec(default_cfg_path(), weights=tmp_path / "w.weights", cache_dir=tmp_path)
    assert isinstance(a.cfg, Path) and isinstance(a.weights, Path) and isinstance(a.cache_dir, Path)
    assert a == b and len({a, b}) == 1


def test_cache_key_changes_with_seed_cfg_and_weights_bytes(tmp_path: Path, packaged_cfg: CfgWriter) -> None:
    cfg = packaged_cfg(tmp_path, 128)
    key = ModelSpec(cfg, seed=0, cache_dir=tmp_path).cache_key("x")
    assert ModelSpec(cfg, seed=0, cache_dir=tmp_path / "elsewhere").cache_key("x") == key
    assert ModelSpec(cfg, seed=1, cache_dir=tmp_path).cache_key("x") != key
    assert ModelSpec(cfg, seed=0, cache_dir=tmp_path).cache_key("y") != key
    assert ModelSpec(packaged_cfg(tmp_path, 160), cache_dir=tmp_path).cache_key("x") != key

    weights = tmp_path / "w.weights"
    weights.write_bytes(b"\x00" * 64)
    with_file = ModelSpec(cfg, weights=weights, cache_dir=tmp_path).cache_key("x")
    assert with_file != key
    weights.write_bytes(b"\x01" * 64)
    assert ModelSpec(cfg, weights=weights, cache_dir=tmp_path).cache_key("x") != with_file


def test_cache_key_of_missing_weights_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "none.weights"
    with pytest.raises(WeightsError, match="none.weights"):
        ModelSpec(default_cfg_path(), weights=missing, cache_dir=tmp_path).cache_key()


def test_missing_cfg_raises_cfg_error_naming_it(tmp_path: Path) -> None:
    spec = ModelSpec(tmp_path / "absent.cfg", cache_dir=tmp_path)
    with pytest.raises(CfgError, match="absent.cfg"):
        spec.cache_key()
    with pytest.raises(CfgError, match="absent.cfg"):
        _ = spec.input_size


def test_load_torch_gives_eval_fp32_cpu_model_with_cfg_input_size(tmp_path: Path, packaged_cfg: CfgWriter) -> None:
    import torch

    model = ModelSpec(packaged_cfg(tmp_path, 128), cache_dir=tmp_path).load_torch()
    assert not model.training
    assert model.input_size == (128, 128)
    param = next(model.parameters())
    assert param.dtype == torch.float32 and param.device.type == "cpu"


def test_load_torch_with_seed_is_deterministic(tmp_path: Path, packaged_cfg: CfgWriter) -> None:
    import torch

    cfg = packaged_cfg(tmp_path, 128)
    a = ModelSpec(cfg, seed=3, cache_dir=tmp_path).load_torch()
    b = ModelSpec(cfg, seed=3, cache_dir=tmp_path).load_torch()
    c = ModelSpec(cfg, seed=4, cache_dir=tmp_path).load_torch()
    first = [p for p in a.parameters()][0]
    assert torch.equal(first, [p for p in b.parameters()][0])
    assert not torch.equal(first, [p for p in c.parameters()][0])


def test_load_torch_reads_a_weights_file(tmp_path: Path, packaged_cfg: CfgWriter) -> None:
    import torch

    cfg = packaged_cfg(tmp_path, 128)
    weights = tmp_path / "seed7.weights"
    ModelSpec(cfg, seed=7, cache_dir=tmp_path).load_torch().save_darknet_weights(weights)
    from_file = ModelSpec(cfg, weights=weights, cache_dir=tmp_path).load_torch()
    seeded = ModelSpec(cfg, seed=7, cache_dir=tmp_path).load_torch()
    x = torch.rand(1, 3, 128, 128)
    with torch.no_grad():
        assert torch.equal(from_file(x), seeded(x))


@pytest.mark.parametrize(("text", "names"), [("cat\ndog\n", ["cat", "dog"]),
                                             ("cat\ndog\nbird\n", ["class0", "class1"])],
                         ids=["one-per-class", "wrong-count-falls-back-to-generic-names"])  # fmt: skip
def test_classes_names_beside_a_cfg_names_its_classes(tmp_path: Path, packaged_cfg: CfgWriter, text: str,
                                                      names: list[str]) -> None:
    cfg = packaged_cfg(tmp_path, 128)
    (tmp_path / "classes.names").write_text(text, encoding="utf-8")
    assert ModelSpec(cfg, cache_dir=tmp_path).names == names


@pytest.mark.parametrize("beside", [False, True], ids=["names-file", "classes.names-beside-the-cfg"])
def test_a_names_file_that_is_not_utf8_is_one_error_naming_it(tmp_path: Path, packaged_cfg: CfgWriter,
                                                               beside: bool) -> None:
    cfg = packaged_cfg(tmp_path, 128)
    names = tmp_path / ("classes.names" if beside else "latin1.names")
    names.write_bytes("person\nv\u00e9hicule\n".encode("latin-1"))  # a Latin-1 byte 0xe9 at offset 8
    spec = ModelSpec(cfg, cache_dir=tmp_path, names_file=None if beside else names)
    with pytest.raises(CfgError) as err:
        spec.names  # noqa: B018
    assert str(err.value) == f"cannot read class names '{names}': not UTF-8 text (byte 8: 0xe9); save it as UTF-8"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp", "Zs")), min_size=1, max_size=8),
                min_size=1, max_size=6, unique=True), st.data())
def test_a_names_file_naming_one_class_twice_is_one_error_naming_both_lines(
        tmp_path_factory: pytest.TempPathFactory, names: list[str], data: st.DataObject) -> None:
    """Scores are reported by class name (detector eval's table): two classes of one name showed one of them."""
    from detector.shipped import read_names

    twice = data.draw(st.sampled_from(names))
    lines = [*names, *data.draw(st.lists(st.just(""), max_size=2)), f"  {twice} "]
    path = tmp_path_factory.mktemp("names") / "classes.names"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(CfgError) as err:
        read_names(path)
    assert str(err.value) == (f"class names '{path}': {twice!r} is on lines {names.index(twice) + 1} and {len(lines)}; "
                              "each class needs its own name (scores are reported by name)")


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_name(tmp_path: Path, packaged_cfg: CfgWriter) -> None:
    cfg = packaged_cfg(tmp_path, 128)
    (tmp_path / "classes.names").write_text("person\nv\u00e9hicule\n", encoding="utf-8-sig")
    (tmp_path / "bad.names").write_bytes(b"\xef\xbb\xbfperson\n\xff\n")
    assert ModelSpec(cfg, cache_dir=tmp_path).names == ["person", "v\u00e9hicule"]
    with pytest.raises(CfgError) as err:  # the offset counts the mark: it is the file's own
        ModelSpec(cfg, cache_dir=tmp_path, names_file=tmp_path / "bad.names").names  # noqa: B018
    assert str(err.value) == (f"cannot read class names '{tmp_path / 'bad.names'}': not UTF-8 text (byte 10: 0xff); "
                              "save it as UTF-8")


@pytest.mark.parametrize(("text", "line", "control"), [(b"person\x00\nvehicle\n", 1, "\\x00"),
                                                    (b"person\nve\x1b[31mhicle\n", 2, "\\x1b"),
                                                    (b"person\nvehicle\x7f\n", 2, "\\x7f")])
def test_a_control_character_in_a_class_name_is_one_error_naming_its_line(tmp_path: Path, text: bytes, line: int,
                                                                          control: str) -> None:
    from detector.shipped import read_names

    (tmp_path / "bad.names").write_bytes(text)
    with pytest.raises(CfgError) as err:  # a NUL went into the report, the saved run and the store
        read_names(tmp_path / "bad.names")
    assert str(err.value) == (f"class names '{tmp_path / 'bad.names'}': line {line} holds the control character "
                              f"'{control}'; a class name is printable text (it is drawn on frames, printed and "
                              "stored)")
    (tmp_path / "ok.names").write_bytes(b"\tperson\r\nvehicle \r\n\n")  # tabs, CRLF and blank lines stay fine
    assert read_names(tmp_path / "ok.names") == ["person", "vehicle"]


def test_an_onnx_file_alone_gives_input_size_and_classes_and_no_torch_model(
    tmp_path: Path, packaged_cfg: CfgWriter
) -> None:
    from detector.errors import BackendUnavailable
    from detector.export import export_onnx

    cfg = packaged_cfg(tmp_path, 96)
    export_onnx(ModelSpec(cfg, cache_dir=tmp_path).load_torch(), tmp_path / "m.onnx")
    spec = ModelSpec(None, onnx=tmp_path / "m.onnx", cache_dir=tmp_path)
    assert (spec.input_size, spec.num_classes, spec.model_file) == ((96, 96), 2, tmp_path / "m.onnx")
    assert spec.onnx_path() == tmp_path / "m.onnx"  # run as given, never exported
    assert spec.cache_key("x") != ModelSpec(cfg, cache_dir=tmp_path).cache_key("x")
    with pytest.raises(BackendUnavailable, match="the torch backends run a Darknet cfg and weights"):
        spec.load_torch()
    with pytest.raises(CfgError, match="is an ONNX file: it has no Darknet cfg"):
        spec.net  # noqa: B018


def _expanding_onnx(path: Path, channels: int, height: int, width: int, columns: int) -> Path:
    """A valid ONNX model, images [batch, channels, H, W] -> decoded [batch, channels*H*W, columns] (Expand)."""
    import onnx
    from onnx import TensorProto, helper

    n = channels * height * width
    images = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", channels, height, width])
    decoded = helper.make_tensor_value_info("decoded", TensorProto.FLOAT, ["batch", n, columns])
    flat = helper.make_tensor("flat", TensorProto.INT64, [3], [0, -1, 1])
    wide = helper.make_tensor("wide", TensorProto.INT64, [3], [1, 1, columns])
    graph = helper.make_graph([helper.make_node("Reshape", ["images", "flat"], ["r"]),
                               helper.make_node("Expand", ["r", "wide"], ["decoded"])], "g", [images], [decoded],
                              initializer=[flat, wide])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["channels", "height", "width", "classes"]), st.integers(-3, 1), st.integers(1, 10**9))
def test_an_onnx_file_alone_must_take_rgb_of_a_size_and_classes_a_cfg_may_have(
        tmp_path_factory: pytest.TempPathFactory, bad: str, small: int, big: int) -> None:
    """Its own static dimensions are the model's input size and classes: an input of no pixels, of 1 or 4 channels
    or past the cfg's side limit, or more classes than a cfg may have, is refused before a frame is fed to it."""
    from detector.darknet import MAX_FILTERS, MAX_INPUT_SIDE
    from detector.errors import ModelFileError

    dims = {"channels": 3, "height": 16, "width": 16, "classes": 2}
    dims[bad] = {"channels": small + 3 if small != 0 else 4, "classes": MAX_FILTERS + big if small else 0}.get(
        bad, small if small < 1 else MAX_INPUT_SIDE + big)  # classes: none (a [B,N,4] output), or too many
    path = _expanding_onnx(tmp_path_factory.mktemp("onnx") / "m.onnx", dims["channels"], dims["height"],
                           dims["width"], 4 + dims["classes"])
    with pytest.raises(ModelFileError) as err:
        ModelSpec(None, onnx=path).input_size  # noqa: B018
    assert str(err.value).startswith(f"ONNX model '{path}': input [None, {dims['channels']}, {dims['height']}, "
                                     f"{dims['width']}] / output [None, "), err.value
    assert str(err.value).endswith(f"this package runs [B,3,H,W] input with H and W 1..{MAX_INPUT_SIDE} and 1 to "
                                   f"{MAX_FILTERS} classes; give the Darknet cfg as well"), err.value


def test_a_given_onnx_file_must_match_the_cfg(tmp_path: Path, packaged_cfg: CfgWriter) -> None:
    from detector.errors import ModelFileError
    from detector.export import export_onnx

    export_onnx(ModelSpec(packaged_cfg(tmp_path, 96), cache_dir=tmp_path).load_torch(), tmp_path / "m96.onnx")
    spec = ModelSpec(packaged_cfg(tmp_path, 128), onnx=tmp_path / "m96.onnx", cache_dir=tmp_path)
    with pytest.raises(ModelFileError, match="takes 3x96x96 .* needs 3x128x128"):
        spec.onnx_path()


def test_a_names_file_must_name_every_class(tmp_path: Path) -> None:
    (tmp_path / "two.names").write_text("cat\ndog\n")
    (tmp_path / "three.names").write_text("cat\ndog\nbird\n")
    assert ModelSpec(default_cfg_path(), names_file=tmp_path / "two.names").names == ["cat", "dog"]
    with pytest.raises(CfgError, match="three.names: 3 names for the 2 classes"):
        ModelSpec(default_cfg_path(), names_file=tmp_path / "three.names").names  # noqa: B018
    with pytest.raises(CfgError, match="need the Darknet cfg they were trained with"):
        ModelSpec(None, weights=tmp_path / "w.weights", onnx=tmp_path / "m.onnx")
