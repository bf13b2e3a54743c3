"""Video decode on the GPU's hardware decoder (NVDEC) into device memory, through NVIDIA's PyNvVideoCodec.

The OpenCV loops decode on the CPU and upload each frame; DeepStream-style deployments decode on the GPU instead, so
the frames never cross PCIe on their way in. :class:`NvdecReader` decodes a video file with
``PyNvVideoCodec.SimpleDecoder`` (``use_device_memory=True``, native NV12 output) on the caller's current CUDA stream
and converts each frame to the BGR ``uint8`` ``(H, W, 3)`` layout the rest of the detector uses, on the device
(:func:`nv12_to_bgr`). NVDEC's planes are FFmpeg's bit for bit (H.264 decoding is exact), and the colour conversion
is the one OpenCV's FFmpeg back end applies to these videos (BT.601 limited range, each chroma sample shared by a
2x2 block of pixels) in floating point where FFmpeg works in fixed point: a frame decoded here and the same frame
read by :func:`detector.video.open_video` differ by at most 3 levels, 1.4 on average, on the test clip (on the H100
and on the CPU through PyAV's planes; ``tests/detector/test_gpudecode.py``). The decoder's own RGB conversion
differs by up to 21 levels, 4 on average.

PyNvVideoCodec is optional (the ``gpu`` extra: ``pip install -e '.[gpu]'``); :func:`nvdec_unavailable` says, in one
line, why this machine cannot decode on NVDEC (not a CUDA device, the package missing or failing to load). torchcodec
decodes on CUDA too, but its CUDA builds come from PyTorch's own package index, which is not PyPI: it is not used
here.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detector.devices import device_index
from detector.errors import VideoError
from detector.video import check_video_file

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

__all__ = ["NvdecReader", "nv12_to_bgr", "nvdec_unavailable"]
#: The package that drives NVDEC.
PACKAGE = "PyNvVideoCodec"
#: BT.601 limited range (FFmpeg's ``ff_yuv2rgb_coeffs`` for ITU-R 601, over 65536): luma gain, V->R, U->B, U->G, V->G.
_Y_GAIN, _CRV, _CBU, _CGU, _CGV = 76309 / 65536, 104597 / 65536, 132201 / 65536, 25675 / 65536, 53279 / 65536


def nvdec_unavailable(device: str, *, load: bool = True) -> str | None:
    """Why frames cannot be decoded on NVDEC for a runner on ``device`` ("cpu", "cuda", "cuda:N"), in one line;
    None when they can. The device type and the package's presence are checked first, without importing anything;
    ``load=False`` stops there (a test collection's check), else torch must see a CUDA device and the package load."""
    if not device.startswith("cuda"):
        return f"nvdec decodes into CUDA memory; the runner is on {device}"
    if importlib.util.find_spec(PACKAGE) is None:
        return (f"nvdec needs {PACKAGE} (NVIDIA's hardware video decoder bindings, in the gpu extra: pip install -e "
                "'.[gpu]'); not installed")
    if not load:
        return None
    try:
        import torch

        if not torch.cuda.is_available():
            return "nvdec needs a CUDA device; torch sees none"
        importlib.import_module(PACKAGE)
    except (ImportError, OSError) as e:
        return f"{PACKAGE} is installed but cannot load: {e}"
    return None


def nv12_to_bgr(nv12: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Convert NV12 frames to BGR on their device, as FFmpeg's swscale does for OpenCV (BT.601, limited range, each
    chroma sample for its 2x2 block).

    Args:
        nv12: ``uint8`` tensor ``[..., rows, pitch]``: per frame the luma plane (``height`` rows), then the
            interleaved U, V plane at half resolution (``height // 2`` rows); ``rows >= height * 3 // 2`` and
            ``pitch >= width``. Leading dimensions are frames (none for one frame).
        height, width: the frame size in pixels (even).

    Returns:
        ``uint8`` tensor ``[..., height, width, 3]``, BGR, contiguous, on ``nv12.device``.
    """
    import torch

    planes = nv12[..., : height * 3 // 2, :width]
    lead = planes.shape[:-2]
    y = planes[..., :height, :].float() - 16.0
    uv = planes[..., height:, :].reshape(*lead, height // 2, width // 2, 2).float() - 128.0
    uv = uv.repeat_interleave(2, dim=-3).repeat_interleave(2, dim=-2)
    u, v = uv[..., 0], uv[..., 1]
    luma = _Y_GAIN * y
    bgr = torch.stack((luma + _CBU * u, luma - _CGU * u - _CGV * v, luma + _CRV * v), dim=-1)
    return bgr.round_().clamp_(0, 255).to(torch.uint8)


class NvdecReader:
    """A video file decoded on NVDEC: :meth:`read` gives batches of BGR ``uint8`` ``[B, H, W, 3]`` device tensors.

    Create it on the thread and CUDA stream that will read it: the decoder works on the current stream of
    ``device`` (a bare ``"cuda"`` is torch's current device, :func:`detector.devices.device_index`) at creation,
    and each batch is converted on the current stream at :meth:`read`, so work queued on
    that stream afterwards sees complete frames. Use as a context manager (or call :meth:`close`).

    Attributes:
        path: the video file; width, height: frame size in pixels; fps: frames per second from the container
        (0.0 when it does not say); frame_count: frames the container announces (0 when it does not say).

    Raises:
        VideoError: (naming the file) the file is missing, empty or not a video (as :func:`detector.video.open_video`
            says), PyNvVideoCodec cannot load, or NVDEC cannot decode this video (codec, size).
    """

    def __init__(self, path: str | os.PathLike[str], device: torch.device | str) -> None:
        import torch

        self.path = Path(path)
        check_video_file(self.path)
        reason = nvdec_unavailable(str(torch.device(device)))
        if reason is not None:
            raise VideoError(f"cannot decode '{self.path}' on NVDEC: {reason}")
        self.device = torch.device("cuda", device_index(device))  # a bare "cuda": torch's current device
        nvc = importlib.import_module(PACKAGE)
        stream = torch.cuda.current_stream(self.device)
        try:
            self._decoder: Any = nvc.SimpleDecoder(
                os.fspath(self.path), gpu_id=self.device.index, cuda_stream=stream.cuda_stream,
                use_device_memory=True, output_color_type=nvc.OutputColorType.NATIVE)  # fmt: skip
            meta = self._decoder.get_stream_metadata()
        except Exception as e:  # noqa: BLE001 -- PyNvVideoCodec raises plain Exception subclasses of its own
            raise VideoError(f"cannot decode '{self.path}' on NVDEC: {str(e).strip() or type(e).__name__}") from e
        self.width, self.height = int(meta.width), int(meta.height)
        fps = float(getattr(meta, "average_fps", 0.0) or 0.0)
        self.fps = fps if fps > 0 else 0.0
        self.frame_count = int(getattr(meta, "num_frames", 0) or 0)
        self.frames_read = 0

    def read(self, count: int) -> torch.Tensor:
        """The next ``count`` frames (fewer at the end; a ``[0, H, W, 3]`` tensor once the video is over), BGR
        ``uint8`` ``[B, H, W, 3]`` on the device, queued on the current stream."""
        import torch

        if self._decoder is None:
            raise VideoError(f"cannot read '{self.path}': the reader is closed")
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        # SimpleDecoder reads by frame index: asking past its last frame only logs "INVALID INDEX" to stderr
        remaining = self.frame_count - self.frames_read if self.frame_count else count
        try:
            decoded = self._decoder.get_batch_frames(min(count, remaining)) if remaining > 0 else []
        except Exception as e:  # noqa: BLE001 -- see __init__
            raise VideoError(f"cannot decode '{self.path}' on NVDEC after frame {self.frames_read}: "
                             f"{str(e).strip() or type(e).__name__}") from e  # fmt: skip
        self.frames_read += len(decoded)
        if not decoded:
            return torch.empty((0, self.height, self.width, 3), dtype=torch.uint8, device=self.device)
        surfaces = [torch.from_dlpack(frame) for frame in decoded]  # (rows, pitch[, 1]) views of decoder memory
        nv12 = torch.stack([surface.reshape(surface.shape[0], -1) for surface in surfaces])
        return nv12_to_bgr(nv12, self.height, self.width)  # one conversion per batch: fewer kernel launches

    def __iter__(self) -> Iterator[torch.Tensor]:
        """Every remaining frame, one ``(H, W, 3)`` BGR device tensor at a time."""
        while True:
            batch = self.read(8)
            if not len(batch):
                return
            yield from batch

    def close(self) -> None:
        """Release the decoder. Safe to call twice."""
        self._decoder = None

    def __enter__(self) -> NvdecReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"NvdecReader('{self.path}', {self.width}x{self.height}, fps={self.fps:g}, device={self.device})"
