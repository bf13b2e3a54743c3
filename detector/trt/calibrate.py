"""INT8 entropy calibration: batches of preprocessed synthetic frames, a calibration cache file, the calibrator.

* :func:`calibration_batches` (pure, numpy): frames -> fixed-size float32 batches [B, 3, H, W].
* :func:`calibration_frames`: frames of the synthetic scene (:func:`detector.synthetic.render_frames`, the
  generator of the suite's video, with a different seed so that the evaluation frames are not calibrated on).
* :class:`CalibrationCache`: the calibration table file TensorRT reads back instead of calibrating again;
  written atomically.
* :func:`entropy_calibrator`: an ``IInt8EntropyCalibrator2`` subclass (the class is made on first use,
  because its base class comes from the TensorRT module) that copies each batch into a torch CUDA tensor
  and hands TensorRT its device pointer (no pycuda).

Entropy calibration exists in ``tensorrt`` 10 only (deprecated since 10.1 in favour of explicit Q/DQ
quantization, removed in 11); TensorRT-RTX has no calibrators.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from detector import fileio
from detector.errors import BackendError, ModelFileError

log = logging.getLogger(__name__)

__all__ = ["CALIBRATION_SEED", "CalibrationCache", "calibration_batches", "calibration_frames", "entropy_calibrator",
           "int8_calibration"]

#: Seed of the synthetic scene the calibration frames come from (the suite's video uses seed 0).
CALIBRATION_SEED = 1000


def calibration_batches(
    frames: Iterable[np.ndarray], batch_size: int, net_size: tuple[int, int], *, mode: str = "letterbox"
) -> Iterator[np.ndarray]:
    """Preprocess ``frames`` and group them into calibration batches.

    Args:
        frames: BGR uint8 ``H x W x 3`` frames (any number; consumed lazily, one batch at a time).
        batch_size: frames per batch; every batch has exactly this many, because TensorRT calibrates with
            one fixed input shape.
        net_size: network input ``(height, width)`` in pixels.
        mode: ``"letterbox"`` or ``"resize"`` (as :func:`detector.preprocess.preprocess`).

    Yields:
        C-contiguous float32 ``[batch_size, 3, height, width]`` RGB arrays in [0, 1]: ``ceil(n / batch_size)``
        of them for ``n`` frames. A last, partial batch is filled up by repeating its own frames in order
        (frames a, b with batch size 4 -> a, b, a, b), so every frame is used and no batch mixes in zeros;
        no frames -> no batches.

    Raises:
        BackendError: ``batch_size`` is not a positive integer.
        DetectorError: a frame that is not ``H x W x 3`` uint8 (from ``preprocess``).
    """
    from detector.preprocess import preprocess

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise BackendError(f"calibration batch size {batch_size!r} is not a positive integer")
    pending: list[np.ndarray] = []
    for frame in frames:
        pending.append(frame)
        if len(pending) == batch_size:
            yield preprocess(pending, net_size, mode)[0]
            pending = []
    if pending:
        filled = [pending[i % len(pending)] for i in range(batch_size)]
        yield preprocess(filled, net_size, mode)[0]


def calibration_frames(count: int, *, seed: int = CALIBRATION_SEED, width: int = 960,
                       height: int = 540) -> Iterator[np.ndarray]:
    """``count`` BGR frames of the synthetic scene (the suite video's generator, rendered without encoding)."""
    from detector.synthetic import render_frames

    for frame, _annotations in render_frames(seed=seed, width=width, height=height, frames=count):
        yield frame


class CalibrationCache:
    """The calibration table file: TensorRT writes it after calibrating and reads it to skip calibration.

    ``read()`` returns the bytes, or ``None`` when the file is missing or empty (TensorRT then calibrates);
    ``write(data)`` replaces the file atomically (temporary file + rename), so a crash never leaves half
    a table that a later build would trust.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def read(self) -> bytes | None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise ModelFileError(f"cannot read calibration cache '{self.path}': {e.strerror or e}") from e
        if not data:
            log.warning("calibration cache %s is empty; calibrating again", self.path)
            return None
        log.info("using calibration cache %s (%d bytes)", self.path, len(data))
        return data

    def write(self, data: bytes | bytearray | memoryview) -> None:
        fileio.atomic_write_bytes(self.path, bytes(data))
        log.info("wrote calibration cache %s (%d bytes)", self.path, len(bytes(data)))

    def __repr__(self) -> str:
        return f"CalibrationCache({str(self.path)!r})"


def entropy_calibrator(trt: Any, batches: Iterable[np.ndarray], *, batch_size: int, cache: CalibrationCache,
                       device: Any = "cuda") -> Any:
    """An ``IInt8EntropyCalibrator2`` feeding ``batches`` (from :func:`calibration_batches`) to TensorRT.

    Each batch is copied into one reused torch CUDA tensor on ``device`` and its pointer returned from
    ``get_batch``; the copy is synchronized before TensorRT reads it. ``read_calibration_cache`` /
    ``write_calibration_cache`` go through ``cache``. An exception inside a callback cannot cross into
    TensorRT: it is logged, ends calibration (``get_batch`` returns None) and is kept in ``.error`` for
    :func:`~detector.trt.build.build_serialized_engine` to raise after the build.
    """
    base = trt.IInt8EntropyCalibrator2

    class EntropyCalibrator(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            base.__init__(self)
            self.error: BaseException | None = None
            self.batches_fed = 0
            self._batches = iter(batches)
            self._buffer: Any = None

        def get_batch_size(self) -> int:
            return batch_size

        def get_batch(self, names: list[str], *args: Any) -> list[int] | None:
            if self.error is not None:
                return None
            try:
                return self._next(names)
            except Exception as e:  # must not propagate into TensorRT
                log.error("int8 calibration: cannot feed batch %d: %s", self.batches_fed, e)
                self.error = e
                return None

        def _next(self, names: list[str]) -> list[int] | None:
            import torch

            batch = next(self._batches, None)
            if batch is None:
                log.info("int8 calibration: fed %d batches", self.batches_fed)
                return None
            if batch.shape[0] != batch_size:
                raise BackendError(f"calibration batch has {batch.shape[0]} frames; expected {batch_size}")
            host = torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float32))
            if self._buffer is None or self._buffer.shape != host.shape:
                self._buffer = torch.empty(host.shape, dtype=torch.float32, device=device)
            self._buffer.copy_(host)
            torch.cuda.current_stream(self._buffer.device).synchronize()
            self.batches_fed += 1
            if len(names) != 1:
                raise BackendError(f"calibration expects one input tensor; the network has {list(names)}")
            return [int(self._buffer.data_ptr())]

        def read_calibration_cache(self, *args: Any) -> bytes | None:
            try:
                return cache.read()
            except Exception as e:
                log.warning("int8 calibration: ignoring unreadable cache: %s", e)
                return None

        def write_calibration_cache(self, data: Any, *args: Any) -> None:
            try:
                cache.write(memoryview(data))
            except Exception as e:
                log.warning("int8 calibration: cannot write cache %s: %s", cache.path, e)

    return EntropyCalibrator()


def int8_calibration(trt: Any, onnx_path: str | os.PathLike[str], cache_dir: str | os.PathLike[str], *, frames: int,
                     batch_size: int, net_size: tuple[int, int], device: Any) -> tuple[Any, dict[str, Any]]:
    """What an int8 build needs: ``(calibrator_factory, key_extra)``.

    The factory makes an :func:`entropy_calibrator` over ``frames`` synthetic frames in batches of
    ``batch_size``, with its table in ``cache_dir`` under a name keyed by the ONNX bytes, the TensorRT
    version and the calibration data; frames are rendered only if TensorRT actually asks for batches (no
    table yet). ``key_extra`` identifies the calibration data, for the engine cache key.
    """
    from detector.synthetic import GENERATOR_VERSION

    data = {"frames": int(frames), "batch": int(batch_size), "seed": CALIBRATION_SEED, "generator": GENERATOR_VERSION,
            "net": [int(v) for v in net_size], "mode": "letterbox"}
    key = fileio.content_key(fileio.file_digest(onnx_path), str(getattr(trt, "__version__", "unknown")), data)
    table = CalibrationCache(Path(cache_dir) / f"{Path(onnx_path).stem}-{key}.cache")

    def factory() -> Any:
        batches = calibration_batches(calibration_frames(int(frames)), int(batch_size), net_size)
        return entropy_calibrator(trt, batches, batch_size=int(batch_size), cache=table, device=device)

    return factory, {"calibration": data}
