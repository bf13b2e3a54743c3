"""detector.multistream on the CPU: each stream gets its own frames' detections back, in order."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from detector.backends import create_runner
from detector.backends.base import Runner
from detector.errors import VideoError
from detector.model import default_weights_path
from detector.multistream import run_multistream
from detector.pipelined import run_pipelined
from detector.postprocess import Detections
from detector.spec import ModelSpec
from detector.synthetic import make_synthetic_video

SIZE = 160
FRAMES = 5  # per video: the streams wrap around during the run


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory, packaged_cfg: Callable[[Path, int], Path]) -> Iterator[Runner]:
    base = tmp_path_factory.mktemp("spec")
    cfg = packaged_cfg(base, SIZE)
    with create_runner("torch", ModelSpec(cfg, weights=default_weights_path(), cache_dir=base / "cache"),
                       device="cpu") as r:
        yield r


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("streams")
    return [make_synthetic_video(folder / f"cam{k}.mp4", seed=20 + k, width=256, height=144, frames=FRAMES).video
            for k in range(3)]


@pytest.fixture(scope="module")
def references(runner: Runner, videos: list[Path]) -> list[list[Detections]]:
    """Each video alone, frame by frame, with the same (torch) preprocessing."""
    return [run_pipelined(runner, v, None, batch=1, gpu_preprocess=True).detections for v in videos]


def close(a: Detections, b: Detections) -> bool:
    """Equal up to float noise of a different batch size."""
    return (len(a) == len(b) and np.array_equal(a.classes, b.classes)
            and np.allclose(a.boxes, b.boxes, atol=1e-2) and np.allclose(a.scores, b.scores, atol=1e-4))


def test_each_stream_gets_its_own_frames_back_in_order(
    runner: Runner, videos: list[Path], references: list[list[Detections]]
) -> None:
    offsets, warmup, ticks = [0, 1, 3], 2, 7
    result = run_multistream(runner, videos, ticks=ticks, offsets=offsets, warmup_ticks=warmup)
    assert result.streams == 3 and result.frames == 21 and len(result.latencies_ms) == 21
    # the videos differ, so a frame delivered to the wrong stream would not match its reference
    assert not close(references[0][2], references[1][2])
    for k, frames in enumerate(result.per_stream):
        assert [f.stream for f in frames] == [k] * ticks
        assert [f.index for f in frames] == list(range(ticks))
        assert [f.position for f in frames] == [(offsets[k] + warmup + i) % FRAMES for i in range(ticks)]
        for f in frames:
            assert f.detections is not None and close(f.detections, references[k][f.position]), (k, f.position)


def test_latency_runs_from_decode_to_detections_and_fps_counts_all_streams(
    runner: Runner, videos: list[Path]
) -> None:
    result = run_multistream(runner, videos, ticks=4, warmup_ticks=1, keep_detections=False)
    assert all(latency > 0 for latency in result.latencies_ms)
    assert result.latency_ms(50) <= result.latency_ms(99) <= max(result.latencies_ms) + 1e-9
    assert result.fps == pytest.approx(3 * result.per_stream_fps)
    assert result.summary()["frames"] == 12 and result.per_stream[1][0].detections is None
    assert not [t for t in threading.enumerate() if t.name.startswith("stream")]


def test_streams_of_different_frame_sizes_cannot_be_batched(runner: Runner, videos: list[Path],
                                                            tmp_path: Path) -> None:
    other = make_synthetic_video(tmp_path / "wide.mp4", seed=1, width=320, height=144, frames=2).video
    with pytest.raises(VideoError, match="cannot batch '.*wide.mp4': frames are 320x144"):
        run_multistream(runner, [videos[0], other], ticks=1)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="offsets must be 2 integers"):
        run_multistream(None, ["a.mp4", "b.mp4"], ticks=1, offsets=[0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ticks >= 1"):
        run_multistream(None, ["a.mp4"], ticks=0)  # type: ignore[arg-type]


def test_streams_whose_buffers_exceed_the_machine_are_refused_before_any_opens(runner: Runner,
                                                                                videos: list[Path]) -> None:
    streams = 10**8  # 4 frames of 256x144 each: 44 TB
    with pytest.raises(MemoryError, match=r"for the frame buffers of 100000000 streams \(4 frames of 256x144 each\)"):
        run_multistream(runner, [videos[0]] * streams, ticks=1)
    assert not [t for t in threading.enumerate() if t.name.startswith("stream")]
