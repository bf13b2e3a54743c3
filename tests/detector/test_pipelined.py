"""detector.pipelined on the CPU: same detections as the sequential loop, bounded memory, clean failures."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from detector.backends import create_runner
from detector.backends.base import Runner
from detector.errors import BackendError, VideoError
from detector.pipeline import run_pipeline
from detector.pipelined import pool_size_for, run_pipelined
from detector.postprocess import Detections
from detector.preprocess import preprocess, preprocess_torch
from detector.spec import ModelSpec
from detector.video import open_video, read_frames
from perf.measure.parity import compare_detections, format_worst_frames

SIZE = 160  # loop_spec's input (tests/conftest.py: LOOP_SIZE)
FRAMES = 12  # loop_clip's frames (tests/conftest.py: LOOP_FRAMES)
#: A hung pipeline fails the test instead of blocking CI.
TIMEOUT_S = 60


def run_with_timeout(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` on a thread; fails the test if it does not return within TIMEOUT_S."""
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["result"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 -- handed to the test's thread
            box["error"] = e

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(TIMEOUT_S)
    assert not thread.is_alive(), f"{fn.__name__} still running after {TIMEOUT_S} s: the pipeline hangs"
    if "error" in box:
        raise box["error"]
    return box["result"]


def no_pipeline_threads_left() -> bool:
    return not [t for t in threading.enumerate() if t.name.startswith("pipelined-")]


def assert_identical(a: list[Detections], b: list[Detections]) -> None:
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        for field in ("boxes", "scores", "classes"):
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field), err_msg=f"frame {i} {field}")


# ------------------------------------------------------------------------------------------ same detections
@pytest.mark.parametrize("batch", [1, 5])
def test_host_preprocess_gives_exactly_the_sequential_loops_detections(
    loop_runner: Runner, loop_clip: Path, tmp_path: Path, batch: int
) -> None:
    # batch 5 over 12 frames: the last batch (2 frames) is padded to 5 and the padding's detections dropped
    sequential = run_pipeline(loop_runner, loop_clip, tmp_path / "seq.mp4", batch=batch)
    pipelined = run_with_timeout(run_pipelined, loop_runner, loop_clip, tmp_path / "pipe.mp4", batch=batch,
                                 gpu_preprocess=False)
    assert pipelined.frames == sequential.frames == FRAMES
    assert sum(len(d) for d in sequential.detections) > FRAMES  # the comparison is not between empty lists
    assert_identical(pipelined.detections, sequential.detections)


@pytest.mark.parametrize("batch", [1, 4])
def test_device_preprocess_matches_the_sequential_loop_within_rounding(
    loop_runner: Runner, loop_clip: Path, batch: int
) -> None:
    sequential = run_pipeline(loop_runner, loop_clip, None, batch=batch)
    pipelined = run_with_timeout(run_pipelined, loop_runner, loop_clip, None, batch=batch, gpu_preprocess=True)
    # preprocess_torch differs from OpenCV by at most one 0..255 level per value: scores move by ~1e-2
    parity = compare_detections(sequential.detections, pipelined.detections, iou_threshold=0.5,
                                score_tolerance=0.03)
    assert parity.reference_detections > FRAMES
    assert parity.match_rate == 1.0 and parity.class_agreement == 1.0, format_worst_frames(parity)
    assert parity.mean_iou > 0.97 and parity.max_score_diff < 0.03, format_worst_frames(parity)


def test_device_preprocess_of_real_frames_is_within_one_level_of_opencv(loop_clip: Path) -> None:
    frames = read_frames(loop_clip, limit=4)
    host, host_lb = preprocess(frames, (SIZE, SIZE))
    device, device_lb = preprocess_torch(torch.from_numpy(np.stack(frames)), (SIZE, SIZE))
    assert host_lb == device_lb
    diff = np.abs(device.numpy() - host) * 255
    assert diff.max() <= 1.0 + 1e-3
    top = host_lb[0].pad_y
    np.testing.assert_array_equal(device.numpy()[:, :, :top], host[:, :, :top])  # the padding is exact


