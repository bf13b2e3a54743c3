"""Per-layer timing of an engine with ``IProfiler``, in its own execution context, never in a timed run.

TensorRT calls ``IProfiler.report_layer_time(layer_name, ms)`` once per layer for each enqueue of a context
that has a profiler attached; the profiler makes the enqueue synchronous and slower, which is why
:func:`profile_layers` uses a separate execution context and separate buffers and runs only when asked
(``TensorRTRunner.layer_profile``). Layer names are TensorRT's (fused layers show the ONNX node names they
cover); with ``ProfilingVerbosity.DETAILED`` (the build default here) the same names and the layer
parameters are also emitted by TensorRT itself as NVTX ranges, visible in Nsight Systems.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from detector.errors import BackendError

log = logging.getLogger(__name__)

__all__ = ["LayerTimes", "engine_layer_info", "layer_profiler", "profile_layers", "summarize_layer_times"]


def summarize_layer_times(records: Iterable[tuple[str, float]], iterations: int) -> list[tuple[str, float]]:
    """Per-layer milliseconds per iteration, slowest first.

    Args:
        records: ``(layer_name, ms)`` as reported, over ``iterations`` runs (a layer appears once per run).
        iterations: number of profiled runs (>= 1); each layer's total is divided by it.

    Returns:
        ``[(layer_name, ms_per_iteration), ...]`` sorted by time, descending; equal times keep report order.
    """
    if iterations < 1:
        raise BackendError(f"layer profile: iterations must be >= 1, got {iterations}")
    totals: dict[str, float] = {}
    for name, ms in records:
        totals[name] = totals.get(name, 0.0) + float(ms)
    order = {name: i for i, name in enumerate(totals)}
    return sorted(((name, total / iterations) for name, total in totals.items()),
                  key=lambda item: (-item[1], order[item[0]]))


class LayerTimes:
    """Collects ``(layer_name, ms)`` reports; :meth:`summary` averages them (see :func:`summarize_layer_times`)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, float]] = []

    def add(self, layer_name: str, ms: float) -> None:
        self.records.append((str(layer_name), float(ms)))

    def reset(self) -> None:
        self.records.clear()

    def summary(self, iterations: int) -> list[tuple[str, float]]:
        return summarize_layer_times(self.records, iterations)


def layer_profiler(trt: Any) -> Any:
    """An ``IProfiler`` whose ``times`` (:class:`LayerTimes`) collects every report."""
    base = trt.IProfiler

    class LayerProfiler(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            base.__init__(self)
            self.times = LayerTimes()

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            self.times.add(layer_name, ms)

    return LayerProfiler()


def profile_layers(
    engine: Any,
    trt: Any,
    *,
    context: Any,
    input_shapes: dict[str, Sequence[int]],
    device: Any,
    stream: Any,
    iterations: int = 20,
    warmup: int = 2,
) -> list[tuple[str, float]]:
    """Run ``context`` (a fresh execution context of ``engine``, used for nothing else) with a profiler.

    Buffers are new torch tensors on ``device`` (inputs filled with 0.5); ``warmup`` unreported runs come
    first (kernel selection, TensorRT-RTX JIT), then ``iterations`` profiled runs on ``stream`` (a
    ``torch.cuda.Stream``). Returns :func:`summarize_layer_times` of the profiled runs.
    """
    import torch

    from detector.trt.package import torch_dtype

    if iterations < 1:
        raise BackendError(f"layer profile: iterations must be >= 1, got {iterations}")
    profiler = layer_profiler(trt)
    context.profiler = profiler
    if hasattr(context, "enqueue_emits_profile"):
        context.enqueue_emits_profile = True  # the default: each enqueue reports (and waits for) its layers
    for name, shape in input_shapes.items():
        if not context.set_input_shape(name, tuple(int(v) for v in shape)):
            raise BackendError(f"layer profile: TensorRT rejected input shape {list(shape)} for '{name}'")
    buffers = []
    with torch.cuda.stream(stream):  # buffers are filled on the stream the runs are enqueued on
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            shape = tuple(int(v) for v in context.get_tensor_shape(name))
            tensor = torch.full(shape, 0.5, dtype=torch_dtype(engine.get_tensor_dtype(name)), device=device)
            buffers.append(tensor)
            context.set_tensor_address(name, int(tensor.data_ptr()))
        for run in range(warmup + iterations):
            if run == warmup:
                stream.synchronize()
                profiler.times.reset()
            if not context.execute_async_v3(stream.cuda_stream):
                raise BackendError("layer profile: execute_async_v3 failed (see the TensorRT log)")
        stream.synchronize()
    del buffers
    table = profiler.times.summary(iterations)
    log.info("profiled %d layers over %d runs; slowest: %s", len(table), iterations,
             ", ".join(f"{n} {ms:.3f} ms" for n, ms in table[:3]))
    return table


def engine_layer_info(engine: Any, trt: Any, context: Any = None) -> dict[str, Any]:
    """The engine inspector's JSON (``{"Layers": [...], "Bindings": [...]}``); with ``DETAILED`` profiling
    verbosity each layer has its type, tactic, precision and fused ONNX nodes. ``{}`` if unavailable."""
    try:
        inspector = engine.create_engine_inspector()
        if context is not None:
            for attribute in ("execution_context", "context"):  # renamed between TensorRT releases
                if hasattr(inspector, attribute):
                    setattr(inspector, attribute, context)
                    break
        text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
        return dict(json.loads(text))
    except Exception as e:  # diagnostic only: never fail a run because the inspector differs
        log.debug("engine inspector unavailable: %s", e)
        return {}
