"""TensorRT support logic that needs no GPU and no TensorRT: package selection, cache keys, profiles,
calibration batches and cache file, parser-error and refusal messages, build progress, layer tables."""

from __future__ import annotations

import json
import logging
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from detector.trt import (
    RTX_COMPUTE_CAPABILITIES,
    BuildProgress,
    CalibrationCache,
    ColdStart,
    LayerTimes,
    calibration_batches,
    engine_cache_key,
    format_parser_errors,
    import_tensorrt,
    precision_unavailable_reason,
    profile_shapes,
    rtx_build_targets,
    rtx_compute_capabilities,
    rtx_refusal_message,
    strongly_typed,
    summarize_layer_times,
)
from detector.errors import BackendError, BackendUnavailable
from detector.preprocess import preprocess

# -- package selection ----------------------------------------------------------------------------------


def fake_tensorrt(name: str, version: str = "10.9.0", *, rtx: bool = False) -> types.ModuleType:
    """A stand-in module: just the attributes the selection and precision logic read."""
    module = types.ModuleType(name)
    module.__version__ = version
    flags = ["DEBUG", "TF32"] if rtx else ["FP16", "INT8", "TF32"]
    module.BuilderFlag = types.SimpleNamespace(**{f: i for i, f in enumerate(flags)})
    if not rtx:
        module.IInt8EntropyCalibrator2 = object
    return module


def importer_for(available: dict[str, Any]) -> Any:
    """An importer that finds only ``available``; a value that is an exception is raised on import."""
    seen: list[str] = []

    def importer(name: str) -> types.ModuleType:
        seen.append(name)
        if name not in available:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        value = available[name]
        if isinstance(value, BaseException):
            raise value
        return value

    importer.seen = seen  # type: ignore[attr-defined]
    return importer


@pytest.fixture(autouse=True)
def no_forced_flavor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DETECTOR_TENSORRT", raising=False)


def test_full_tensorrt_is_preferred_over_rtx() -> None:
    trt, rtx = fake_tensorrt("tensorrt"), fake_tensorrt("tensorrt_rtx", "1.7.1", rtx=True)
    module, flavor = import_tensorrt(importer=importer_for({"tensorrt": trt, "tensorrt_rtx": rtx}))
    assert module is trt and flavor == "tensorrt"


def test_rtx_bindings_module_name_is_the_rtx_flavor() -> None:
    bindings = fake_tensorrt("tensorrt_rtx_bindings", "1.7.1.116", rtx=True)
    importer = importer_for({"tensorrt_rtx_bindings": bindings})
    module, flavor = import_tensorrt(importer=importer)
    assert module is bindings and flavor == "tensorrt_rtx"
    assert importer.seen == ["tensorrt", "tensorrt_rtx", "tensorrt_rtx_bindings"]


def test_environment_variable_forces_the_rtx_flavor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DETECTOR_TENSORRT", "tensorrt_rtx")
    trt, rtx = fake_tensorrt("tensorrt"), fake_tensorrt("tensorrt_rtx", "1.7.1", rtx=True)
    module, flavor = import_tensorrt(importer=importer_for({"tensorrt": trt, "tensorrt_rtx": rtx}))
    assert module is rtx and flavor == "tensorrt_rtx"


def test_forced_flavor_that_is_missing_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DETECTOR_TENSORRT", "tensorrt")
    with pytest.raises(BackendUnavailable) as info:
        import_tensorrt(importer=importer_for({"tensorrt_rtx": fake_tensorrt("tensorrt_rtx", rtx=True)}))
    assert str(info.value) == "tensorrt not installed (tried tensorrt; DETECTOR_TENSORRT=tensorrt)"


def test_prefer_argument_overrides_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DETECTOR_TENSORRT", "tensorrt_rtx")
    trt = fake_tensorrt("tensorrt")
    assert import_tensorrt("tensorrt", importer=importer_for({"tensorrt": trt})) == (trt, "tensorrt")