def test_output_video_has_every_frame_at_the_input_size_and_no_temporary_file(
    loop_runner: Runner, loop_clip: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.mp4"
    result = run_with_timeout(run_pipelined, loop_runner, loop_clip, out, batch=2, names=loop_runner.spec.names)
    with open_video(out) as reader:
        assert (reader.width, reader.height) == (320, 180)
        assert sum(1 for _ in reader) == FRAMES == result.frames
    assert [p.name for p in tmp_path.iterdir()] == ["out.mp4"]
    assert result.e2e_fps > 0 and set(result.stage_ms) >= {"read", "preprocess", "infer", "postprocess", "write"}


def test_max_frames_and_on_frame_see_frames_in_order(loop_runner: Runner, loop_clip: Path) -> None:
    seen: list[int] = []
    result = run_with_timeout(run_pipelined, loop_runner, loop_clip, None, batch=3, max_frames=7,
                              on_frame=lambda i, frame, det: seen.append(i))
    assert seen == list(range(7)) and result.frames == 7 and len(result.detections) == 7


# --------------------------------------------------------------------------------------------- bounded
def test_a_slow_writer_throttles_the_reader_to_the_pool_size(loop_runner: Runner, loop_clip: Path) -> None:
    def slow_consumer(index: int, frame: np.ndarray, det: Detections) -> None:
        if index == 0:  # the writer stalls on its first frame while decode and inference go on
            threading.Event().wait(1.5)

    result = run_with_timeout(run_pipelined, loop_runner, loop_clip, None, batch=1, queue_depth=1,
                              on_frame=slow_consumer)
    assert result.pool_size == pool_size_for(1, 1) < FRAMES
    assert result.peak_in_flight == result.pool_size  # the reader ran ahead until the pool was empty, no further
    assert result.queue_peaks == result.queue_sizes == {"decoded": 1, "detected": 1}


# ------------------------------------------------------------------------------------------- failures
def frames_then_error(video: Path, good: int) -> Iterator[np.ndarray]:
    """The video's first ``good`` frames, then the error a broken capture device would raise."""
    yield from read_frames(video, limit=good)
    raise VideoError(f"{video}: capture lost after frame {good - 1}")


def test_a_reader_failure_is_raised_in_the_caller_and_nothing_is_written(
    loop_runner: Runner, loop_clip: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.mp4"
    with pytest.raises(VideoError, match="capture lost after frame 4"):
        run_with_timeout(run_pipelined, loop_runner, "camera", out, frames=frames_then_error(loop_clip, 5), batch=2)
    assert list(tmp_path.iterdir()) == [] and no_pipeline_threads_left()


def test_a_writer_side_failure_stops_the_reader_and_is_raised(loop_runner: Runner, loop_clip: Path,
                                                              tmp_path: Path) -> None:
    def fail_at_frame_3(index: int, frame: np.ndarray, det: Detections) -> None:
        if index == 3:
            raise OSError(f"metadata sink closed at frame {index}")

    with pytest.raises(OSError, match="sink closed at frame 3"):
        run_with_timeout(run_pipelined, loop_runner, loop_clip, tmp_path / "out.mp4", on_frame=fail_at_frame_3)
    assert list(tmp_path.iterdir()) == [] and no_pipeline_threads_left()


def test_an_inference_failure_on_the_calling_thread_stops_both_threads(
    loop_spec: ModelSpec, loop_clip: Path, tmp_path: Path
) -> None:
    inactive = create_runner("torch", loop_spec, device="cpu")
    with pytest.raises(BackendError, match="not active"):
        run_with_timeout(run_pipelined, inactive, loop_clip, tmp_path / "out.mp4", warmup=0)
    assert list(tmp_path.iterdir()) == [] and no_pipeline_threads_left()


def test_a_truncated_video_is_one_clear_error_and_no_output(loop_runner: Runner, loop_clip: Path,
                                                            tmp_path: Path) -> None:
    cut = tmp_path / "cut.mp4"
    data = loop_clip.read_bytes()
    cut.write_bytes(data[: len(data) // 2])  # mp4v from OpenCV keeps its index (moov) at the end
    with pytest.raises(VideoError, match="cut.mp4"):
        run_with_timeout(run_pipelined, loop_runner, cut, tmp_path / "out.mp4")
    assert [p.name for p in tmp_path.iterdir()] == ["cut.mp4"] and no_pipeline_threads_left()


def test_frames_of_another_size_are_refused_naming_the_frame(loop_runner: Runner, tmp_path: Path) -> None:
    frames = [np.zeros((64, 96, 3), np.uint8)] * 3 + [np.zeros((64, 80, 3), np.uint8)]
    with pytest.raises(VideoError, match="frame 3: shape"):
        run_with_timeout(run_pipelined, loop_runner, "list", tmp_path / "out.mp4", frames=frames)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------ CUDA
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: pinned uploads and GPU letterbox need one")
@pytest.mark.parametrize(("precision", "options"), [("fp32", {}), ("fp16", {"fuse_bn": True, "channels_last": True,
                                                                           "cuda_graph": True})])
def test_on_cuda_pinned_uploads_and_device_preprocess_match_the_sequential_loop(
    loop_spec: ModelSpec, loop_clip: Path, tmp_path: Path, precision: str, options: dict[str, Any]
) -> None:
    with create_runner("torch", loop_spec, device="cuda", precision=precision, **options) as cuda_runner:
        sequential = run_pipeline(cuda_runner, loop_clip, None, batch=4)
        host_prep = run_with_timeout(run_pipelined, cuda_runner, loop_clip, tmp_path / "a.mp4", batch=4,
                                     gpu_preprocess=False)
        device_prep = run_with_timeout(run_pipelined, cuda_runner, loop_clip, tmp_path / "b.mp4", batch=4)
    for candidate in (host_prep, device_prep):
        parity = compare_detections(sequential.detections, candidate.detections, score_tolerance=0.03)
        assert parity.reference_detections > FRAMES
        assert parity.match_rate == 1.0 and parity.mean_iou > 0.97 and parity.max_score_diff < 0.03, parity.summary()
    assert host_prep.peak_in_flight <= host_prep.pool_size
