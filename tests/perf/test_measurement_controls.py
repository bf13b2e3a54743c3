"""How the suite measures the video pipelines: block samples, the CPU reference, the noise controls, the loops'
hooks, and the real code changes the self-test injects."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import perf.measure.controls as controls_module
from perf.measure.controls import (NAMES, Controls, controlled, keep_output, local_cpus, pin_cpus, scratch_dir,
                                   warm_page_cache, warm_up)
from perf.gate.regressions import LayerRegressedSpec, SlowedStage, calibrate_stage, regressed_spec
from perf.options import parse_controls, parse_regression
from perf.measure.samples import TimedPasses, block_samples, block_size, pass_frames, stage_metrics
from perf.measure.speedref import CpuReference, FrameProbe, ReferenceProbe, normalize, smoothed

# -- block samples -------------------------------------------------------------------------------------------------


def test_blocks_give_seconds_per_frame_per_whole_block_pass_after_pass() -> None:
    passes = [[10.0, 10.0, 20.0, 20.0, 99.0], [30.0, 30.0, 30.0, 30.0]]
    assert block_samples(passes, 2) == pytest.approx([0.010, 0.020, 0.030, 0.030])
    assert block_samples(passes, 2, skip=1) == pytest.approx([0.015, 0.0595, 0.030])
    with pytest.raises(ValueError, match="block"):
        block_samples(passes, 0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.1, 50.0), min_size=1, max_size=200), st.integers(1, 20))
def test_blocks_of_a_steady_pass_average_to_its_mean_frame_time(iterations: list[float], block: int) -> None:
    out = block_samples([iterations], block)
    whole = len(iterations) // block * block
    assert len(out) == len(iterations) // block
    if out:
        assert np.mean(out) == pytest.approx(np.sum(iterations[:whole]) / whole / 1e3)


def test_block_size_aims_at_thirty_blocks_a_pass() -> None:
    assert block_size(300) == 10 and block_size(60) == 2 and block_size(7) == 1


def test_stage_metrics_use_the_same_blocks_and_say_whether_they_are_judged() -> None:
    metrics = stage_metrics([{"read": [1.0, 3.0], "write": [2.0, 2.0]}], 2, judged=False)
    assert metrics["stage:read"] == {"label": "stage read", "unit": "s per frame", "data": [0.002], "judged": False}


class _Benchmark:
    """What `TimedPasses` uses of pytest-benchmark's fixture: ``extra_info``, and ``pedantic``, which calls the
    function once a round (``rounds=0``: as if it never ran it)."""

    def __init__(self) -> None:
        self.extra_info: dict[str, Any] = {}
        self.pedantic_calls: list[dict[str, int]] = []

    def pedantic(self, fn: Any, **kwargs: int) -> None:
        self.pedantic_calls.append(kwargs)
        for _ in range(kwargs["rounds"]):
            fn()


def _pass(iteration_ms: list[float], infer_ms: list[float]) -> Any:
    from detector.pipeline import PipelineResult

    return PipelineResult(Path("v.mp4"), None, "torch", "fp32", "cpu", 1, len(iteration_ms), 64, 64, (32, 32), 1.0,
                          {}, stage_samples_ms={"infer": infer_ms}, iteration_ms=iteration_ms)


def _driver(normalised: bool, block: int = 2) -> TimedPasses[Any]:
    """A driver as on a GPU (the reference read) or a CPU; the reference reads 2 ms, half its nominal speed."""
    passes: TimedPasses[Any] = TimedPasses(block, Controls(), on_gpu=normalised)
    if normalised:
        passes.reference = lambda calls=3: 2e-3  # type: ignore[assignment]
    return passes


def _loop(result: Any) -> Any:
    """One pass of a loop that reports each frame done to its ``on_progress`` probe."""

    def one_pass(probe: Any) -> Any:
        for done in range(1, len(result.iteration_ms) + 1):
            if probe is not None:
                probe(done)
        return result

    return one_pass


def test_timed_passes_run_every_round_inside_the_regions_each_with_a_fresh_probe() -> None:
    log: list[str] = []

    @contextlib.contextmanager
    def region(name: str) -> Iterator[None]:
        log.append(f"enter {name}")
        yield
        log.append(f"exit {name}")

    passes, benchmark = _driver(True), _Benchmark()
    passes.run(benchmark, lambda probe: log.append("pass") or _loop(_pass([1.0] * 4, [0.5] * 4))(probe), 3,
               region("measured"), region("slowed"))  # fmt: skip
    assert log == ["enter measured", "enter slowed", "pass", "pass", "pass", "exit slowed", "exit measured"]
    assert benchmark.pedantic_calls == [{"rounds": 3, "iterations": 1, "warmup_rounds": 0}]
    assert len(passes.results) == 3 and len({id(p) for p in passes.probes}) == 3
    assert passes.readings_s == [[2e-3, 2e-3]] * 3


def test_timed_passes_run_once_outside_the_regions_when_the_benchmark_ran_no_round() -> None:
    log: list[str] = []
    passes = _driver(False)
    passes.run(_Benchmark(), lambda probe: log.append(f"pass, probe {probe}"), 0, contextlib.nullcontext())
    assert log == ["pass, probe None"] and passes.readings_s is None and passes.reference is None


@pytest.mark.parametrize("normalised", [False, True])
def test_sequential_passes_become_block_samples_with_stage_and_wall_metrics(normalised: bool) -> None:
    results = iter([_pass([10.0, 10.0, 20.0, 20.0], [4.0, 4.0, 0.0, 0.0]), _pass([30.0, 30.0], [6.0, 6.0])])
    recorded: dict[str, Any] = {}
    passes, benchmark = _driver(normalised), _Benchmark()
    passes.run(benchmark, lambda probe: _loop(next(results))(probe), 2)
    out = passes.record(benchmark, lambda b, samples, **kw: recorded.update(samples=samples, **kw))
    assert out.wall == pytest.approx([0.010, 0.020, 0.030]) and out.stage_passes[1] == {"infer": [6.0, 6.0]}
    scale = 0.5 if normalised else 1.0
    assert recorded["samples"] == pytest.approx([0.010 * scale, 0.020 * scale, 0.030 * scale])
    assert recorded["metrics"]["wall"]["data"] == pytest.approx(out.wall) and recorded["block"] == 2
    assert recorded["metrics"]["wall"]["label"] == "frame time (wall clock)"
    assert recorded["metrics"]["stage:infer"]["data"] == pytest.approx([0.004 * scale, 0.0, 0.006 * scale])
    assert ("cpu_reference" in benchmark.extra_info) is normalised
    assert recorded["label"] == ("frame time (CPU-reference units)" if normalised else "frame time")
    assert recorded["unit"] == ("s per frame at reference speed" if normalised else "s per frame")


@pytest.mark.parametrize("normalised", [False, True])
def test_multistream_ticks_become_block_samples_per_tick_without_stages(normalised: bool) -> None:
    import types

    ticks = types.SimpleNamespace(tick_ms=[10.0, 10.0, 20.0, 20.0], iteration_ms=[0.0] * 4)  # 4 ticks to probe
    recorded: dict[str, Any] = {}
    passes, benchmark = _driver(normalised), _Benchmark()
    passes.run(benchmark, _loop(ticks), 1)
    out = passes.record(benchmark, lambda b, samples, **kw: recorded.update(samples=samples, **kw), per="tick")
    assert out.wall == pytest.approx([0.010, 0.020]) and out.stages == {}
    assert list(recorded["metrics"]) == ["wall"] and recorded["metrics"]["wall"] == {
        "label": "tick time (wall clock)", "unit": "s per tick", "data": pytest.approx([0.010, 0.020])}
    scale = 0.5 if normalised else 1.0
    assert recorded["samples"] == pytest.approx([0.010 * scale, 0.020 * scale])
    assert (recorded["label"], recorded["unit"]) == (("tick time (CPU-reference units)", "s per tick at reference speed")
                                                     if normalised else ("tick time", "s per tick"))  # fmt: skip


def test_a_pass_runs_the_frames_asked_for_else_the_containers_count(tmp_path: Path) -> None:
    from detector.synthetic import make_synthetic_video

    video = make_synthetic_video(tmp_path / "v.mp4", width=64, height=64, frames=5, seed=1).video
    assert pass_frames(video, 3, 30) == 3 and pass_frames(video, None, 30) == 5


# -- the CPU reference ---------------------------------------------------------------------------------------------


def test_normalising_cancels_a_slowdown_the_reference_shares() -> None:
    readings = [[1e-3, 1e-3, 1e-3], [2e-3, 2e-3, 2e-3]]  # the CPU ran at half speed in the second pass
    blocks = [[5e-3, 5e-3, 5e-3], [10e-3, 10e-3, 10e-3]]
    assert normalize(blocks, readings, 1e-3) == pytest.approx([5e-3] * 6)
    assert normalize([[5e-3, 6e-3]], [[1e-3]], 1e-3) == pytest.approx([5e-3])  # a block without a reading goes
    assert normalize([[5e-3, 6e-3]], [[9.0, 1e-3, 1e-3]], 1e-3, offset=1) == pytest.approx([5e-3, 6e-3])
    assert smoothed([1.0, 50.0, 1.0, 1.0], 1) == 1.0  # one hiccup does not count


def test_reference_probe_reads_once_per_block_whatever_steps_the_count_takes() -> None:
    class Counting:
        calls = 0

        def __call__(self) -> float:
            Counting.calls += 1
            return 1e-3

    probe = ReferenceProbe(Counting(), 3)  # type: ignore[arg-type]
    for done in (1, 2, 3, 4, 8, 9, 12):
        probe(done)
    assert probe.readings_s == [1e-3] * 4 and Counting.calls == 4


def test_writer_probe_reads_after_every_block_past_the_fill_and_takes_its_time_out_of_the_next_interval() -> None:
    probe = FrameProbe(lambda calls=1: 1e-3, block=3, skip=2)  # type: ignore[arg-type]
    for index in range(12):
        probe(index, None, None)
    assert probe.readings_s == [1e-3] * 3  # after frames 4, 7 and 10 (the 3rd, 6th and 9th past the fill)
    assert sorted(probe.spent_ms) == [5, 8, 11]
    intervals = [10.0] * 12
    excluded = probe.exclude(intervals)
    assert [i for i, (a, b) in enumerate(zip(intervals, excluded)) if a != b] == [5, 8, 11]
    assert sum(intervals) - sum(excluded) == pytest.approx(probe.spent_s * 1e3)


def test_writer_probe_in_the_pipelined_loop_reads_on_the_writer_thread_once_per_block(cpu_runner: Any,
                                                                                      clip: Path) -> None:
    import threading

    from detector.pipelined import run_pipelined

    threads: set[str] = set()

    def reference(calls: int = 1) -> float:
        threads.add(threading.current_thread().name)
        return CpuReference()(calls)

    probe = FrameProbe(reference, block=2, skip=1)  # type: ignore[arg-type]
    result = run_pipelined(cpu_runner, clip, None, batch=1, on_frame=probe, keep_detections=False)
    assert len(probe.readings_s) == 2 and threads == {"pipelined-write"}  # frames 2 and 4 end blocks; 6 is short
    excluded = probe.exclude(result.iteration_ms)
    assert min(excluded) >= 0 and sum(result.iteration_ms) - sum(excluded) == pytest.approx(probe.spent_s * 1e3)


def test_reference_workload_takes_a_positive_time_and_touches_no_detector_code() -> None:
    reference = CpuReference()
    assert 0 < reference() < 1.0
    import perf.measure.speedref as module

    assert "detector" not in Path(module.__file__).read_text().split('"""', 2)[2]


