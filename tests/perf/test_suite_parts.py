"""Small parts of the suite: cases, the report, the suite clock, the deliberate slowdown, stage timing."""

from __future__ import annotations

import argparse
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detector.timing import StageTimer, percentile, summarize_ms
from perf.measure.cases import make_cases, variants_for
from perf.measure.clock import SuiteClock
from perf.report.suite import PerfReport
from perf.measure.slowdown import parse_delay_ms, slow_down


def test_cpu_cases_leave_out_gpu_only_variants_and_mark_nothing_gpu() -> None:
    params = make_cases(("torch", "onnxruntime", "tensorrt"), ("fp32",), (1, 8), "cpu", nsys_first=True)
    ids = [p.id for p in params]
    assert ids == ["torch-fp32-b1", "torch-fp32-b8", "onnxruntime-fp32-b1", "onnxruntime-fp32-b8"]
    assert all("gpu" not in {m.name for m in p.marks} for p in params)
    nsys = [p.id for p in params if "nsys" in {m.name for m in p.marks}]
    assert nsys == ["torch-fp32-b1", "onnxruntime-fp32-b1"]  # the first benchmark of each backend


def test_gpu_cases_mark_gpu_and_trt_and_can_exclude_the_reference() -> None:
    assert "torch-graph" in variants_for(("torch",), "cuda:1")
    params = make_cases(("torch", "tensorrt"), ("fp32", "fp16"), None, "cuda", exclude=("torch", "fp32"))
    labels = [p.id for p in params]
    assert "torch-fp32" not in labels and "torch-fp16" in labels
    trt = next(p for p in params if p.id == "tensorrt-fp32")
    assert {m.name for m in trt.marks} == {"gpu", "trt"}


def test_ci_marker_picks_the_key_variant_at_batch_one_and_the_largest_batch_in_every_family() -> None:
    def ci(params: list) -> list[str]:
        return [p.id for p in params if "ci" in {m.name for m in p.marks}]

    cuda = make_cases(("torch", "onnxruntime"), ("fp32", "fp16"), (1, 8, 32), "cuda")
    assert ci(cuda) == ["torch-fp32-b1", "torch-fp32-b32", "torch-graph-fp16-b1", "torch-graph-fp16-b32",
                        "torch-compile-fp16-b1", "torch-compile-fp16-b32", "onnxruntime-fp32-b1",
                        "onnxruntime-fp32-b32"]  # fmt: skip
    assert ci(make_cases(("torch",), ("fp32",), (1, 8, 32), "cpu")) == ["torch-fp32-b1"]
    assert ci(make_cases(("torch",), ("fp32", "fp16"), None, "cuda", family="end-to-end")) == ["torch-graph-fp16"]
    parity = make_cases(("torch",), ("fp32", "fp16"), None, "cuda", exclude=("torch", "fp32"), family="parity")
    assert ci(parity) == ["torch-graph-fp16", "torch-compile-fp16"]


def test_clock_lead_in_covers_a_long_enqueue_for_the_block_and_is_put_back() -> None:
    class EventClock:  # stands in for the CUDA-event clock the suite clock would build on a GPU
        lead_in_ms = 1.0

        def __call__(self) -> float:
            return 0.0

    clock = SuiteClock()
    clock.configure(lambda: "cuda", lead_in_ms=1.0)
    clock._clock = events = EventClock()
    with clock.covering(3.0) as lead_in:
        assert lead_in == events.lead_in_ms == 4.5  # 1.5 x the enqueue: the GPU is busy until it is done
    assert events.lead_in_ms == 1.0
    with clock.covering(0.2) as lead_in:
        assert lead_in == 1.0  # a short enqueue keeps the default
    host = SuiteClock()
    host.configure(lambda: "cpu")
    with host.covering(3.0) as lead_in:
        assert lead_in == host.lead_in_ms  # the host clock has no lead-in to stretch


