"""Video files in and out: a frame reader and an atomic writer.

Frames are ``numpy.ndarray`` of shape ``(height, width, 3)``, dtype ``uint8``, BGR channel order (OpenCV's
convention). OpenCV is imported when a function first needs it, so importing this module is cheap.

* :func:`open_video` / :class:`VideoReader` read a video file frame by frame; :func:`read_frames` reads a list.
* :class:`VideoWriter` writes frames under a temporary name beside the target and renames it over the target
  only when its ``with`` block ends without an error, so a failed run never leaves a half-written video.

Every failure is a :class:`~detector.errors.VideoError` whose one-line message names the file.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from detector.errors import VideoError
from detector.fileio import atomic_path, file_kind, os_reason

log = logging.getLogger(__name__)

__all__ = ["H264_CODECS", "WRITABLE_SUFFIXES", "VideoReader", "VideoWriter", "as_bgr", "check_video_file", "open_video", "read_frames"]

# (byte offset, magic bytes, container name): only used to word the error for a file OpenCV cannot open.
_SIGNATURES = (
    (4, b"ftyp", "MP4/QuickTime"),
    (4, b"moov", "QuickTime"),
    (4, b"mdat", "QuickTime"),
    (0, b"RIFF", "AVI/RIFF"),
    (0, b"\x1aE\xdf\xa3", "Matroska/WebM"),
    (0, b"FLV", "FLV"),
    (0, b"OggS", "Ogg"),
    (0, b"0&\xb2u", "ASF/WMV"),
    (0, b"\x00\x00\x01\xba", "MPEG program stream"),
    (0, b"\x00\x00\x01\xb3", "MPEG video"),
    (0, b"YUV4MPEG2", "Y4M"),
    (0, b"GIF8", "GIF"),
)
_SNIFF_BYTES = 4096
#: File suffixes (lower case) that :class:`VideoWriter` writes with its default codec (mp4v).
WRITABLE_SUFFIXES: tuple[str, ...] = (".mp4", ".avi", ".mkv", ".mov", ".m4v")


#: Frame rates OpenCV's encoders open with (mp4v: a time base of at most 1/65535 s; none opens at 0.001 fps).
WRITABLE_FPS = (0.01, 65535.0)


def writable_fps(fps: float) -> float:
    """A source's frame rate as its detected video can hold it: clamped into WRITABLE_FPS; 30 when unknown (0)."""
    return min(max(fps, WRITABLE_FPS[0]), WRITABLE_FPS[1]) if fps > 0 else 30.0


def _cv2() -> Any:
    """OpenCV, with its own and FFmpeg's console logging off: they would print lines such as ``moov atom not
    found`` beside the one-line :class:`VideoError` that already says what is wrong. ``OPENCV_FFMPEG_LOGLEVEL``
    and ``OPENCV_LOG_LEVEL`` set by the user win."""
    import cv2

    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # AV_LOG_QUIET; read when a capture opens
    options = os.environ.get("OPENCV_FFMPEG_CAPTURE_OPTIONS", "")
    if "pattern_type" not in options:  # 'shot%03d.png' is that file, not FFmpeg's image sequence shot000.png, ...
        os.environ["OPENCV_FFMPEG_CAPTURE_OPTIONS"] = "|".join(filter(None, [options, "pattern_type;none"]))
    if "OPENCV_LOG_LEVEL" not in os.environ:
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)
    return cv2


def as_bgr(frame: np.ndarray, *, source: str = "frame") -> np.ndarray:
    """Return ``frame`` as a 3-channel BGR ``uint8`` array of shape ``(H, W, 3)``.

    Accepts ``(H, W)`` or ``(H, W, 1)`` grayscale, ``(H, W, 3)`` BGR (returned as is) and ``(H, W, 4)`` BGRA
    (alpha dropped). ``uint16`` frames are scaled to 8 bits (``>> 8``). Anything else raises
    :class:`VideoError` naming ``source`` (a file name, or a frame description) and the shape and dtype.
    """
    if not isinstance(frame, np.ndarray):
        raise VideoError(f"{source}: expected a numpy array, got {type(frame).__name__}")
    if frame.dtype == np.uint16:
        frame = (frame >> 8).astype(np.uint8)
    if frame.dtype != np.uint8 or frame.ndim not in (2, 3) or (frame.ndim == 3 and frame.shape[2] not in (1, 3, 4)):
        raise VideoError(
            f"{source}: unsupported frame of shape {frame.shape} and dtype {frame.dtype}; "
            "expected uint8 (H, W), (H, W, 1), (H, W, 3) or (H, W, 4)"
        )
    if frame.ndim == 3 and frame.shape[2] == 3:
        return frame
    cv2 = _cv2()
    if frame.ndim == 3 and frame.shape[2] == 4:
        return cv2.cvtColor(frame, cv2.COLOR_BGRA2BGR)
    return cv2.cvtColor(np.ascontiguousarray(frame.reshape(frame.shape[:2])), cv2.COLOR_GRAY2BGR)


