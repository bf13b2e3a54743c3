"""End-to-end benchmark: read -> preprocess -> infer -> postprocess -> write on a video, per backend.

End to end is what the user waits for: the host wall clock of the sequential pipeline. One untimed warm-up
pass (engine and encoder set-up, the video into the page cache) comes first; then ``PASSES`` timed passes, each
cut into blocks of consecutive frames (`perf.measure.samples`). With the ``cpu-reference`` control (the default on a
GPU) a fixed CPU workload is read after every block (`perf.measure.speedref`) and the benchmark's samples are each
block's seconds per frame at the reference's nominal speed, so a host whose CPU slows down for everyone does not
pass for a slower pipeline; the wall-clock blocks are kept as the ``wall`` metric and give the FPS. Each
stage's time per frame in the same blocks (normalised alike) goes into ``extra_info["metrics"]`` so that a
verdict names the stage that moved. Outputs of timed passes go to a RAM-backed scratch folder
(`perf.measure.controls`); the last one is kept under the reports folder, read back and checked (frame count, size).
``extra_info`` also carries end-to-end FPS (from the median frame time), inference-only FPS and milliseconds
per frame of each stage with their spread (IQR over the blocks); the report prints the lab's table.

Every case runs on the mp4v synthetic video with OpenCV decoding; the key cases also run on the other
``--perf-sources`` (`perf.measure.sources`): the H.264 video, decoded by OpenCV or by NVDEC into device memory
(preprocess and postprocess then on the GPU too), with or without encoding the output, under ids ending in the
source (``torch-graph-fp16-h264-nvdec-noencode``); their rows stand beside the OpenCV ones in the same tables.
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from perf.measure.cases import Case
from perf.measure.sources import skip_unless_decodes
from perf.report import schema

pytestmark = [pytest.mark.e2e, pytest.mark.benchmark(group="end-to-end", warmup=False)]

#: Timed passes over the video per case, per device type.
PASSES = {"cuda": 2, "cpu": 1}
#: Frames of the untimed warm-up pass.
WARMUP_FRAMES = 30


def _quartiles_ms(samples_s: list[float]) -> dict[str, float]:
    q1, median, q3 = statistics.quantiles(samples_s, n=4) if len(samples_s) > 1 else [samples_s[0]] * 3
    return {"median": median * 1e3, "iqr": (q3 - q1) * 1e3}


def test_end_to_end(benchmark: Any, e2e_case: Case, runner_pool: Any, source_video: Any, perf_reports_dir: Any,
                    measured_region: Any, perf_report: Any, perf_controls: Any, perf_samples: Any,
                    pytestconfig: pytest.Config) -> None:  # fmt: skip
    from detector.backends import display_name
    from detector.pipeline import default_output_path, run_pipeline
    from detector.video import open_video
    from perf.measure.controls import keep_output, scratch_dir, warm_page_cache
    from perf.measure.samples import TimedPasses, block_samples, block_size, pass_frames

    source = e2e_case.source
    perf_video = source_video(source)
    runner = runner_pool.get(e2e_case.backend, e2e_case.precision, **e2e_case.options)
    kind = "cuda" if runner.device.startswith("cuda") else "cpu"
    skip_unless_decodes(source, runner)
    final = default_output_path(perf_video.path, e2e_case.id, perf_reports_dir / "e2e")
    if "page-cache" in perf_controls:
        warm_page_cache(perf_video.path)
    block = block_size(pass_frames(perf_video.path, perf_video.frames, WARMUP_FRAMES))
    passes = TimedPasses(block, perf_controls, on_gpu=kind == "cuda")
    with scratch_dir(perf_controls, final.parent) as scratch:
        output = scratch / final.name

        def one_pass(probe: Any, preprocess_fn: Any = None, frames: int | None = perf_video.frames) -> Any:
            return run_pipeline(runner, perf_video.path, output if source.encode else None, batch=1,
                                names=runner.spec.names, max_frames=frames, keep_detections=False,
                                preprocess_fn=preprocess_fn, on_progress=probe, decoder=source.decoder)  # fmt: skip

        warm = one_pass(passes.probe(), frames=WARMUP_FRAMES)
        slowed = None if source.suffix else _regressed_preprocess(pytestconfig, perf_video, runner, warm,
                                                                  benchmark.extra_info, perf_controls)  # fmt: skip
        passes.run(benchmark, lambda probe: one_pass(probe, slowed), PASSES[kind],
                   measured_region(f"end-to-end[{e2e_case.id}]", runner, benchmark.extra_info))
        if source.encode:
            keep_output(output, final)

    recorded = passes.record(benchmark, perf_samples)
    samples, stage_passes, stages = recorded.wall, recorded.stage_passes, recorded.stages  # FPS, tables: wall clock
    result = passes.results[-1]
    if source.encode:
        with open_video(final) as written:
            frames_written = sum(1 for _ in written)
            assert (written.width, written.height) == (result.width, result.height), (
                f"{final}: frame size {written.width}x{written.height}, expected {result.width}x{result.height}")
        assert frames_written == result.frames, f"{final}: {frames_written} frames read back, {result.frames} written"

    spread = {name: _quartiles_ms(block_samples([p[name] for p in stage_passes], block))
              for name in (n.removeprefix("stage:") for n in stages)}  # fmt: skip
    per_frame = {name: s["median"] for name, s in spread.items()}
    e2e_fps = 1.0 / statistics.median(samples) if samples else result.e2e_fps
    infer = spread.get("infer", {}).get("median")
    benchmark.extra_info.update({
        "backend": e2e_case.backend, "variant": e2e_case.variant, "precision": e2e_case.precision,
        "frames": result.frames, "passes": len(passes.results), "e2e_fps": e2e_fps,
        "infer_fps": 1e3 / infer if infer else result.infer_fps, "stage_ms_per_frame": per_frame,
        "stage_spread_ms": spread, "stage_fps": result.stage_fps(), "video": str(perf_video.path),
        "source": source.spec,
    })  # fmt: skip
    h, w = result.net_size
    model_type = f"{display_name(e2e_case.backend)} ({e2e_case.label}, {runner.device})"
    perf_report.add(schema.LAB, {
        "Model Type": model_type, "Model Input Size": f"{w}x{h}",
        "Inference Speed (FPS)": benchmark.extra_info["infer_fps"], "End-to-end speed (FPS)": e2e_fps,
    })  # fmt: skip
    perf_report.add(schema.STAGES_TABLE,
                    {"Model Type": model_type, "frames": result.frames, **per_frame, "e2e FPS": e2e_fps})
    perf_report.add(schema.STAGE_SPREAD, {
        "Model Type": model_type, "blocks": len(samples), "frames per block": block,
        **{name: s["iqr"] for name, s in spread.items()},
    })  # fmt: skip


def _regressed_preprocess(config: pytest.Config, video: Any, runner: Any, warm: Any, extra_info: dict[str, Any],
                          controls: Any) -> Any:  # fmt: skip
    """With ``--perf-regression=preprocess:P``: the slowed preprocess, calibrated on the warm-up pass's frame
    time and a bare loop of the preprocess (`perf.gate.regressions`); else None."""
    from perf.session import PERF_SESSION

    regression = config.stash[PERF_SESSION].options.regression
    if regression is None or regression.kind != "preprocess":
        return None
    from detector.preprocess import preprocess
    from detector.video import read_frames
    from perf.gate.regressions import SlowedStage, calibrate_stage
    from perf.measure.controls import controlled

    frame_ms = statistics.median(warm.iteration_ms[len(warm.iteration_ms) // 3 :])
    frames = read_frames(video.path, limit=20)
    extra, bare_ms = calibrate_stage(preprocess, frames, (runner.spec.input_size,), frame_ms, regression.fraction,
                                     {"mode": runner.spec.preprocess_mode},
                                     lambda: controlled(controls, on_gpu=False))  # fmt: skip
    extra_info["regression_calibration"] = {"frame_ms": frame_ms, "preprocess_bare_ms": bare_ms,
                                            "extra_calls_per_frame": extra}  # fmt: skip
    return SlowedStage(preprocess, extra)