@pytest.mark.parametrize("value", ["TensorRT", "rtx", "tensorrt-rtx"])
def test_unknown_flavor_is_an_error_listing_the_allowed_names(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("DETECTOR_TENSORRT", value)
    with pytest.raises(BackendError, match="allowed: tensorrt, tensorrt_rtx") as info:
        import_tensorrt(importer=importer_for({}))
    assert not isinstance(info.value, BackendUnavailable)
    assert repr(value) in str(info.value)


def test_nothing_installed_lists_every_candidate() -> None:
    with pytest.raises(BackendUnavailable) as info:
        import_tensorrt(importer=importer_for({}))
    assert str(info.value) == "tensorrt not installed (tried tensorrt, tensorrt_rtx, tensorrt_rtx_bindings)"


def test_a_broken_install_is_reported_with_its_error() -> None:
    broken = OSError("libnvinfer.so.10: cannot open shared object file: No such file or directory")
    rtx = fake_tensorrt("tensorrt_rtx_bindings", rtx=True)
    assert import_tensorrt(importer=importer_for({"tensorrt": broken, "tensorrt_rtx_bindings": rtx}))[1] == \
        "tensorrt_rtx"
    with pytest.raises(BackendUnavailable, match=r"tried tensorrt: libnvinfer\.so\.10: cannot open"):
        import_tensorrt(importer=importer_for({"tensorrt": broken}))


def test_a_missing_dependency_of_the_package_is_named() -> None:
    missing = ModuleNotFoundError("No module named 'tensorrt_libs'", name="tensorrt_libs")
    with pytest.raises(BackendUnavailable, match="tensorrt: No module named 'tensorrt_libs'"):
        import_tensorrt(importer=importer_for({"tensorrt": missing}))


def test_tensorrt_older_than_10_is_passed_over() -> None:
    old, rtx = fake_tensorrt("tensorrt", "8.6.1"), fake_tensorrt("tensorrt_rtx", "1.7.1", rtx=True)
    assert import_tensorrt(importer=importer_for({"tensorrt": old, "tensorrt_rtx": rtx})) == (rtx, "tensorrt_rtx")
    with pytest.raises(BackendUnavailable, match=r"tensorrt: version 8\.6\.1 is older than 10\.0"):
        import_tensorrt(importer=importer_for({"tensorrt": old}))


def test_int8_needs_the_weakly_typed_builder() -> None:
    trt, rtx = fake_tensorrt("tensorrt"), fake_tensorrt("tensorrt_rtx", rtx=True)
    assert not strongly_typed(trt, "tensorrt") and strongly_typed(rtx, "tensorrt_rtx")
    assert all(precision_unavailable_reason(trt, "tensorrt", p) is None for p in ("fp32", "fp16", "int8"))
    assert precision_unavailable_reason(rtx, "tensorrt_rtx", "fp16") is None
    reason = precision_unavailable_reason(rtx, "tensorrt_rtx", "int8")
    assert reason is not None and "TensorRT-RTX" in reason and "Q/DQ" in reason


def test_tensorrt_11_without_precision_flags_counts_as_strongly_typed() -> None:
    trt11 = fake_tensorrt("tensorrt", "11.0.0", rtx=True)  # no FP16 flag, no calibrator: like RTX
    assert strongly_typed(trt11, "tensorrt")
    assert "tensorrt 11.0.0" in (precision_unavailable_reason(trt11, "tensorrt", "int8") or "")


# -- TensorRT-RTX hardware --------------------------------------------------------------------------------


def test_rtx_compute_capabilities_come_from_the_enum() -> None:
    members = {name: i for i, name in enumerate(["NONE", "CURRENT", "SM75", "SM89", "SM120", "SM121"])}
    module = types.SimpleNamespace(ComputeCapability=types.SimpleNamespace(__members__=members))
    assert rtx_compute_capabilities(module) == ((7, 5), (8, 9), (12, 0), (12, 1))


def test_rtx_compute_capabilities_default_without_the_enum() -> None:
    assert rtx_compute_capabilities(None) == RTX_COMPUTE_CAPABILITIES
    assert (9, 0) not in RTX_COMPUTE_CAPABILITIES


def test_rtx_refusal_names_the_gpu_its_capability_and_the_supported_list() -> None:
    message = rtx_refusal_message("NVIDIA H100 80GB HBM3", (9, 0), [(12, 0), (8, 6), (7, 5)])
    assert message.startswith("TensorRT-RTX cannot run engines on NVIDIA H100 80GB HBM3 (compute capability 9.0)")
    assert "compute capabilities 7.5, 8.6, 12.0" in message
    assert "support matrix" in message and "\n" not in message


def test_rtx_refusal_without_a_known_list_points_to_the_support_matrix() -> None:
    message = rtx_refusal_message("Some GPU", (10, 0), [])
    assert "compute capability 10.0" in message and "see the TensorRT-RTX support matrix" in message


def test_rtx_builds_for_the_current_gpu_only_when_it_can_target_it() -> None:
    members = {"NONE": 0, "CURRENT": 1, "SM86": 2, "SM89": 3}
    module = types.SimpleNamespace(ComputeCapability=types.SimpleNamespace(__members__=members))
    assert rtx_build_targets(module, (8, 9)) == ((8, 9),)
    assert rtx_build_targets(module, (9, 0)) == ()  # H100: RTX's portable default (builds, cannot run)
    assert rtx_build_targets(module, None) == ()


# -- engine cache key -------------------------------------------------------------------------------------

KEY_ARGS: dict[str, Any] = {
    "onnx_digest": "ab" * 32, "trt_version": "10.9.0.34", "flavor": "tensorrt", "gpu_name": "NVIDIA H100 80GB HBM3",
    "compute_capability": (9, 0), "precision": "fp16",
    "profile_shapes": ((1, 3, 416, 416), (8, 3, 416, 416), (32, 3, 416, 416)),
}
CHANGED: dict[str, Any] = {
    "onnx_digest": "cd" * 32, "trt_version": "10.9.0.35", "flavor": "tensorrt_rtx", "gpu_name": "NVIDIA L4",
    "compute_capability": (8, 9), "precision": "fp32",
    "profile_shapes": ((1, 3, 416, 416), (4, 3, 416, 416), (32, 3, 416, 416)),
}


def test_same_inputs_give_the_same_cache_key() -> None:
    key = engine_cache_key(**KEY_ARGS)
    assert key == engine_cache_key(**{**KEY_ARGS, "compute_capability": [9, 0]})
    assert len(key) == 20 and int(key, 16) >= 0


@pytest.mark.parametrize("field", sorted(CHANGED))
def test_every_field_changes_the_cache_key(field: str) -> None:
    assert engine_cache_key(**{**KEY_ARGS, field: CHANGED[field]}) != engine_cache_key(**KEY_ARGS)


def test_build_options_change_the_cache_key() -> None:
    assert engine_cache_key(**KEY_ARGS, extra={"workspace_mb": 512}) != engine_cache_key(**KEY_ARGS)
    assert engine_cache_key(**KEY_ARGS, extra={"a": 1}) == engine_cache_key(**KEY_ARGS, extra={"a": 1})


# -- optimization profile ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("sizes", "expected"), [
    ((1, 8, 32), (1, 8, 32)),
    ((4,), (4, 4, 4)),
    ((32, 1, 8, 8), (1, 8, 32)),
    ((1, 2, 4, 8), (1, 4, 8)),  # even count: the upper median
])
def test_profile_is_min_median_max_of_the_batch_sizes(sizes: tuple[int, ...], expected: tuple[int, ...]) -> None:
    shapes = profile_shapes(sizes, (3, 416, 416))
    assert (shapes.min, shapes.opt, shapes.max) == tuple((b, 3, 416, 416) for b in expected)


