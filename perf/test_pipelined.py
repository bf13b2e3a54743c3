"""Pipelined end to end against each stage alone and against the sequential loop, all from one run per case.

For each runner case one test measures, on the perf video: decode only (read every frame), encode only (the
frames the pipeline writes -- the decoded sequence in order with the detected boxes drawn -- fastest of
``ENCODE_PASSES``, so the bound is the encoder on the pipeline's own output; cycling a few frames would put a
scene cut every few frames, which cost the mp4v encoder more than the real sequence; a video longer than
``ENCODE_KEEP`` frames is cycled in runs of that many), inference only (the runner on a preprocessed device
batch, per pipeline batch size), the sequential loop (:func:`detector.pipeline.run_pipeline`, batch 1) and the
pipelined loop (:func:`detector.pipelined.run_pipelined`) at each of ``PIPELINE_BATCHES``. The benchmark's
samples are the pipelined passes at batch 1, cut into blocks (`perf.measure.samples`): seconds per frame between
frames leaving the writer, after the first ``FILL`` frames of each pass (the pipeline filling up), so the
figure is the pipeline's steady throughput. On a GPU they are in CPU-reference units *of the writer's CPU*
(`perf.measure.speedref`): the writer thread bounds this loop, and the ``pin`` control puts it on a CPU of its own.
A vCPU of the H100 machine toggles between two speeds 1.5x apart every few tenths of a second, so the reference is
read *in-band on the writer thread* after every block of frames (`perf.measure.speedref.FrameProbe`, through
``on_frame``; the reading's own time is taken out of the next frame's interval and out of the pass's FPS) and
each block is divided by its reading. Until 2026-11-25 the readings were taken before and after each pass
(`perf.measure.controls.reading_on`), which left 10.6% CV between 11 processes; those pass-level figures stay as
the ``writer_passes`` metric. The wall clock is kept as the ``wall`` metric, and the calling thread's in-band
readings (after every block, through ``on_progress``) give the ``normalised`` metric. Each stage's busy time per frame
rides along as ``stage:<name>``.
The report gets a ``| path | FPS | ms/frame |`` table and the two ratios: the best pipelined FPS over the
slowest stage alone (the bound, target >= 0.9) and over the sequential loop. On the CPU the video is cut to
``CPU_FRAMES`` frames: the numbers are a smoke test only.

The key cases also run on the other ``--perf-sources`` (`perf.measure.sources`), as the end-to-end test does: on an
``nvdec`` source every path decodes on the GPU ("decode only (nvdec)": frames into device memory, converted to BGR),
and on a ``noencode`` source nothing is written, so there is no "encode only" row and the bound is the slowest of
decode and inference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from perf.measure.cases import Case
from perf.measure.sources import skip_unless_decodes
from perf.report import schema

pytestmark = [pytest.mark.e2e, pytest.mark.benchmark(group="pipelined", warmup=False)]

#: Frames per inference in the pipelined loop, per device type.
PIPELINE_BATCHES = {"cuda": (1, 4), "cpu": (1,)}
#: Rounds of the benchmarked pipelined pass (batch 1).
ROUNDS = {"cuda": 3, "cpu": 1}
#: Frames of the video used on the CPU.
CPU_FRAMES = 12
#: Frames at the start of each pass left out of the samples (queues and buffers filling).
FILL = {"cuda": 10, "cpu": 2}
#: run_pipelined's default decoded-queue depth: how far the calling thread runs ahead of the writer.
QUEUE_DEPTH = 8
#: Frames (the first decoded ones) that make the inference-only input batches.
KEEP = 30
#: Decoded frames kept for the encode-only measurement (960x540 BGR: 1.5 MB each).
ENCODE_KEEP = 1000
#: Encode-only passes, the fastest kept (as the pipelined b1 pass keeps its fastest of ROUNDS).
ENCODE_PASSES = {"cuda": 3, "cpu": 1}
#: The pipelined loop's target fraction of its slowest stage.
TARGET = 0.9
#: The pipelined loop's writer thread (`detector.pipelined`), its bottleneck: the CPU reference is read on its CPU.
WRITER = "pipelined-write"
TABLE = schema.PIPELINED_PATHS
RATIOS = schema.PIPELINED_RATIOS


@contextlib.contextmanager
def _regressed_writes(config: pytest.Config, warm: Any, frames: list[Any],
                      extra_info: dict[str, Any]) -> Iterator[None]:  # fmt: skip
    """With ``--perf-regression=write:P``: every frame write also JPEG-encodes extra times, calibrated (on entering,
    inside the measured region) on the warm-up pass's frame time and a bare loop of the encode
    (`perf.gate.regressions`); else nothing."""
    import statistics

    from perf.session import PERF_SESSION

    regression = config.stash[PERF_SESSION].options.regression
    if regression is None or regression.kind != "write" or not warm.iteration_ms:
        yield
        return
    from perf.gate.regressions import calibrate_stage, encode_jpeg, slowed_writes

    frame_ms = statistics.median(warm.iteration_ms[len(warm.iteration_ms) // 3:])
    extra, bare_ms = calibrate_stage(encode_jpeg, frames[:20], (), frame_ms, regression.fraction)
    extra_info["regression_calibration"] = {"frame_ms": frame_ms, "encode_bare_ms": bare_ms,
                                            "extra_encodes_per_frame": extra}  # fmt: skip
    with slowed_writes(extra):
        yield


def test_pipelined_end_to_end(benchmark: Any, pipe_case: Case, runner_pool: Any, source_video: Any,
                              perf_reports_dir: Any, perf_report: Any, tmp_path: Any, measured_region: Any,
                              perf_controls: Any, perf_samples: Any, pytestconfig: pytest.Config) -> None:  # fmt: skip
    import dataclasses
    import statistics

    import numpy as np
    import torch

    from detector.pipeline import default_output_path, draw_detections, run_pipeline
    from detector.frames import frame_device
    from detector.pipelined import run_pipelined
    from detector.preprocess import preprocess_torch
    from detector.stagespeed import decode_speed, encode_speed, infer_speed, meets, slowest
    from detector.video import open_video, read_frames
    from perf.measure.controls import keep_output, reading_on, scratch_dir, warm_page_cache
    from perf.measure.samples import TimedPasses, block_samples, block_size, stage_metrics
    from perf.measure.speedref import NOMINAL_S, FrameProbe, normalize
    from perf.measure.speedref import summary as reference_summary

    source = pipe_case.source
    perf_video = source_video(source)
    runner = runner_pool.get(pipe_case.backend, pipe_case.precision, **pipe_case.options)
    kind = "cuda" if runner.device.startswith("cuda") else "cpu"
    skip_unless_decodes(source, runner)
    decoder = {"decoder": source.decoder}
    frames = perf_video.frames if kind == "cuda" else min(perf_video.frames or CPU_FRAMES, CPU_FRAMES)
    names = runner.spec.names
    out_dir = perf_reports_dir / "pipelined"
    if "page-cache" in perf_controls:
        warm_page_cache(perf_video.path)

    decode, kept = decode_speed(perf_video.path, frames, keep=KEEP, device=runner.device, **decoder)
    frames = decode.frames
    with open_video(perf_video.path) as reader:
        fps = reader.fps or 30.0
    device_frames = torch.from_numpy(np.stack(kept)).to(frame_device(runner))
    batches = PIPELINE_BATCHES[kind]
    infer = {}
    for b in batches:
        x, _ = preprocess_torch(device_frames[torch.arange(b) % len(kept)], runner.spec.input_size,
                                runner.spec.preprocess_mode)
        infer[b] = infer_speed(runner, x, frames, warmup=3 if kind == "cuda" else 1)
    sequential_out = default_output_path(perf_video.path, f"{pipe_case.id}-sequential", out_dir)
    sequential = run_pipeline(runner, perf_video.path, sequential_out if source.encode else None, batch=1,
                              names=names, max_frames=frames, keep_detections=True, **decoder)  # fmt: skip
    encode = None
    if source.encode:  # the frames the pipeline writes (its boxes drawn, untimed), fastest of ENCODE_PASSES passes
        sequence = read_frames(perf_video.path, limit=min(frames, ENCODE_KEEP))
        for frame, det in zip(sequence, sequential.detections):
            draw_detections(frame, det, names)
        encode = max((encode_speed(sequence, frames, tmp_path / f"encode-only-{i}.mp4", fps=fps)
                      for i in range(ENCODE_PASSES[kind])), key=lambda speed: speed.fps)
        del sequence

    pipelined: dict[int, Any] = {}
    frame_probes: list[Any] = []  # in-band readings on the writer thread
    writer_readings: list[tuple[float, float]] = []  # the reference on the writer's CPU before and after each pass
    skip = min(FILL[kind], frames // 2)
    block = block_size(frames - skip)
    timed = TimedPasses(block, perf_controls, on_gpu=kind == "cuda")
    reference = timed.reference
    outputs = {b: default_output_path(perf_video.path, f"{pipe_case.id}-pipelined-b{b}", out_dir) for b in batches}
    with scratch_dir(perf_controls, out_dir) as scratch:
        scratch_b1 = scratch / outputs[1].name

        def one_pass(probe: Any) -> Any:
            in_band = FrameProbe(reference, block, skip) if reference is not None else None
            before = reading_on(WRITER, reference) if reference is not None else None
            result = run_pipelined(runner, perf_video.path, out_b1, batch=1, names=names, max_frames=frames,
                                   keep_detections=False, on_progress=probe, on_frame=in_band, **decoder)
            if in_band is not None:  # the readings' own time is not the loop's
                result = dataclasses.replace(result, wall_s=result.wall_s - in_band.spent_s,
                                             iteration_ms=in_band.exclude(result.iteration_ms))
            frame_probes.append(in_band)
            if before is not None:
                writer_readings.append((before, reading_on(WRITER, reference)))
            return result

        out_b1 = scratch_b1 if source.encode else None
        warm = run_pipelined(runner, perf_video.path, out_b1, batch=1, names=names, max_frames=min(frames, 30),
                             keep_detections=False, **decoder)  # untimed: threads, pinned buffers, encoder set-up
        timed.run(benchmark, one_pass, ROUNDS[kind],
                  measured_region(f"pipelined[{pipe_case.id}]", runner, benchmark.extra_info),
                  _regressed_writes(pytestconfig, warm, kept, benchmark.extra_info))
        if source.encode:
            keep_output(scratch_b1, outputs[1])
    passes = timed.results
    pipelined[1] = max(passes, key=lambda r: r.e2e_fps)
    wall = [block_samples([r.iteration_ms], block, skip=skip) for r in passes]
    stages = stage_metrics([{k: v[: r.frames] for k, v in r.stage_samples_ms.items() if k in ("read", "write")}
                            for r in passes], block, skip=skip, judged=True)  # fmt: skip
    wall_flat = [x for pass_ in wall for x in pass_]
    samples, label, unit = wall_flat, "frame interval", "s per frame"
    if reference is not None:
        readings = timed.readings_s
        offset = round((skip + QUEUE_DEPTH) / block)  # the calling thread runs ahead of the writer by the queue
        stages["normalised"] = {"label": "frame interval (CPU-reference units, calling thread)", "unit": "s per "
                                "frame at reference speed", "data": normalize(wall, readings, NOMINAL_S, offset)}
        benchmark.extra_info["cpu_reference"] = {**reference_summary(readings), "nominal_ms": NOMINAL_S * 1e3,
                                                 "writer_ms": [[1e3 * r for r in pair] for pair in writer_readings]}
        stages["wall"] = {"label": "frame interval (wall clock)", "unit": "s per frame", "data": wall_flat}
        stages["writer_passes"] = {
            "label": "frame interval (CPU-reference units, writer's CPU before and after each pass)",
            "unit": "s per frame at reference speed",
            "data": [x * NOMINAL_S / statistics.fmean(pair) for pass_, pair in zip(wall, writer_readings) for x in pass_]}
        in_band_readings = [f.readings_s for f in frame_probes]
        benchmark.extra_info["cpu_reference"]["writer_in_band_ms"] = reference_summary(in_band_readings)
        samples = normalize(wall, in_band_readings, NOMINAL_S)
        label, unit = "frame interval (CPU-reference units, writer's CPU, in-band)", "s per frame at reference speed"
    perf_samples(benchmark, samples, label=label, unit=unit, block=block, metrics=stages)
    for b in batches[1:]:
        pipelined[b] = run_pipelined(runner, perf_video.path, outputs[b] if source.encode else None, batch=b,
                                     names=names, max_frames=frames, keep_detections=False, **decoder)
    for b, result in pipelined.items():
        assert result.frames == frames, f"pipelined b{b}: {result.frames} frames, expected {frames}"
        if source.encode:
            with open_video(outputs[b]) as written:
                assert sum(1 for _ in written) == result.frames, f"{outputs[b]}: wrong frame count"

    best = max(pipelined.values(), key=lambda r: r.e2e_fps)
    bound = slowest(*(s for s in (decode, encode, infer[best.batch]) if s is not None))
    decode_row = "decode only" if source.decoder == "opencv" else f"decode only ({source.decoder})"
    rows = [(decode_row, decode.fps), *([("encode only", encode.fps)] if encode else []),
            *((f"inference only b{b}", s.fps) for b, s in infer.items()),
            ("sequential loop b1", sequential.e2e_fps),
            *((f"pipelined b{b}", r.e2e_fps) for b, r in pipelined.items())]  # fmt: skip
    label = f"{pipe_case.label} ({runner.device})"
    for path, fps_value in rows:
        perf_report.add(TABLE, {"case": label, "path": path, "FPS": fps_value, "ms/frame": 1e3 / fps_value})
    ratio_bound = best.e2e_fps / bound.fps
    ratio_sequential = best.e2e_fps / sequential.e2e_fps
    perf_report.add(RATIOS, {
        "case": label, "frames": frames, "pipelined": f"b{best.batch}", "pipelined FPS": best.e2e_fps,
        "slowest stage": bound.name, "slowest stage FPS": bound.fps, "pipeline/slowest stage": ratio_bound,
        f"meets {TARGET}": meets(ratio_bound, TARGET) if str(runner.device).startswith("cuda") else
        "n/a: a GPU target (on a CPU the stages share its cores)", "pipeline/sequential": ratio_sequential,
    })  # fmt: skip
    benchmark.extra_info.update({
        "backend": pipe_case.backend, "variant": pipe_case.variant, "precision": pipe_case.precision,
        "frames": frames, "video": str(perf_video.path), "source": source.spec, "fps": dict(rows), "best_pipelined_batch": best.batch,
        "slowest_stage": bound.name, "pipeline_over_slowest_stage": ratio_bound,
        "pipeline_over_sequential": ratio_sequential, "pipelined_b1": pipelined[1].summary(),
        "sequential": sequential.summary(),
    })  # fmt: skip
