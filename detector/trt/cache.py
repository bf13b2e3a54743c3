"""The engine cache: serialized engines keyed by everything that makes them differ, loaded with clear errors.

An engine is specific to its ONNX bytes, the TensorRT package and version, the GPU (name and compute
capability), the precision and the optimization profile -- :func:`engine_cache_key` hashes all of these
(plus build options such as the workspace limit or TensorRT-RTX targets). Entries live in
``<cache_dir>/engines/`` with a ``.json`` sidecar holding the engine's sha256, size, build time and versions:

* written atomically and built once across processes (:func:`detector.fileio.cached_file`: pytest-xdist
  workers wait on a lock while one builds);
* an entry whose bytes do not match its sidecar (truncated, corrupt, sidecar missing) is rebuilt with a
  warning before TensorRT ever sees it;
* an entry TensorRT cannot deserialize (another TensorRT build, another GPU, corruption the digest could
  not catch) is rebuilt once with a warning (:func:`load_engine`); only a fresh engine failing is an error;
* TensorRT-RTX refusing the GPU (an unsupported compute capability such as the H100's 9.0) is
  :class:`EngineRefused`, a :class:`BackendUnavailable`: rebuilding cannot help, suites skip.

:class:`ColdStart` records what the first use cost: build, deserialization, execution-context creation
(TensorRT-RTX JIT-compiles its kernels there) and the first inference.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detector import fileio
from detector.errors import BackendUnavailable, ModelFileError
from detector.trt.build import DEFAULT_BATCH_SIZES, build_serialized_engine, profile_shapes, rtx_build_targets
from detector.trt.package import (
    cuda_device_info,
    import_tensorrt,
    is_rtx,
    rtx_compute_capabilities,
    rtx_refusal_message,
    tensorrt_version,
    trt_logger,
)

if TYPE_CHECKING:
    from types import ModuleType

log = logging.getLogger(__name__)

__all__ = ["CachedEngine", "ColdStart", "ENGINE_CACHE_VERSION", "EngineLoadError", "EngineRefused", "LoadedEngine",
           "cached_engine", "check_entry", "deserialize_engine", "engine_cache_key", "load_engine", "load_engine_file"]

#: Bump when the build code changes the engines it makes (cached engines are keyed on it).
ENGINE_CACHE_VERSION = 1
#: build_serialized_engine's defaults for the options that change an engine: given or not, same key.
_BUILD_DEFAULTS: dict[str, Any] = {"workspace_mb": None, "tf32": True, "optimization_level": None,
                                   "calibration_batch": None, "compute_capabilities": ()}
_CC_REFUSAL = re.compile(r"compute capabilit|UNSUPPORTED_CC|unsupported (gpu|device|hardware)", re.IGNORECASE)


class EngineRefused(BackendUnavailable):
    """The TensorRT package will not run engines on this GPU (TensorRT-RTX on an unsupported compute capability)."""


class EngineLoadError(ModelFileError):
    """A serialized engine TensorRT cannot deserialize (other version or GPU, corrupt file); names the file."""


@dataclasses.dataclass
class ColdStart:
    """What it cost to get from an ONNX file to the first result; seconds unless the name says ms.

    Attributes:
        build_s: engine build time in this process; ``None`` when the engine came from the cache.
        from_cache: the engine was read from the cache (built earlier or by another process).
        cached_build_s: build time recorded when the cached engine was built (from its sidecar).
        deserialize_s: ``Runtime.deserialize_cuda_engine``.
        context_s: ``create_execution_context`` (TensorRT-RTX compiles its kernels just in time here).
        first_inference_ms: the runner's first inference (batch 1, with buffer allocation; host wall time
            to the synchronized result).
        rebuilt_reason: why a cached engine was rebuilt, if it was.
        engine_path: the cache entry; engine_bytes: its size.
    """

    build_s: float | None = None
    from_cache: bool = False
    cached_build_s: float | None = None
    deserialize_s: float | None = None
    context_s: float | None = None
    first_inference_ms: float | None = None
    rebuilt_reason: str | None = None
    engine_path: str | None = None
    engine_bytes: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the fields."""
        return dataclasses.asdict(self)