# -- the controls --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "active"), [
    ("all", set(NAMES)), ("none", set()), ("gc,pin", {"gc", "pin"}), ("-pin,-gc", set(NAMES) - {"pin", "gc"}),
])  # fmt: skip
def test_controls_parse_as_all_none_a_list_or_all_but(text: str, active: set[str]) -> None:
    assert parse_controls(text).active == frozenset(active)


def test_an_unknown_control_names_the_value_and_the_choices() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="Could not parse value: 'gc,turbo'.*cv2-threads"):
        parse_controls("gc,turbo")


def test_controlled_region_turns_gc_and_opencv_threads_off_and_puts_them_back() -> None:
    import cv2

    threads = cv2.getNumThreads()
    assert gc.isenabled()
    with controlled(Controls(), on_gpu=False) as info:
        assert not gc.isenabled() and cv2.getNumThreads() == 1
        assert info["pin"] == "off: CPU run (torch's threads need the cores)"
    assert gc.isenabled() and cv2.getNumThreads() == threads
    with controlled(Controls(frozenset()), on_gpu=False):
        assert gc.isenabled()


def test_controlled_region_restores_even_when_the_block_raises() -> None:
    from detector import video

    with pytest.raises(RuntimeError), controlled(Controls(), on_gpu=False):
        assert video._decode_threads == 2
        raise RuntimeError("boom")
    assert gc.isenabled() and video._decode_threads is None


