"""Profiling without Nsight Systems: a ``torch.profiler`` trace (Chrome/Perfetto JSON, ``--perf-profile=torch``) of
the measured region with the NVTX stage names as ``record_function`` labels; the measured-region bracket both
profilers share (`capture_range`). torch is imported inside the functions only.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from detector import timing
from detector.fileio import atomic_path
from detector.timing import annotate, enable_annotations, profiler_capture

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
