"""Profiling without Nsight Systems: a ``torch.profiler`` trace (Chrome/Perfetto JSON,
``--perf-profile=torch``) of the measured region with the NVTX stage names as ``record_function`` labels; the
measured-region bracket both profilers share (`capture_range`). torch is imported inside the functions only.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from detector import timing
from detector.fileio import atomic_path
from detector.timing import annotate, enable_annotations, profiler_capture

log = logging.getLogger(__name__)

#: The NVTX range / profiler label around the whole measured region (nsys summaries measure GPU idle in it).
MEASURED_RANGE = "measured"


@contextlib.contextmanager
def torch_profile(trace_path: str | os.PathLike[str]) -> Iterator[Any]:
    """Record the block (one `MEASURED_RANGE` label, stage labels inside) with ``torch.profiler`` (CPU, plus
    CUDA on a GPU) and, if it succeeds, write its Chrome/Perfetto trace to ``trace_path`` atomically."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    nvtx, labels = timing._Annotations.nvtx, timing._Annotations.torch_profiler  # no public getter
    enable_annotations(torch_profiler=True)
    try:
        cuda = [ProfilerActivity.CUDA] if torch.cuda.is_available() else []
        with profile(activities=[ProfilerActivity.CPU, *cuda]) as prof:
            with record_function(MEASURED_RANGE):
                yield prof
            if torch.cuda.is_available():
                torch.cuda.synchronize()
    finally:
        enable_annotations(nvtx=nvtx, torch_profiler=labels)
    with atomic_path(Path(trace_path)) as tmp:
        prof.export_chrome_trace(os.fspath(tmp))
    log.info("torch.profiler trace written to %s", trace_path)


@contextlib.contextmanager
def capture_range(*, capture: bool) -> Iterator[None]:
    """A benchmark's measured region: nsys's capture range (cudaProfilerStart/Stop) around it when
    ``capture`` (the nsys child), a `MEASURED_RANGE` annotation inside."""
    with profiler_capture(capture), annotate(MEASURED_RANGE):
        yield