@dataclasses.dataclass
class CachedEngine:
    """A cache entry: ``path`` and its bytes, the key, and whether this call built it (``build_s``)."""

    path: Path
    data: bytes
    key: str
    from_cache: bool
    build_s: float | None
    meta: dict[str, Any]


@dataclasses.dataclass
class LoadedEngine:
    """A deserialized ``ICudaEngine`` with the ``Runtime`` that made it (kept alive together)."""

    engine: Any
    runtime: Any
    deserialize_s: float
    tensorrt: Any
    flavor: str


def engine_cache_key(
    onnx_digest: str,
    trt_version: str,
    flavor: str,
    gpu_name: str,
    compute_capability: Sequence[int],
    precision: str,
    profile_shapes: Iterable[Sequence[int]],
    extra: dict[str, Any] | None = None,
) -> str:
    """A short hex key over everything that makes two engines differ; equal inputs give equal keys.

    Args:
        onnx_digest: sha256 of the ONNX file's bytes.
        trt_version: the package's ``__version__``; flavor: ``"tensorrt"`` or ``"tensorrt_rtx"``.
        gpu_name, compute_capability: the GPU, e.g. ``"NVIDIA H100 80GB HBM3"``, ``(9, 0)``.
        precision: ``"fp32"``, ``"fp16"`` or ``"int8"``.
        profile_shapes: the optimization profile's (min, opt, max) input shapes.
        extra: further build options (workspace, targets, calibration data key, ...), JSON-serialisable.
    """
    return fileio.content_key(
        "trt-engine", ENGINE_CACHE_VERSION, str(onnx_digest), str(trt_version), str(flavor), str(gpu_name),
        [int(v) for v in compute_capability], str(precision), [[int(v) for v in s] for s in profile_shapes],
        extra or {},
    )


def cached_engine(
    onnx_path: str | os.PathLike[str],
    *,
    cache_dir: str | os.PathLike[str],
    precision: str = "fp32",
    profile_batches: Iterable[int] = DEFAULT_BATCH_SIZES,
    tensorrt: tuple[ModuleType, str] | None = None,
    gpu: tuple[str, Sequence[int]] | None = None,
    calibrator_factory: Callable[[], Any] | None = None,
    key_extra: dict[str, Any] | None = None,
    reject_digest: str | None = None,
    build_fn: Callable[..., bytes] = build_serialized_engine,
    **build_options: Any,
) -> CachedEngine:
    """The serialized engine for these inputs from ``cache_dir/engines/``, built there on first use.

    Args:
        onnx_path: the model (its bytes are part of the key).
        cache_dir: cache folder (the runner uses ``spec.cache_dir / "trt"``).
        precision, profile_batches: as :func:`~detector.trt.build.build_serialized_engine`.
        tensorrt: ``(module, flavor)``; imported if ``None``.
        gpu: ``(name, (major, minor))``; the current CUDA device if ``None`` (``"no GPU"`` without one).
        calibrator_factory: makes the int8 calibrator, called only when the engine is actually built.
        key_extra: more key material (e.g. the calibration data's identity).
        reject_digest: sha256 of bytes known to be unusable: an entry with these bytes is rebuilt.
        build_fn: the builder, :func:`~detector.trt.build.build_serialized_engine` (tests pass their own).
        **build_options: passed to ``build_serialized_engine`` and part of the key (workspace_mb, tf32, ...).
    """
    trt, flavor = tensorrt or import_tensorrt()
    onnx_path = Path(onnx_path)
    gpu_name, cc = gpu if gpu is not None else _current_gpu()
    if is_rtx(flavor) and "compute_capabilities" not in build_options:
        build_options["compute_capabilities"] = rtx_build_targets(trt, cc if gpu_name != "no GPU" else None)
    batches = list(profile_batches)
    shapes = profile_shapes(batches, _onnx_sample_shape(onnx_path)).as_tuple()
    try:
        digest = fileio.file_digest(onnx_path)
    except FileNotFoundError as e:
        raise ModelFileError(f"cannot build a TensorRT engine from '{onnx_path}': no such file") from e
    keyed = {**_BUILD_DEFAULTS, **build_options}
    options_key = {k: ([list(c) for c in v] if k == "compute_capabilities" else v) for k, v in sorted(keyed.items())
                   if k != "progress"}
    version = tensorrt_version(trt)
    key = engine_cache_key(digest, version, flavor, gpu_name, cc, precision, shapes,
                           {"options": options_key, **(key_extra or {})})
    name = f"engines/{onnx_path.stem}-{flavor}-{precision}-{key}.engine"
    final = Path(cache_dir) / name
    built: dict[str, Any] = {}

    def build(tmp: Path) -> None:
        calibrator = calibrator_factory() if calibrator_factory is not None else None
        start = time.perf_counter()
        data = build_fn(onnx_path, precision=precision, profile_batches=batches, calibrator=calibrator,
                        tensorrt=(trt, flavor), **build_options)
        built["build_s"] = time.perf_counter() - start
        meta = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "build_s": built["build_s"],
                "flavor": flavor, "tensorrt": version, "gpu": gpu_name, "compute_capability": list(cc),
                "precision": precision, "profile": [list(s) for s in shapes], "onnx": str(onnx_path),
                "onnx_sha256": digest}
        fileio.atomic_write_text(_sidecar(final), json.dumps(meta, indent=1))
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())

    def valid(path: Path) -> bool:
        return _entry_ok(path, reject_digest)

    path = fileio.cached_file(cache_dir, name, build, valid=valid)
    data = path.read_bytes()
    meta = _read_sidecar(path)
    from_cache = "build_s" not in built
    if from_cache:
        log.info("TensorRT engine from the cache: %s", path)
    return CachedEngine(path, data, key, from_cache, built.get("build_s"), meta)


