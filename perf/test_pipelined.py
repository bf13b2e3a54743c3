"""Pipelined end to end against each stage alone and against the sequential loop, all from one run per case.

For each runner case one test measures, on the perf video: decode only (read every frame), encode only (the
frames the pipeline writes -- the decoded sequence in order with the detected boxes drawn -- fastest of
``ENCODE_PASSES``, so the bound is the encoder on the pipeline's own output; cycling a few frames would put a
scene cut every few frames, which cost the mp4v encoder more than the real sequence; a video longer than
``ENCODE_KEEP`` frames is cycled in runs of that many), inference only (the runner on a preprocessed device
batch, per pipeline batch size), the sequential loop (:func:`detector.pipeline.run_pipeline`, batch 1) and the
pipelined loop (:func:`detector.pipelined.run_pipelined`) at each of ``PIPELINE_BATCHES``. The benchmark's
time is the pipelined pass at batch 1; the report gets a ``| path | FPS | ms/frame |`` table and the two
ratios: the best pipelined FPS over the slowest stage alone (the bound, target >= 0.9) and over the
sequential loop. On the CPU the video is cut to ``CPU_FRAMES`` frames: the numbers are a smoke test only.
"""

from __future__ import annotations

from typing import Any

import pytest

from perf.cases import Case, make_cases

pytestmark = [pytest.mark.e2e, pytest.mark.benchmark(group="pipelined", warmup=False)]

#: Frames per inference in the pipelined loop, per device type.
PIPELINE_BATCHES = {"cuda": (1, 4), "cpu": (1,)}
#: Rounds of the benchmarked pipelined pass (batch 1).
ROUNDS = {"cuda": 3, "cpu": 1}
#: Frames of the video used on the CPU.
CPU_FRAMES = 8
#: Frames (the first decoded ones) that make the inference-only input batches.
KEEP = 30
#: Decoded frames kept for the encode-only measurement (960x540 BGR: 1.5 MB each).
ENCODE_KEEP = 1000
#: Encode-only passes, the fastest kept (as the pipelined b1 pass keeps its fastest of ROUNDS).
ENCODE_PASSES = {"cuda": 3, "cpu": 1}
#: The pipelined loop's target fraction of its slowest stage.
TARGET = 0.9
TABLE = "Pipelined end to end: each path alone"
RATIOS = "Pipelined vs its slowest stage and the sequential loop"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "pipe_case" in metafunc.fixturenames:
        from perf.plugin import PERF_SESSION

        session = metafunc.config.stash[PERF_SESSION]
        o = session.options
        metafunc.parametrize("pipe_case", make_cases(o.backends, o.precisions, None, session.device))


def test_pipelined_end_to_end(benchmark: Any, pipe_case: Case, runner_pool: Any, perf_video: Any,
                              perf_reports_dir: Any, perf_report: Any, tmp_path: Any) -> None:
    import numpy as np
    import torch

    from detector.pipeline import default_output_path, draw_detections, run_pipeline
    from detector.pipelined import frame_device, run_pipelined
    from detector.preprocess import preprocess_torch
    from detector.stagespeed import decode_speed, encode_speed, infer_speed, slowest
    from detector.video import open_video, read_frames

    runner = runner_pool.get(pipe_case.backend, pipe_case.precision, **pipe_case.options)
    kind = "cuda" if runner.device.startswith("cuda") else "cpu"
    frames = perf_video.frames if kind == "cuda" else min(perf_video.frames or CPU_FRAMES, CPU_FRAMES)
    names = runner.spec.names
    out_dir = perf_reports_dir / "pipelined"

    decode, kept = decode_speed(perf_video.path, frames, keep=KEEP)  # holding every frame would slow decoding
    frames = decode.frames
    with open_video(perf_video.path) as reader:
        fps = reader.fps or 30.0
    device_frames = torch.from_numpy(np.stack(kept)).to(frame_device(runner))
    batches = PIPELINE_BATCHES[kind]
    infer = {}
    for b in batches:
        x, _ = preprocess_torch(device_frames[torch.arange(b) % len(kept)], runner.spec.input_size)
        infer[b] = infer_speed(runner, x, frames, warmup=3 if kind == "cuda" else 1)
    sequential_out = default_output_path(perf_video.path, f"{pipe_case.id}-sequential", out_dir)
    sequential = run_pipeline(runner, perf_video.path, sequential_out, batch=1, names=names, max_frames=frames,
                              keep_detections=True)
    # Encode only: the frames the pipeline writes (its boxes drawn, untimed), fastest of ENCODE_PASSES passes.
    sequence = read_frames(perf_video.path, limit=min(frames, ENCODE_KEEP))
    for frame, det in zip(sequence, sequential.detections):
        draw_detections(frame, det, names)
    encode = max((encode_speed(sequence, frames, tmp_path / f"encode-only-{i}.mp4", fps=fps)
                  for i in range(ENCODE_PASSES[kind])), key=lambda speed: speed.fps)
    del sequence

    pipelined: dict[int, Any] = {}
    outputs = {b: default_output_path(perf_video.path, f"{pipe_case.id}-pipelined-b{b}", out_dir) for b in batches}

    def one_pass() -> None:
        result = run_pipelined(runner, perf_video.path, outputs[1], batch=1, names=names, max_frames=frames,
                               keep_detections=False)
        if 1 not in pipelined or result.wall_s < pipelined[1].wall_s:
            pipelined[1] = result

    benchmark.pedantic(one_pass, rounds=ROUNDS[kind], iterations=1, warmup_rounds=0)
    if 1 not in pipelined:  # --benchmark-disable runs it once; make sure
        one_pass()
    for b in batches[1:]:
        pipelined[b] = run_pipelined(runner, perf_video.path, outputs[b], batch=b, names=names, max_frames=frames,
                                     keep_detections=False)
    for b, result in pipelined.items():
        with open_video(outputs[b]) as written:
            assert sum(1 for _ in written) == result.frames == frames, f"{outputs[b]}: wrong frame count"

    best = max(pipelined.values(), key=lambda r: r.e2e_fps)
    bound = slowest(decode, encode, infer[best.batch])
    rows = [("decode only", decode.fps), ("encode only", encode.fps),
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
        f"meets {TARGET}": "yes" if ratio_bound >= TARGET else "no", "pipeline/sequential": ratio_sequential,
    })  # fmt: skip
    benchmark.extra_info.update({
        "backend": pipe_case.backend, "variant": pipe_case.variant, "precision": pipe_case.precision,
        "frames": frames, "video": str(perf_video.path), "fps": dict(rows), "best_pipelined_batch": best.batch,
        "slowest_stage": bound.name, "pipeline_over_slowest_stage": ratio_bound,
        "pipeline_over_sequential": ratio_sequential, "pipelined_b1": pipelined[1].summary(),
        "sequential": sequential.summary(),
    })  # fmt: skip
