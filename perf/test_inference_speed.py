"""Inference benchmarks: every available backend x precision x batch size, timed on the GPU with CUDA events.

The benchmarked call is the runner's ``infer`` on a batch that already sits on the device in the runner's
``input_format`` (fp16 channels-last for torch-graph / torch-compile fp16: what a GPU preprocess writing the
model's format hands over; trtexec likewise feeds an engine its own I/O formats), with the output left there:
GPU time of the model alone, as pytest-benchmark's statistics (so ``--benchmark-compare`` compares GPU
time). The clock's lead-in covers the call's enqueue (`perf.measure.clock.SuiteClock.covering`), so even eager
PyTorch at batch 1, which enqueues for longer than it computes, reads its GPU execution and not the host's
launch gaps. Beside it, in ``extra_info``: images/s, p50/p90/p95/p99, the enqueue time, whether the call is
*launch-bound* (its enqueue takes longer than its GPU time), and the host latency of the same call with
synchronisation as a second metric (``extra_info["metrics"]["host"]``, every call's time): for a launch-bound
call that is the figure users see, and the gate judges it beside the GPU time and says which moved. On a GPU
the host loop reads the CPU reference (`perf.measure.speedref`) after every `HOST_BLOCK` calls and ``host`` is in its
units (the host's latency tracks the CPU's speed: r = 0.99 between pass medians and the reference on the H100
machine); the wall-clock latencies are ``host_wall``. A separate
loop with host input and output gives host-to-device, compute, device-to-host and enqueue times. On a CPU run
the clock is ``time.perf_counter``.
A batch size that does not fit on the GPU skips with the reason (:mod:`perf.measure.gpu_memory`) and the run goes on;
each backend's runners are released before the next backend runs, with the memory before and after in the
report.
Benchmarks record; they never assert a time.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import pytest

from perf.measure.cases import Case
from perf.measure.clock import SUITE_CLOCK, max_time_s
from perf.session import PERF_SESSION
from perf.report import schema

pytestmark = pytest.mark.benchmark(group="inference", timer=SUITE_CLOCK, warmup=False)

#: Untimed calls before measuring (cuDNN autotuning, CUDA graph capture, lazy allocations), per device type.
WARMUP_CALLS = {"cuda": 20, "cpu": 1}
#: The perf report's table of GPU memory (MiB) before and after each release of a backend's runners.
MEMORY_TABLE = schema.GPU_MEMORY
#: Calls of the side loop that measures per-stage times with host input and output, per device type.
SIDE_LOOP_CALLS = {"cuda": 100, "cpu": 2}
#: The host-latency loop: seconds it aims at, and the fewest and most calls.
HOST_LOOP_S, HOST_LOOP_CALLS = 0.5, (50, 2000)
#: Calls whose enqueue time is measured (each from an idle GPU).
ENQUEUE_CALLS = 10
#: Host-latency calls between two readings of the CPU reference.
HOST_BLOCK = 25


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def test_inference_speed(benchmark: Any, case: Case, runner_pool: Any, input_frames: Any, measured_region: Any,
                         perf_report: Any, perf_measure: Any, perf_controls: Any, perf_kernels: Any,
                         pytestconfig: pytest.Config) -> None:
    for record in runner_pool.release_others(case.backend):  # one backend on the GPU at a time
        perf_report.add(MEMORY_TABLE, {**record, "why": f"next backend: {case.backend}"})
    reason = None
    try:
        built = time.perf_counter()
        runner = runner_pool.get(case.backend, case.precision, **case.options)
        benchmark.extra_info["phase_s"] = {"runner": time.perf_counter() - built}
        if runner.max_batch_size is not None and case.batch > runner.max_batch_size:
            pytest.skip(f"batch {case.batch} exceeds the runner's maximum batch {runner.max_batch_size}")
        _measure(benchmark, case, runner, input_frames, measured_region, perf_report, perf_measure, perf_controls,
                 perf_kernels, pytestconfig.stash[PERF_SESSION].max_time_given)
    except Exception as exc:  # only out-of-memory becomes a skip; everything else fails the test as before
        from perf.measure.gpu_memory import oom_skip_reason

        reason = oom_skip_reason(exc, case.batch, _device_name(runner_pool.device))
        if reason is None:
            raise
    if reason is not None:  # outside the except block: the traceback holding the batch's tensors is gone
        record = runner_pool.release(case.backend)
        perf_report.add(MEMORY_TABLE, {**record, "why": f"out of memory at batch {case.batch}"})
        pytest.skip(reason)


def _enqueue_ms(runner: Any, x: Any) -> float:
    """Median host time to enqueue one call (device input and output, from an idle GPU), ms."""
    times = []
    for _ in range(ENQUEUE_CALLS):
        runner.stream.synchronize()
        start = time.perf_counter()
        runner.infer(x, to_host=False)
        times.append((time.perf_counter() - start) * 1e3)
    runner.stream.synchronize()
    return statistics.median(times)


def _host_latency_s(runner: Any, x: Any, probe: Any = None) -> list[float]:
    """Host wall time of each call, synchronised (s): for about `HOST_LOOP_S`, within `HOST_LOOP_CALLS`; ``probe``
    (a `perf.measure.speedref.ReferenceProbe`) reads the CPU reference between calls, outside their times."""
    fewest, most = HOST_LOOP_CALLS
    out: list[float] = []
    deadline = time.perf_counter() + HOST_LOOP_S
    while len(out) < most and (len(out) < fewest or time.perf_counter() < deadline):
        start = time.perf_counter()
        runner.infer(x, to_host=False)
        runner.stream.synchronize()
        out.append(time.perf_counter() - start)
        if probe is not None:
            probe(len(out))
    return out


def _host_metrics(host_s: list[float], probe: Any) -> dict[str, dict[str, Any]]:
    """``host`` (in CPU-reference units when ``probe`` read the reference) and, then, ``host_wall``."""
    wall = {"label": "host latency (sync)", "unit": "s per call", "data": host_s}
    if probe is None or not probe.readings_s:
        return {"host": wall}
    from perf.measure.speedref import NOMINAL_S, smoothed

    readings, block = probe.readings_s, probe.block  # reading k follows calls k * block .. (k + 1) * block - 1
    normalised = [t * NOMINAL_S / smoothed(readings, i // block) for i, t in enumerate(host_s[: len(readings) * block])]
    return {"host": {"label": "host latency (sync, CPU-reference units)", "unit": "s per call at reference speed",
                     "data": normalised}, "host_wall": {**wall, "label": "host latency (sync, wall clock)"}}


def _device_name(device: str) -> str:
    """The GPU's name for a CUDA device ("NVIDIA H100 80GB HBM3"), else the device as given."""
    if not device.startswith("cuda"):
        return device
    import torch

    return torch.cuda.get_device_name(torch.device(device))


