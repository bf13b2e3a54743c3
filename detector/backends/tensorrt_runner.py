"""TensorRT runner: an engine built from the spec's ONNX export, cached, run by tensor name on a torch stream.

Works with ``tensorrt`` 10+ and with TensorRT-RTX (see :mod:`detector.trt.package`; ``DETECTOR_TENSORRT``
forces one). :meth:`activate` exports the ONNX model (cached), builds the engine or reads it from
``spec.cache_dir / "trt"`` (:func:`detector.trt.load_engine`: keyed by ONNX bytes, package and version,
GPU and compute capability, precision, profile; unusable cached engines are rebuilt with a warning),
creates the execution context and runs one batch to measure the first inference. Everything runs on the
runner's ``torch.cuda.Stream``: device buffers are torch tensors and ``execute_async_v3`` receives
``stream.cuda_stream``, so TensorRT and torch share one CUDA context and no pycuda is involved. I/O is by
tensor name (``num_io_tensors`` / ``get_tensor_name`` / ``get_tensor_mode``); the input shape is set per
batch size (``set_input_shape``), the input tensor's own memory is handed to TensorRT and each call writes a
fresh output tensor (no copies besides the base class's host transfers).

Precisions: fp32; fp16 (``tensorrt``: ``BuilderFlag.FP16`` on the fp32 ONNX; TensorRT-RTX, whose networks
are strongly typed: an fp16 ONNX export, float32 I/O); int8 (``tensorrt`` 10 only: entropy calibration on
synthetic frames, calibration table cached next to the engines). :meth:`unavailable_reason` says why a
combination cannot run here: ``"tensorrt not installed (tried ...)"``, ``"no CUDA device"``, int8 on a
strongly typed package, or TensorRT-RTX on a GPU it does not support (name, compute capability and the
supported list -- e.g. the H100, 9.0).

Options:

``batch_sizes`` (default ``(1, 8, 32)``)
    The optimization profile: min and max batch accepted, kernels tuned for the median.
``cuda_graph`` (default False)
    ``tensorrt``: per batch size, on first use, a dedicated execution context with static buffers runs one
    warm-up enqueue (TensorRT finishes shape-dependent setup there; capture is legal only once no such
    reallocation is pending), then ``execute_async_v3`` is captured into a ``torch.cuda.CUDAGraph``; later
    calls copy the input into the static buffer, replay and clone the output. If capture fails the batch
    size falls back to plain enqueues (warning). TensorRT-RTX: its own ``CudaGraphStrategy.WHOLE_GRAPH_CAPTURE``
    runtime setting (RTX needs ``REQUIRE_USER_ALLOCATION`` engines for capture by the application).
``workspace_mb``, ``tf32``, ``optimization_level``, ``progress``
    Builder settings (see :func:`detector.trt.build_serialized_engine`); part of the engine cache key.
``calibration_frames`` (256), ``calibration_batch`` (8)
    int8 calibration data: frames of the synthetic scene, preprocessed like the suite's input.
``rtx_kernels`` (``"eager"``)
    TensorRT-RTX dynamic-shape kernel specialisation: ``"eager"`` compiles a kernel for each new shape on
    its first use (stable timings after warm-up), ``"lazy"`` uses fallback kernels while compiling in the
    background (RTX's default), ``"none"`` keeps fallback kernels.
``opset`` (17)
    ONNX opset of the export.

A prebuilt engine (``spec.engine``, e.g. the suite's ``--perf-engine``) is loaded instead of built
(:func:`detector.trt.load_engine_file`): deserialized as is, its optimization profile read from the engine
(``get_tensor_profile_shape``), its input checked against the spec's [B, 3, H, W] and its output's last
dimension against 4 + C. It runs only as ``spec.engine_precision``
(TensorRT keeps no readable record of the precision an engine was built for); other precisions are unavailable.

Measurements the suite reads: :attr:`cold_start` (:class:`detector.trt.ColdStart`: build or cache,
deserialization, context creation, first inference), :attr:`memory` (engine device memory from
``device_memory_size_v2``, device memory taken by activation, peak torch-allocated bytes during inference)
and :meth:`layer_profile` (``IProfiler`` in a separate context and run; never during timed inference).
With ``ProfilingVerbosity.DETAILED`` engines TensorRT itself emits NVTX ranges named after its layers, so
an Nsight Systems capture of a timed run shows the layers without any profiler attached.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, ClassVar

from detector.backends.base import Runner
from detector.errors import BackendError, BackendUnavailable
from detector.trt import (
    DEFAULT_BATCH_SIZES,
    ColdStart,
    cuda_device_info,
    engine_layer_info,
    fp16_onnx_path,
    import_tensorrt,
    int8_calibration,
    is_rtx,
    load_engine,
    load_engine_file,
    profile_layers,
    profile_shapes,
    run_unavailable_reason,
    strongly_typed,
    tensorrt_version,
    torch_dtype,
    trt_logger,
)

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

__all__ = ["TensorRTRunner"]

_RTX_KERNELS = ("eager", "lazy", "none")
_ALIGNMENT = 256  # bytes; torch allocations are 512-aligned, views may not be


class TensorRTRunner(Runner):
    """Runs a TensorRT engine of the spec's model on CUDA (see the module docstring)."""

    name: ClassVar[str] = "tensorrt"
    precisions: ClassVar[tuple[str, ...]] = ("fp32", "fp16", "int8")
    devices: ClassVar[tuple[str, ...]] = ("cuda",)
    options: ClassVar[dict[str, Any]] = {
        "batch_sizes": DEFAULT_BATCH_SIZES,
        "cuda_graph": False,
        "workspace_mb": None,
        "tf32": True,
        "optimization_level": None,
        "progress": True,
        "calibration_frames": 256,
        "calibration_batch": 8,
        "rtx_kernels": "eager",
        "opset": 17,
    }

    def __init__(self, spec: Any, *, device: str = "cuda", precision: str = "fp32", **options: Any) -> None:
        super().__init__(spec, device=device, precision=precision, **options)
        opts = self.options
        try:
            sizes = tuple(opts["batch_sizes"])
        except TypeError:
            raise BackendError(f"runner 'tensorrt': option batch_sizes must be a sequence of positive integers, "
                               f"got {opts['batch_sizes']!r}") from None
        self._profile = profile_shapes(sizes, (1,))  # validates them; only the batch dimension is used
        if opts["rtx_kernels"] not in _RTX_KERNELS:
            raise BackendError(f"runner 'tensorrt': unknown rtx_kernels {opts['rtx_kernels']!r}; allowed: "
                               f"{', '.join(_RTX_KERNELS)}")
        for key in ("calibration_frames", "calibration_batch"):
            if isinstance(opts[key], bool) or not isinstance(opts[key], int) or opts[key] < 1:
                raise BackendError(f"runner 'tensorrt': option {key} must be a positive integer, got {opts[key]!r}")
        #: Cold-start costs of the last activation (None before the first).
        self.cold_start: ColdStart | None = None
        #: flavor, package version, engine file, GPU of the last activation.
        self.engine_info: dict[str, Any] = {}
        #: The last :meth:`layer_profile` table.
        self.last_layer_profile: list[tuple[str, float]] = []
        self._memory: dict[str, int | None] = {}
        self._reset_state()

    def _reset_state(self) -> None:
        self._trt: Any = None
        self._flavor = ""
        self._loaded: Any = None
        self._context: Any = None
        self._input = self._output = ""
        self._in_dtype: Any = None
        self._out_dtype: Any = None
        self._context_batch: int | None = None
        self._out_shape: tuple[int, ...] = ()
        self._graphs: dict[int, Any] = {}
        self._no_graph: set[int] = set()
        self._mem_baseline: int | None = None

    # -- availability -----------------------------------------------------------------------------------
    @classmethod
    def unavailable_reason(cls, device: str = "cuda", precision: str = "fp32") -> str | None:
        """Package first (``"tensorrt not installed (tried ...)"``), then CUDA, the precision, and for
        TensorRT-RTX the GPU's compute capability (:func:`detector.trt.rtx_refusal_message`)."""
        base_reason = super().unavailable_reason(device, precision)  # also validates the names
        # (a prebuilt engine's own precision is checked in _activate: it belongs to the spec, not the class)
        try:
            trt, flavor = import_tensorrt()
        except BackendError as e:  # BackendUnavailable included
            return str(e)
        if base_reason is not None:
            return base_reason
        index = str(device).partition(":")[2]
        return run_unavailable_reason(trt, flavor, precision, int(index) if index else None)

    # -- lifecycle ----------------------------------------------------------------------------------------
    def _activate(self) -> None:
        import torch

        if self.spec.engine is not None and self.precision != self.spec.engine_precision:
            raise BackendUnavailable(f"the prebuilt engine '{self.spec.engine}' runs as "
                                     f"{self.spec.engine_precision} only (not {self.precision})")
        trt, flavor = import_tensorrt()
        self._trt, self._flavor = trt, flavor
        dev = self.torch_device
        gpu = cuda_device_info(dev.index)
        free_before = torch.cuda.mem_get_info(dev)[0]
        height, width = self.spec.input_size
        if self.spec.engine is not None:
            loaded, entry, cold = load_engine_file(self.spec.engine, tensorrt=(trt, flavor), gpu=gpu)
            onnx_path = None
        else:
            loaded, entry, cold, onnx_path = self._built(trt, flavor, gpu, dev)
        self._loaded = loaded
        engine = loaded.engine
        self._bind_io(engine, (3, height, width))
        if self.spec.engine is not None:
            low, _, high = (tuple(int(v) for v in s) for s in engine.get_tensor_profile_shape(self._input, 0))
            self._profile = profile_shapes(sorted({low[0], high[0]}), (1,))
        start = time.perf_counter()
        self._context = self._new_context(native_graphs=True)
        cold.context_s = time.perf_counter() - start
        self.max_batch_size = self._profile.max[0]
        self.engine_info = {"flavor": flavor, "tensorrt": tensorrt_version(trt), "module": trt.__name__,
                            "engine": str(entry.path), "gpu": gpu[0], "compute_capability": list(gpu[1]),
                            "profile_batches": [shape[0] for shape in self._profile.as_tuple()],
                            "onnx": str(onnx_path) if onnx_path is not None else None,
                            "prebuilt": self.spec.engine is not None}
        self._finish_activation(engine, entry, cold, dev, free_before)

    def _built(self, trt: Any, flavor: str, gpu: Any, dev: Any) -> tuple[Any, Any, ColdStart, Any]:
        """An engine of the spec's ONNX model, built or read from the cache (:func:`detector.trt.load_engine`)."""
        height, width = self.spec.input_size
        opts = self.options
        if self.precision == "fp16" and strongly_typed(trt, flavor):
            if self.spec.cfg is None:
                raise BackendUnavailable(f"{flavor} fp16 needs an fp16 export of a Darknet model; the model is the "
                                         f"ONNX file '{self.spec.onnx}'")
            onnx_path = fp16_onnx_path(self.spec, opts["opset"])
        else:
            onnx_path = self.spec.onnx_path(opts["opset"])
        cache_dir = self.spec.cache_dir / "trt"
        build = {"workspace_mb": opts["workspace_mb"], "tf32": opts["tf32"],
                 "optimization_level": opts["optimization_level"], "progress": opts["progress"]}
        calibrator_factory, key_extra = None, {}
        if self.precision == "int8":
            calibrator_factory, key_extra = int8_calibration(
                trt, onnx_path, cache_dir / "calibration", frames=opts["calibration_frames"],
                batch_size=opts["calibration_batch"], net_size=(height, width), device=dev)
            build["calibration_batch"] = opts["calibration_batch"]
        loaded, entry, cold = load_engine(
            onnx_path, cache_dir=cache_dir, precision=self.precision, profile_batches=tuple(opts["batch_sizes"]),
            tensorrt=(trt, flavor), gpu=gpu, calibrator_factory=calibrator_factory, key_extra=key_extra, **build)
        return loaded, entry, cold, onnx_path

    def _finish_activation(self, engine: Any, entry: Any, cold: ColdStart, dev: Any, free_before: int) -> None:
        """First inference (timed) and the memory readings, for a built or a prebuilt engine."""
        import torch

        height, width = self.spec.input_size
        flavor = self._flavor
        engine_memory = getattr(engine, "device_memory_size_v2", None)
        if engine_memory is None:
            engine_memory = getattr(engine, "device_memory_size", None)

        x = torch.zeros((self._profile.min[0], 3, height, width), dtype=torch.float32, device=dev)
        self.stream.synchronize()
        start = time.perf_counter()
        self._infer(x)
        self.stream.synchronize()
        cold.first_inference_ms = (time.perf_counter() - start) * 1e3
        self.cold_start = cold
        self._memory = {
            "engine_device_memory_bytes": int(engine_memory) if engine_memory is not None else None,
            "engine_file_bytes": len(entry.data),
            "activate_device_bytes": int(free_before - torch.cuda.mem_get_info(dev)[0]),
            "peak_inference_bytes": 0,
        }
        self._mem_baseline = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        origin = "cached" if cold.from_cache else f"built in {cold.build_s:.1f} s"
        log.info("tensorrt runner ready: %s %s, engine %s (%s), context %.2f s, first inference %.1f ms",
                 flavor, self.precision, entry.path.name, origin, cold.context_s, cold.first_inference_ms)

    def _deactivate(self) -> None:
        if self._mem_baseline is not None:
            self._memory = self.memory
        self._graphs.clear()
        self._reset_state()

    # -- measurements -------------------------------------------------------------------------------------
    @property
    def memory(self) -> dict[str, int | None]:
        """Device memory in bytes: ``engine_device_memory_bytes`` (TensorRT's activation memory per context,
        ``device_memory_size_v2``), ``engine_file_bytes``, ``activate_device_bytes`` (free device memory
        consumed by activation: weights, context, buffers, torch cache) and ``peak_inference_bytes`` (peak
        torch-allocated bytes above the post-activation baseline while active: inputs, outputs, graph
        buffers; activation resets torch's peak-memory statistics for this device)."""
        memory = dict(self._memory)
        if self._mem_baseline is not None and self.torch_device is not None:
            import torch

            peak = torch.cuda.max_memory_allocated(self.torch_device) - self._mem_baseline
            memory["peak_inference_bytes"] = max(int(peak), int(memory.get("peak_inference_bytes") or 0))
        return memory

    def layer_profile(self, batch_size: int = 1, iterations: int = 20) -> list[tuple[str, float]]:
        """Per-layer GPU time, ``[(layer_name, ms_per_iteration), ...]`` slowest first.

        Runs in a new execution context with its own buffers (2 warm-up runs, then ``iterations`` profiled
        runs), after the runner's pending work; the timed path is untouched. Also kept in
        :attr:`last_layer_profile`.
        """
        import torch

        if not self.is_active:
            raise BackendError("runner 'tensorrt' is not active: call activate() before layer_profile()")
        if not self._profile.min[0] <= batch_size <= self._profile.max[0]:
            raise BackendError(f"runner 'tensorrt': batch size {batch_size} is outside the engine's profile "
                               f"{self._profile.min[0]}..{self._profile.max[0]}")
        height, width = self.spec.input_size
        self.stream.synchronize()
        with torch.cuda.device(self.torch_device):  # the context's memory on the runner's GPU, not the current one
            context = self._new_context(native_graphs=False)
            table = profile_layers(self._loaded.engine, self._trt, context=context,
                                   input_shapes={self._input: (batch_size, 3, height, width)},
                                   device=self.torch_device, stream=self.stream, iterations=iterations)
        del context
        self.last_layer_profile = table
        return table

    def layer_info(self) -> dict[str, Any]:
        """The engine inspector's JSON for the loaded engine (layers, tactics, precisions); ``{}`` if absent."""
        if not self.is_active:
            raise BackendError("runner 'tensorrt' is not active: call activate() before layer_info()")
        return engine_layer_info(self._loaded.engine, self._trt)

    # -- inference ----------------------------------------------------------------------------------------
    @property
    def input_format(self) -> tuple[torch.dtype, torch.memory_format]:
        """The engine's input dtype (float16 for a strongly typed fp16 engine), contiguous NCHW."""
        import torch

        return self._in_dtype or torch.float32, torch.contiguous_format

    def _infer(self, x: torch.Tensor) -> torch.Tensor:
        import torch

        batch = int(x.shape[0])
        if batch < self._profile.min[0]:
            raise BackendError(f"runner 'tensorrt': batch size {batch} is below the engine's profile minimum "
                               f"{self._profile.min[0]} (option batch_sizes)")
        if x.dtype != self._in_dtype:
            x = x.to(self._in_dtype)
        elif x.data_ptr() % _ALIGNMENT:
            x = x.clone()
        if self.options["cuda_graph"] and not is_rtx(self._flavor) and batch not in self._no_graph:
            out = self._replay(x)
            if out is not None:
                return out
        context = self._context
        if self._context_batch != batch:
            if not context.set_input_shape(self._input, tuple(x.shape)):
                raise BackendError(f"runner 'tensorrt': TensorRT rejected input shape {list(x.shape)}")
            self._out_shape = tuple(int(v) for v in context.get_tensor_shape(self._output))
            self._context_batch = batch
        out = torch.empty(self._out_shape, dtype=self._out_dtype, device=self.torch_device)
        context.set_tensor_address(self._input, int(x.data_ptr()))
        context.set_tensor_address(self._output, int(out.data_ptr()))
        if not context.execute_async_v3(self.stream.cuda_stream):
            raise BackendError(f"runner 'tensorrt': execute_async_v3 failed for batch {batch}: {self._errors()}")
        return out

    # -- internals ----------------------------------------------------------------------------------------
    def _bind_io(self, engine: Any, sample_shape: tuple[int, ...]) -> None:
        """Find the one input and one output by name and mode; check the input matches the spec."""
        trt = self._trt
        inputs, outputs = [], []
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            (inputs if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else outputs).append(name)
        if len(inputs) != 1 or len(outputs) != 1:
            raise BackendError(f"runner 'tensorrt': engine has inputs {inputs} and outputs {outputs}; expected one "
                               "input [B, 3, H, W] and one output [B, N, 4 + C]")
        self._input, self._output = inputs[0], outputs[0]
        shape = tuple(int(v) for v in engine.get_tensor_shape(self._input))
        if shape[1:] != sample_shape:
            raise BackendError(f"runner 'tensorrt': engine input '{self._input}' has shape {list(shape)}; the spec "
                               f"expects [B, {', '.join(map(str, sample_shape))}]")
        out_shape = tuple(int(v) for v in engine.get_tensor_shape(self._output))
        columns = 4 + self.spec.num_classes
        if len(out_shape) != 3 or out_shape[2] != columns:
            raise BackendError(f"runner 'tensorrt': engine output '{self._output}' has shape {list(out_shape)}; the "
                               f"model's {self.spec.num_classes} classes need [B, N, {columns}]")
        self._in_dtype = torch_dtype(engine.get_tensor_dtype(self._input))
        self._out_dtype = torch_dtype(engine.get_tensor_dtype(self._output))

    def _new_context(self, *, native_graphs: bool) -> Any:
        """An execution context; for TensorRT-RTX with a runtime config (kernel strategy, native graphs)."""
        trt, engine = self._trt, self._loaded.engine
        if is_rtx(self._flavor) and hasattr(engine, "create_runtime_config"):
            config = engine.create_runtime_config()
            strategy = getattr(trt, "DynamicShapesKernelSpecializationStrategy", None)
            if strategy is not None:
                config.dynamic_shapes_kernel_specialization_strategy = getattr(
                    strategy, self.options["rtx_kernels"].upper())
            if native_graphs and self.options["cuda_graph"] and hasattr(trt, "CudaGraphStrategy"):
                config.cuda_graph_strategy = trt.CudaGraphStrategy.WHOLE_GRAPH_CAPTURE
            context = engine.create_execution_context(config)
        else:
            context = engine.create_execution_context()
        if context is None:
            raise BackendError(f"runner 'tensorrt': cannot create an execution context: {self._errors()}")
        return context

    def _replay(self, x: torch.Tensor) -> torch.Tensor | None:
        batch = int(x.shape[0])
        entry = self._graphs.get(batch)
        if entry is None:
            entry = self._capture(batch)
            if entry is None:
                return None
            self._graphs[batch] = entry
        _context, graph, static_in, static_out = entry
        static_in.copy_(x)
        graph.replay()
        return static_out.clone()

    def _capture(self, batch: int) -> tuple[Any, Any, Any, Any] | None:
        import torch

        height, width = self.spec.input_size
        context = self._new_context(native_graphs=False)
        static_in = torch.zeros((batch, 3, height, width), dtype=self._in_dtype, device=self.torch_device)
        if not context.set_input_shape(self._input, tuple(static_in.shape)):
            raise BackendError(f"runner 'tensorrt': TensorRT rejected input shape {list(static_in.shape)}")
        out_shape = tuple(int(v) for v in context.get_tensor_shape(self._output))
        static_out = torch.empty(out_shape, dtype=self._out_dtype, device=self.torch_device)
        context.set_tensor_address(self._input, int(static_in.data_ptr()))
        context.set_tensor_address(self._output, int(static_out.data_ptr()))
        stream = self.stream
        if not context.execute_async_v3(stream.cuda_stream):  # warm-up: deferred shape-dependent setup
            raise BackendError(f"runner 'tensorrt': execute_async_v3 failed for batch {batch}: {self._errors()}")
        stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                captured = context.execute_async_v3(torch.cuda.current_stream().cuda_stream)
            if not captured:
                raise BackendError(self._errors())
        except Exception as e:  # capture is an optimisation: fall back to plain enqueues for this size
            log.warning("tensorrt runner: CUDA graph capture failed for batch %d (%s); using plain enqueues",
                        batch, " ".join(str(e).split())[:200])
            self._no_graph.add(batch)
            return None
        log.info("tensorrt runner: captured a CUDA graph for batch size %d", batch)
        return context, graph, static_in, static_out

    def _errors(self) -> str:
        errors = trt_logger(self._trt).take_errors() if self._trt is not None else []
        return "; ".join(errors[-3:]) or "no reason given (see the log)"
