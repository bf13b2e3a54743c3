"""ONNX -> serialized TensorRT engine: parser errors in one line, an optimization profile, progress in the log
and as bars.

:func:`build_serialized_engine` is the whole build: ``Builder`` -> ``create_network`` -> ``OnnxParser`` ->
``IBuilderConfig`` (precision, workspace, ``ProfilingVerbosity.DETAILED`` so that layer names and
parameters reach NVTX ranges and the engine inspector, one optimization profile over the batch sizes,
progress monitor) -> ``build_serialized_network``. It works with both flavors (see
:mod:`detector.trt.package`):

* ``tensorrt`` 10: weakly typed network (``create_network(0)``; explicit batch is the only mode since 10.0);
  fp16 sets ``BuilderFlag.FP16``; int8 sets ``INT8`` and ``FP16`` (fp16 fallback for layers without int8
  kernels) and needs an ``IInt8EntropyCalibrator2`` (:mod:`detector.trt.calibrate`).
* TensorRT-RTX (and TensorRT 11+): strongly typed (``STRONGLY_TYPED``; always on in RTX 1.7). There are no
  precision flags: the engine computes in the ONNX model's types, so an fp16 engine is built from an fp16
  ONNX model (:func:`fp16_onnx_path`); int8 is refused. The engine is compiled ahead of time for the
  compute capabilities set with ``config.num_compute_capabilities`` / ``set_compute_capability`` (none
  set: portable to 8.0, 8.6, 8.9, 12.0); :func:`rtx_build_targets` picks the current GPU when RTX can
  target it, else leaves the portable default (that is how an H100 still builds, then cannot run).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detector import fileio
from detector.devices import PRECISIONS
from detector.errors import BackendError, BackendUnavailable, ModelFileError
from detector.progress import progress as progress_bar
from detector.progress import spinner
from detector.trt.package import (
    format_cc,
    import_tensorrt,
    is_rtx,
    precision_unavailable_reason,
    rtx_compute_capabilities,
    strongly_typed,
    trt_logger,
)

if TYPE_CHECKING:
    from types import ModuleType

    from detector.spec import ModelSpec

log = logging.getLogger(__name__)

__all__ = ["BuildProgress", "DEFAULT_BATCH_SIZES", "FP16_EXPORT_VERSION", "ProfileShapes", "build_serialized_engine",
           "format_parser_errors", "fp16_onnx_path", "profile_shapes", "rtx_build_targets"]

#: Batch sizes of the default optimization profile (the suite's batch sizes).
DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 8, 32)
#: Bump when :func:`fp16_onnx_path` changes what it writes (cached exports are keyed on it).
FP16_EXPORT_VERSION = 1
_PROGRESS_INTERVAL_S = 10.0


@dataclasses.dataclass(frozen=True)
class ProfileShapes:
    """One optimization profile for the input tensor: ``min`` <= ``opt`` <= ``max`` shapes [B, C, H, W]."""

    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def as_tuple(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """``(min, opt, max)``."""
        return (self.min, self.opt, self.max)


def profile_shapes(batch_sizes: Iterable[int], sample_shape: Sequence[int]) -> ProfileShapes:
    """The optimization profile covering ``batch_sizes`` for inputs ``[B, *sample_shape]``.

    min is the smallest batch size, max the largest, and opt -- the shape TensorRT tunes its kernels for --
    the median of the distinct sizes (the upper median for an even count): ``(1, 8, 32)`` -> 1, 8, 32.
    Every size in between is accepted at run time.

    Raises:
        BackendError: no batch sizes, a size that is not a positive integer, or a bad sample shape.
    """
    sizes = list(batch_sizes)
    if not sizes:
        raise BackendError("TensorRT profile: no batch sizes given; pass at least one positive integer")
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise BackendError(f"TensorRT profile: batch size {size!r} is not a positive integer")
    sample = tuple(sample_shape)
    if not sample or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in sample):
        raise BackendError(f"TensorRT profile: sample shape {list(sample)} must be positive integers, "
                           "e.g. [3, 416, 416]")
    distinct = sorted(set(sizes))
    opt = distinct[len(distinct) // 2]
    return ProfileShapes((distinct[0], *sample), (opt, *sample), (distinct[-1], *sample))


def format_parser_errors(onnx_path: str | os.PathLike[str], errors: Sequence[Any]) -> str:
    """One line describing the ONNX parser's errors: the first in full (node index, name, operator, reason,
    error code), then how many more. ``errors`` are ``ParserError`` objects (``code()``, ``desc()``,
    ``node()``; ``node_name()`` and ``node_operator()`` where the package has them)."""
    if not errors:
        return f"TensorRT cannot parse ONNX model '{onnx_path}': the parser gave no reason (see the log)"
    first = errors[0]
    node = _call(first, "node")
    name = _call(first, "node_name")
    operator = _call(first, "node_operator")
    where = ""
    if node is not None and int(node) >= 0:
        where = f"node {int(node)}"
        if name:
            where += f" '{name}'"
        if operator:
            where += f" ({operator})"
        where += ": "
    code = _call(first, "code")
    code_text = getattr(code, "name", str(code).rpartition(".")[2]) if code is not None else ""
    desc = " ".join(str(_call(first, "desc") or "no description").split())
    more = f" (+{len(errors) - 1} more error{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    code_part = f" [{code_text}]" if code_text else ""
    return f"TensorRT cannot parse ONNX model '{onnx_path}': {where}{desc}{code_part}{more}"


class BuildProgress:
    """Turns TensorRT's progress callbacks into log lines and bars: top-level phases at INFO, nested phases at DEBUG,
    and every ``interval_s`` seconds an INFO line with the innermost phase's step (long builds only). Each top-level
    phase is also a bar of its steps (:func:`detector.progress.progress`, drawn on a terminal) with the nested
    phase's step beside it. ``step_complete`` returns True (never cancels). Thread-safe: TensorRT calls it from
    several threads. :meth:`close` ends the bars of a build that stopped half-way."""

    def __init__(self, interval_s: float = _PROGRESS_INTERVAL_S, clock: Any = time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._phases: dict[str, tuple[str | None, int]] = {}
        self._bars: dict[str, Any] = {}  # top-level phase -> its bar
        self._done: dict[str, int] = {}  # top-level phase -> steps done
        self._started = clock()
        self._last_report = self._started
        self._last_draw = self._started

    def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
        with self._lock:
            self._phases[phase_name] = (parent_phase, int(num_steps))
            if parent_phase is None:
                self._bars[phase_name] = progress_bar(total=int(num_steps) or None,
                                                      desc=f"TensorRT: {phase_name}", unit="step")
                self._done[phase_name] = 0
        level = logging.INFO if parent_phase is None else logging.DEBUG
        log.log(level, "TensorRT build: %s (%d steps)", phase_name, num_steps)

    def step_complete(self, phase_name: str, step: int) -> bool:
        now = self._clock()
        with self._lock:
            due = now - self._last_report >= self.interval_s
            if due:
                self._last_report = now
            steps = self._phases.get(phase_name, (None, 0))[1]
            self._draw(phase_name, step, steps, now)
        if due:
            log.info("TensorRT build: %s step %d/%d (%.0f s elapsed)", phase_name, step + 1, steps,
                     now - self._started)
        return True

    def _draw(self, phase_name: str, step: int, steps: int, now: float) -> None:
        """Advance a top-level phase's bar, or show a nested phase's step beside its top-level phase's bar
        (redrawn at most twice a second). Called with the lock held."""
        bar = self._bars.get(phase_name)
        if bar is not None:
            bar.update(max(0, step + 1 - self._done[phase_name]))
            self._done[phase_name] = max(self._done[phase_name], step + 1)
            return
        top, parent = phase_name, self._phases.get(phase_name, (None, 0))[0]
        while parent is not None:
            top, parent = parent, self._phases.get(parent, (None, 0))[0]
        bar = self._bars.get(top)
        if bar is not None:
            bar.set_postfix_str(f"{phase_name} {step + 1}/{steps}", refresh=now - self._last_draw >= 0.5)
            self._last_draw = now if now - self._last_draw >= 0.5 else self._last_draw

    def phase_finish(self, phase_name: str) -> None:
        with self._lock:
            parent = self._phases.pop(phase_name, (None, 0))[0]
            bar = self._bars.pop(phase_name, None)
            if bar is not None:
                bar.close()
        log.log(logging.INFO if parent is None else logging.DEBUG, "TensorRT build: %s done", phase_name)

    def close(self) -> None:
        """Close the bars of phases TensorRT did not finish (a failed or cancelled build)."""
        with self._lock:
            for bar in self._bars.values():
                bar.close()
            self._bars.clear()


def rtx_build_targets(module: Any, gpu_cc: Sequence[int] | None) -> tuple[tuple[int, int], ...]:
    """Compute capabilities to compile a TensorRT-RTX engine for: the current GPU's if RTX can target it,
    else ``()`` (RTX's portable default; such an engine builds anywhere but runs only on supported GPUs)."""
    if gpu_cc is None:
        return ()
    cc = (int(gpu_cc[0]), int(gpu_cc[1]))
    return (cc,) if cc in rtx_compute_capabilities(module) else ()


def build_serialized_engine(
    onnx_path: str | os.PathLike[str],
    *,
    precision: str = "fp32",
    profile_batches: Iterable[int] = DEFAULT_BATCH_SIZES,
    calibrator: Any = None,
    calibration_batch: int | None = None,
    workspace_mb: int | None = None,
    progress: bool = True,
    tensorrt: tuple[ModuleType, str] | None = None,
    compute_capabilities: Sequence[Sequence[int]] = (),
    tf32: bool = True,
    optimization_level: int | None = None,
) -> bytes:
    """Build a serialized engine (the plan file's bytes) from an ONNX model with one input [B, 3, H, W].

    Args:
        onnx_path: the model; for strongly typed packages its tensor types set the precision.
        precision: ``"fp32"``, ``"fp16"`` or ``"int8"`` (see the module docstring for each flavor).
        profile_batches: batch sizes the engine must accept (see :func:`profile_shapes`).
        calibrator: an ``IInt8EntropyCalibrator2`` (int8 only, required there).
        calibration_batch: batch size the calibrator feeds (its calibration profile); int8 only.
        workspace_mb: ``MemoryPoolType.WORKSPACE`` limit in MiB; ``None`` keeps TensorRT's default.
        progress: log build progress through an ``IProgressMonitor`` (:class:`BuildProgress`) and draw it as bars
            on a terminal (:mod:`detector.progress`); False: neither.
        tensorrt: ``(module, flavor)`` from :func:`~detector.trt.package.import_tensorrt` (imported if None).
        compute_capabilities: TensorRT-RTX targets, e.g. ``[(8, 9)]``; ``()`` keeps RTX's portable default.
        tf32: allow TF32 for fp32 layers (TensorRT's default); False clears ``BuilderFlag.TF32``.
        optimization_level: ``builder_optimization_level`` 0-5; ``None`` keeps the default (3).

    Raises:
        BackendUnavailable: no TensorRT package, or a precision this package cannot build.
        ModelFileError: missing ONNX file, parser errors (one line: node index, name, operator, reason),
            or a graph that is not one [B, 3, H, W] input with a dynamic batch where several sizes are asked.
        BackendError: bad arguments or a failed build (quoting TensorRT's last errors).
    """
    trt, flavor = tensorrt or import_tensorrt()
    onnx_path = Path(onnx_path)
    reason = precision_unavailable_reason(trt, flavor, precision)
    if reason is not None:
        raise BackendUnavailable(f"cannot build a {precision} engine from '{onnx_path}': {reason}")
    if precision not in PRECISIONS:
        raise BackendError(f"cannot build an engine from '{onnx_path}': unknown precision {precision!r}; "
                           f"allowed: {', '.join(PRECISIONS)}")
    if precision == "int8" and calibrator is None:
        raise BackendError(f"cannot build an int8 engine from '{onnx_path}': pass an int8 calibrator")
    if not onnx_path.is_file():
        raise ModelFileError(f"cannot build a TensorRT engine from '{onnx_path}': no such file")
    logger = trt_logger(trt)
    logger.take_errors()
    builder = trt.Builder(logger)
    typed = strongly_typed(trt, flavor)
    flags = 0
    if typed and hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"):
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = [parser.get_error(i) for i in range(parser.num_errors)]
        raise ModelFileError(format_parser_errors(onnx_path, errors))
    input_name, sample_shape, fixed_batch = _network_input(network, onnx_path)
    shapes = profile_shapes(profile_batches, sample_shape)
    if fixed_batch is not None and (shapes.min[0], shapes.max[0]) != (fixed_batch, fixed_batch):
        raise ModelFileError(f"ONNX model '{onnx_path}' has a fixed batch size {fixed_batch}; batch sizes "
                             f"{shapes.min[0]}..{shapes.max[0]} need a dynamic batch (export_onnx dynamic_batch=True)")

    config = builder.create_builder_config()
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    if workspace_mb is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_mb) << 20)
    if not tf32 and hasattr(trt.BuilderFlag, "TF32"):
        config.clear_flag(trt.BuilderFlag.TF32)
    if optimization_level is not None:
        config.builder_optimization_level = int(optimization_level)
    profile = builder.create_optimization_profile()
    profile.set_shape(input_name, *shapes.as_tuple())
    config.add_optimization_profile(profile)
    if not typed and precision in ("fp16", "int8"):
        config.set_flag(trt.BuilderFlag.FP16)
    if precision == "int8":
        config.set_flag(trt.BuilderFlag.INT8)
        config.int8_calibrator = calibrator
        if calibration_batch is not None and hasattr(config, "set_calibration_profile"):
            calib = builder.create_optimization_profile()
            fixed = (int(calibration_batch), *sample_shape)
            calib.set_shape(input_name, fixed, fixed, fixed)
            config.set_calibration_profile(calib)
    if is_rtx(flavor) and compute_capabilities:
        config.num_compute_capabilities = len(compute_capabilities)
        for i, cc in enumerate(compute_capabilities):
            config.set_compute_capability(getattr(trt.ComputeCapability, f"SM{int(cc[0])}{int(cc[1])}"), i)
    monitor = _progress_monitor(trt) if progress and hasattr(trt, "IProgressMonitor") else None
    if monitor is not None:
        config.progress_monitor = monitor

    targets = ", ".join(format_cc(c) for c in compute_capabilities) or "default"
    log.info("building a %s %s engine from %s (profile %s; targets %s)", flavor, precision, onnx_path,
             [s[0] for s in shapes.as_tuple()], targets)
    start = time.perf_counter()
    waiting = progress and monitor is None  # a TensorRT without IProgressMonitor: the elapsed time alone
    try:
        with spinner(f"building a TensorRT {precision} engine") if waiting else contextlib.nullcontext():
            serialized = builder.build_serialized_network(network, config)
    finally:
        if monitor is not None:
            monitor.progress.close()
    seconds = time.perf_counter() - start
    error = getattr(calibrator, "error", None)
    if error is not None:
        raise BackendError(f"int8 calibration for '{onnx_path}' failed: {error}") from error
    if serialized is None:
        detail = "; ".join(logger.take_errors()[-3:]) or "no reason given (see the log)"
        raise BackendError(f"TensorRT failed to build a {precision} engine from '{onnx_path}': {detail}")
    data = bytes(memoryview(serialized))
    log.info("built the %s engine in %.2f s (%.1f MiB)", precision, seconds, len(data) / 2**20)
    return data


