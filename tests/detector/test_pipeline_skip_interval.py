"""detector.pipeline's skip interval (DeepStream's ``interval``) on a real video and the trained model on the CPU: N=0
is the plain loop, N > 0 infers one frame in N + 1 (N=1: frames 0,2,4,...; N=2: 0,3,6,...; N=4: 0,5,10,...) and keeps
the detector's own detections there, and the settings refuse what cannot work."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from detector.backends.base import Runner
from detector.pipeline import LoopSettings, run_pipeline
from detector.postprocess import Detections
from detector.tracker import IouTracker

SIZE = 160  # loop_spec's input (tests/conftest.py: LOOP_SIZE)
FRAMES = 12  # loop_clip's frames (tests/conftest.py: LOOP_FRAMES)



@pytest.fixture(scope="module")
def plain(loop_runner: Runner, loop_clip: Path) -> list[Detections]:
    """The plain loop's detections, one per frame."""
    return run_pipeline(loop_runner, loop_clip, None, warmup=0).detections


def assert_identical(a: Detections, b: Detections, where: str) -> None:
    for name in ("boxes", "scores", "classes"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=f"{where} {name}")


def test_interval_zero_gives_the_plain_loops_detections_exactly(loop_runner: Runner, loop_clip: Path,
                                                                plain: list[Detections]) -> None:
    result = run_pipeline(loop_runner, loop_clip, None, warmup=0, skip_interval=0)
    assert len(result.detections) == len(plain) == FRAMES
    assert sum(len(d) for d in plain) > 0, "the trained model should find objects in the synthetic video"
    for i, (a, b) in enumerate(zip(result.detections, plain)):
        assert_identical(a, b, f"frame {i}")
    assert (result.skip_interval, result.inferred_frames) == (0, FRAMES)
    assert result.summary()["inferred_frames"] == FRAMES


@pytest.mark.parametrize("interval", [1, 2, 4])
def test_interval_n_infers_one_frame_in_n_plus_one_and_keeps_the_detectors_detections_there(
    loop_runner: Runner, loop_clip: Path, plain: list[Detections], interval: int, tmp_path: Path
) -> None:
    calls = []
    remove = loop_runner.add_infer_hook(lambda: calls.append(1))
    try:
        result = run_pipeline(loop_runner, loop_clip, tmp_path / "out.mp4", warmup=0, skip_interval=interval)
    finally:
        remove()
    inferred = math.ceil(FRAMES / (interval + 1))
    assert len(calls) == inferred == result.inferred_frames
    assert result.summary()["skip_interval"] == interval and result.summary()["inferred_frames"] == inferred
    assert result.frames == len(result.detections) == FRAMES
    for i in range(0, FRAMES, interval + 1):
        assert_identical(result.detections[i], plain[i], f"inferred frame {i}")
    skipped = [i for i in range(FRAMES) if i % (interval + 1)]
    assert all(len(result.stage_samples_ms[s]) == FRAMES for s in ("read", "preprocess", "infer", "postprocess"))
    assert all(result.stage_samples_ms["infer"][i] == 0.0 for i in skipped)
    for i in skipped:  # the tracker's boxes lie in the frame
        b = result.detections[i].boxes
        assert np.all((b[:, 0] >= 0) & (b[:, 2] <= result.width) & (b[:, 1] >= 0) & (b[:, 3] <= result.height))
    tracker = IouTracker()  # the same tracker fed the inferred frames' detections, by hand
    for i in range(FRAMES):
        if i % (interval + 1):
            assert_identical(result.detections[i], tracker.predict(i, (result.width, result.height)), f"frame {i}")
        else:
            tracker.update(result.detections[i], i)


@pytest.mark.parametrize(("keywords", "message"), [
    ({"skip_interval": 2, "batch": 4}, ("skip_interval 2 needs batch 1 (one frame per inference), got batch 4; use "
                                        "batch 1 or skip_interval 0")),
    ({"skip_interval": -1}, "skip_interval must be an integer >= 0 (frames skipped between inferences), got -1"),
    ({"skip_interval": 1.5}, "skip_interval must be an integer >= 0 (frames skipped between inferences), got 1.5"),
])  # fmt: skip
def test_settings_refuse_a_skip_interval_that_cannot_work(keywords: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError) as info:
        LoopSettings(**keywords)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_the_plain_loop_keeps_darknets_default_thresholds(loop_runner: Runner, loop_clip: Path,
                                                          plain: list[Detections]) -> None:
    """Darknet's ``detector test`` defaults: scores > 0.25, NMS at IoU 0.45 (checked frame by frame against
    postprocess with those thresholds on the same frames)."""
    from detector.postprocess import postprocess
    from detector.preprocess import preprocess
    from detector.video import read_frames

    expected, looser = [], []
    for i, frame in enumerate(read_frames(loop_clip, limit=FRAMES)):  # batch 1, as the loop: the same kernels
        tensor, transforms = preprocess([frame], loop_runner.spec.input_size, "letterbox")
        decoded = loop_runner.infer(tensor)
        expected += postprocess(decoded, transforms, 0.25, 0.45, nms=loop_runner.spec.nms)
        looser += postprocess(decoded, transforms, 0.2, 0.5, nms=loop_runner.spec.nms)
        assert_identical(plain[i], expected[i], f"frame {i}")
    assert sum(map(len, looser)) > sum(map(len, expected)), "the check must see a change of either threshold"