def test_report_renders_known_tables_in_their_column_order_and_writes_both_files(tmp_path) -> None:
    report = PerfReport()
    report.add("End-to-end (the lab's table)", {"End-to-end speed (FPS)": 71.43, "Model Type": "PyTorch",
                                                "Model Input Size": "416x416", "Inference Speed (FPS)": 182.6})
    md = report.to_markdown()
    assert "| Model Type | Model Input Size | Inference Speed (FPS) | End-to-end speed (FPS) |" in md
    assert "| PyTorch | 416x416 | 182.6 | 71.43 |" in md
    paths = report.write(tmp_path)
    merged = PerfReport()
    merged.merge(__import__("json").loads(paths[0].read_text())["tables"])
    assert merged.tables == report.tables


def test_suite_clock_is_the_host_clock_on_a_cpu_run() -> None:
    clock = SuiteClock()
    clock.configure(lambda: "cpu")
    assert clock.kind == "perf_counter" and clock.__name__ == "SuiteClock[perf_counter]"
    first = clock()
    time.sleep(0.01)
    assert clock() - first >= 0.009


@pytest.mark.parametrize("lead_in_ms", [0.0, 0.5])
def test_cuda_clock_times_the_work_between_any_two_readings_after_pytest_benchmarks_precision_probe(
        lead_in_ms: float) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the CUDA-event clock needs one")
    from pytest_benchmark.timers import compute_timer_precision

    from detector.timing import CudaEventClock, sleep_cycles_per_ms

    clock = CudaEventClock(lead_in_ms=lead_in_ms)
    assert 0 < compute_timer_precision(clock) < 1e-4  # an odd number of readings, none around GPU work
    cycles_per_ms = sleep_cycles_per_ms(torch.cuda.current_device())
    readings = [clock()]
    for ms in (5.0, 2.0, 3.0):  # three consecutive intervals: start and end roles alternate across them
        torch.cuda._sleep(int(ms * cycles_per_ms))
        readings.append(clock())
    intervals = [(b - a) * 1e3 for a, b in zip(readings, readings[1:])]
    assert intervals == pytest.approx([5.0, 2.0, 3.0], rel=0.05)


@pytest.mark.parametrize(("text", "ms"), [("0.3", 0.3), ("0.5ms", 0.5), (" 2MS ", 2.0), ("0", 0.0)])
def test_delay_option_parses_milliseconds(text: str, ms: float) -> None:
    assert parse_delay_ms(text) == ms


@pytest.mark.parametrize("text", ["-1", "fast", "", "nan"])
def test_delay_option_rejects_bad_values(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="Could not parse value"):
        parse_delay_ms(text)


class _HostRunner:
    """The two attributes slow_down needs, on a host runner whose own work takes no time."""

    stream = None

    def _infer(self, x):
        return x


def test_slowdown_adds_the_delay_to_every_call_on_the_host() -> None:
    runner = _HostRunner()
    slow_down(runner, 20.0)
    start = time.perf_counter()
    for _ in range(3):
        assert runner._infer(5) == 5
    assert time.perf_counter() - start >= 0.060


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=200), st.floats(0, 100))
def test_percentile_matches_numpy_linear_interpolation(samples: list[float], q: float) -> None:
    assert percentile(samples, q) == pytest.approx(float(np.percentile(samples, q)), rel=1e-9, abs=1e-9)


def test_summary_and_stage_timer_keep_per_stage_totals() -> None:
    timer = StageTimer()
    for _ in range(3):
        with timer.stage("read"):
            time.sleep(0.002)
    timer.add("infer", 5.0)
    assert len(timer.samples_ms["read"]) == 3 and timer.total_ms("read") >= 6.0
    assert timer.totals_ms()["infer"] == 5.0 and timer.total_ms("write") == 0.0
    summary = summarize_ms([1.0, 2.0, 3.0, 4.0])
    assert summary["p50_ms"] == 2.5 and summary["min_ms"] == 1.0 and summary["max_ms"] == 4.0
    assert summarize_ms([]) == {}