def _measure(benchmark: Any, case: Case, runner: Any, input_frames: Any, measured_region: Any,
             perf_report: Any, perf_measure: Any, perf_controls: Any, perf_kernels: Any, given: bool) -> None:
    """Warm up, benchmark and measure ``runner`` on a batch of ``case.batch`` frames (tensors die with this frame)."""
    import torch

    on_gpu = runner.stream is not None
    if on_gpu:  # built on the GPU from up to 16 real frames: a batch that does not fit fails there, not in host RAM
        tile = torch.from_numpy(input_frames(min(case.batch, 16))).to(runner.torch_device)
        x = tile.repeat(-(-case.batch // len(tile)), 1, 1, 1)[: case.batch].contiguous()
        del tile
        x = runner.as_input(x)  # in the model's dtype and layout, as a GPU preprocess would write it
    else:
        x = input_frames(case.batch)
    device_type = "cuda" if on_gpu else "cpu"

    warmup_start = time.perf_counter()  # includes CUDA graph capture and torch.compile (or its cache hit)
    for _ in range(WARMUP_CALLS[device_type]):
        runner.infer(x, to_host=not on_gpu)
    if on_gpu:
        runner.stream.synchronize()
    warmup_s = time.perf_counter() - warmup_start
    enqueue_ms = _enqueue_ms(runner, x) if on_gpu else None
    phases, mark = benchmark.extra_info.setdefault("phase_s", {}), [time.perf_counter()]

    def phase(name: str) -> None:  # where a test's seconds go (the cost of a verdict), per phase
        now = time.perf_counter()
        phases[name], mark[0] = now - mark[0], now

    benchmark.extra_info.update({"backend": case.backend, "variant": case.variant, "precision": case.precision,
                                 "batch": case.batch, "device": runner.device,
                                 "clock": SUITE_CLOCK.kind if on_gpu else "perf_counter",
                                 "warmup_s": warmup_s, "device_enqueue_ms": enqueue_ms,
                                 "samples": {"metric": "time", "label": "GPU time" if on_gpu else "host time",
                                             "unit": "s per call"}})  # fmt: skip
    # The GPU clock records its events on the current stream: make it the runner's. A runner on no stream of ours
    # (ONNX Runtime's CUDA provider) is timed on the host: events would not see its work.
    on_stream = torch.cuda.stream(runner.stream) if on_gpu else SUITE_CLOCK.on_host()
    if on_gpu:  # its budget on the GPU clock, read as pytest-benchmark starts measuring
        benchmark._max_time = max_time_s(benchmark._max_time, given)
    benchmark.extra_info["max_time_s"] = benchmark._max_time if on_gpu else None
    with measured_region(f"inference[{case.id}]", runner, benchmark.extra_info), on_stream, \
            SUITE_CLOCK.covering(enqueue_ms or 0.0) as lead_in_ms:
        perf_measure(benchmark, runner.infer, x, to_host=not on_gpu)  # re-measured while unstable
    benchmark.extra_info["lead_in_ms"] = lead_in_ms if on_gpu else None
    phase("measure")

    host_s: list[float] = []
    if on_gpu:  # host latency with synchronisation, every call: the second metric
        from perf.measure.speedref import CpuReference, ReferenceProbe

        probe = ReferenceProbe(CpuReference(), HOST_BLOCK) if "cpu-reference" in perf_controls else None
        with measured_region(f"host-latency[{case.id}]", runner):
            host_s = _host_latency_s(runner, x, probe)
        gpu_ms = (benchmark.stats.stats.median * 1e3 if benchmark.stats is not None and benchmark.stats.stats.data
                  else None)
        benchmark.extra_info["launch_bound"] = bool(gpu_ms is not None and enqueue_ms is not None
                                                    and enqueue_ms > gpu_ms)
        benchmark.extra_info.setdefault("metrics", {}).update(_host_metrics(host_s, probe))
    phase("host")
    # The top kernels of this call, kept with the run: what a later compare shows if it got slower.
    perf_kernels(benchmark.extra_info, lambda: runner.infer(x, to_host=not on_gpu), device=device_type,
                 synchronize=runner.stream.synchronize if on_gpu else None)
    phase("kernels")
    # Per-stage times with the input and output on the host (what a pipeline pays).
    host_batch = input_frames(case.batch)
    timings = []
    for _ in range(SIDE_LOOP_CALLS[device_type]):
        runner.infer(host_batch)
        timings.append(runner.last_timing)
    stages = {f"{name}_ms": _median([getattr(t, name + "_ms") for t in timings])
              for name in ("h2d", "compute", "d2h", "enqueue", "total")}
    phase("side loop")

    info: dict[str, Any] = {"host_sync_median_ms": 1e3 * statistics.median(host_s) if host_s else stages["total_ms"],
                            **stages}  # fmt: skip
    stats = benchmark.stats.stats if benchmark.stats is not None else None
    if stats is not None and stats.data:
        from detector.timing import summarize_ms

        samples_ms = [s * 1e3 for s in stats.data]
        info.update(summarize_ms(samples_ms))
        info["images_per_s"] = case.batch / (stats.median)
        perf_report.add(schema.INFERENCE, {
            "case": case.label, "batch": case.batch, "median ms": stats.median * 1e3, "p99 ms": info["p99_ms"],
            "images/s": info["images_per_s"], "h2d ms": stages["h2d_ms"], "compute ms": stages["compute_ms"],
            "d2h ms": stages["d2h_ms"], "enqueue ms": stages["enqueue_ms"],
            "host ms (sync)": info["host_sync_median_ms"], "warm-up s": warmup_s,
        })  # fmt: skip
    benchmark.extra_info.update(info)
