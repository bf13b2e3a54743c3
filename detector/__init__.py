"""A small YOLOv4-tiny detector: Darknet files, a PyTorch model, interchangeable runners, a video pipeline.

Importing this package is cheap: torch, onnxruntime, OpenCV and TensorRT are imported by the modules
that need them, when they are first used.
"""

from detector.errors import (
    BackendError,
    BackendUnavailable,
    CfgError,
    DetectorError,
    ModelFileError,
    VideoError,
    WeightsError,
)

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "BackendUnavailable",
    "CfgError",
    "DetectorError",
    "ModelFileError",
    "VideoError",
    "WeightsError",
    "__version__",
]
