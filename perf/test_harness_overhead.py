"""Harness overhead: the suite's measured inference speed against a bare loop over the same runner, same run.

For the fastest path on the GPU (torch-graph in the first of ``--perf-precisions``) at batch 1 and at the largest
``--perf-batch-sizes`` entry, three readings of one runner (a CPU run skips it, saying why):

* suite: pytest-benchmark with the suite's clock (CUDA events around each call), the median;
* bare per-call events: a plain loop with the same two events per call, no pytest-benchmark (what the clock
  alone costs);
* bare loop: back-to-back calls between two events, total / calls (what a user's throughput loop sees).

``overhead`` = suite median / bare loop ms per call - 1. Records, never asserts.
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from detector.backends import variant
from detector.stagespeed import infer_ms_per_call
from perf.measure.clock import SUITE_CLOCK
from perf.report import schema

pytestmark = pytest.mark.benchmark(group="harness", timer=SUITE_CLOCK, warmup=False)
#: Calls per loop at batch 1; larger batches take CALLS // batch, at least MIN_CALLS.
CALLS = 2000
MIN_CALLS = 100
TABLE = schema.HARNESS


def _per_call_events_ms(x: Any, runner: Any, calls: int) -> float:
    """The suite's clock around each call, without pytest-benchmark: median ms."""
    clock = SUITE_CLOCK
    readings = []
    for _ in range(calls):
        t0 = clock()
        runner.infer(x, to_host=runner.stream is None)
        readings.append((clock() - t0) * 1e3)
    return statistics.median(readings)


def test_harness_overhead(benchmark: Any, batch: int, runner_pool: Any, input_frames: Any, perf_device: str,
                          perf_report: Any, pytestconfig: pytest.Config) -> None:
    from perf.session import PERF_SESSION

    backends = pytestconfig.stash[PERF_SESSION].options.backends
    if "torch" not in backends:
        pytest.skip(f"measured on torch, which --perf-backends {','.join(backends)} leaves out")
    if not perf_device.startswith("cuda"):
        pytest.skip("a GPU measurement (CUDA events against a bare loop); on a CPU a few calls of a ~30 ms inference "
                    "cannot resolve the harness's microseconds")  # fmt: skip
    import torch

    precision = pytestconfig.stash[PERF_SESSION].options.precisions[0]
    label = f"torch-graph {precision}"
    graph = variant("torch-graph")
    runner = runner_pool.get(graph.backend, precision, **graph.options)
    x = runner.as_input(torch.from_numpy(input_frames(batch)).to(runner.torch_device))
    calls = max(MIN_CALLS, CALLS // batch)
    with torch.cuda.stream(runner.stream):
        infer_ms_per_call(runner, x, max(1, calls // 10))  # warm-up (graph capture, clocks up)
        bare_ms = infer_ms_per_call(runner, x, calls)
        events_ms = _per_call_events_ms(x, runner, calls)
        benchmark.pedantic(runner.infer, args=(x,), kwargs={"to_host": False}, rounds=calls, iterations=1)
        bare_after_ms = infer_ms_per_call(runner, x, calls)  # drift check: the bare loop again after the suite's
    suite_ms = benchmark.stats.stats.median * 1e3
    bare = statistics.mean([bare_ms, bare_after_ms])
    row = {"case": label, "batch": batch, "suite median ms": suite_ms, "bare loop ms/call": bare,
           "bare per-call events ms": events_ms, "suite FPS": batch / suite_ms * 1e3,
           "bare loop FPS": batch / bare * 1e3, "overhead": suite_ms / bare - 1.0}
    perf_report.add(TABLE, row)
    benchmark.extra_info.update({"harness": row, "bare_loop_before_ms": bare_ms, "bare_loop_after_ms": bare_after_ms})