def deserialize_engine(
    data: bytes,
    *,
    tensorrt: tuple[ModuleType, str] | None = None,
    source: str | os.PathLike[str] = "<bytes>",
    gpu: tuple[str, Sequence[int]] | None = None,
) -> LoadedEngine:
    """``Runtime.deserialize_cuda_engine`` with errors that say what happened.

    For TensorRT-RTX the engine is first checked with ``Runtime.get_engine_validity`` (RTX 1.7: returns
    ``(EngineValidity, diagnostics)``; VALID / SUBOPTIMAL / INVALID with flags such as UNSUPPORTED_CC).

    Raises:
        EngineRefused: TensorRT-RTX will not run on this GPU (message: GPU, compute capability, supported list).
        EngineLoadError: any other deserialization failure (quotes TensorRT's errors, names ``source``).
    """
    trt, flavor = tensorrt or import_tensorrt()
    logger = trt_logger(trt)
    logger.take_errors()
    runtime = trt.Runtime(logger)
    if is_rtx(flavor):
        _check_rtx_validity(trt, runtime, data, source, gpu)
    start = time.perf_counter()
    try:
        engine = runtime.deserialize_cuda_engine(data)
    except Exception as e:  # some builds raise instead of returning None
        logger.take_errors()
        engine, detail = None, " ".join(str(e).split())
    else:
        detail = "; ".join(logger.take_errors()[-3:])
    seconds = time.perf_counter() - start
    if engine is None:
        if is_rtx(flavor) and _CC_REFUSAL.search(detail or ""):
            name, cc = gpu if gpu is not None else _current_gpu()
            raise EngineRefused(f"{rtx_refusal_message(name, cc, rtx_compute_capabilities(trt))} "
                                f"(TensorRT-RTX: {detail})")
        raise EngineLoadError(f"cannot deserialize TensorRT engine '{source}': {detail or 'no reason given'}")
    log.info("deserialized TensorRT engine %s in %.3f s", source, seconds)
    return LoadedEngine(engine, runtime, seconds, trt, flavor)