def fp16_onnx_path(spec: ModelSpec, opset: int = 17) -> Path:
    """The model exported with fp16 weights and activations, for strongly typed builds (TensorRT-RTX).

    Input ``images`` and output ``decoded`` stay float32: the graph casts the input to fp16 first and the
    output back to fp32 last, so the runner's I/O is the same as for fp32. Cached like
    :meth:`ModelSpec.onnx_path` under ``cache_dir/onnx/`` (key: cfg, weights, torch/onnx versions, opset,
    export versions), xdist-safe.
    """
    import onnx
    import torch

    from detector import export

    key = spec.cache_key("onnx-fp16", torch.__version__, onnx.__version__, int(opset), export.EXPORT_VERSION,
                         FP16_EXPORT_VERSION)
    name = f"onnx/{spec.cfg.stem}-{key}-op{int(opset)}-fp16.onnx"

    def build(tmp: Path) -> None:
        model = spec.load_torch()
        log.info("exporting %s in fp16 to ONNX opset %d", spec.cfg, opset)
        export.export_onnx(_half_model(model), tmp, opset=opset, dynamic_batch=True, input_size=model.input_size)

    return fileio.cached_file(spec.cache_dir, name, build, valid=lambda p: p.stat().st_size > 0)


def _half_model(model: Any) -> Any:
    """``model`` in fp16 wrapped to take and return float32 (casts at both ends); keeps ``input_size``."""
    import torch

    class HalfModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model.half()
            self.input_size = model.input_size

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(x.half()).float()

    return HalfModel()