@given(st.lists(st.integers(1, 512), min_size=1, max_size=12))
def test_profile_covers_every_batch_size(sizes: list[int]) -> None:
    shapes = profile_shapes(sizes, (3, 64, 64))
    assert shapes.min[0] == min(sizes) and shapes.max[0] == max(sizes)
    assert shapes.min[0] <= shapes.opt[0] <= shapes.max[0] and shapes.opt[0] in sizes
    assert all(s[1:] == (3, 64, 64) for s in shapes.as_tuple())


@pytest.mark.parametrize("sizes", [(), (0,), (1, -8), (2.5,), (True,), ("8",)])
def test_profile_rejects_bad_batch_sizes(sizes: tuple[Any, ...]) -> None:
    with pytest.raises(BackendError, match="TensorRT profile"):
        profile_shapes(sizes, (3, 416, 416))


def test_profile_rejects_a_bad_sample_shape() -> None:
    with pytest.raises(BackendError, match=r"sample shape \[3, 0, 416\]"):
        profile_shapes((1,), (3, 0, 416))


# -- calibration ------------------------------------------------------------------------------------------


def frames(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (40 + 3 * i, 60, 3), dtype=np.uint8) for i in range(n)]


@pytest.mark.parametrize(("n", "batch_size", "count"), [(8, 4, 2), (9, 4, 3), (3, 4, 1), (1, 1, 1), (0, 4, 0)])
def test_calibration_batches_have_a_fixed_shape(n: int, batch_size: int, count: int) -> None:
    batches = list(calibration_batches(frames(n), batch_size, (32, 48)))
    assert len(batches) == count
    for batch in batches:
        assert batch.shape == (batch_size, 3, 32, 48) and batch.dtype == np.float32
        assert batch.flags.c_contiguous and 0.0 <= batch.min() and batch.max() <= 1.0


