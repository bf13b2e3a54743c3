"""End-to-end benchmark: read -> preprocess -> infer -> postprocess -> write on a video, per backend.

The benchmark's time is one pass of the sequential pipeline over the video (host wall clock: end to end is
what the user waits for), repeated ``E2E_ROUNDS`` times; ``extra_info`` carries end-to-end FPS, inference-only
FPS and milliseconds per frame of each stage, and the suite's report prints the lab's table. The detected
video is read back and checked (frame count, frame size).
"""

from __future__ import annotations

from typing import Any

import pytest

from perf.cases import Case, make_cases

pytestmark = [pytest.mark.e2e, pytest.mark.benchmark(group="end-to-end", warmup=False)]

#: Passes over the video per case, per device type (the CPU pass must stay short).
E2E_ROUNDS = {"cuda": 3, "cpu": 1}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "e2e_case" in metafunc.fixturenames:
        from perf.plugin import PERF_SESSION

        session = metafunc.config.stash[PERF_SESSION]
        o = session.options
        metafunc.parametrize("e2e_case", make_cases(o.backends, o.precisions, None, session.device,
                                                    nsys_first=True))


def test_end_to_end(benchmark: Any, e2e_case: Case, runner_pool: Any, perf_video: Any, perf_reports_dir: Any,
                    measured_region: Any, perf_report: Any) -> None:
    from detector.cli import MODEL_TYPES
    from detector.pipeline import default_output_path, run_pipeline
    from detector.video import open_video

    runner = runner_pool.get(e2e_case.backend, e2e_case.precision, **e2e_case.options)
    output = default_output_path(perf_video.path, e2e_case.id, perf_reports_dir / "e2e")
    results = []

    def one_pass() -> None:
        results.append(run_pipeline(runner, perf_video.path, output, batch=1, names=runner.spec.names,
                                    max_frames=perf_video.frames, keep_detections=False))

    rounds = E2E_ROUNDS["cuda" if runner.device.startswith("cuda") else "cpu"]
    with measured_region(f"end-to-end[{e2e_case.id}]", runner, benchmark.extra_info):
        benchmark.pedantic(one_pass, rounds=rounds, iterations=1, warmup_rounds=0)

    if not results:  # --benchmark-disable still runs the function once; --benchmark-skip never reaches here
        one_pass()
    result = min(results, key=lambda r: r.wall_s)
    with open_video(output) as written:
        frames_written = sum(1 for _ in written)
        assert (written.width, written.height) == (result.width, result.height), (
            f"{output}: frame size {written.width}x{written.height}, expected {result.width}x{result.height}")
    assert frames_written == result.frames, f"{output}: {frames_written} frames read back, {result.frames} written"

    per_frame = {k: v / result.frames for k, v in result.stage_ms.items()}
    benchmark.extra_info.update({
        "backend": e2e_case.backend, "variant": e2e_case.variant, "precision": e2e_case.precision,
        "frames": result.frames, "e2e_fps": result.e2e_fps, "infer_fps": result.infer_fps,
        "stage_ms_per_frame": per_frame, "stage_fps": result.stage_fps(), "video": str(perf_video.path),
    })  # fmt: skip
    h, w = result.net_size
    model_type = f"{MODEL_TYPES.get(e2e_case.backend, e2e_case.backend)} ({e2e_case.label}, {runner.device})"
    perf_report.add("End-to-end (the lab's table)", {
        "Model Type": model_type, "Model Input Size": f"{w}x{h}",
        "Inference Speed (FPS)": result.infer_fps, "End-to-end speed (FPS)": result.e2e_fps,
    })  # fmt: skip
    perf_report.add("End-to-end stages (ms per frame)",
                    {"Model Type": model_type, "frames": result.frames, **per_frame, "e2e FPS": result.e2e_fps})