def test_scratch_outputs_move_to_the_reports_folder(tmp_path: Path) -> None:
    final = tmp_path / "reports" / "out.mp4"
    with scratch_dir(Controls(), tmp_path / "reports") as scratch:
        (scratch / "out.mp4").write_bytes(b"video")
        assert keep_output(scratch / "out.mp4", final) == final
    assert final.read_bytes() == b"video"
    assert scratch == final.parent or (str(scratch).startswith("/dev/shm/") and not scratch.exists())
    with scratch_dir(Controls(frozenset()), tmp_path / "disk") as folder:
        assert folder == tmp_path / "disk" and folder.is_dir()


def test_the_warm_up_runs_its_seconds_once_a_process_and_device_and_not_when_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controls_module, "_warmed", set())  # this process's record, fresh for the test
    assert warm_up(Controls().without("gpu-warmup"), "cpu", seconds=0.05, size=32) is None
    took = warm_up(Controls(), "cpu", seconds=0.05, size=32)
    assert took is not None and took >= 0.05
    assert warm_up(Controls(), "cpu", seconds=0.05, size=32) is None  # done earlier in the process
    assert controls_module._warmed == {"cpu"}
    controls_module.session_controls(Controls(), device="cpu")  # a CPU run warms nothing
    assert controls_module._warmed == {"cpu"}