#: Smallest width and height, in pixels, the video encoders write (mp4v refuses a side of 1).
MIN_FRAME_SIDE = 2
_FULL_BYTES = 256 << 10  # a folder with less free space than this is "full" when an encoder's write went missing


def _disk_full(folder: Path) -> bool:
    """Whether ``folder``'s file system has (nearly) no space left for this user."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < _FULL_BYTES


def _looks_like_text(head: bytes) -> bool:
    """True for bytes that are UTF-8 text (no NUL; a multi-byte character cut at the end is allowed)."""
    if not head or b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start >= len(head) - 3 and e.reason == "unexpected end of data"
    return True


def _container(head: bytes) -> str | None:
    for offset, magic, name in _SIGNATURES:
        if head[offset : offset + len(magic)] == magic:
            return name
    if len(head) > 188 and head[0] == 0x47 and head[188] == 0x47:
        return "MPEG transport stream"
    return None


def check_video_file(path: str | os.PathLike[str]) -> bytes:
    """Raise VideoError unless ``path`` is a non-empty readable regular file that is not text; return its first
    bytes. Cheap (OpenCV is not imported), so a command checks its input this way before loading anything."""
    path = Path(path)
    try:
        st = path.stat()
        kind = file_kind(st)
        if kind == "a directory":
            raise VideoError(f"cannot open '{path}': it is a directory, not a video file")
        if kind is not None:
            raise VideoError(f"cannot open '{path}': it is {kind}, not a regular file")
        size = st.st_size
        with open(path, "rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except OSError as e:
        raise VideoError(f"cannot open '{path}': {os_reason(e)}") from e
    if size == 0:
        raise VideoError(f"cannot open '{path}': the file is empty (0 bytes)")
    if _container(head) is None and _looks_like_text(head):
        raise VideoError(f"cannot open '{path}': it is a text file, not a video")
    return head


#: Decoder threads FFmpeg gets for new readers (None: OpenCV's default, one per CPU); see set_decode_threads.
_decode_threads: int | None = None


def set_decode_threads(threads: int | None) -> int | None:
    """Decode videos opened from now on with ``threads`` FFmpeg threads (``cv2.CAP_PROP_N_THREADS``; None: OpenCV's
    default, which is one per CPU); returns the previous setting so a caller can restore it."""
    global _decode_threads
    if threads is not None and threads < 1:
        raise ValueError(f"decode threads must be >= 1 or None, got {threads}")
    previous, _decode_threads = _decode_threads, threads
    return previous


def _open_capture(path: Path, head: bytes) -> Any:
    cv2 = _cv2()
    params = [] if _decode_threads is None else [cv2.CAP_PROP_N_THREADS, _decode_threads]
    cap = cv2.VideoCapture(os.fsencode(path), cv2.CAP_ANY, params)  # bytes: a str not UTF-8 crashes OpenCV
    if cap.isOpened():
        return cap
    cap.release()
    container = _container(head)
    if container is None:
        raise VideoError(f"cannot open '{path}': not a video file (no known container header)")
    raise VideoError(
        f"cannot open '{path}': OpenCV cannot decode this {container} file (no frames, truncated, or an "
        "unsupported codec)"
    )


class VideoReader:
    """An open video file: iterate it for BGR ``uint8`` frames of shape ``(height, width, 3)``.

    Create it with :func:`open_video`; use it as a context manager (or call :meth:`close`). The file is
    checked and its first frame decoded on opening, so every "cannot open" problem is raised there.
    Iterating again starts from the first frame (the file is reopened); one pass at a time.

    Attributes:
        path: the video file.
        width, height: frame size in pixels (of the decoded first frame).
        fps: frames per second from the container, ``0.0`` when it does not say.
        frame_count: number of frames from the container metadata, ``0`` when it does not say. It may be
            approximate for some containers; the number of frames iterated is the truth.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        head = check_video_file(self.path)
        self._cap: Any = _open_capture(self.path, head)
        self._index = 0
        self._first = self._read()
        if self._first is None:
            self.close()
            raise VideoError(f"cannot read '{self.path}': the video contains no readable frames")
        cv2 = _cv2()
        self.height, self.width = (int(n) for n in self._first.shape[:2])
        fps = float(self._cap.get(cv2.CAP_PROP_FPS))
        self.fps = fps if math.isfinite(fps) and fps > 0 else 0.0
        count = float(self._cap.get(cv2.CAP_PROP_FRAME_COUNT))
        self.frame_count = int(round(count)) if math.isfinite(count) and count > 0 else 0
        self._started = False

    def _read(self) -> np.ndarray | None:
        ok, frame = self._cap.read()
        if not ok or frame is None:
            return None
        self._index += 1
        return as_bgr(frame, source=f"'{self.path}' frame {self._index - 1}")

    def __iter__(self) -> Iterator[np.ndarray]:
        """Yield every frame, from the first, as a BGR ``uint8`` array of shape ``(height, width, 3)``."""
        if self._cap is None:
            raise VideoError(f"cannot read '{self.path}': the reader is closed")
        if self._started:  # a second pass: reopen instead of seeking (seeking is inexact for many codecs)
            self._cap.release()
            self._cap = _open_capture(self.path, check_video_file(self.path))
            self._index = 0
            self._first = self._read()
        self._started = True
        return self._frames()

    def _frames(self) -> Iterator[np.ndarray]:
        frame, self._first = self._first, None
        while frame is not None:
            yield frame
            if self._cap is None:
                return
            frame = self._read()
        if self.frame_count and abs(self._index - self.frame_count) > max(2, self.frame_count // 100):
            log.warning("%s: read %d frames, the container says %d", self.path, self._index, self.frame_count)

    def close(self) -> None:
        """Release the decoder; further iteration raises VideoError. Safe to call twice."""
        if self._cap is not None:
            self._cap.release()
            self._cap = None

    def __enter__(self) -> VideoReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"VideoReader('{self.path}', {self.width}x{self.height}, fps={self.fps:g}, "
            f"frame_count={self.frame_count})"
        )


