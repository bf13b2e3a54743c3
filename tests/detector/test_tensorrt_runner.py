"""The TensorRT runner through the registry, and -- where a TensorRT package and a GPU are present -- the real
build, cache, refusal and inference paths. Every test that needs what this machine lacks skips with a
reason naming it ("tensorrt not installed (...)", "no CUDA device", TensorRT-RTX's refusal of the GPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from detector.backends import availability, available_backends, create_runner, runner_class
from detector.trt import (
    EngineRefused,
    build_serialized_engine,
    cached_engine,
    cuda_device_info,
    deserialize_engine,
    import_tensorrt,
    is_rtx,
    rtx_compute_capabilities,
)
from detector.errors import BackendError, BackendUnavailable, ModelFileError
from detector.spec import ModelSpec

SIZE = 128  # the packaged cfg at 128x128: same layers, ~10x less compute than 416


def package() -> tuple[Any, str] | None:
    try:
        return import_tensorrt()
    except BackendError:
        return None


def build_skip_reason() -> str | None:
    """Why engines cannot be built here: no package; full TensorRT also needs a GPU (RTX builds on the CPU)."""
    try:
        _trt, flavor = import_tensorrt()
    except BackendError as e:
        return str(e)
    if not is_rtx(flavor) and not torch.cuda.is_available():
        return "no CUDA device (tensorrt builds engines on the GPU)"
    return None


needs_build = pytest.mark.skipif(build_skip_reason() is not None, reason=str(build_skip_reason()))


def run_skip_reason(precision: str = "fp32") -> str | None:
    return availability("tensorrt", "cuda", precision)



# -- registry and construction (run everywhere) -----------------------------------------------------------


@pytest.mark.skipif(package() is not None, reason="a TensorRT package is installed here")
def test_registry_says_tensorrt_is_not_installed() -> None:
    expected = "tensorrt not installed (tried tensorrt, tensorrt_rtx, tensorrt_rtx_bindings)"
    assert available_backends("cuda")["tensorrt"] == expected
    assert runner_class("tensorrt").unavailable_reason("cuda", "fp32") == expected
    assert availability("tensorrt", "cuda:0", "int8") == expected


def test_unavailable_reason_agrees_with_package_selection() -> None:
    """The package is checked first, then the GPU; with both, full TensorRT runs fp32 anywhere and TensorRT-RTX
    exactly on the compute capabilities it lists."""
    reason = runner_class("tensorrt").unavailable_reason("cuda", "fp32")
    try:
        trt, flavor = import_tensorrt()
    except BackendError as e:
        assert reason == str(e)
        return
    if not torch.cuda.is_available():
        assert reason == "no CUDA device"
    elif not is_rtx(flavor):
        assert reason is None
    else:
        name, cc = cuda_device_info()
        if cc in rtx_compute_capabilities(trt):
            assert reason is None
        else:
            assert reason is not None and name in reason


def test_tensorrt_runs_on_cuda_only(spec: ModelSpec) -> None:
    with pytest.raises(BackendError, match="unknown device 'cpu'; allowed: cuda"):
        create_runner("tensorrt", spec, device="cpu")
    assert "unknown device 'cpu'" in (available_backends("cpu")["tensorrt"] or "")


@pytest.mark.parametrize(("options", "match"), [
    ({"batch_sizes": ()}, "no batch sizes"),
    ({"batch_sizes": (1, 0)}, "batch size 0"),
    ({"batch_sizes": 8}, "batch_sizes must be a sequence"),
    ({"rtx_kernels": "fast"}, "unknown rtx_kernels 'fast'"),
    ({"calibration_batch": 0}, "calibration_batch must be a positive integer"),
    ({"fp8": True}, "unknown option 'fp8'"),
])
def test_bad_options_are_refused_when_the_runner_is_made(spec: ModelSpec, options: dict[str, Any], match: str) -> None:
    with pytest.raises(BackendError, match=match):
        create_runner("tensorrt", spec, device="cuda", **options)


def test_construction_loads_nothing(spec: ModelSpec) -> None:
    runner = create_runner("tensorrt", spec, device="cuda", precision="int8", batch_sizes=(2, 4))
    assert not runner.is_active and runner.cold_start is None and runner.memory == {}
    with pytest.raises(BackendError, match="not active"):
        runner.layer_profile()


@pytest.mark.skipif(run_skip_reason() is None, reason="TensorRT runs here")
def test_activate_raises_backend_unavailable_with_the_reason(spec: ModelSpec) -> None:
    runner = create_runner("tensorrt", spec, device="cuda")
    with pytest.raises(BackendUnavailable) as info:
        runner.activate()
    assert str(run_skip_reason()) in str(info.value) and not runner.is_active


# -- real TensorRT: build and cache (any package; full TensorRT also needs a GPU) ---------------------------


@needs_build
def test_engine_builds_then_comes_from_the_cache(spec: ModelSpec, tmp_path: Path) -> None:
    options = {"cache_dir": tmp_path, "precision": "fp32", "profile_batches": (1, 4)}
    first = cached_engine(spec.onnx_path(), **options)
    second = cached_engine(spec.onnx_path(), **options)
    assert not first.from_cache and first.build_s is not None and len(first.data) > 1000
    assert second.from_cache and second.data == first.data


@needs_build
def test_parser_errors_name_the_node(tmp_path: Path) -> None:
    images = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, 8, 8])
    decoded = helper.make_tensor_value_info("decoded", TensorProto.FLOAT, ["batch", 3, 8, 8])
    node = helper.make_node("NoSuchOp", ["images"], ["decoded"], name="mystery_node", domain="example.custom")
    graph = helper.make_graph([node], "g", [images], [decoded])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                     helper.make_opsetid("example.custom", 1)])
    path = tmp_path / "bad.onnx"
    onnx.save(model, str(path))
    with pytest.raises(ModelFileError) as info:
        build_serialized_engine(path, profile_batches=(1,), progress=False)
    message = str(info.value)
    assert message.startswith(f"TensorRT cannot parse ONNX model '{path}': ") and "\n" not in message
    assert "mystery_node" in message or "NoSuchOp" in message


def test_missing_onnx_file_is_a_model_file_error(tmp_path: Path) -> None:
    if package() is None:
        pytest.skip(build_skip_reason() or "")
    with pytest.raises(ModelFileError, match="no such file"):
        build_serialized_engine(tmp_path / "absent.onnx")


# -- real TensorRT-RTX on a GPU it refuses (e.g. H100): the refusal is clean ---------------------------------


def rtx_refusal_skip_reason() -> str | None:
    found = package()
    if found is None:
        return build_skip_reason()
    trt, flavor = found
    if not is_rtx(flavor):
        return f"the installed package is {flavor}, not TensorRT-RTX"
    if not torch.cuda.is_available():
        return "no CUDA device"
    name, cc = cuda_device_info()
    if cc in rtx_compute_capabilities(trt):
        return f"TensorRT-RTX supports this GPU ({name})"
    return None


@pytest.mark.skipif(rtx_refusal_skip_reason() is not None, reason=str(rtx_refusal_skip_reason()))
def test_rtx_refusal_of_this_gpu_is_clean(spec: ModelSpec, tmp_path: Path) -> None:
    name, cc = cuda_device_info()
    entry = cached_engine(spec.onnx_path(), cache_dir=tmp_path, profile_batches=(1, 4))
    with pytest.raises(EngineRefused) as info:
        deserialize_engine(entry.data, source=entry.path)
    assert name in str(info.value) and f"compute capability {cc[0]}.{cc[1]}" in str(info.value)
    runner = create_runner("tensorrt", spec, device="cuda")
    with pytest.raises(BackendUnavailable, match="TensorRT-RTX cannot run engines on"):
        runner.activate()


# -- real TensorRT on a GPU it runs on --------------------------------------------------------------------


def reference(spec: ModelSpec, batch: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return spec.load_torch()(torch.from_numpy(batch)).numpy()


@pytest.mark.parametrize(("precision", "options", "box_rel", "score_abs"), [
    ("fp32", {"tf32": False}, 1e-4, 1e-4),
    ("fp32", {}, 5e-3, 5e-3),  # TF32 convolutions (TensorRT's default)
    ("fp16", {}, 2e-2, 2e-2),
])
def test_decoded_output_matches_torch(spec: ModelSpec, precision: str, options: dict[str, Any], box_rel: float,
                                      score_abs: float) -> None:
    reason = run_skip_reason(precision)
    if reason is not None:
        pytest.skip(reason)
    batch = np.random.default_rng(0).random((3, 3, SIZE, SIZE), dtype=np.float32)
    want = reference(spec, batch)
    with create_runner("tensorrt", spec, device="cuda", precision=precision, batch_sizes=(1, 4),
                       **options) as runner:
        got = runner.infer(batch).numpy()
        assert runner.last_timing is not None and runner.last_timing.compute_ms is not None
    assert got.shape == want.shape and got.dtype == np.float32
    scale = float(np.abs(want[..., :4]).max())
    np.testing.assert_allclose(got[..., :4], want[..., :4], rtol=0, atol=box_rel * scale)
    np.testing.assert_allclose(got[..., 4:], want[..., 4:], rtol=0, atol=score_abs)


def test_cold_start_memory_and_layer_profile_are_recorded(spec: ModelSpec) -> None:
    reason = run_skip_reason()
    if reason is not None:
        pytest.skip(reason)
    with create_runner("tensorrt", spec, device="cuda", batch_sizes=(1, 2)) as runner:
        cold = runner.cold_start
        assert cold is not None and cold.deserialize_s is not None and cold.first_inference_ms is not None
        assert (cold.build_s is not None) != cold.from_cache
        runner.infer(np.zeros((2, 3, SIZE, SIZE), np.float32))
        memory = runner.memory
        assert memory["engine_file_bytes"] and memory["activate_device_bytes"] is not None
        assert memory["peak_inference_bytes"] >= 0
        table = runner.layer_profile(batch_size=2, iterations=3)
        assert table and all(ms >= 0 for _name, ms in table)
        assert table == sorted(table, key=lambda item: -item[1])
        with pytest.raises(BackendError, match="outside the engine's profile"):
            runner.layer_profile(batch_size=3)


def test_cuda_graph_replay_matches_plain_enqueue(spec: ModelSpec) -> None:
    reason = run_skip_reason()
    if reason is not None:
        pytest.skip(reason)
    batch = np.random.default_rng(1).random((2, 3, SIZE, SIZE), dtype=np.float32)
    with create_runner("tensorrt", spec, device="cuda", batch_sizes=(1, 2)) as plain:
        want = plain.infer(batch).numpy()
    with create_runner("tensorrt", spec, device="cuda", batch_sizes=(1, 2), cuda_graph=True) as graphed:
        first = graphed.infer(batch).numpy()
        second = graphed.infer(batch).numpy()
    np.testing.assert_allclose(first, want, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(first, second)
