"""The engine cache and engine loading, on the CPU: a real ONNX file, a build function standing in for the
TensorRT builder and a stand-in ``Runtime`` that accepts or refuses engine bytes the way TensorRT does
(returns None and logs an error). What is tested is this package's logic: keys, atomic entries, sidecar
checks, rebuild-once on an unusable cached engine, and the TensorRT-RTX refusal becoming EngineRefused."""

from __future__ import annotations

import logging
import types
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper

from detector.trt import (
    EngineLoadError,
    EngineRefused,
    cached_engine,
    deserialize_engine,
    load_engine,
    load_engine_file,
    run_unavailable_reason,
    trt_logger,
)
from detector.errors import BackendUnavailable, ModelFileError

H100 = ("NVIDIA H100 80GB HBM3", (9, 0))


def write_onnx(path: Path, size: int = 8) -> Path:
    """A valid one-node ONNX model: images [batch, 3, size, size] -> decoded (Identity)."""
    images = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, size, size])
    decoded = helper.make_tensor_value_info("decoded", TensorProto.FLOAT, ["batch", 3, size, size])
    graph = helper.make_graph([helper.make_node("Identity", ["images"], ["decoded"], name="id")], "g",
                              [images], [decoded])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


class Severity:
    def __init__(self, name: str) -> None:
        self.name = name


def fake_module(name: str = "tensorrt", *, refusal: str = "", validity: tuple[str, int] | None = None) -> Any:
    """A stand-in for the package's runtime side: engines are bytes starting with b"ENGINE"; anything else is
    refused with TensorRT's kind of log error (``refusal`` replaces the default text)."""
    module = types.ModuleType(name)
    module.__version__ = "1.7.1.116" if "rtx" in name else "10.9.0.34"
    module.calls = {"deserialize": 0}

    class ILogger:
        def __init__(self) -> None:
            pass

    class Runtime:
        def __init__(self, logger: Any) -> None:
            self.logger = logger

        def deserialize_cuda_engine(self, data: bytes) -> Any:
            module.calls["deserialize"] += 1
            if bytes(data).startswith(b"ENGINE") and not refusal:
                return types.SimpleNamespace(data=bytes(data))
            self.logger.log(Severity("ERROR"), refusal or "IRuntime::deserializeCudaEngine: Error Code 6: The engine "
                            "plan file is not compatible with this version of TensorRT")
            return None

    if validity is not None:
        def get_engine_validity(self: Any, data: bytes) -> tuple[Any, int]:
            return types.SimpleNamespace(name=validity[0]), validity[1]

        Runtime.get_engine_validity = get_engine_validity
        module.EngineInvalidityDiagnostics = types.SimpleNamespace(
            __members__={"VERSION_MISMATCH": 1, "UNSUPPORTED_CC": 2, "MALFORMED_ENGINE": 8})
    module.ILogger = ILogger
    module.Runtime = Runtime
    module.ComputeCapability = types.SimpleNamespace(__members__={"NONE": 0, "CURRENT": 1, "SM86": 2, "SM89": 3})
    return module


class Builder:
    """Stands in for build_serialized_engine: returns ``outputs`` in turn and counts its calls."""

    def __init__(self, *outputs: bytes) -> None:
        self.outputs = list(outputs)
        self.calls: list[dict[str, Any]] = []

    def __call__(self, onnx_path: Path, **options: Any) -> bytes:
        self.calls.append(options)
        return self.outputs[min(len(self.calls), len(self.outputs)) - 1]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return write_onnx(tmp_path / "model.onnx")


def entry_options(tmp_path: Path, module: Any, builder: Builder, **extra: Any) -> dict[str, Any]:
    flavor = "tensorrt_rtx" if "rtx" in module.__name__ else "tensorrt"
    return {"cache_dir": tmp_path / "cache", "tensorrt": (module, flavor), "gpu": H100, "build_fn": builder,
            "profile_batches": (1, 4), **extra}


def test_engine_is_built_once_then_read_from_the_cache(tmp_path: Path, model: Path) -> None:
    builder = Builder(b"ENGINE-1")
    options = entry_options(tmp_path, fake_module(), builder)
    first = cached_engine(model, **options)
    second = cached_engine(model, **options)
    assert (first.from_cache, second.from_cache) == (False, True)
    assert first.build_s is not None and second.build_s is None
    assert first.path == second.path and second.data == b"ENGINE-1" and len(builder.calls) == 1
    assert second.meta["sha256"] and second.meta["gpu"] == H100[0] and second.meta["profile"][2] == [4, 3, 8, 8]
    assert builder.calls[0]["precision"] == "fp32" and builder.calls[0]["profile_batches"] == [1, 4]