def open_video(path: str | os.PathLike[str]) -> VideoReader:
    """Open a video file for reading; see :class:`VideoReader`.

    Raises:
        VideoError: (naming the file) it is missing, a directory, empty, unreadable, a text or other
            non-video file, a video OpenCV cannot decode, or a video with no readable frames.
    """
    return VideoReader(path)


def read_frames(path: str | os.PathLike[str], limit: int | None = None) -> list[np.ndarray]:
    """Read the first ``limit`` frames (all when ``None``) of a video as BGR ``uint8`` ``(H, W, 3)`` arrays."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise VideoError(f"cannot read '{path}': limit must be None or an integer >= 0, got {limit!r}")
    with open_video(path) as reader:
        return list(itertools.islice(reader, limit))


#: Codec names :class:`VideoWriter` encodes as H.264 with libx264 through PyAV (OpenCV's wheels carry no H.264
#: encoder): what cameras and users' videos hold, where ``mp4v`` (MPEG-4 Part 2) is OpenCV's own.
H264_CODECS: tuple[str, ...] = ("h264", "avc1")
#: libx264 settings of :class:`VideoWriter`'s H.264 files: its default quality and speed, 4:2:0 chroma as cameras do.
H264_OPTIONS: dict[str, str] = {"crf": "23", "preset": "medium"}


class _H264Encoder:
    """H.264 (libx264) into an MP4/MKV/MOV file through PyAV, with the few methods of ``cv2.VideoWriter`` that
    :class:`VideoWriter` uses (``isOpened``, ``write`` of a BGR frame, ``release``)."""

    def __init__(self, tmp: Path, fps: float, size: tuple[int, int], target: Path) -> None:
        try:
            import av
        except ImportError as e:
            raise VideoError(f"cannot write '{target}': codec 'h264' needs PyAV (pip install av), which is not "
                             "installed") from e  # fmt: skip
        from fractions import Fraction

        self._av, self._target = av, target
        self._container: Any = None
        try:
            self._container = av.open(os.fspath(tmp), "w")
            self._stream = self._container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1001))
            self._stream.width, self._stream.height = size
            self._stream.pix_fmt = "yuv420p"
            self._stream.options = dict(H264_OPTIONS)
        except (av.FFmpegError, ValueError, OSError) as e:
            log.debug("PyAV cannot open %s: %s", tmp, e)
            self.release()

    def isOpened(self) -> bool:  # noqa: N802 -- cv2.VideoWriter's name
        return self._container is not None

    def write(self, frame: np.ndarray) -> None:
        try:
            for packet in self._stream.encode(self._av.VideoFrame.from_ndarray(frame, format="bgr24")):
                self._container.mux(packet)
        except (self._av.FFmpegError, OSError) as e:
            raise VideoError(f"cannot write '{self._target}': {e}") from e

    def release(self) -> None:
        container, self._container = self._container, None
        if container is None:
            return
        try:
            if hasattr(self, "_stream"):
                for packet in self._stream.encode():  # flush the frames the encoder still holds
                    container.mux(packet)
        finally:
            container.close()


class VideoWriter:
    """Write BGR ``uint8`` frames of a fixed size to a video file, atomically.

    Use as a context manager. Frames go to a temporary file beside ``path`` (same suffix, so the container
    is chosen the same way); it is renamed over ``path`` only when the block exits without an exception and
    at least one frame was written. Otherwise the temporary file is removed and ``path`` is left as it was.

    Args:
        path: target file; its suffix picks the container (``.mp4``, ``.avi``, ...).
        fps: frames per second (> 0).
        size: ``(width, height)`` of every frame, in pixels. Codecs such as ``mp4v`` need even sizes.
        codec: a four-character code for ``cv2.VideoWriter_fourcc`` (``"mp4v"``, ``"MJPG"``, ...), or ``"h264"``
            (also ``"avc1"``): H.264 with libx264 through PyAV (:data:`H264_CODECS`; needs ``pip install av``).

    Raises (on entering the block):
        VideoError: the output folder cannot be created or written, or OpenCV cannot open ``codec`` for
            this file type.
    """

    def __init__(
        self, path: str | os.PathLike[str], fps: float, size: tuple[int, int], codec: str = "mp4v"
    ) -> None:
        self.path = Path(path)
        if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not math.isfinite(fps) or fps <= 0:
            raise VideoError(f"cannot write '{self.path}': fps must be a number > 0, got {fps!r}")
        if (
            not isinstance(size, (tuple, list))
            or len(size) != 2
            or not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n > 0 for n in size)
        ):
            raise VideoError(f"cannot write '{self.path}': size must be (width, height) in pixels > 0, got {size!r}")
        if not isinstance(codec, str) or len(codec) != 4:
            raise VideoError(f"cannot write '{self.path}': codec must be a four-character code, got {codec!r}")
        if min(size) < MIN_FRAME_SIDE:
            raise VideoError(f"cannot write '{self.path}': {size[0]}x{size[1]} frames are below the smallest the video "
                             f"encoders write ({MIN_FRAME_SIDE}x{MIN_FRAME_SIDE} pixels)")
        self.fps = float(fps)
        self.size = (int(size[0]), int(size[1]))
        self.codec = codec
        self.frames_written = 0
        self._atomic: Any = None
        self._writer: Any = None
        self._tmp = self.path

    def __enter__(self) -> VideoWriter:
        if self._writer is not None:
            raise VideoError(f"cannot write '{self.path}': the writer is already open")
        cv2 = _cv2()
        self._atomic = atomic_path(self.path)
        try:
            tmp = self._atomic.__enter__()
        except OSError as e:
            self._atomic = None
            raise VideoError(
                f"cannot write '{self.path}': output folder '{self.path.parent}' is not writable "
                f"({e.strerror or e})"
            ) from e
        if self.codec.lower() in H264_CODECS:
            try:
                writer: Any = _H264Encoder(tmp, self.fps, self.size, self.path)
            except VideoError as e:
                self._abort(e)
        else:
            writer = cv2.VideoWriter(os.fsencode(tmp), cv2.VideoWriter_fourcc(*self.codec), self.fps, self.size)
        if not writer.isOpened():
            writer.release()
            self._abort(VideoError(
                f"cannot write '{self.path}': No space left on device" if _disk_full(tmp.parent) else
                f"cannot write '{self.path}': {'PyAV (libx264)' if self.codec.lower() in H264_CODECS else 'OpenCV'} "
                f"cannot open codec '{self.codec}' for a "
                f"'{self.path.suffix or '(no suffix)'}' file"
            ))
        self._writer, self._tmp = writer, tmp
        self.frames_written = 0
        return self

    def _abort(self, error: VideoError) -> None:
        """Remove the temporary file (``path`` untouched) and raise ``error``."""
        atomic, self._atomic = self._atomic, None
        if atomic is not None:
            atomic.__exit__(type(error), error, error.__traceback__)
        raise error

    def write(self, frame: np.ndarray) -> None:
        """Append one frame: ``uint8`` BGR ``(height, width, 3)`` (grayscale or BGRA are converted)."""
        width, height = self.size
        expected = f"expected uint8 BGR of shape ({height}, {width}, 3)"
        if self._writer is None:
            raise VideoError(f"cannot write to '{self.path}': the writer is not open (use it in a 'with' block)")
        if not isinstance(frame, np.ndarray):
            raise VideoError(f"cannot write frame {self.frames_written} to '{self.path}': got "
                             f"{type(frame).__name__}; {expected}")
        if frame.dtype != np.uint8 or frame.ndim not in (2, 3) or frame.shape[:2] != (height, width):
            raise VideoError(
                f"cannot write frame {self.frames_written} to '{self.path}': got shape {frame.shape} dtype "
                f"{frame.dtype}; {expected}"
            )
        frame = as_bgr(frame, source=f"cannot write frame {self.frames_written} to '{self.path}'")
        self._writer.write(np.ascontiguousarray(frame))
        self.frames_written += 1

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.release()
        if exc_type is None and self.frames_written == 0:
            self._abort(VideoError(f"cannot write '{self.path}': no frames were written; nothing saved"))
        if exc_type is None and self._atomic is not None:
            problem = self._check_written()
            if problem:
                self._abort(VideoError(f"cannot write '{self.path}': {problem}; nothing saved"))
        atomic, self._atomic = self._atomic, None
        if atomic is None:
            return
        try:
            atomic.__exit__(exc_type, exc, tb)
        except OSError as e:
            if exc_type is not None:
                raise
            raise VideoError(f"cannot write '{self.path}': {e.strerror or e}") from e
        if exc_type is None:
            log.debug("wrote %s (%d frames, %dx%d, %s)", self.path, self.frames_written, *self.size, self.codec)

    def _check_written(self) -> str | None:
        """Why the finished temporary file is not the video that was written (None: it is). OpenCV's writer
        drops the encoder's write errors (a full disk leaves a file without its index), so the file is read back:
        it must open and its container must count every frame written."""
        cv2 = _cv2()
        cap = cv2.VideoCapture(os.fsencode(self._tmp), cv2.CAP_ANY)
        try:
            count = float(cap.get(cv2.CAP_PROP_FRAME_COUNT)) if cap.isOpened() else 0.0
            readable = int(count) if math.isfinite(count) and count > 0 else 0
            if cap.isOpened() and readable != self.frames_written:  # a container without a count: decode them
                readable = 0
                while readable <= self.frames_written and cap.grab():
                    readable += 1
        finally:
            cap.release()
        if readable == self.frames_written:
            return None
        if _disk_full(self._tmp.parent):
            return "No space left on device"
        return f"the encoder's file holds {readable} of the {self.frames_written} frames written"

    def __repr__(self) -> str:
        state = "open" if self._writer is not None else "closed"
        return f"VideoWriter('{self.path}', fps={self.fps:g}, size={self.size}, codec='{self.codec}', {state})"