def test_full_calibration_batches_are_the_preprocessed_frames_in_order() -> None:
    source = frames(8)
    batches = list(calibration_batches(source, 4, (32, 48)))
    np.testing.assert_array_equal(np.concatenate(batches), preprocess(source, (32, 48))[0])


def test_last_partial_batch_repeats_its_own_frames() -> None:
    source = frames(6)
    last = list(calibration_batches(source, 4, (32, 48)))[-1]
    expected = preprocess([source[4], source[5], source[4], source[5]], (32, 48))[0]
    np.testing.assert_array_equal(last, expected)


def test_calibration_batches_consume_frames_lazily() -> None:
    consumed: list[int] = []

    def stream() -> Iterator[np.ndarray]:
        for i, frame in enumerate(frames(12)):
            consumed.append(i)
            yield frame

    batches = calibration_batches(stream(), 4, (32, 48))
    next(batches)
    assert len(consumed) == 4


@pytest.mark.parametrize("batch_size", [0, -1, 2.0, True])
def test_calibration_batch_size_must_be_a_positive_integer(batch_size: Any) -> None:
    with pytest.raises(BackendError, match="calibration batch size"):
        next(calibration_batches(frames(2), batch_size, (32, 48)))


def test_calibration_cache_round_trips_bytes(tmp_path: Path) -> None:
    cache = CalibrationCache(tmp_path / "sub" / "model.cache")
    assert cache.read() is None
    table = b"TRT-100-EntropyCalibration2\nimages: 3c010a14\n"
    cache.write(table)
    assert cache.read() == table
    cache.write(memoryview(b"second"))
    assert CalibrationCache(cache.path).read() == b"second"
    assert sorted(p.name for p in cache.path.parent.iterdir()) == ["model.cache"]  # no temporary files left


def test_empty_calibration_cache_means_calibrate_again(tmp_path: Path) -> None:
    path = tmp_path / "model.cache"
    path.write_bytes(b"")
    assert CalibrationCache(path).read() is None


# -- parser errors, build progress ------------------------------------------------------------------------


class ParserErrorStub:
    """Plays a ParserError: accessor methods returning fixed values."""

    def __init__(self, node: int, desc: str, name: str = "", operator: str = "", code: str = "UNSUPPORTED_NODE"):
        self._values = {"node": node, "desc": desc, "node_name": name, "node_operator": operator,
                        "code": types.SimpleNamespace(name=code)}

    def __getattr__(self, item: str) -> Any:
        if item in self._values:
            return lambda: self._values[item]
        raise AttributeError(item)


def test_parser_error_names_node_operator_reason_and_count() -> None:
    errors = [ParserErrorStub(12, "No importer registered\nfor op: Foo", "/model/foo", "Foo"),
              ParserErrorStub(13, "second"), ParserErrorStub(14, "third")]
    message = format_parser_errors("m.onnx", errors)
    assert message == ("TensorRT cannot parse ONNX model 'm.onnx': node 12 '/model/foo' (Foo): No importer registered "
                       "for op: Foo [UNSUPPORTED_NODE] (+2 more errors)")


def test_parser_error_without_a_node_or_newer_accessors() -> None:
    class Old:  # TensorRT < 10: no node_name / node_operator
        def code(self) -> Any:
            return "ErrorCode.INVALID_GRAPH"

        def desc(self) -> str:
            return "graph has no outputs"

        def node(self) -> int:
            return -1

    assert format_parser_errors("m.onnx", [Old()]) == \
        "TensorRT cannot parse ONNX model 'm.onnx': graph has no outputs [INVALID_GRAPH]"
    assert "gave no reason" in format_parser_errors("m.onnx", [])