def load_engine_file(
    path: str | os.PathLike[str],
    *,
    tensorrt: tuple[ModuleType, str] | None = None,
    gpu: tuple[str, Sequence[int]] | None = None,
) -> tuple[LoadedEngine, CachedEngine, ColdStart]:
    """A prebuilt engine file, deserialized as it is (never rebuilt); the same triple as :func:`load_engine`, the
    entry's key ``"prebuilt"``.

    Raises:
        ModelFileError: the file cannot be read or is empty (names it).
        EngineRefused, EngineLoadError: as :func:`deserialize_engine`.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ModelFileError(f"cannot read TensorRT engine '{path}': {e.strerror or e}") from e
    if not data:
        raise ModelFileError(f"cannot read TensorRT engine '{path}': the file is empty (0 bytes)")
    loaded = deserialize_engine(data, tensorrt=tensorrt, source=path, gpu=gpu)
    entry = CachedEngine(path, data, "prebuilt", True, None, {})
    cold = ColdStart(from_cache=True, deserialize_s=loaded.deserialize_s, engine_path=str(path),
                     engine_bytes=len(data))
    return loaded, entry, cold


def load_engine(onnx_path: str | os.PathLike[str], **options: Any) -> tuple[LoadedEngine, CachedEngine, ColdStart]:
    """:func:`cached_engine` then :func:`deserialize_engine`; a cached engine that fails to deserialize is
    rebuilt once with a warning. ``options`` are :func:`cached_engine`'s.

    Raises:
        EngineRefused: the package will not run on this GPU (no rebuild: it would not help).
        EngineLoadError: a freshly built engine failed to deserialize.
    """
    tensorrt = options.pop("tensorrt", None) or import_tensorrt()
    gpu = options.pop("gpu", None) or _current_gpu()
    entry = cached_engine(onnx_path, tensorrt=tensorrt, gpu=gpu, **options)
    cold = _cold_start(entry)
    try:
        loaded = deserialize_engine(entry.data, tensorrt=tensorrt, source=entry.path, gpu=gpu)
    except EngineRefused:
        raise
    except EngineLoadError as e:
        if not entry.from_cache:
            raise
        log.warning("cached TensorRT engine %s is unusable here (%s); rebuilding it", entry.path, e)
        entry = cached_engine(onnx_path, tensorrt=tensorrt, gpu=gpu,
                              reject_digest=hashlib.sha256(entry.data).hexdigest(), **options)
        cold = _cold_start(entry)
        cold.rebuilt_reason = str(e)
        loaded = deserialize_engine(entry.data, tensorrt=tensorrt, source=entry.path, gpu=gpu)
    cold.deserialize_s = loaded.deserialize_s
    return loaded, entry, cold


def _cold_start(entry: CachedEngine) -> ColdStart:
    cached_build = entry.meta.get("build_s")
    return ColdStart(build_s=entry.build_s, from_cache=entry.from_cache,
                     cached_build_s=float(cached_build) if entry.from_cache and cached_build is not None else None,
                     engine_path=str(entry.path), engine_bytes=len(entry.data))


def _check_rtx_validity(trt: Any, runtime: Any, data: bytes, source: Any, gpu: Any) -> None:
    check = getattr(runtime, "get_engine_validity", None)
    if check is None:
        return
    try:
        validity, diagnostics = check(data)
    except Exception as e:  # an API detail differing between RTX releases must not hide the real load
        log.debug("get_engine_validity failed (%s); deserializing anyway", e)
        return
    state = getattr(validity, "name", str(validity).rpartition(".")[2])
    flags = _flag_names(getattr(trt, "EngineInvalidityDiagnostics", None), diagnostics)
    if state == "SUBOPTIMAL":
        log.warning("TensorRT-RTX: engine %s may run with reduced performance here (%s)", source,
                    ", ".join(flags) or "no detail")
    if state != "INVALID":
        return
    if "UNSUPPORTED_CC" in flags:
        name, cc = gpu if gpu is not None else _current_gpu()
        raise EngineRefused(f"{rtx_refusal_message(name, cc, rtx_compute_capabilities(trt))} "
                            "(TensorRT-RTX: engine validity INVALID, UNSUPPORTED_CC)")
    raise EngineLoadError(f"TensorRT-RTX reports engine '{source}' invalid here: {', '.join(flags) or 'no detail'}")


def _flag_names(enum: Any, value: Any) -> list[str]:
    members = getattr(enum, "__members__", {}) or {}
    try:
        bits = int(value)
    except (TypeError, ValueError):
        return [getattr(value, "name", str(value))]
    names = []
    for name, member in members.items():
        try:
            flag = int(member)
        except (TypeError, ValueError):
            continue
        if flag and bits & flag == flag:
            names.append(str(name))
    return names


def _current_gpu() -> tuple[str, tuple[int, int]]:
    try:
        import torch

        if torch.cuda.is_available():
            return cuda_device_info()
    except Exception as e:  # a broken CUDA setup: key engines as GPU-less rather than fail here
        log.debug("cannot query the CUDA device: %s", e)
    return "no GPU", (0, 0)


def _onnx_sample_shape(onnx_path: Path) -> tuple[int, ...]:
    """(C, H, W) of the ONNX model's single input, read from the graph without its weights."""
    import onnx

    try:
        model = onnx.load(str(onnx_path), load_external_data=False)
    except FileNotFoundError as e:
        raise ModelFileError(f"cannot build a TensorRT engine from '{onnx_path}': no such file") from e
    except Exception as e:
        raise ModelFileError(f"cannot read ONNX model '{onnx_path}': {' '.join(str(e).split())[:200]}") from e
    weights = {init.name for init in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in weights]
    if len(inputs) != 1:
        raise ModelFileError(f"ONNX model '{onnx_path}' has {len(inputs)} inputs; expected one [B, 3, H, W]")
    dims = inputs[0].type.tensor_type.shape.dim
    shape = tuple(int(d.dim_value) for d in dims[1:])
    if len(dims) != 4 or any(v < 1 for v in shape):
        raise ModelFileError(f"ONNX model '{onnx_path}' input '{inputs[0].name}' is not [batch, C, H, W] with fixed "
                             "C, H, W")
    return shape


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def _read_sidecar(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(_sidecar(path).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return {}


def check_entry(path: str | os.PathLike[str], reject_digest: str | None = None) -> str | None:
    """Why the cache entry ``path`` cannot be used, in one line naming it, or ``None`` when it is sound.

    Checked without TensorRT (so before TensorRT ever parses the bytes): the ``.json`` sidecar exists and
    parses; the engine's size and sha256 match it; the flavor and precision in the entry's name match the
    sidecar's (an engine copied in under another entry's name); the bytes are not ``reject_digest``.
    """
    path = Path(path)
    meta = _read_sidecar(path)
    if not meta.get("sha256"):
        return f"TensorRT engine '{path}' has no readable sidecar {_sidecar(path).name}"
    try:
        size = path.stat().st_size
        if size != int(meta.get("bytes", -1)):
            return (f"TensorRT engine '{path}' has {size} bytes; its sidecar says {meta.get('bytes')} "
                    "(truncated or replaced)")
        digest = fileio.file_digest(path)
    except (OSError, ValueError, TypeError) as e:
        return f"TensorRT engine '{path}' cannot be read: {getattr(e, 'strerror', None) or e}"
    if digest != meta["sha256"]:
        return f"TensorRT engine '{path}' does not match the digest in its sidecar (corrupt)"
    parts = path.stem.rsplit("-", 3)
    if len(parts) == 4 and (parts[1], parts[2]) != (meta.get("flavor"), meta.get("precision")):
        return (f"TensorRT engine '{path}' is named {parts[1]} {parts[2]} but was built as {meta.get('flavor')} "
                f"{meta.get('precision')} (mismatched entry)")
    if reject_digest is not None and digest == reject_digest:
        return f"TensorRT engine '{path}' failed to deserialize before"
    return None


def _entry_ok(path: Path, reject_digest: str | None) -> bool:
    """True if the entry passes :func:`check_entry` (a warning names the problem otherwise)."""
    problem = check_entry(path, reject_digest)
    if problem is not None:
        log.warning("%s", problem)
    return problem is None
