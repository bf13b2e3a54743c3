"""Video reading and writing on real files: frames, metadata, conversions, atomic writes, every error."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from detector.errors import VideoError
from detector.video import VideoWriter, as_bgr, open_video, read_frames

cv2 = pytest.importorskip("cv2")

W, H, N = 320, 180, 12


def _frame(i: int) -> np.ndarray:
    """Frame ``i``: a flat grey level 20 * i with a white square moving right (BGR uint8 (H, W, 3))."""
    frame = np.full((H, W, 3), 20 * i, np.uint8)
    frame[60:100, 10 + 20 * i : 50 + 20 * i] = 255
    return frame


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("clip") / "clip.mp4"
    with VideoWriter(path, 25, (W, H)) as writer:
        for i in range(N):
            writer.write(_frame(i))
    return path


def _raw_cv2_video(path: Path, frames: list[np.ndarray], codec: str = "MJPG", is_color: bool = True) -> Path:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*codec), 25, (W, H), isColor=is_color)
    assert writer.isOpened()
    for frame in frames:
        writer.write(frame)
    writer.release()
    return path


def test_reader_reports_size_fps_frame_count_and_path(clip: Path) -> None:
    with open_video(clip) as reader:
        assert (reader.width, reader.height) == (W, H)
        assert reader.fps == pytest.approx(25)
        assert reader.frame_count == N
        assert reader.path == clip
        assert "320x180" in repr(reader)


def test_frames_are_bgr_uint8_in_order(clip: Path) -> None:
    frames = read_frames(clip)
    assert len(frames) == N
    for i, frame in enumerate(frames):
        assert frame.shape == (H, W, 3) and frame.dtype == np.uint8
        assert abs(float(frame[150:170, 250:300].mean()) - 20 * i) < 6  # lossy codec: close, not equal


def test_read_frames_stops_at_limit(clip: Path) -> None:
    assert len(read_frames(clip, limit=5)) == 5
    assert read_frames(clip, limit=0) == []
    with pytest.raises(VideoError, match="limit"):
        read_frames(clip, limit=-1)


def test_iterating_again_restarts_from_first_frame(clip: Path) -> None:
    with open_video(clip) as reader:
        first = [f.copy() for f in reader]
        second = list(reader)
    assert len(first) == len(second) == N
    assert all(np.array_equal(a, b) for a, b in zip(first, second))


def test_closed_reader_refuses_to_iterate(clip: Path) -> None:
    reader = open_video(clip)
    reader.close()
    reader.close()
    with pytest.raises(VideoError, match="closed"):
        iter(reader)


def _zero_frame_mp4(path: Path) -> None:
    _raw_cv2_video(path, [], codec="mp4v")


def _zero_frame_avi(path: Path) -> None:
    _raw_cv2_video(path, [])


def _truncated_mp4(path: Path, clip: Path) -> None:
    data = clip.read_bytes()
    path.write_bytes(data[: len(data) // 3])


@pytest.mark.parametrize(
    "case, make, message",
    [
        ("missing.mp4", None, "no such file"),
        ("a_directory.mp4", lambda p: p.mkdir(), "directory"),
        ("empty.mp4", lambda p: p.write_bytes(b""), "empty"),
        ("notes.mp4", lambda p: p.write_text("just some text\nnot a video\n"), "text file"),
        ("noise.mp4", lambda p: p.write_bytes(np.random.default_rng(0).bytes(20000)), "not a video"),
        ("no_frames.mp4", _zero_frame_mp4, "cannot decode"),
        ("no_frames.avi", _zero_frame_avi, "no readable frames"),
    ],
)
def test_error_names_the_file_and_the_problem(tmp_path: Path, case: str, make, message: str) -> None:
    path = tmp_path / case
    if make is not None:
        make(path)
    with pytest.raises(VideoError, match=message) as info:
        open_video(path)
    text = str(info.value)
    assert str(path) in text and "\n" not in text
    with pytest.raises(VideoError):
        read_frames(path)


def test_error_for_truncated_video(tmp_path: Path, clip: Path) -> None:
    path = tmp_path / "cut.mp4"
    _truncated_mp4(path, clip)
    with pytest.raises(VideoError, match="cut.mp4"):
        open_video(path)


def test_a_name_holding_a_printf_pattern_is_that_file_not_an_image_sequence(tmp_path: Path) -> None:
    """FFmpeg reads 'shot%d.png' as the images shot0.png, shot1.png, ... beside it, unless told not to."""
    cv2.imwrite(os.fsencode(tmp_path / "shot%d.png"), np.full((48, 64, 3), 200, np.uint8))
    for i in range(5):
        cv2.imwrite(os.fsencode(tmp_path / f"shot{i}.png"), np.full((32, 40, 3), 40 * i, np.uint8))
    frames = read_frames(tmp_path / "shot%d.png")
    assert [frame.shape for frame in frames] == [(48, 64, 3)]
    assert abs(float(frames[0].mean()) - 200) < 4


def test_grayscale_video_is_read_as_three_channel_bgr(tmp_path: Path) -> None:
    gray = [np.full((H, W), 40 * i, np.uint8) for i in range(4)]
    path = _raw_cv2_video(tmp_path / "gray.avi", gray, is_color=False)
    frames = read_frames(path)
    assert len(frames) == 4
    for i, frame in enumerate(frames):
        assert frame.shape == (H, W, 3) and frame.dtype == np.uint8
        assert np.array_equal(frame[..., 0], frame[..., 2])
        assert abs(float(frame.mean()) - 40 * i) < 4


@pytest.mark.parametrize("shape", [(H, W), (H, W, 1), (H, W, 4)])
def test_as_bgr_converts_gray_and_bgra_to_bgr(shape: tuple[int, ...]) -> None:
    frame = np.random.default_rng(1).integers(0, 256, shape, dtype=np.uint8)
    bgr = as_bgr(frame)
    assert bgr.shape == (H, W, 3) and bgr.dtype == np.uint8
    expected = frame[..., :3] if len(shape) == 3 and shape[2] == 4 else frame.reshape(H, W, 1)
    assert np.array_equal(bgr, np.broadcast_to(expected, (H, W, 3)))


def test_as_bgr_passes_bgr_through_and_scales_16_bit() -> None:
    frame = np.zeros((H, W, 3), np.uint8)
    assert as_bgr(frame) is frame
    assert as_bgr(np.full((4, 4), 0xAB00, np.uint16)).max() == 0xAB


@pytest.mark.parametrize("bad", [np.zeros((H, W, 2), np.uint8), np.zeros((H, W, 3), np.float32), np.zeros(5, np.uint8)])
def test_as_bgr_rejects_unsupported_frames(bad: np.ndarray) -> None:
    with pytest.raises(VideoError, match=r"expected uint8"):
        as_bgr(bad, source="clip.mp4 frame 3")


def test_writer_counts_frames_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "out" / "written.mp4"
    with VideoWriter(path, 30, (W, H)) as writer:
        for i in range(5):
            writer.write(_frame(i))
        writer.write(np.full((H, W), 7, np.uint8))  # grayscale accepted and converted
        assert writer.frames_written == 6
    assert [p.name for p in path.parent.iterdir()] == ["written.mp4"]
    assert len(read_frames(path)) == 6


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_writer_leaves_no_partial_file_when_block_raises(tmp_path: Path) -> None:
    path = tmp_path / "partial.mp4"
    with pytest.raises(RuntimeError, match="boom"):
        with VideoWriter(path, 30, (W, H)) as writer:
            writer.write(_frame(0))
            raise RuntimeError("boom")
    assert _leftovers(tmp_path) == []


def test_writer_keeps_previous_file_when_block_raises(tmp_path: Path, clip: Path) -> None:
    path = tmp_path / "kept.mp4"
    path.write_bytes(clip.read_bytes())
    with pytest.raises(RuntimeError):
        with VideoWriter(path, 30, (W, H)) as writer:
            writer.write(_frame(1))
            raise RuntimeError("boom")
    assert path.read_bytes() == clip.read_bytes()
    assert _leftovers(tmp_path) == ["kept.mp4"]


def test_writer_with_no_frames_saves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "nothing.mp4"
    with pytest.raises(VideoError, match="no frames were written") as info:
        with VideoWriter(path, 30, (W, H)):
            pass
    assert str(path) in str(info.value)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "frame, expected",
    [
        (np.zeros((H + 2, W, 3), np.uint8), r"shape \(182, 320, 3\).*expected uint8 BGR of shape \(180, 320, 3\)"),
        (np.zeros((H, W, 3), np.float32), r"dtype float32.*expected uint8 BGR of shape \(180, 320, 3\)"),
        ([[0]], r"got list.*expected uint8 BGR"),
    ],
)
def test_writer_rejects_wrong_frames_saying_what_it_expects(tmp_path: Path, frame: object, expected: str) -> None:
    path = tmp_path / "strict.mp4"
    with pytest.raises(VideoError, match=expected):
        with VideoWriter(path, 30, (W, H)) as writer:
            writer.write(frame)  # type: ignore[arg-type]
    assert not path.exists()


def test_writer_error_for_unwritable_output_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    path = blocker / "out.mp4"
    with pytest.raises(VideoError, match="not writable") as info:
        with VideoWriter(path, 30, (W, H)):
            pass
    assert str(path) in str(info.value)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root can write to read-only folders")
def test_writer_error_for_read_only_output_folder(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(VideoError, match="ro/out.mp4"):
            with VideoWriter(folder / "out.mp4", 30, (W, H)):
                pass
    finally:
        folder.chmod(0o700)


def test_writer_error_for_codec_that_cannot_open(tmp_path: Path) -> None:
    path = tmp_path / "odd.mp4"
    with pytest.raises(VideoError, match="codec 'ZZZZ'") as info:
        with VideoWriter(path, 30, (W, H), codec="ZZZZ"):
            pass
    assert str(path) in str(info.value)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "fps, size, codec, message",
    [(0, (W, H), "mp4v", "fps"), (30, (W, 0), "mp4v", "size"), (30, (W,), "mp4v", "size"), (30, (W, H), "mp4", "codec")],
)
def test_writer_rejects_bad_settings(tmp_path: Path, fps: float, size: tuple, codec: str, message: str) -> None:
    with pytest.raises(VideoError, match=message):
        VideoWriter(tmp_path / "x.mp4", fps, size, codec)


def test_write_outside_with_block_is_an_error(tmp_path: Path) -> None:
    writer = VideoWriter(tmp_path / "x.mp4", 30, (W, H))
    with pytest.raises(VideoError, match="not open"):
        writer.write(_frame(0))