def test_warm_page_cache_reads_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "v.bin"
    path.write_bytes(b"x" * 3_000_000)
    assert warm_page_cache(path) == 3_000_000


# -- the loops' hooks ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_runner() -> Any:
    from detector.backends import create_runner
    from detector.spec import ModelSpec

    with create_runner("torch", ModelSpec.default(), device="cpu") as runner:
        yield runner


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from detector.synthetic import synthetic_video

    return synthetic_video(tmp_path_factory.mktemp("clip"), seed=3, width=320, height=192, frames=6).video


def test_each_loop_calls_its_hook_outside_its_timed_spans(cpu_runner: Any, clip: Path) -> None:
    from detector.multistream import run_multistream
    from detector.pipeline import run_pipeline
    from detector.pipelined import run_pipelined

    seen: list[int] = []
    result = run_pipeline(cpu_runner, clip, None, on_progress=seen.append, keep_detections=False)
    assert seen == [1, 2, 3, 4, 5, 6] and len(result.iteration_ms) == 6
    assert sum(result.iteration_ms) <= result.wall_s * 1e3
    assert all(len(v) == 6 for v in result.stage_samples_ms.values())  # the read that met the end is no sample
    seen.clear()
    piped = run_pipelined(cpu_runner, clip, None, batch=2, on_progress=seen.append, keep_detections=False)
    assert seen == [2, 4, 6] and len(piped.iteration_ms) == 6
    seen.clear()
    streams = run_multistream(cpu_runner, [clip, clip], ticks=4, warmup_ticks=1, on_progress=seen.append)
    assert seen == [1, 2, 3, 4] and len(streams.tick_ms) == 4


def test_decode_threads_setting_is_used_by_new_readers_and_rejects_nonsense(clip: Path) -> None:
    from detector.video import open_video, set_decode_threads

    assert set_decode_threads(1) is None
    try:
        with open_video(clip) as reader:
            assert sum(1 for _ in reader) == 6
    finally:
        assert set_decode_threads(None) == 1
    with pytest.raises(ValueError, match="decode threads"):
        set_decode_threads(0)


def _two_socket_sysfs(root: Path) -> Path:
    """A sysfs of two NUMA nodes of 8 CPUs (and their hyper-threads), a GPU on each."""
    for address, cpus in (("0000:1b:00.0", "0-7,16-23"), ("0000:9a:00.0", "8-15,24-31")):
        (root / "bus" / "pci" / "devices" / address).mkdir(parents=True)
        (root / "bus" / "pci" / "devices" / address / "local_cpulist").write_text(cpus + "\n")
    return root


def test_pin_uses_the_cpus_local_to_the_gpu_on_a_two_socket_host(tmp_path: Path) -> None:
    sysfs = _two_socket_sysfs(tmp_path)
    assert local_cpus("0000:1b:00.0", sysfs) == set(range(8)) | set(range(16, 24))
    assert local_cpus("00000000:9A:00.0", sysfs) == set(range(8, 16)) | set(range(24, 32))  # NVML's form
    assert pin_cpus(range(32), "0000:9a:00.0", sysfs) == [*range(8, 16), *range(24, 32)]
    assert pin_cpus(range(12, 32), "0000:1b:00.0", sysfs) == list(range(16, 24))  # only the allowed ones


