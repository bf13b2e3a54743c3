"""ONNX export: opset, checker, dynamic batch, parity with torch, the on-disk cache, bad files."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from detector import export
from detector.errors import BackendError, ModelFileError
from detector.export import export_onnx, load_onnx
from detector.spec import ModelSpec

SIZE = 128  # the packaged cfg at 128x128: same layers, ~10x less compute than 416



@pytest.fixture(scope="module")
def onnx_file(spec: ModelSpec) -> Path:
    return spec.onnx_path()


class Tiny(torch.nn.Module):
    """x [B,3,H,W] -> [B, H*W, 6]: exports in about a second."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).flatten(2).transpose(1, 2)


class FixedBatch(torch.nn.Module):
    input_size = (8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(2, 3 * 8 * 8)


class Raises(torch.nn.Module):
    input_size = (8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("forward is broken")


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def test_export_writes_opset_17_by_default_and_passes_the_full_checker(onnx_file: Path) -> None:
    model = load_onnx(onnx_file)  # runs onnx.checker with full_check
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    assert opsets["ai.onnx"] >= 17
    assert opsets["ai.onnx"] == 17
    onnx.checker.check_model(model, full_check=True)


def test_exported_graph_has_images_input_and_decoded_output_with_a_batch_axis(onnx_file: Path, spec: ModelSpec) -> None:
    graph = onnx.load(str(onnx_file)).graph
    (inp,), (out,) = graph.input, graph.output
    assert (inp.name, out.name) == ("images", "decoded")
    assert _dims(inp) == ["batch", 3, SIZE, SIZE]
    n = 3 * ((SIZE // 32) ** 2 + (SIZE // 16) ** 2)
    assert _dims(out) == ["batch", n, 4 + spec.num_classes]


@pytest.mark.parametrize("batch", [1, 4])
def test_dynamic_batch_runs_in_onnxruntime_and_matches_torch(onnx_file: Path, spec: ModelSpec, batch: int) -> None:
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(batch).random((batch, 3, SIZE, SIZE), dtype=np.float32)
    got = session.run(None, {"images": x})[0]
    with torch.no_grad():
        want = spec.load_torch()(torch.from_numpy(x)).numpy()
    assert got.shape == want.shape == (batch, want.shape[1], 4 + spec.num_classes)
    # Scores: absolute. Boxes are pixels, up to ~1e3 with random weights: relative to the largest coordinate.
    assert np.abs(got[..., 4:] - want[..., 4:]).max() <= 1e-4
    assert np.abs(got[..., :4] - want[..., :4]).max() <= 2e-5 * max(1.0, float(np.abs(want[..., :4]).max()))


def test_onnx_path_cache_hit_returns_the_same_file_without_exporting(
    onnx_file: Path, spec: ModelSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = onnx_file.stat().st_mtime_ns

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("exported again despite a cache entry")

    monkeypatch.setattr(export, "export_onnx", fail)
    assert spec.onnx_path() == onnx_file
    assert ModelSpec(spec.cfg, seed=0, cache_dir=spec.cache_dir).onnx_path() == onnx_file
    assert onnx_file.stat().st_mtime_ns == before


def test_onnx_path_differs_by_seed_and_opset_without_exporting(spec: ModelSpec, onnx_file: Path) -> None:
    other_seed = ModelSpec(spec.cfg, seed=1, cache_dir=spec.cache_dir)
    key = spec.cache_key("onnx", torch.__version__, onnx.__version__, 17, export.EXPORT_VERSION)
    assert key in onnx_file.name
    assert other_seed.cache_key("onnx", torch.__version__, onnx.__version__, 17, export.EXPORT_VERSION) != key
    assert spec.cache_key("onnx", torch.__version__, onnx.__version__, 18, export.EXPORT_VERSION) != key


def test_unreadable_cache_entry_is_rebuilt(spec: ModelSpec, onnx_file: Path, tmp_path: Path) -> None:
    private = ModelSpec(spec.cfg, seed=0, cache_dir=tmp_path)
    entry = tmp_path / onnx_file.relative_to(spec.cache_dir)
    entry.parent.mkdir(parents=True)
    entry.write_bytes(os.urandom(4096))
    assert private.onnx_path() == entry
    load_onnx(entry)
    assert entry.read_bytes() == onnx_file.read_bytes()  # the export is deterministic


def test_export_with_fixed_batch_has_batch_one(tmp_path: Path) -> None:
    path = export_onnx(Tiny(), tmp_path / "fixed.onnx", dynamic_batch=False, input_size=(8, 8))
    graph = load_onnx(path).graph
    assert _dims(graph.input[0]) == [1, 3, 8, 8]
    assert _dims(graph.output[0]) == [1, 64, 6]


def test_export_at_opset_18_writes_opset_18(tmp_path: Path) -> None:
    model = load_onnx(export_onnx(Tiny(), tmp_path / "op18.onnx", opset=18, input_size=(8, 8)))
    assert {o.domain or "ai.onnx": o.version for o in model.opset_import}["ai.onnx"] == 18


def test_export_rejects_opset_below_17(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="opset 13 is below the minimum 17"):
        export_onnx(Tiny(), tmp_path / "old.onnx", opset=13, input_size=(8, 8))


@pytest.mark.parametrize("opset", [29, 10**20], ids=["past-onnxs-newest", "past-int64"])
def test_export_refuses_an_opset_onnx_does_not_know_and_keeps_no_file(tmp_path: Path, opset: int) -> None:
    """onnx 1.23 knows opsets up to 28: asked for 29 the exporter wrote 18 and `detector export-onnx` said 'wrote
    ... (opset 29 ...)'; 10^20 was a TypeError of onnx's get_schema()."""
    newest = onnx.defs.onnx_opset_version()
    with pytest.raises(BackendError, match=rf"cannot export to '.*op\.onnx': opset {max(opset, newest + 1)} is above "
                       rf"the newest this onnx {re.escape(onnx.__version__)} knows, {newest}$"):
        export_onnx(Tiny(), tmp_path / "op.onnx", opset=max(opset, newest + 1), input_size=(8, 8))
    assert list(tmp_path.iterdir()) == []


def test_export_without_input_size_asks_for_it(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="input_size"):
        export_onnx(Tiny(), tmp_path / "t.onnx")


def test_model_that_hard_codes_its_batch_fails_export_and_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "fixed_batch.onnx"
    with pytest.raises(BackendError, match="batch axis of 'images' came out fixed at 2"):
        export_onnx(FixedBatch(), target)
    assert list(tmp_path.iterdir()) == []


def test_export_failure_is_one_line_naming_the_file_and_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "broken.onnx"
    with pytest.raises(BackendError) as err:
        export_onnx(Raises(), target)
    message = str(err.value)
    assert "broken.onnx" in message and "forward is broken" in message and "\n" not in message
    assert list(tmp_path.iterdir()) == []


def test_load_onnx_of_a_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match=r"absent\.onnx': no such file"):
        load_onnx(tmp_path / "absent.onnx")


def test_load_onnx_of_an_empty_file_names_it(tmp_path: Path) -> None:
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(ModelFileError, match=r"empty\.onnx': the file is empty"):
        load_onnx(tmp_path / "empty.onnx")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_load_onnx_of_random_bytes_raises_model_file_error(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "noise.onnx"
    path.write_bytes(np.random.default_rng(seed).bytes(2048))
    with pytest.raises(ModelFileError, match=r"noise\.onnx'"):
        load_onnx(path)


def test_load_onnx_of_a_truncated_export_raises_model_file_error(onnx_file: Path, tmp_path: Path) -> None:
    path = tmp_path / "truncated.onnx"
    path.write_bytes(onnx_file.read_bytes()[: onnx_file.stat().st_size // 2])
    with pytest.raises(ModelFileError, match=r"truncated\.onnx'"):
        load_onnx(path)


def test_load_onnx_of_a_folder_names_it(tmp_path: Path) -> None:
    (tmp_path / "dir.onnx").mkdir()
    with pytest.raises(ModelFileError, match="folder"):
        load_onnx(tmp_path / "dir.onnx")


def test_load_onnx_rejects_a_graph_with_two_inputs(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 3, 8, 8])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "two", [a, b], [y])
    path = tmp_path / "two.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(ModelFileError, match="2 inputs"):
        load_onnx(path)


def _retyped(onnx_file: Path, path: Path, input_type: int, output_type: int = 1) -> Path:
    """The export with its input taken as ``input_type`` and its output given as ``output_type`` (Casts added)."""
    from onnx import helper

    model = onnx.load(str(onnx_file))
    graph, image, boxes = model.graph, model.graph.input[0], model.graph.output[0]
    graph.node.insert(0, helper.make_node("Cast", ["retyped"], [image.name], to=onnx.TensorProto.FLOAT))
    graph.node.append(helper.make_node("Cast", [boxes.name], ["retyped_out"], to=output_type))
    image.name, boxes.name = "retyped", "retyped_out"
    image.type.tensor_type.elem_type, boxes.type.tensor_type.elem_type = input_type, output_type
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize(("input_type", "output_type", "problem"), [
    (onnx.TensorProto.UINT8, onnx.TensorProto.FLOAT, "input 'retyped' holds uint8"),
    (onnx.TensorProto.FLOAT, onnx.TensorProto.INT32, "output 'retyped_out' holds int32"),
])  # fmt: skip
def test_load_onnx_refuses_a_model_whose_input_or_output_is_not_float_naming_the_file(
        onnx_file: Path, tmp_path: Path, input_type: int, output_type: int, problem: str) -> None:
    path = _retyped(onnx_file, tmp_path / "typed.onnx", input_type, output_type)
    with pytest.raises(ModelFileError, match=re.escape(f"ONNX model '{path}' {problem}; expected float32, float16 or "
                                                       "bfloat16")):  # fmt: skip
        load_onnx(path)


def test_a_float16_input_model_loads_for_tensorrt_and_onnx_runtime_refuses_it_naming_the_file(
        onnx_file: Path, tmp_path: Path, spec: ModelSpec) -> None:
    from detector.backends import create_runner

    path = _retyped(onnx_file, tmp_path / "half.onnx", onnx.TensorProto.FLOAT16)
    load_onnx(path)  # TensorRT's strongly typed fp16 engines take float16 frames
    runner = create_runner("onnxruntime", spec, model_path=path)
    with pytest.raises(ModelFileError, match=re.escape(f"ONNX model '{path}' input 'retyped' is tensor(float16); "
                                                       "ONNX Runtime runs it with float32 frames")):  # fmt: skip
        runner.activate()
    assert not runner.is_active


def test_copy_of_an_export_loads_anywhere(onnx_file: Path, tmp_path: Path) -> None:
    """The export is one self-contained file (no external weight data beside it)."""
    copy = tmp_path / "moved.onnx"
    shutil.copy(onnx_file, copy)
    assert [p.name for p in tmp_path.iterdir()] == ["moved.onnx"]
    load_onnx(copy)
