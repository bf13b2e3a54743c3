"""detector.frames and detector.stages on the CPU: one frame source for every loop, one stage chain."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from detector.backends.base import Runner
from detector.errors import VideoError
from detector.frames import HostFrames, open_frames
from detector.multistream import run_multistream
from detector.pipeline import LoopSettings, run_pipeline
from detector.spec import ModelSpec
from detector.stages import StageChain
from detector.stagespeed import decode_speed, meets
from detector.train.evalrun import detect_video, eval_chain
from detector.video import read_frames


def test_host_frames_read_in_batches_until_an_empty_read(loop_clip: Path) -> None:
    expected = read_frames(loop_clip)
    with open_frames(loop_clip) as source:
        assert (source.width, source.height, source.on_device) == (320, 180, False)
        batches = [source.read(4)]
        while len(batches[-1]):
            batches.append(source.read(4))
    frames = [f for batch in batches for f in batch]
    assert all(len(b) == 4 for b in batches[:-2]) and 0 < len(batches[-2]) <= 4 and len(batches[-1]) == 0
    assert len(frames) == len(expected) > 0 and all(np.array_equal(a, b) for a, b in zip(frames, expected))


def test_a_video_source_starts_again_at_each_iteration(loop_clip: Path) -> None:
    with open_frames(loop_clip) as source:
        first, second = next(iter(source)), next(iter(source))
    assert np.array_equal(first, second)


def test_frames_of_an_iterable_are_read_once_and_sized_by_the_first() -> None:
    frames = [np.full((24, 40, 3), k, np.uint8) for k in range(3)]
    source = HostFrames(iter(frames), fps=12.5, name="camera")
    assert (source.width, source.height, source.fps, source.frame_count) == (40, 24, 12.5, 0)
    assert [int(f[0, 0, 0]) for f in source] == [0, 1, 2]
    with pytest.raises(VideoError, match="read once"):
        iter(source)


def test_an_empty_iterable_of_frames_is_an_error_naming_it() -> None:
    with pytest.raises(VideoError, match="camera: no frames could be read"):
        HostFrames(iter([]), name="camera")


def test_an_unknown_decoder_is_refused(loop_clip: Path) -> None:
    with pytest.raises(ValueError, match="decoder must be one of opencv, nvdec, got 'gstreamer'"):
        open_frames(loop_clip, "gstreamer")


def test_decode_speed_counts_and_keeps_the_first_frames(loop_clip: Path) -> None:
    expected = read_frames(loop_clip)
    speed, kept = decode_speed(loop_clip, max_frames=len(expected) - 1, keep=3, decoder="opencv")
    assert speed.frames == len(expected) - 1 and speed.seconds > 0
    assert len(kept) == 3 and all(np.array_equal(a, b) for a, b in zip(kept, expected))


def test_the_evaluation_detects_what_the_sequential_loop_detects(loop_runner: Runner, loop_clip: Path) -> None:
    settings = LoopSettings(batch=3, conf_threshold=0.1, iou_threshold=0.5, letterbox=True, warmup=0)
    sequential = run_pipeline(loop_runner, loop_clip, None, settings=settings).detections
    evaluated = detect_video(lambda x: loop_runner.infer(x), loop_clip, StageChain.of(loop_runner.spec, settings),
                             batch=3)
    assert len(sequential) == len(evaluated) > 0 and sum(len(d) for d in sequential) > 0
    for image_id, det in evaluated.items():
        ref = sequential[image_id - 1]
        assert np.array_equal(det.boxes, ref.boxes) and np.array_equal(det.scores, ref.scores)


def test_the_evaluation_holds_a_frame_s_100_best_where_the_loops_keep_every_detection(loop_spec: ModelSpec) -> None:
    import torch

    from detector.boxes import Letterbox

    crowded = torch.zeros(1, 240, 5)  # 240 disjoint boxes of one class, scores 0.5 down to 0.26
    for i in range(240):
        x, y = 16.0 * (i % 24), 16.0 * (i // 24)
        crowded[0, i] = torch.tensor([x, y, x + 8, y + 8, 0.5 - 0.001 * i])
    transforms = [Letterbox.letterbox(416, 416, 416, 416)]
    every = StageChain.of(loop_spec, LoopSettings(letterbox=True)).postprocess(crowded, transforms)[0]
    held = eval_chain(loop_spec, letterbox=True).postprocess(crowded, transforms)[0]
    assert len(every) == 240  # the loops keep them all, as Darknet does
    assert np.array_equal(held.scores, every.scores[:100])  # COCO scores no more: the evaluation holds the same 100


def test_multistream_takes_the_loop_settings_thresholds(loop_runner: Runner, loop_clip: Path) -> None:
    def boxes(**keywords: object) -> int:
        result = run_multistream(loop_runner, [loop_clip], ticks=3, warmup_ticks=0, **keywords)
        return sum(len(f.detections) for f in result.per_stream[0])

    assert boxes(settings=LoopSettings(conf_threshold=0.99)) <= boxes(conf_threshold=0.05)
    assert boxes(conf_threshold=0.05) > 0


@pytest.mark.parametrize("keywords", [{"skip_interval": 1}, {"batch": 2}, {"decoder": "nvdec"}, {"max_frames": 3}])
def test_multistream_refuses_settings_it_does_not_take(loop_runner: Runner, loop_clip: Path,
                                                       keywords: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="the multi-stream loop infers one frame of each stream per tick"):
        run_multistream(loop_runner, [loop_clip], ticks=1, **keywords)


@given(st.floats(0, 3))
def test_a_pipeline_above_its_slowest_stage_alone_neither_meets_nor_misses_the_target(ratio: float) -> None:
    """Above 1 the pipeline beat its own bound: the two were measured at different CPU speeds, so no verdict."""
    verdict = meets(ratio, 0.9)
    assert verdict.startswith("unknown") == (ratio > 1)
    assert ratio > 1 or verdict == ("yes" if ratio >= 0.9 else "no")