def test_build_progress_logs_phases_and_throttles_steps(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    progress = BuildProgress(interval_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.DEBUG, logger="detector.trt.build"):
        progress.phase_start("Building engine", None, 3)
        progress.phase_start("Tactic search", "Building engine", 100)
        assert progress.step_complete("Tactic search", 0) is True
        now[0] = 12.0
        assert progress.step_complete("Tactic search", 41) is True
        progress.phase_finish("Tactic search")
        progress.phase_finish("Building engine")
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert info == ["TensorRT build: Building engine (3 steps)",
                    "TensorRT build: Tactic search step 42/100 (12 s elapsed)",
                    "TensorRT build: Building engine done"]


def test_build_progress_draws_a_bar_per_top_level_phase_with_the_nested_step_beside_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DETECTOR_PROGRESS", "1")
    now = [0.0]
    progress = BuildProgress(interval_s=10.0, clock=lambda: now[0])
    progress.phase_start("Building engine", None, 3)
    progress.phase_start("Tactic search", "Building engine", 100)
    now[0] = 1.0
    progress.step_complete("Tactic search", 41)
    progress.phase_finish("Tactic search")
    progress.step_complete("Building engine", 0)
    progress.phase_start("Serializing", None, 2)
    progress.close()  # a build that stopped half-way: its open bars end too
    err = capsys.readouterr().err
    assert "TensorRT: Building engine:   0%|" in err and "| 0/3 [" in err, err
    assert "step/s, Tactic search 42/100]" in err, err
    assert "TensorRT: Serializing:   0%|" in err, err


# -- layer tables, cold start -----------------------------------------------------------------------------


def test_layer_times_are_averaged_per_iteration_and_sorted() -> None:
    records = [("conv1", 0.2), ("conv2", 0.5), ("yolo", 0.2), ("conv1", 0.4), ("conv2", 0.5), ("yolo", 0.2)]
    assert summarize_layer_times(records, 2) == [("conv2", 0.5), ("conv1", pytest.approx(0.3)), ("yolo", 0.2)]


def test_layer_times_reset_drops_warmup_reports() -> None:
    times = LayerTimes()
    times.add("conv1", 9.0)
    times.reset()
    times.add("conv1", 1.0)
    assert times.summary(1) == [("conv1", 1.0)]
    with pytest.raises(BackendError, match="iterations"):
        times.summary(0)


def test_cold_start_is_json_ready() -> None:
    cold = ColdStart(build_s=12.5, deserialize_s=0.04, context_s=0.2, first_inference_ms=3.1, engine_bytes=10)
    assert json.loads(json.dumps(cold.as_dict()))["build_s"] == 12.5
    assert set(cold.as_dict()) >= {"build_s", "from_cache", "deserialize_s", "first_inference_ms"}


# -- fp16 ONNX for strongly typed builds --------------------------------------------------------------------


def test_fp16_export_has_half_weights_float32_io_and_close_outputs(
    tmp_path: Path, packaged_cfg: Callable[[Path, int], Path]
) -> None:
    import onnx
    import onnxruntime as ort

    from detector.spec import ModelSpec
    from detector.trt import fp16_onnx_path

    spec = ModelSpec(packaged_cfg(tmp_path, 128), seed=0, cache_dir=tmp_path / "cache")
    path = fp16_onnx_path(spec)
    assert fp16_onnx_path(spec) == path and path.name.endswith("-fp16.onnx")
    model = onnx.load(str(path))
    io_types = [v.type.tensor_type.elem_type for v in (*model.graph.input, *model.graph.output)]
    assert io_types == [onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT]
    conv_weights = {n.input[1] for n in model.graph.node if n.op_type == "Conv"}
    assert {i.data_type for i in model.graph.initializer if i.name in conv_weights} == {onnx.TensorProto.FLOAT16}
    batch = np.random.default_rng(0).random((2, 3, 128, 128), dtype=np.float32)
    half = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"images": batch})[0]
    session = ort.InferenceSession(str(spec.onnx_path()), providers=["CPUExecutionProvider"])
    full = session.run(None, {"images": batch})[0]
    scale = float(np.abs(full[..., :4]).max())
    np.testing.assert_allclose(half[..., :4], full[..., :4], rtol=0, atol=1e-2 * scale)
    np.testing.assert_allclose(half[..., 4:], full[..., 4:], rtol=0, atol=1e-2)