def test_pin_keeps_every_allowed_cpu_without_a_usable_numa_answer(tmp_path: Path) -> None:
    sysfs = _two_socket_sysfs(tmp_path)
    assert local_cpus("0000:3c:00.0", sysfs) is None
    odd = sysfs / "bus" / "pci" / "devices" / "0000:3c:00.0"
    odd.mkdir()
    for text in ("", "\n", "0-", "3-1", "a-b", "0-99999999", "-1"):  # none is a list the kernel writes
        (odd / "local_cpulist").write_text(text)
        assert local_cpus("0000:3c:00.0", sysfs) is None, text
    (odd / "local_cpulist").unlink()
    assert pin_cpus(range(32), "0000:3c:00.0", sysfs) == list(range(32))  # no such file
    assert pin_cpus(range(32), None, sysfs) == list(range(32))  # no PCI address (CPU run, older torch)
    assert pin_cpus(range(8, 16), "0000:1b:00.0", sysfs) == list(range(8, 16))  # none of the allowed is local
    assert pin_cpus(range(4, 12), "0000:9a:00.0", sysfs) == list(range(4, 12))  # 4 local: too few to pin on


def test_pinned_workers_get_the_cpus_the_placement_names() -> None:
    import os
    import threading

    from detector.handoff import Control, set_thread_placement, start_worker

    cpu = sorted(os.sched_getaffinity(0))[-1]
    seen: dict[str, set[int]] = {}
    previous = set_thread_placement(lambda name: {cpu} if name == "pinned" else None)
    try:
        for name in ("pinned", "free"):
            thread = start_worker(name, lambda n=name: seen.__setitem__(n, os.sched_getaffinity(0)), Control())
            thread.join()
    finally:
        set_thread_placement(previous)
    assert seen["pinned"] == {cpu} and seen["free"] == os.sched_getaffinity(0)
    assert threading.current_thread().is_alive()


# -- injected regressions ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "kind", "fraction"), [("layer:5%", "layer", 0.05), ("PREPROCESS:20", "preprocess", 0.2)])
def test_regressions_parse_kind_and_percent(text: str, kind: str, fraction: float) -> None:
    regression = parse_regression(text)
    assert (regression.kind, regression.fraction) == (kind, pytest.approx(fraction))


@pytest.mark.parametrize("text", ["layer", "sleep:5%", "layer:0%", "layer:lots"])
def test_bad_regressions_name_the_value(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=f"Could not parse value: '{text}'"):
        parse_regression(text)


def test_the_injected_layer_is_real_work_in_the_model_and_changes_the_export_key() -> None:
    import torch

    from detector.spec import ModelSpec

    spec = ModelSpec.default()
    slowed = regressed_spec(spec, 64)
    assert isinstance(slowed, LayerRegressedSpec) and slowed.cache_key("onnx") != spec.cache_key("onnx")
    assert regressed_spec(spec, 0).load_torch().layers[26].act.__class__.__name__ != "Sequential"
    model, base = slowed.load_torch().eval(), spec.load_torch().eval()
    extra = sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in base.parameters())
    assert extra == 2 * 512 * 64  # two 1x1 convolutions 512 -> 64 -> 512
    x = torch.rand(1, 3, *spec.input_size)
    with torch.no_grad():
        assert torch.allclose(model(x), base(x), atol=0.05)  # small weights: the detections barely move
    model.fuse_batchnorm()  # the runners fold batch norm: the injected block must survive it


def test_the_layer_calibration_hands_back_the_runner_it_measured_last_and_releases_every_other() -> None:
    import torch

    from detector.backends import create_runner
    from detector.spec import ModelSpec
    from perf.gate.regressions import calibrate_layer

    spec = ModelSpec.default()
    built: list[tuple[int, Any]] = []

    def build(model: Any) -> Any:
        runner = create_runner("torch", model, device="cpu", precision="fp32")
        runner.activate()
        built.append((getattr(model, "width", 0), runner))
        return runner

    batch = torch.rand(1, 3, *spec.input_size)
    runner, width, readings = calibrate_layer(spec, 0.05, batch, build, "cpu")
    try:
        assert built[0][0] == 0 and len(built) >= 2  # the unchanged model, then at least the trial width
        assert runner is built[-1][1] and width == built[-1][0] == readings["width"] > 0
        assert all(other._model is None for _, other in built[:-1]) and runner._model is not None
        block = runner._model.layers[26].act[1]
        assert block.reduce.out_channels == width  # the benchmark times this runner: the width it was measured at
        assert readings["batch"] == 1 and readings["target"] == 0.05 and readings["base_ms"] > 0
    finally:
        runner.deactivate()


