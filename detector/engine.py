"""TensorRT engine build and cache: the public face of :mod:`detector.trt` (see there for the details).

    >>> from detector.engine import import_tensorrt, load_engine
    >>> trt, flavor = import_tensorrt()                  # "tensorrt" or "tensorrt_rtx"
    >>> loaded, entry, cold = load_engine(spec.onnx_path(), cache_dir=spec.cache_dir / "trt", precision="fp16")

Nothing here imports TensorRT, torch or onnx until a function that needs them is called.
"""

from detector.trt import *  # noqa: F403 - this module is the documented entry point
from detector.trt import __all__  # noqa: F401
