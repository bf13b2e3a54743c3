"""TensorRT support: package selection, engine build, engine cache, int8 calibration, per-layer profiling.

Works with the ``tensorrt`` package (10+) and with TensorRT-RTX (``tensorrt_rtx`` /
``tensorrt_rtx_bindings``); neither is imported until a function needs it, so this package imports on any
machine. Modules:

* :mod:`~detector.trt.package` -- :func:`import_tensorrt` (which package, which flavor), logging bridge,
  precision and compute-capability support (:func:`run_unavailable_reason`), :func:`rtx_refusal_message`.
* :mod:`~detector.trt.build` -- :func:`build_serialized_engine`, :func:`profile_shapes`, parser errors,
  build progress, :func:`fp16_onnx_path` (the fp16 ONNX a strongly typed fp16 build needs).
* :mod:`~detector.trt.cache` -- :func:`engine_cache_key`, :func:`cached_engine`, :func:`load_engine` (built or
  cached), :func:`load_engine_file` (a prebuilt engine), :class:`ColdStart`.
* :mod:`~detector.trt.calibrate` -- :func:`calibration_batches`, :class:`CalibrationCache`, the entropy
  calibrator.
* :mod:`~detector.trt.profile` -- the ``IProfiler`` layer table and the engine inspector.

The runner that uses all of this is :class:`detector.backends.tensorrt_runner.TensorRTRunner`.
"""

from detector.trt.build import (
    DEFAULT_BATCH_SIZES,
    BuildProgress,
    ProfileShapes,
    build_serialized_engine,
    format_parser_errors,
    fp16_onnx_path,
    profile_shapes,
    rtx_build_targets,
)
from detector.trt.cache import (
    CachedEngine,
    ColdStart,
    EngineLoadError,
    EngineRefused,
    LoadedEngine,
    cached_engine,
    check_entry,
    deserialize_engine,
    engine_cache_key,
    load_engine,
    load_engine_file,
)
from detector.trt.calibrate import (
    CalibrationCache,
    calibration_batches,
    calibration_frames,
    entropy_calibrator,
    int8_calibration,
)
from detector.trt.package import (
    ENV_VAR,
    FLAVORS,
    RTX_COMPUTE_CAPABILITIES,
    cuda_device_info,
    format_cc,
    import_tensorrt,
    is_rtx,
    precision_unavailable_reason,
    rtx_compute_capabilities,
    rtx_refusal_message,
    run_unavailable_reason,
    strongly_typed,
    tensorrt_version,
    torch_dtype,
    trt_logger,
)
from detector.trt.profile import LayerTimes, engine_layer_info, layer_profiler, profile_layers, summarize_layer_times

__all__ = [
    "BuildProgress", "CachedEngine", "CalibrationCache", "ColdStart", "DEFAULT_BATCH_SIZES", "ENV_VAR",
    "EngineLoadError", "EngineRefused", "FLAVORS", "LayerTimes", "LoadedEngine", "ProfileShapes",
    "RTX_COMPUTE_CAPABILITIES", "build_serialized_engine", "cached_engine", "calibration_batches",
    "calibration_frames", "check_entry", "cuda_device_info", "deserialize_engine", "engine_cache_key",
    "engine_layer_info", "entropy_calibrator", "format_cc", "format_parser_errors", "fp16_onnx_path",
    "import_tensorrt", "int8_calibration", "is_rtx", "layer_profiler", "load_engine", "load_engine_file",
    "precision_unavailable_reason", "profile_layers", "profile_shapes", "rtx_build_targets",
    "rtx_compute_capabilities", "rtx_refusal_message", "run_unavailable_reason", "strongly_typed",
    "summarize_layer_times", "tensorrt_version", "torch_dtype", "trt_logger",
]
