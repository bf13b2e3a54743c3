"""The suite's benchmark clock (perf.measure.clock): the host clock on a CPU run, CUDA events on a GPU one, the
lead-in that covers a long enqueue, the plugin pointing it at the resolved device; and the clock-truth readings
(perf.measure.clock_truth) that judge it against a known duration."""

from __future__ import annotations

import time

import pytest

from perf.measure.clock import SuiteClock

pytest_plugins = ["pytester"]


def test_suite_clock_is_the_host_clock_on_a_cpu_run() -> None:
    clock = SuiteClock()
    clock.configure(lambda: "cpu")
    assert clock.kind == "perf_counter" and clock.__name__ == "SuiteClock[perf_counter]"
    first = clock()
    time.sleep(0.01)
    assert clock() - first >= 0.009


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



def test_a_runner_on_no_stream_of_the_suites_is_timed_on_the_host_within_a_gpu_run() -> None:
    class EventClock:  # stands in for the CUDA-event clock: it must not be read inside the block
        lead_in_ms = 1.0

        def __call__(self) -> float:
            raise AssertionError("CUDA events read for a host-timed runner")

    clock = SuiteClock()
    clock.configure(lambda: "cuda:0", lead_in_ms=1.0)
    clock._clock = EventClock()
    with clock.on_host(), clock.covering(3.0) as lead_in:
        assert clock.kind == "perf_counter" and lead_in == 1.0  # no lead-in stretched: none is enqueued
        first = clock()
        time.sleep(0.01)
        assert clock() - first >= 0.009
    assert clock.kind == "cuda-events"

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
    readings, bounds = [clock()], []
    for ms in (5.0, 2.0, 3.0):  # three consecutive intervals: start and end roles alternate across them
        # events right after one reading and right before the next bracket the same GPU work: the truth even where
        # other processes share the GPU and stretch the sleep (pytest -n on one GPU)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(int(ms * cycles_per_ms))
        end.record()
        readings.append(clock())
        bounds.append((start, end))
    intervals = [(b - a) * 1e3 for a, b in zip(readings, readings[1:])]
    assert intervals == pytest.approx([start.elapsed_time(end) for start, end in bounds], rel=0.05)
    assert intervals == pytest.approx([5.0, 2.0, 3.0], rel=0.5)  # each its own sleep, not the sum or the next


@pytest.mark.usefixtures("lazy_imports_done_outside_pytester")
def test_plugin_points_the_suite_clock_at_the_resolved_device(perf_pytester: pytest.Pytester,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """--perf-device cuda makes the benchmarks' clock the CUDA-event clock (checked where a CUDA device exists: a
    missing one is a usage error), cpu the host clock. The clock starts out pointed at the other device, so a
    plugin that left it alone fails both cases."""
    from perf.measure.clock import SUITE_CLOCK
    from perf.measure.machine import cuda_device_count

    monkeypatch.setattr(SUITE_CLOCK, "_clock", None)  # both restored after the inner runs
    perf_pytester.makepyfile(test_kind="from perf.measure.clock import SUITE_CLOCK\n\n"
                                       "def test_kind(request):\n"
                                       "    print('clock kind', SUITE_CLOCK.kind)\n")  # fmt: skip
    cases = (("cuda", "cuda-events", "cpu"), ("cpu", "perf_counter", "cuda"))
    for device, kind, other in cases if cuda_device_count() else cases[1:]:
        monkeypatch.setattr(SUITE_CLOCK, "_device", lambda other=other: other)
        result = perf_pytester.runpytest("-s", f"--perf-device={device}")
        result.stdout.fnmatch_lines([f"*clock kind {kind}*"])


def test_clock_reading_errors_are_relative_to_the_known_duration() -> None:
    from perf.measure.clock_truth import reading

    r = reading(cycles=2000, cycles_per_ms=1000.0, event_ms=2.02, host_ms=2.1)
    assert r["known_ms"] == 2.0 and r["event_error"] == pytest.approx(0.01)
    assert r["host_error"] == pytest.approx(0.05)
    assert r["offset_us"] == pytest.approx(20.0)


@pytest.mark.parametrize(("device", "given", "expected"), [("cuda", False, 0.2), ("cuda", True, 1.0),
                                                            ("cpu", False, 1.0)])
def test_gpu_clock_budget_is_short_unless_the_user_gave_one(monkeypatch: pytest.MonkeyPatch, device: str,
                                                            given: bool, expected: float) -> None:
    """Rounds past ~100 do not narrow the between-process spread: on the GPU clock pytest-benchmark's default 1 s
    becomes `GPU_MAX_TIME_S`; a ``--benchmark-max-time`` the user gave, or the host clock, keeps its own."""
    from perf.measure.clock import GPU_MAX_TIME_S, SUITE_CLOCK, max_time_s

    monkeypatch.setattr(SUITE_CLOCK, "_device", lambda: device)
    assert GPU_MAX_TIME_S == 0.2
    assert max_time_s(1.0, given) == expected
    assert max_time_s(0.05, False) == 0.05  # a shorter budget stays


def test_a_max_time_on_the_command_line_in_addopts_or_the_environment_counts_as_given(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    from perf.measure.clock import max_time_given

    pytester.makeini("[pytest]\n")
    assert not max_time_given(pytester.parseconfig())
    assert max_time_given(pytester.parseconfig("--benchmark-max-time=0.5"))
    monkeypatch.setenv("PYTEST_ADDOPTS", "--benchmark-max-time 2")
    assert max_time_given(pytester.parseconfig())


def test_cuda_event_clock_reads_event_milliseconds_as_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA events report milliseconds; the clock, like time.perf_counter, counts seconds (checked on the CPU
    with stand-in events that are 2.5 ms apart; the GPU test above times real work)."""
    import torch

    from detector.timing import CudaEventClock

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            assert enable_timing

        def record(self) -> None:
            pass

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, end: Event) -> float:
            return 2.5

    monkeypatch.setattr(torch.cuda, "Event", Event)
    clock = CudaEventClock()
    readings = [clock() for _ in range(3)]
    assert readings == pytest.approx([0.0, 0.0025, 0.005])
