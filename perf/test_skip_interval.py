"""Skip interval (DeepStream's ``interval``): end-to-end FPS and mAP when the detector runs on one frame in N + 1.

For each N of ``--perf-skip-interval`` (default 0,1,2,4, as NVIDIA's DeepStream lab table) the sequential loop
(:func:`detector.pipeline.run_pipeline` with ``skip_interval=N``) runs over the perf video: N=0 infers every frame, N=1
frames 0,2,4,..., N=2 frames 0,3,6,..., N=4 frames 0,5,10,...; the frames in between get the boxes of a
constant-velocity IoU tracker (`detector.tracker`, not DeepStream's NvDCF or IOU tracker). One runner: the parity
reference as `perf.test_detection_parity` chooses and gets it (torch fp32, or ONNX Runtime fp32 for a model given as an
ONNX file only; from the runner pool, which skips with the reason where it cannot run) on the session's device, whatever
``--perf-backends`` and ``--perf-precisions`` select, as the parity reference runs: the N=0 row's mAP is then the
reference accuracy and every row differs from it by the skipping alone. The test is not parametrised over the selected
cases (`perf.measure.cases`), only over N.

Measured as `perf.test_end_to_end` measures the loop: an untimed warm-up pass, then ``PASSES`` timed passes cut into
blocks, on a GPU normalised by the CPU reference (`perf.measure.samples.TimedPasses`). No video is
written, as DeepStream's figures are taken with a fake sink: the mp4v encoder's 3 ms or more a frame is the same for
every N, bounds the loop and moves between processes by up to 25%, so it would hide what skipping buys. A block holds a whole number of inference periods (N + 1 frames), so
every block holds as many inferences and the median block is the loop's frame time, which gives the FPS. The last
pass keeps its detections: mAP@0.5 and mAP@0.5:0.95 against the video's ground truth over the frames run
(`detector.evaluate.evaluate_coco`); without ground truth the FPS is still recorded and the mAP is n/a with the reason.
On a CPU the video is cut to ``CPU_FRAMES`` frames: the figures are a smoke test.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import pytest

from perf.report import schema
from perf.test_detection_parity import _reference

pytestmark = [pytest.mark.e2e, pytest.mark.benchmark(group="skip-interval", warmup=False)]

#: Timed passes over the video per N, per device type.
PASSES = {"cuda": 2, "cpu": 1}
#: Frames of the untimed warm-up pass, per device type (the runner is warm already: the encoder and page cache).
WARMUP_FRAMES = {"cuda": 30, "cpu": 3}
#: Frames of the video used on the CPU.
CPU_FRAMES = 12


def test_skip_interval(benchmark: Any, skip_interval: int, runner_pool: Any, perf_video: Any, measured_region: Any,
                       perf_report: Any, perf_controls: Any, perf_samples: Any,
                       pytestconfig: pytest.Config) -> None:  # fmt: skip
    from detector.pipeline import run_pipeline
    from perf.measure.controls import warm_page_cache
    from perf.measure.samples import TimedPasses, block_size, pass_frames

    backend, precision = _reference(pytestconfig)
    runner = runner_pool.get(backend, precision)
    kind = "cuda" if runner.device.startswith("cuda") else "cpu"
    frames = perf_video.frames if kind == "cuda" else min(perf_video.frames or CPU_FRAMES, CPU_FRAMES)
    name = f"{backend}-{precision}-N{skip_interval}"
    if "page-cache" in perf_controls:
        warm_page_cache(perf_video.path)
    period = skip_interval + 1
    block = period * max(1, round(block_size(pass_frames(perf_video.path, frames, WARMUP_FRAMES[kind])) / period))
    passes = TimedPasses(block, perf_controls, on_gpu=kind == "cuda")

    def one_pass(probe: Any, max_frames: int | None = frames) -> Any:
        return run_pipeline(runner, perf_video.path, None, batch=1, names=runner.spec.names, max_frames=max_frames,
                            skip_interval=skip_interval, on_progress=probe)  # fmt: skip

    one_pass(passes.probe(), min(frames or WARMUP_FRAMES[kind], WARMUP_FRAMES[kind]))
    passes.run(benchmark, one_pass, PASSES[kind],
               measured_region(f"skip-interval[{name}]", runner, benchmark.extra_info))
    wall = passes.record(benchmark, perf_samples).wall
    result = passes.results[-1]
    assert result.inferred_frames == math.ceil(result.frames / period), (
        f"N={skip_interval}: {result.inferred_frames} of {result.frames} frames inferred, expected one in {period}")

    fps = 1.0 / statistics.median(wall) if wall else result.e2e_fps  # no video written: read to track
    map50, map50_95, note = _accuracy(perf_video, result.detections, runner.spec.names)
    benchmark.extra_info.update({
        "backend": backend, "variant": backend, "precision": precision,
        "frames": result.frames, "passes": len(passes.results), "skip_interval": skip_interval,
        "inferred_frames": result.inferred_frames, "fps": fps, "map50": map50, "map50_95": map50_95,
        "map_note": note or None, "video": str(perf_video.path),
    })  # fmt: skip
    perf_report.add(schema.SKIP_INTERVAL, {
        "case": f"{backend} {precision} ({runner.device})", "N": skip_interval,
        "inferred frames": result.inferred_frames, "FPS, no video written": fps,
        "mAP@0.5": math.nan if map50 is None else map50,
        "mAP@0.5:0.95": math.nan if map50_95 is None else map50_95, "note": note,
    })  # fmt: skip


def _accuracy(video: Any, detections: list[Any], names: Any) -> tuple[float | None, float | None, str]:
    """(mAP@0.5, mAP@0.5:0.95, "") of per-frame ``detections`` against the video's ground truth over those frames
    (image id = frame index + 1), or (None, None, why not)."""
    if video.ground_truth is None:
        return None, None, (f"no ground truth for {Path(video.path).name}: give --perf-ground-truth (or put "
                            f"{Path(video.path).with_suffix('.json').name} beside it) to score it")
    from detector.evaluate import evaluate_coco

    result = evaluate_coco(video.ground_truth, {i + 1: d for i, d in enumerate(detections)}, names=names,
                           image_ids=range(1, len(detections) + 1))
    finite = [v if math.isfinite(v) else None for v in (result.map50, result.map50_95)]
    why = "" if finite[0] is not None else "no ground-truth box in the frames run"
    return finite[0], finite[1], why