def test_a_different_model_or_precision_is_another_entry(tmp_path: Path, model: Path) -> None:
    builder = Builder(b"ENGINE-1")
    options = entry_options(tmp_path, fake_module(), builder)
    base = cached_engine(model, **options).path
    assert cached_engine(model, precision="fp16", **options).path != base
    other = write_onnx(tmp_path / "other.onnx", size=16)
    assert cached_engine(other, **options).path != base
    assert cached_engine(model, workspace_mb=256, **options).path != base
    assert len(builder.calls) == 4


def test_a_corrupt_entry_is_rebuilt_before_tensorrt_sees_it(tmp_path: Path, model: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    builder = Builder(b"ENGINE-1", b"ENGINE-2")
    options = entry_options(tmp_path, fake_module(), builder)
    path = cached_engine(model, **options).path
    path.write_bytes(b"ENGINE-X")  # same size, other bytes: a flipped byte on disk
    with caplog.at_level(logging.WARNING):
        again = cached_engine(model, **options)
    assert again.data == b"ENGINE-2" and not again.from_cache and len(builder.calls) == 2
    assert any("does not match the digest" in r.getMessage() for r in caplog.records)


def test_an_entry_without_its_sidecar_is_rebuilt(tmp_path: Path, model: Path) -> None:
    builder = Builder(b"ENGINE-1")
    options = entry_options(tmp_path, fake_module(), builder)
    path = cached_engine(model, **options).path
    path.with_name(path.name + ".json").unlink()
    assert not cached_engine(model, **options).from_cache and len(builder.calls) == 2


def test_a_cached_engine_tensorrt_cannot_load_is_rebuilt_once(tmp_path: Path, model: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    module = fake_module()
    cached_engine(model, **entry_options(tmp_path, module, Builder(b"PLAN-FROM-OLD-TENSORRT")))
    builder = Builder(b"ENGINE-NEW")
    with caplog.at_level(logging.WARNING):
        loaded, entry, cold = load_engine(model, **entry_options(tmp_path, module, builder))
    assert loaded.engine.data == b"ENGINE-NEW" and entry.data == b"ENGINE-NEW" and len(builder.calls) == 1
    assert cold.rebuilt_reason and "not compatible with this version" in cold.rebuilt_reason
    assert cold.build_s is not None and not cold.from_cache and cold.deserialize_s is not None
    assert any("unusable here" in r.getMessage() for r in caplog.records)
    loaded, _entry, cold = load_engine(model, **entry_options(tmp_path, module, builder))
    assert cold.from_cache and cold.cached_build_s is not None and cold.rebuilt_reason is None


def test_a_fresh_engine_that_cannot_be_loaded_is_an_error_naming_the_file(tmp_path: Path, model: Path) -> None:
    with pytest.raises(EngineLoadError) as info:
        load_engine(model, **entry_options(tmp_path, fake_module(), Builder(b"GARBAGE")))
    message = str(info.value)
    assert message.startswith("cannot deserialize TensorRT engine '") and ".engine'" in message
    assert "Error Code 6" in message and "\n" not in message


def test_rtx_refusing_the_gpu_is_engine_refused_without_a_rebuild(tmp_path: Path, model: Path) -> None:
    module = fake_module("tensorrt_rtx_bindings", refusal="Engine deserialization failed: compute capability 9.0 "
                                                           "is not supported")
    builder = Builder(b"ENGINE-RTX")
    with pytest.raises(EngineRefused) as info:
        load_engine(model, **entry_options(tmp_path, module, builder))
    assert isinstance(info.value, BackendUnavailable)
    message = str(info.value)
    assert message.startswith("TensorRT-RTX cannot run engines on NVIDIA H100 80GB HBM3 (compute capability 9.0)")
    assert "8.6, 8.9" in message and "compute capability 9.0 is not supported" in message
    with pytest.raises(EngineRefused):  # the cached engine is refused the same way, still no rebuild
        load_engine(model, **entry_options(tmp_path, module, builder))
    assert len(builder.calls) == 1


def test_rtx_engine_validity_refuses_before_deserializing(tmp_path: Path, model: Path) -> None:
    module = fake_module("tensorrt_rtx_bindings", validity=("INVALID", 2))
    with pytest.raises(EngineRefused, match=r"compute capability 9\.0\).*UNSUPPORTED_CC"):
        deserialize_engine(b"ENGINE-RTX", tensorrt=(module, "tensorrt_rtx"), gpu=H100)
    assert module.calls["deserialize"] == 0


def test_rtx_engine_validity_version_mismatch_is_a_load_error() -> None:
    module = fake_module("tensorrt_rtx_bindings", validity=("INVALID", 1))
    with pytest.raises(EngineLoadError, match="invalid here: VERSION_MISMATCH"):
        deserialize_engine(b"ENGINE-RTX", tensorrt=(module, "tensorrt_rtx"), source="e.engine", gpu=H100)


def test_rtx_engine_validity_valid_goes_on_to_deserialize() -> None:
    module = fake_module("tensorrt_rtx_bindings", validity=("VALID", 0))
    loaded = deserialize_engine(b"ENGINE-RTX", tensorrt=(module, "tensorrt_rtx"), gpu=H100)
    assert loaded.engine.data == b"ENGINE-RTX" and loaded.flavor == "tensorrt_rtx"


def test_logger_forwards_to_logging_and_keeps_errors(caplog: pytest.LogCaptureFixture) -> None:
    logger = trt_logger(fake_module())
    with caplog.at_level(logging.DEBUG, logger="detector.trt.package"):
        logger.log(Severity("WARNING"), "weights are not used")
        logger.log(Severity("ERROR"), "out of memory\n")
        logger.log(Severity("VERBOSE"), "tactic 7")
    assert logger.take_errors() == ["out of memory"] and logger.take_errors() == []
    levels = {r.getMessage(): r.levelno for r in caplog.records}
    assert levels == {"TensorRT: weights are not used": logging.WARNING, "TensorRT: out of memory": logging.ERROR,
                      "TensorRT: tactic 7": logging.DEBUG}


def test_default_build_options_given_or_not_are_the_same_entry(tmp_path: Path, model: Path) -> None:
    builder = Builder(b"ENGINE-1")
    options = entry_options(tmp_path, fake_module(), builder)
    plain = cached_engine(model, **options)
    explicit = cached_engine(model, tf32=True, workspace_mb=None, progress=False, **options)
    assert explicit.path == plain.path and explicit.from_cache and len(builder.calls) == 1
    assert cached_engine(model, tf32=False, **options).path != plain.path


def test_prebuilt_engine_file_is_deserialized_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "given.engine"
    path.write_bytes(b"ENGINE-PREBUILT")
    loaded, entry, cold = load_engine_file(path, tensorrt=(fake_module(), "tensorrt"), gpu=H100)
    assert loaded.engine.data == b"ENGINE-PREBUILT" and entry.path == path and entry.key == "prebuilt"
    assert cold.from_cache and cold.build_s is None and cold.engine_bytes == len(b"ENGINE-PREBUILT")
    assert cold.deserialize_s == loaded.deserialize_s


@pytest.mark.parametrize(("content", "match"), [(None, "cannot read TensorRT engine .*absent.engine"),
                                                (b"", "the file is empty"), (b"junk", "not compatible")])
def test_unusable_prebuilt_engine_file_names_it(tmp_path: Path, content: bytes | None, match: str) -> None:
    path = tmp_path / ("absent.engine" if content is None else "given.engine")
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ModelFileError, match=match):  # EngineLoadError is a ModelFileError
        load_engine_file(path, tensorrt=(fake_module(), "tensorrt"), gpu=H100)


def test_run_unavailable_reason_refuses_int8_on_strongly_typed_packages_only() -> None:
    full = fake_module()
    full.BuilderFlag = types.SimpleNamespace(FP16=1)
    full.IInt8EntropyCalibrator2 = object
    assert run_unavailable_reason(full, "tensorrt", "int8") is None
    assert run_unavailable_reason(full, "tensorrt", "fp16") is None
    assert "strongly typed networks only" in (run_unavailable_reason(fake_module(), "tensorrt", "int8") or "")
