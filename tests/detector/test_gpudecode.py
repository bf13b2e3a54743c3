"""GPU video decode (detector.gpudecode) and H.264 files: the colour conversion against OpenCV's, the one-line
reasons and errors, H.264 writing through PyAV; on a machine with CUDA and PyNvVideoCodec, NVDEC frames and both
loops against OpenCV decoding."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from detector.backends import create_runner
from detector.backends.base import Runner
from detector.errors import VideoError
from detector.gpudecode import NvdecReader, nv12_to_bgr, nvdec_unavailable
from detector.pipeline import LoopSettings, run_pipeline
from detector.pipelined import run_pipelined
from detector.spec import ModelSpec
from detector.synthetic import make_synthetic_video, render_frames, synthetic_video, synthetic_video_path, SyntheticParams
from detector.video import VideoWriter, open_video, read_frames
from perf.measure.parity import compare_detections

FRAMES = 12  # the committed clip's frames: the loops' clip (tests/conftest.py) encoded as H.264
#: A committed H.264 clip (the synthetic scene, seed 3, 320x180, 12 frames, libx264 through PyAV): a GPU machine
#: without PyAV decodes the same bytes.
H264_CLIP = Path(__file__).parents[1] / "data" / "video" / "h264-seed3-320x180-12f.mp4"
NVDEC_REASON = nvdec_unavailable("cuda") if torch.cuda.is_available() else "no CUDA device"
needs_nvdec = pytest.mark.skipif(NVDEC_REASON is not None, reason=f"NVDEC: {NVDEC_REASON}")


def _nv12_of(bgr: np.ndarray) -> np.ndarray:
    """The NV12 planes of a BGR image, by OpenCV's own BT.601 conversion (an independent encoder of the layout)."""
    h, w = bgr.shape[:2]
    flat = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420).reshape(-1)
    u = flat[h * w : h * w + h * w // 4].reshape(h // 2, w // 2)
    v = flat[h * w + h * w // 4 :].reshape(h // 2, w // 2)
    return np.concatenate([flat[: h * w].reshape(h, w), np.stack([u, v], axis=-1).reshape(h // 2, w)])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), half_h=st.integers(32, 60), half_w=st.integers(32, 80))
def test_nv12_conversion_matches_opencv_within_one_level(seed: int, half_h: int, half_w: int) -> None:
    frame, _ = next(iter(render_frames(seed, 2 * half_w, 2 * half_h, 1)))
    nv12 = _nv12_of(frame)
    expected = cv2.cvtColor(nv12, cv2.COLOR_YUV2BGR_NV12)
    got = nv12_to_bgr(torch.from_numpy(nv12), 2 * half_h, 2 * half_w).numpy()
    assert got.shape == expected.shape and got.dtype == np.uint8
    assert np.abs(got.astype(int) - expected).max() <= 1


def test_decoded_planes_convert_to_opencvs_frames_within_three_levels() -> None:
    av = pytest.importorskip("av")
    with av.open(str(H264_CLIP)) as container:
        planes = [frame.to_ndarray(format="yuv420p") for frame in container.decode(video=0)]  # (H * 3 / 2, W) I420
    h, w = 180, 320
    nv12 = []
    for plane in planes:  # I420 -> NV12: interleave U and V
        flat = plane.reshape(-1)
        u, v = flat[h * w : h * w * 5 // 4], flat[h * w * 5 // 4 :]
        nv12.append(np.concatenate([flat[: h * w], np.stack([u, v], axis=-1).reshape(-1)]).reshape(h * 3 // 2, w))
    got = nv12_to_bgr(torch.from_numpy(np.stack(nv12)), h, w).numpy()  # a batch of frames at once
    diff = np.abs(got.astype(int) - np.stack(read_frames(H264_CLIP)))
    assert got.shape == (FRAMES, h, w, 3) and diff.mean() < 2 and diff.max() <= 3, (diff.mean(), diff.max())


def test_nv12_conversion_reads_a_pitched_decoder_surface() -> None:
    frame, _ = next(iter(render_frames(1, 64, 64, 1)))
    nv12 = _nv12_of(frame)
    pitched = np.zeros((96, 128, 1), np.uint8)  # a decoder surface: rows wider than the frame
    pitched[:, :64, 0] = nv12
    assert np.array_equal(nv12_to_bgr(torch.from_numpy(pitched[..., 0]), 64, 64).numpy(),
                          nv12_to_bgr(torch.from_numpy(nv12), 64, 64).numpy())


def test_nvdec_is_unavailable_on_the_cpu_with_the_reason() -> None:
    assert nvdec_unavailable("cpu") == "nvdec decodes into CUDA memory; the runner is on cpu"


@pytest.mark.skipif(importlib.util.find_spec("PyNvVideoCodec") is not None, reason="PyNvVideoCodec is installed")
def test_nvdec_names_the_missing_package() -> None:
    assert "nvdec needs PyNvVideoCodec (NVIDIA's hardware video decoder bindings, in the gpu extra: pip install -e " \
           "'.[gpu]'); not installed" == str(nvdec_unavailable("cuda"))


def test_nvdec_reader_names_a_missing_file_before_anything_else(tmp_path: Path) -> None:
    with pytest.raises(VideoError, match=r"cannot open '.*nope\.mp4': no such file"):
        NvdecReader(tmp_path / "nope.mp4", "cuda")


@pytest.mark.skipif(NVDEC_REASON is None, reason="this machine decodes on NVDEC")
def test_nvdec_reader_says_why_it_cannot_decode_here(tmp_path: Path) -> None:
    video = make_synthetic_video(tmp_path / "clip.mp4", width=64, height=64, frames=2).video
    with pytest.raises(VideoError, match="cannot decode '.*clip.mp4' on NVDEC: "):
        NvdecReader(video, "cpu")


@pytest.fixture
def fake_nvdec(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """PyNvVideoCodec stood in for (this machine may have no GPU): a `SimpleDecoder` of `FRAMES` grey 320x180 NV12
    frames read by index, on a host whose current CUDA device is GPU 1; returns what the reader asked of it
    (the decoder's options, and ``batches``: each ``get_batch_frames`` count)."""
    import importlib.machinery
    import types

    asked: dict[str, Any] = {"batches": []}

    class SimpleDecoder:
        def __init__(self, path: str, **options: object) -> None:
            asked.update(options)
            self.index = 0

        def get_stream_metadata(self) -> object:
            return types.SimpleNamespace(width=320, height=180, average_fps=25.0, num_frames=FRAMES)

        def get_batch_frames(self, count: int) -> list[torch.Tensor]:
            asked["batches"].append(count)
            frames = [torch.full((270, 320), 128, dtype=torch.uint8) for _ in range(min(count, FRAMES - self.index))]
            self.index += count
            return frames

    package = types.ModuleType("PyNvVideoCodec")
    package.__spec__ = importlib.machinery.ModuleSpec("PyNvVideoCodec", None)
    package.SimpleDecoder, package.OutputColorType = SimpleDecoder, types.SimpleNamespace(NATIVE="native")
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", package)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: types.SimpleNamespace(cuda_stream=device.index))
    return asked


def test_nvdec_reader_on_a_bare_cuda_decodes_on_torchs_current_device(fake_nvdec: dict[str, Any]) -> None:
    """The GPU the decoder is told to use is the one torch's "cuda" means, the current device, and so are the
    reader's device and stream."""
    reader = NvdecReader(H264_CLIP, "cuda")
    assert reader.device == torch.device("cuda", 1)
    assert fake_nvdec["gpu_id"] == 1 and fake_nvdec["cuda_stream"] == 1


def test_nvdec_reader_never_asks_past_the_last_frame(fake_nvdec: dict[str, Any]) -> None:
    """SimpleDecoder reads by index and logs "INVALID INDEX" for one past its last frame: the reader asks for the
    frames left, and once they are read, for none."""
    reader = NvdecReader(H264_CLIP, "cuda")
    reader.device = torch.device("cpu")  # the stand-in's frames are on the host
    sizes = [len(reader.read(5)) for _ in range(4)]
    assert sizes == [5, 5, 2, 0] and reader.frames_read == FRAMES
    assert fake_nvdec["batches"] == [5, 5, 2]


def test_loop_settings_refuse_an_unknown_decoder() -> None:
    with pytest.raises(ValueError, match="decoder must be one of opencv, nvdec, got 'gpu'"):
        LoopSettings(decoder="gpu")


# ------------------------------------------------------------------------------------------------ H.264 files
def test_h264_video_is_written_and_read_back_frame_for_frame(tmp_path: Path) -> None:
    pytest.importorskip("av")
    frames = [frame for frame, _ in render_frames(2, 160, 96, 10)]
    with VideoWriter(tmp_path / "clip.mp4", 30, (160, 96), codec="h264") as writer:
        for frame in frames:
            writer.write(frame)
    capture = cv2.VideoCapture(str(tmp_path / "clip.mp4"))
    fourcc = int(capture.get(cv2.CAP_PROP_FOURCC)).to_bytes(4, "little").decode()
    capture.release()
    back = read_frames(tmp_path / "clip.mp4")
    assert fourcc in ("avc1", "h264", "H264") and len(back) == 10
    assert float(np.mean([np.abs(a.astype(int) - b).mean() for a, b in zip(frames, back)])) < 8  # lossy, same scene
    assert list(tmp_path.iterdir()) == [tmp_path / "clip.mp4"]


def test_h264_without_pyav_is_one_line_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "av", None)  # import av raises ImportError, as on a machine without it
    with pytest.raises(VideoError, match=r"^cannot write '.*out\.mp4': codec 'h264' needs PyAV \(pip install av\)"):
        with VideoWriter(tmp_path / "out.mp4", 30, (64, 64), codec="h264"):
            pass
    assert list(tmp_path.iterdir()) == []


def test_synthetic_h264_video_has_the_same_ground_truth_as_mp4v(tmp_path: Path) -> None:
    pytest.importorskip("av")
    h264 = synthetic_video(tmp_path, seed=4, width=128, height=96, frames=6, codec="h264")
    mp4v = synthetic_video(tmp_path, seed=4, width=128, height=96, frames=6)
    assert "-h264-" in h264.video.name and h264.video != mp4v.video
    assert h264.video == synthetic_video_path(tmp_path, SyntheticParams(4, 128, 96, frames=6, codec="h264"))
    assert h264.load_ground_truth()["annotations"] == mp4v.load_ground_truth()["annotations"]
    assert len(read_frames(h264.video)) == 6


# ------------------------------------------------------------------------------------------------ NVDEC (GPU)
@pytest.fixture(scope="module")
def h264_clip() -> Path:
    return H264_CLIP


@pytest.fixture(scope="module")
def cuda_runner(loop_spec: ModelSpec) -> Iterator[Runner]:
    with create_runner("torch", loop_spec, device="cuda") as runner:
        yield runner


@needs_nvdec
def test_nvdec_frames_equal_opencv_frames_up_to_rounding(h264_clip: Path) -> None:
    expected = read_frames(h264_clip)
    with NvdecReader(h264_clip, "cuda") as reader:
        assert (reader.width, reader.height) == (320, 180)
        got = [frame.cpu().numpy() for frame in reader]
    assert len(got) == len(expected) == FRAMES
    diff = np.abs(np.stack(got).astype(int) - np.stack(expected))
    assert diff.mean() < 2 and diff.max() <= 3, (diff.mean(), diff.max())  # FFmpeg converts in fixed point


@needs_nvdec
def test_nvdec_loops_find_the_opencv_loops_boxes(cuda_runner: Runner, h264_clip: Path, tmp_path: Path) -> None:
    reference = run_pipeline(cuda_runner, h264_clip, None)
    sequential = run_pipeline(cuda_runner, h264_clip, tmp_path / "seq.mp4", decoder="nvdec")
    pipelined = run_pipelined(cuda_runner, h264_clip, None, decoder="nvdec", batch=4)
    for result in (sequential, pipelined):
        assert result.decoder == "nvdec" and result.frames == FRAMES
        parity = compare_detections(reference.detections, result.detections, score_tolerance=0.05)
        assert parity.reference_detections > FRAMES
        assert parity.match_rate >= 0.97 and parity.mean_iou > 0.95, parity.summary()
    with open_video(tmp_path / "seq.mp4") as written:
        assert sum(1 for _ in written) == FRAMES