def test_a_calibrated_layer_width_is_kept_so_a_later_process_builds_its_runner_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    import torch

    from detector.backends import create_runner
    from detector.spec import ModelSpec
    from perf.gate import regressions

    spec = ModelSpec.default(cache_dir=tmp_path)
    built: list[int] = []
    searched: list[float] = []  # the search itself is timed on real runners above; here, what it read is given
    reading = {"width": 64, "measured_fraction": 0.05}

    def search(model: Any, fraction: float, batch: Any, build: Any, device: str) -> tuple[Any, int, dict[str, Any]]:
        searched.append(fraction)
        return build(regressions.regressed_spec(model, reading["width"])), reading["width"], dict(reading)

    def build(model: Any) -> Any:
        runner = create_runner("torch", model, device="cpu", precision="fp32")
        runner.activate()
        built.append(getattr(model, "width", 0))
        return runner

    def calibrated(fraction: float = 0.05) -> dict[str, Any]:
        runner, readings = regressions.calibrated_layer(spec, "torch fp32", fraction, batch, build, "cpu")
        assert runner._model.layers[26].act[1].reduce.out_channels == readings["width"]  # the width it says
        runner.deactivate()
        return readings

    monkeypatch.setattr(regressions, "calibrate_layer", search)
    batch = torch.rand(1, 3, *spec.input_size)
    assert calibrated()["cached"] is False and searched == [0.05]
    (kept,) = (tmp_path / "regressions").iterdir()
    assert calibrated() == {**reading, "cached": True} and searched == [0.05] and built == [64, 64]  # read back
    assert calibrated(0.1)["cached"] is False and searched == [0.05, 0.1]  # another fraction: its own width
    for unreadable in ("{not json", '{"width": 0}', '{"width": "64"}', "[64]", "null", "[" * 100_000,
                       '{"width": 1000000000000}', '{"width": 64, "base_ms": 1' + "0" * 400 + "}",
                       '{"width": 64, "label": "\\ud800"}'):  # nested past the parser; no width the search
        kept.write_text(unreadable)  # makes; a reading no saved run can hold (its benchmarks' extra_info)
        assert calibrated()["cached"] is False, unreadable[:40]  # searched again and kept again
        assert json.loads(kept.read_text())["width"] == 64
    kept.unlink()
    os.mkfifo(kept)  # not read (it would block): searched again
    assert calibrated()["cached"] is False and built[-1] == 64
    kept.unlink()
    for noise in (-0.15, 0.0, 0.0044, 0.18):  # a search that read off the target by more than twice is not kept
        kept.unlink(missing_ok=True)
        reading["measured_fraction"] = noise
        assert calibrated()["cached"] is False and not kept.exists() and calibrated()["cached"] is False, noise
    for within in (0.025, 0.1):  # half and twice the target: kept
        kept.unlink(missing_ok=True)
        reading["measured_fraction"] = within
        assert calibrated()["cached"] is False and kept.exists() and calibrated()["cached"] is True, within


def test_a_slowed_stage_does_its_work_again_as_often_as_asked_on_average() -> None:
    calls: list[int] = []
    slowed = SlowedStage(lambda x: calls.append(x) or x, 0.35)
    for i in range(100):
        assert slowed(i) == i
    assert len(calls) == 135 and math.isclose(slowed.extra * 100, 35)


def test_stage_calibration_asks_for_the_work_that_adds_the_fraction() -> None:
    import time

    def work(frames: list[int]) -> None:
        time.sleep(0.002)

    extra, bare = calibrate_stage(work, [0, 1, 2], (), frame_ms=20.0, fraction=0.05)
    assert 2.0 <= bare < 4.0 and extra == pytest.approx(0.05 * 20.0 / bare)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_reference_reading_for_a_worker_runs_on_that_workers_cpu() -> None:
    from detector.handoff import set_thread_placement
    from perf.measure.controls import reading_on

    cpu = max(os.sched_getaffinity(0))
    previous = set_thread_placement(lambda name: {cpu} if name == "pipelined-write" else None)
    try:
        on_writer = reading_on("pipelined-write", lambda: float(min(os.sched_getaffinity(0))), readings=3)
    finally:
        set_thread_placement(previous)
    assert on_writer == cpu