def _network_input(network: Any, onnx_path: Path) -> tuple[str, tuple[int, ...], int | None]:
    """Name, per-sample shape (C, H, W) and fixed batch size (None if dynamic) of the single input."""
    if network.num_inputs != 1:
        raise ModelFileError(f"ONNX model '{onnx_path}' has {network.num_inputs} inputs; expected one [B, 3, H, W]")
    tensor = network.get_input(0)
    dims = tuple(int(d) for d in tensor.shape)
    if len(dims) != 4 or any(d < 1 for d in dims[1:]):
        raise ModelFileError(f"ONNX model '{onnx_path}' input '{tensor.name}' has shape {list(dims)}; expected "
                             "[batch, 3, H, W] with fixed C, H, W")
    return tensor.name, dims[1:], (dims[0] if dims[0] >= 1 else None)


def _progress_monitor(trt: Any) -> Any:
    base = trt.IProgressMonitor

    class _Monitor(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            base.__init__(self)
            self.progress = BuildProgress()

        def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
            self.progress.phase_start(phase_name, parent_phase, num_steps)

        def step_complete(self, phase_name: str, step: int) -> bool:
            return self.progress.step_complete(phase_name, step)

        def phase_finish(self, phase_name: str) -> None:
            self.progress.phase_finish(phase_name)

    return _Monitor()


def _call(obj: Any, method: str) -> Any:
    fn = getattr(obj, method, None)
    if fn is None:
        return None
    try:
        return fn() if callable(fn) else fn
    except Exception:  # an accessor this package version lacks or that fails: leave it out of the message
        return None
