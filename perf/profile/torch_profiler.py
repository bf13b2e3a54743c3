"""Profiling without Nsight Systems: a ``torch.profiler`` trace (Chrome/Perfetto JSON, ``--perf-profile=torch``) of
the measured region with the NVTX stage names as ``record_function`` labels; the measured-region bracket both
profilers share (`capture_range`); the annotations' own cost. torch is imported inside the functions only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from detector import timing
from detector.fileio import atomic_path
from detector.timing import STAGES, annotate, enable_annotations, profiler_capture

log = logging.getLogger(__name__)

#: Name of the NVTX range / profiler label around the whole measured region (nsys summaries measure GPU idle in it).
MEASURED_RANGE = "measured"


@contextlib.contextmanager
def _annotations(*, nvtx: bool | None = None, torch_profiler: bool | None = None) -> Iterator[None]:
    """Switch annotation kinds for the block, then restore what was set before."""
    before = (timing._Annotations.nvtx, timing._Annotations.torch_profiler)  # no public getter in detector.timing
    enable_annotations(nvtx=nvtx, torch_profiler=torch_profiler)
    try:
        yield
    finally:
        enable_annotations(nvtx=before[0], torch_profiler=before[1])


@contextlib.contextmanager
def torch_profile(trace_path: str | os.PathLike[str], *, activities: Sequence[Any] | None = None) -> Iterator[Any]:
    """Record the block (one `MEASURED_RANGE` label, stage labels inside) with ``torch.profiler`` (``activities``:
    CPU, plus CUDA on a GPU) and, if it succeeds, write its Chrome/Perfetto trace to ``trace_path`` atomically."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    trace_path = Path(trace_path)
    cuda = [ProfilerActivity.CUDA] if torch.cuda.is_available() else []
    acts = list(activities) if activities is not None else [ProfilerActivity.CPU, *cuda]
    with _annotations(torch_profiler=True), profile(activities=acts) as prof:
        with record_function(MEASURED_RANGE):
            yield prof
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    with atomic_path(trace_path) as tmp:
        prof.export_chrome_trace(os.fspath(tmp))
    log.info("torch.profiler trace written to %s", trace_path)


@contextlib.contextmanager
def capture_range(*, capture: bool) -> Iterator[None]:
    """Bracket a benchmark's measured region: the nsys capture range (cudaProfilerStart/Stop, for
    ``--capture-range=cudaProfilerApi``) around it when ``capture`` (the nsys child), and a `MEASURED_RANGE`
    annotation inside (an NVTX range / profiler label when those are switched on)."""
    with profiler_capture(capture), annotate(MEASURED_RANGE):
        yield


def trace_event_names(trace_path: str | os.PathLike[str]) -> set[str]:
    """Names of all events in a Chrome trace JSON (``{"traceEvents": [...]}`` or a bare list)."""
    data = json.loads(Path(trace_path).read_text(encoding="utf-8"))
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    return {event["name"] for event in events if isinstance(event, dict) and "name" in event}


def trace_stage_names(trace_path: str | os.PathLike[str], stages: Sequence[str] = STAGES) -> set[str]:
    """The pipeline stage names (of ``stages``) that appear as events in the trace at ``trace_path``."""
    return trace_event_names(trace_path) & set(stages)


def _ns_per_call(n: int, repeats: int = 5) -> float:
    """Best-of-``repeats`` host time of one empty ``with annotate("infer")`` block, in ns."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(n):
            with annotate("infer"):
                pass
        best = min(best, (time.perf_counter_ns() - start) / n)
    return best


def measure_annotation_overhead(n: int = 10000) -> dict[str, float | int | bool]:
    """Host ns per `detector.timing.annotate` call (best of 5 runs of ``n``): off, NVTX, profiler labels (no profiler
    running); ``nvtx_emitted`` False without a CUDA device (no NVTX push/pop, Python overhead only)."""
    import torch

    with _annotations(nvtx=False, torch_profiler=False):
        off = _ns_per_call(n)
    with _annotations(nvtx=True, torch_profiler=False):
        nvtx = _ns_per_call(n)
    with _annotations(nvtx=False, torch_profiler=True):
        label = _ns_per_call(n)
    return {
        "calls": n,
        "disabled_ns_per_call": off,
        "nvtx_ns_per_call": nvtx,
        "nvtx_overhead_ns_per_call": nvtx - off,
        "torch_label_ns_per_call": label,
        "nvtx_emitted": torch.cuda.is_available(),
    }
