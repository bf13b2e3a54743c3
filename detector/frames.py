"""Where a loop's frames come from: one interface over host frames (OpenCV, PyAV) and device frames (NVDEC).

Every video loop (sequential, pipelined, multi-stream, stage speeds, evaluation) opens its video through
:func:`open_frames` and reads it through :class:`FrameSource`, so "where do the frames live" is answered here once:

* :class:`HostFrames` -- BGR ``uint8`` ``(H, W, 3)`` numpy frames of a :class:`detector.video.VideoReader` (or of any
  iterable of frames); preprocessing is OpenCV's (:func:`detector.preprocess.preprocess`), ``wait`` does nothing.
* :class:`DeviceFrames` -- BGR ``uint8`` ``[B, H, W, 3]`` CUDA tensors of a :class:`detector.gpudecode.NvdecReader`;
  preprocessing is torch's on the device (:func:`detector.preprocess.preprocess_torch`), and ``wait`` waits for the
  current stream of the device, so that a stage's host time includes its device work.

A source is read in batches (:meth:`FrameSource.read`, the sequential loops) or frame by frame (iteration, the
threaded readers). Adding a video source means one class with these methods and one branch in :func:`open_frames`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from detector.errors import VideoError

if TYPE_CHECKING:
    import numpy as np
    import torch

    from detector.backends.base import Runner
    from detector.stages import StageChain

__all__ = ["DECODERS", "DeviceFrames", "FrameSource", "HostFrames", "frame_device", "open_frames"]

#: Where a pass decodes its video: ``opencv`` on the CPU (:class:`HostFrames`), ``nvdec`` on the GPU's hardware
#: decoder into device memory (:class:`DeviceFrames`).
DECODERS: tuple[str, ...] = ("opencv", "nvdec")


class FrameSource(Protocol):
    """The frames of one video, in batches or one at a time, and how they reach the network and the writer.

    Attributes:
        width, height: frame size in pixels. fps: frames per second (0.0 when the container does not say).
        frame_count: frames the container announces (0 when it does not say).
        on_device: the frames are device tensors (the runner then keeps its outputs on the device too).
    """

    width: int
    height: int
    fps: float
    frame_count: int
    on_device: bool

    def read(self, count: int) -> Any:
        """The next ``count`` frames (fewer at the end, none once the video is over), queued, not waited for."""

    def __iter__(self) -> Iterator[Any]:
        """Every frame, one at a time."""

    def upload(self, batch: np.ndarray) -> Any:
        """A host float32 ``[B, 3, h, w]`` batch where the runner takes this source's batches (warm-up)."""

    def preprocess(self, frames: Any, chain: StageChain) -> tuple[Any, list[Any]]:
        """``frames`` letterboxed or resized for the network by ``chain``, waited for."""

    def wait(self) -> None:
        """Wait for the device work queued on the current stream (nothing to wait for on the host)."""

    def download(self, frames: Any) -> Sequence[np.ndarray]:
        """``frames`` as host BGR ``uint8`` arrays, to be drawn on and encoded."""

    def close(self) -> None:
        """Release the decoder."""


class HostFrames:
    """Host frames: a :class:`detector.video.VideoReader` or an iterable of BGR ``uint8`` ``(H, W, 3)`` arrays.

    An iterable is read once, and its first frame is taken at once for the frame size (``name`` says whose frames
    they are in the error when there is none; ``fps`` is their rate). A reader is read again from its first frame
    by each iteration.
    """

    on_device = False

    def __init__(self, frames: Iterable[np.ndarray], *, fps: float = 0.0, name: str = "frames") -> None:
        from detector.video import VideoReader

        self._reader = frames if isinstance(frames, VideoReader) else None
        self._batches: Iterator[np.ndarray] | None = None
        if self._reader is not None:
            self.width, self.height, self.fps = self._reader.width, self._reader.height, self._reader.fps
            self.frame_count = self._reader.frame_count
            return
        source = iter(frames)
        first = next(source, None)
        if first is None:
            raise VideoError(f"{name}: no frames could be read")
        self.height, self.width = (int(n) for n in first.shape[:2])
        self.fps, self.frame_count = fps, 0
        self._once: Iterator[np.ndarray] | None = itertools.chain([first], source)

    def read(self, count: int) -> list[np.ndarray]:
        if self._batches is None:
            self._batches = iter(self)
        return [f for _, f in zip(range(count), self._batches)]

    def __iter__(self) -> Iterator[np.ndarray]:
        if self._reader is not None:
            return iter(self._reader)
        if self._once is None:
            raise VideoError("the frames were read already; an iterable of frames is read once")
        source, self._once = self._once, None
        return source

    def upload(self, batch: np.ndarray) -> np.ndarray:
        return batch

    def preprocess(self, frames: Sequence[np.ndarray], chain: StageChain) -> tuple[np.ndarray, list[Any]]:
        return chain.prepare_host(frames)

    def wait(self) -> None:
        pass

    def download(self, frames: Sequence[np.ndarray]) -> Sequence[np.ndarray]:
        return frames

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()

    def __enter__(self) -> HostFrames:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DeviceFrames:
    """Device frames decoded by NVDEC (:class:`detector.gpudecode.NvdecReader`) into the memory of ``device``.

    Open it on the thread and CUDA stream that will read it (the decoder works on the stream current at opening).
    """

    on_device = True

    def __init__(self, video: str | os.PathLike[str], device: torch.device | str) -> None:
        from detector.gpudecode import NvdecReader

        self.reader = NvdecReader(video, device)
        self.device = self.reader.device
        self.width, self.height, self.fps = self.reader.width, self.reader.height, self.reader.fps
        self.frame_count = self.reader.frame_count

    def read(self, count: int) -> torch.Tensor:
        return self.reader.read(count)

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(self.reader)

    def upload(self, batch: np.ndarray) -> torch.Tensor:
        import torch

        return torch.from_numpy(batch).to(self.device)

    def preprocess(self, frames: torch.Tensor, chain: StageChain) -> tuple[torch.Tensor, list[Any]]:
        out = chain.prepare_device(frames)
        self.wait()
        return out

    def wait(self) -> None:
        import torch

        torch.cuda.current_stream(self.device).synchronize()

    def download(self, frames: torch.Tensor) -> np.ndarray:
        return frames.cpu().numpy()

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> DeviceFrames:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_frames(video: str | os.PathLike[str], decoder: str = "opencv",
                device: torch.device | str = "cpu") -> HostFrames | DeviceFrames:
    """The frames of ``video`` decoded by ``decoder`` (:data:`DECODERS`): ``opencv`` on the host, ``nvdec`` into the
    memory of the CUDA ``device``. Use it as a context manager.

    Raises:
        VideoError: the video cannot be opened (naming the file, as :func:`detector.video.open_video` or
            :class:`detector.gpudecode.NvdecReader` say).
        ValueError: an unknown ``decoder``.
    """
    if decoder == "nvdec":
        return DeviceFrames(video, device)
    if decoder != "opencv":
        raise ValueError(f"decoder must be one of {', '.join(DECODERS)}, got {decoder!r}")
    from detector.video import open_video

    return HostFrames(open_video(video))


def frame_device(runner: Runner) -> torch.device:
    """Where the threaded loops put frames: the runner's CUDA device, else the CPU."""
    import torch

    return torch.device(runner.device) if runner.device.startswith("cuda") else torch.device("cpu")
