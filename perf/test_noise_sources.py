"""Which noise sources matter on this machine (``pytest perf --perf-selftest``): each control, off and on.

For every control of `perf.measure.controls` the same measurement runs alternately with all controls on and with all
but that one (off, on, off, on, ... in one process, so slow drift hits both alike), on two subjects:

* ``end-to-end``: a pass of the sequential pipeline (torch-graph fp16 on a GPU, torch fp32 on a CPU) over the
  first `FRAMES` frames of the perf video; per pass its median seconds per frame (blocks of frames, as the
  end-to-end benchmark takes them), the robust CV of its blocks, and its 99th percentile frame;
* ``host latency``: the same runner's synchronised call at batch 1 (`HOST_CALLS` calls; eager torch, the
  launch-bound case, on a GPU).

The table gives, per control and subject, the spread of the per-pass medians (max / min - 1) and the mean
within-pass CV and p99 with the control off and on, and the ratio of the medians (on / off). "Page cache off"
drops the video from the page cache before each pass (``posix_fadvise(DONTNEED)``); "scratch off" writes the
output into the reports folder. A last row relates the clocks: the range of the GPU's SM clock and of the CPU
reference workload's time (`perf.measure.speedref`, the CPU's speed at that moment) over the passes, and the
correlation of each pass's median with them. ``cpu-reference`` is no setting but a second reading; its effect
is in the noise profile (``wall`` against ``time`` of the video benchmarks). ``gpu-warmup`` runs once a process,
before its runners are built, so its effect is measured across processes (docs/results.md). Results are
recorded, never asserted (the study informs which controls are worth their keep; ``--perf-controls`` switches
them).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from detector.backends import variant
from detector.devices import device_index
from perf.report import schema

TABLE = schema.NOISE_CONTROLS
CLOCKS = schema.NOISE_CLOCKS
#: (variant, precision) of each subject, per device type.
SUBJECTS = {"cuda": {"end-to-end": ("torch-graph", "fp16"), "host latency": ("torch", "fp32")},
            "cpu": {"end-to-end": ("torch", "fp32"), "host latency": ("torch", "fp32")}}  # fmt: skip
FRAMES = {"cuda": 150, "cpu": 20}
HOST_CALLS = {"cuda": 300, "cpu": 10}
PAIRS = {"cuda": 3, "cpu": 2}


def _evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _normalised_ratio(on: list[dict[str, Any]], off: list[dict[str, Any]]) -> float:
    """on / off of the pass medians divided by each pass's CPU reference time: the control's effect with the CPU's
    own speed swings (which alternating passes do not cancel on a shared host) taken out."""
    def median(passes: list[dict[str, Any]]) -> float:
        return statistics.median(p["median"] / p["cpu_ref_ms"] for p in passes)

    return median(on) / median(off)


def _spread(values: list[float]) -> float:
    return max(values) / min(values) - 1 if values and min(values) > 0 else float("nan")


def test_noise_sources(pytestconfig: pytest.Config, perf_device: str, runner_pool: Any, perf_video: Any,
                       perf_reports_dir: Path, perf_report: Any, perf_controls: Any, input_frames: Any) -> None:  # fmt: skip
    from perf.session import PERF_SESSION

    if not pytestconfig.stash[PERF_SESSION].options.selftest:
        pytest.skip("the noise-source study runs with --perf-selftest (pytest perf --perf-selftest)")
    import numpy as np
    import torch

    from detector.pipeline import run_pipeline
    from perf.measure.stability import robust_cv
    from perf.measure.controls import NAMES, Controls, controlled, scratch_dir, warm_page_cache
    from perf.measure.samples import block_samples, block_size
    from perf.measure.speedref import CpuReference
    from perf.measure.telemetry import NvmlSampler

    kind = "cuda" if perf_device.startswith("cuda") else "cpu"
    on_gpu = kind == "cuda"
    runners = {}
    for subject, (variant_name, precision) in SUBJECTS[kind].items():
        preset = variant(variant_name)
        runners[subject] = runner_pool.get(preset.backend, precision, **preset.options)
    frames = min(FRAMES[kind], perf_video.frames or FRAMES[kind])
    disk = perf_reports_dir / "noise-sources"
    disk.mkdir(parents=True, exist_ok=True)
    x_host = input_frames(1)
    reference = CpuReference()
    passes: list[dict[str, Any]] = []

    def measure(subject: str, controls: Controls, scratch: Path) -> dict[str, Any]:
        runner = runners[subject]
        index = device_index(runner.torch_device) if on_gpu else 0
        if subject == "end-to-end":
            (warm_page_cache if "page-cache" in controls else _evict)(perf_video.path)
        ref_before = reference()
        sampler = NvmlSampler(device_index=index, interval_s=controls.telemetry_interval_s) if on_gpu else None
        region = controlled(controls, on_gpu=on_gpu, gpu_index=index if on_gpu else None)
        with sampler if sampler is not None else contextlib.nullcontext(), region:
            if subject == "end-to-end":
                folder = scratch if "scratch" in controls else disk
                result = run_pipeline(runner, perf_video.path, folder / "noise-sources.mp4", batch=1,
                                      names=runner.spec.names, max_frames=frames, keep_detections=False)
                per_frame = [ms / 1e3 for ms in result.iteration_ms]
                samples = block_samples([result.iteration_ms], block_size(len(result.iteration_ms)))
            else:
                x = runner.as_input(torch.from_numpy(x_host).to(runner.torch_device)) if on_gpu else x_host
                per_frame = []
                for _ in range(HOST_CALLS[kind]):
                    start = time.perf_counter()
                    runner.infer(x, to_host=not on_gpu)
                    if on_gpu:
                        runner.stream.synchronize()
                    per_frame.append(time.perf_counter() - start)
                samples = per_frame
        clock = sampler.summary().get("sm_clock_mhz_mean") if sampler is not None else None
        return {"median": float(np.median(samples)), "cv": robust_cv(samples),
                "p99": float(np.percentile(per_frame, 99)), "sm_clock": clock,
                "cpu_ref_ms": 1e3 * (ref_before + reference()) / 2}  # fmt: skip

    everything = Controls()
    with scratch_dir(everything, disk) as scratch:
        for subject in runners:  # one untimed pass each: graph capture, encoder, caches
            measure(subject, everything, scratch)
        for name in NAMES:
            if name in ("cpu-reference", "gpu-warmup"):  # a second reading, or once a process (before the runners)
                continue  # their effects: the noise profile's "wall" vs "time", and across processes (results.md)
            for subject in runners:
                if subject == "host latency" and name in ("page-cache", "scratch", "cv2-threads", "decode-threads"):
                    continue  # nothing of those in a host-latency loop
                off, on = [], []
                for _ in range(PAIRS[kind]):
                    off.append(measure(subject, everything.without(name), scratch))
                    on.append(measure(subject, everything, scratch))
                passes += [{"subject": subject, **p} for p in off + on]
                perf_report.add(TABLE, {
                    "control": name, "subject": subject, "passes": len(off) + len(on),
                    "median ms off": 1e3 * statistics.median(p["median"] for p in off),
                    "median ms on": 1e3 * statistics.median(p["median"] for p in on),
                    "on/off": statistics.median(p["median"] for p in on) / statistics.median(p["median"] for p in off),
                    "on/off (CPU-reference units)": _normalised_ratio(on, off),
                    "pass spread % off": 100 * _spread([p["median"] for p in off]),
                    "pass spread % on": 100 * _spread([p["median"] for p in on]),
                    "within CV % off": 100 * statistics.fmean(p["cv"] for p in off),
                    "within CV % on": 100 * statistics.fmean(p["cv"] for p in on),
                    "p99 ms off": 1e3 * statistics.fmean(p["p99"] for p in off),
                    "p99 ms on": 1e3 * statistics.fmean(p["p99"] for p in on),
                })  # fmt: skip
    for subject in runners:
        chosen = [p for p in passes if p["subject"] == subject]
        row: dict[str, Any] = {"subject": subject, "passes": len(chosen)}
        for key, label in (("sm_clock", "GPU SM clock MHz"), ("cpu_ref_ms", "CPU reference ms")):
            values = [p[key] for p in chosen if p[key] is not None]
            if len(values) > 2 and max(values) > min(values):
                medians = [p["median"] for p in chosen if p[key] is not None]
                row[f"{label} range"] = f"{min(values):.4g}-{max(values):.4g}"
                row[f"corr(median, {label})"] = float(np.corrcoef(values, medians)[0, 1])
            elif values:
                row[f"{label} range"] = f"{min(values):.4g} (constant)"
        perf_report.add(CLOCKS, row)
