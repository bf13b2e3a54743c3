"""Which TensorRT: the ``tensorrt`` package or TensorRT-RTX, imported lazily, and what each can do here.

Two Python packages implement the TensorRT 10 API this backend uses:

``tensorrt`` (flavor ``"tensorrt"``)
    Full TensorRT from NVIDIA's own index. Weakly typed networks: fp16 and int8 are builder flags on an
    fp32 ONNX model; int8 uses an entropy calibrator. Engines run on any GPU TensorRT supports (they are
    built for the GPU they are built on).
``tensorrt_rtx`` / ``tensorrt_rtx_bindings`` (flavor ``"tensorrt_rtx"``)
    TensorRT for RTX from PyPI: the wheel ``tensorrt-rtx-cu13-bindings`` installs the module
    ``tensorrt_rtx_bindings`` and ``tensorrt-rtx-cu13-libs`` the shared libraries (``tensorrt_rtx_libs``);
    NVIDIA's own samples ``import tensorrt_rtx``. Networks are always strongly typed: there are no
    fp16/int8 builder flags and no calibrators, so precision comes from the ONNX tensor types (an fp16
    engine needs an fp16 ONNX model; int8 needs Q/DQ nodes in the ONNX and is not offered here).
    Engines are compiled ahead of time on the CPU (no GPU needed to build) and JIT-specialised when the
    execution context is created; they run only on the compute capabilities of the module's
    ``ComputeCapability`` enum (1.7: SM75, SM80, SM86, SM89, SM120, SM121 -- Turing, Ampere, Ada and
    Blackwell RTX parts; 7.5 only when targeted explicitly). Data-center Hopper/Blackwell parts such as
    the H100 (9.0) are refused at deserialization: :func:`rtx_refusal_message` words that refusal.

``DETECTOR_TENSORRT=tensorrt|tensorrt_rtx`` forces one flavor; otherwise the first importable of
``tensorrt``, ``tensorrt_rtx``, ``tensorrt_rtx_bindings`` wins.
"""

from __future__ import annotations

import collections
import importlib
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any

from detector.errors import BackendError, BackendUnavailable

log = logging.getLogger(__name__)

__all__ = [
    "CANDIDATES", "ENV_VAR", "FLAVORS", "RTX_COMPUTE_CAPABILITIES", "cuda_device_info", "format_cc",
    "import_tensorrt", "is_rtx", "precision_unavailable_reason", "rtx_compute_capabilities", "rtx_refusal_message",
    "run_unavailable_reason", "strongly_typed", "tensorrt_version", "torch_dtype", "trt_logger",
]

#: Environment variable that forces a flavor.
ENV_VAR = "DETECTOR_TENSORRT"
#: Flavor names, in the order tried.
FLAVORS: tuple[str, ...] = ("tensorrt", "tensorrt_rtx")
#: (module name, flavor) in the order tried.
CANDIDATES: tuple[tuple[str, str], ...] = (
    ("tensorrt", "tensorrt"),
    ("tensorrt_rtx", "tensorrt_rtx"),
    ("tensorrt_rtx_bindings", "tensorrt_rtx"),
)
#: Oldest major version of the ``tensorrt`` package this backend supports (name-based I/O, execute_async_v3).
MIN_TENSORRT_MAJOR = 10
#: Compute capabilities TensorRT-RTX 1.7 can target (its ``ComputeCapability`` enum); used when the module
#: is not at hand. The support matrix lists 7.5, 8.6, 8.9, 12.0 (+12.1 GB10 from 1.5); engines built without
#: an explicit target run on 8.0, 8.6, 8.9 and 12.0 ("CPU-only AOT" page).
RTX_COMPUTE_CAPABILITIES: tuple[tuple[int, int], ...] = ((7, 5), (8, 0), (8, 6), (8, 9), (12, 0), (12, 1))

Importer = Callable[[str], ModuleType]


def import_tensorrt(prefer: str | None = None, *, importer: Importer | None = None) -> tuple[ModuleType, str]:
    """Import a TensorRT package and return ``(module, flavor)``.

    Args:
        prefer: ``"tensorrt"`` or ``"tensorrt_rtx"`` to try only that flavor; ``None`` reads
            ``$DETECTOR_TENSORRT`` and, if that is unset or empty, tries every candidate in order.
        importer: ``importlib.import_module`` by default; tests pass a function returning stand-in modules.

    Raises:
        BackendError: ``prefer`` (or the environment variable) names no known flavor.
        BackendUnavailable: nothing importable, e.g. ``"tensorrt not installed (tried tensorrt, tensorrt_rtx,
            tensorrt_rtx_bindings)"``; a candidate that exists but fails to load (a missing shared library)
            is named with its error; ``tensorrt`` older than 10 is refused.
    """
    source = "prefer"
    if prefer is None:
        prefer = os.environ.get(ENV_VAR, "").strip() or None
        source = ENV_VAR
    if prefer is not None and prefer not in FLAVORS:
        raise BackendError(f"unknown TensorRT flavor {prefer!r} ({source}); allowed: {', '.join(FLAVORS)}")
    importer = importer or importlib.import_module
    tried: list[str] = []
    for module_name, flavor in CANDIDATES:
        if prefer is not None and flavor != prefer:
            continue
        try:
            module = importer(module_name)
        except ModuleNotFoundError as e:
            if e.name not in (None, module_name):  # the package exists but one of its imports is missing
                tried.append(f"{module_name}: {_first_line(e)}")
            else:
                tried.append(module_name)
            continue
        except (ImportError, OSError) as e:  # e.g. libnvinfer.so.10: cannot open shared object file
            tried.append(f"{module_name}: {_first_line(e)}")
            continue
        if flavor == "tensorrt":
            major = _major(tensorrt_version(module))
            if major is not None and major < MIN_TENSORRT_MAJOR:
                tried.append(f"{module_name}: version {tensorrt_version(module)} is older than "
                             f"{MIN_TENSORRT_MAJOR}.0")
                continue
        return module, flavor
    what = prefer or "tensorrt"
    forced = f"; {ENV_VAR}={prefer}" if prefer is not None and source == ENV_VAR else ""
    raise BackendUnavailable(f"{what} not installed (tried {', '.join(tried)}{forced})")


def tensorrt_version(module: ModuleType) -> str:
    """The package's ``__version__`` (``"unknown"`` if it has none)."""
    return str(getattr(module, "__version__", "unknown"))


def is_rtx(flavor: str) -> bool:
    """True for the TensorRT-RTX flavor."""
    return flavor == "tensorrt_rtx"


def strongly_typed(module: Any, flavor: str) -> bool:
    """True where precision comes from the ONNX types only: TensorRT-RTX, and TensorRT 11+ (no FP16 flag)."""
    if is_rtx(flavor):
        return True
    return not hasattr(getattr(module, "BuilderFlag", None), "FP16")


def precision_unavailable_reason(module: Any, flavor: str, precision: str) -> str | None:
    """Why this package cannot build ``precision`` engines (one line), or ``None``.

    fp32 always works; fp16 works everywhere (an fp16 ONNX model where the network is strongly typed);
    int8 needs the weakly typed builder with ``IInt8EntropyCalibrator2`` (``tensorrt`` 10).
    """
    if precision != "int8":
        return None
    if strongly_typed(module, flavor) or not hasattr(module, "IInt8EntropyCalibrator2"):
        name = "TensorRT-RTX" if is_rtx(flavor) else f"tensorrt {tensorrt_version(module)}"
        return (f"{name} builds strongly typed networks only: int8 needs an ONNX model with Q/DQ nodes, not "
                "entropy calibration (use tensorrt 10 for int8)")
    return None


def run_unavailable_reason(module: Any, flavor: str, precision: str, device_index: int | None = None) -> str | None:
    """Why this package cannot run ``precision`` engines on CUDA device ``device_index`` (the current one if
    ``None``), in one line, or ``None``: the precision (:func:`precision_unavailable_reason`), then for
    TensorRT-RTX the GPU's compute capability (:func:`rtx_refusal_message`). The device must exist."""
    reason = precision_unavailable_reason(module, flavor, precision)
    if reason is not None or not is_rtx(flavor):
        return reason
    gpu_name, cc = cuda_device_info(device_index)
    supported = rtx_compute_capabilities(module)
    return None if cc in supported else rtx_refusal_message(gpu_name, cc, supported)


def format_cc(cc: Sequence[int]) -> str:
    """``(9, 0)`` -> ``"9.0"``."""
    return ".".join(str(int(v)) for v in cc)


def rtx_compute_capabilities(module: Any | None = None) -> tuple[tuple[int, int], ...]:
    """Compute capabilities TensorRT-RTX can run on, read from ``module.ComputeCapability`` (``SM86`` ->
    ``(8, 6)``; the last digit is the minor version), else :data:`RTX_COMPUTE_CAPABILITIES`. Sorted."""
    enum = getattr(module, "ComputeCapability", None) if module is not None else None
    members: Iterable[str] = getattr(enum, "__members__", {}) or ()
    found = set()
    for member in members:
        match = re.fullmatch(r"SM(\d+)(\d)", str(member))
        if match:
            found.add((int(match.group(1)), int(match.group(2))))
    return tuple(sorted(found)) if found else RTX_COMPUTE_CAPABILITIES


def rtx_refusal_message(gpu_name: str, cc: Sequence[int], supported: Sequence[Sequence[int]]) -> str:
    """The one-line reason TensorRT-RTX cannot run on a GPU, naming it, its compute capability and the list.

    For ``("NVIDIA H100 80GB HBM3", (9, 0), [(8, 6), (8, 9), (12, 0)])``: "TensorRT-RTX cannot run engines on
    NVIDIA H100 80GB HBM3 (compute capability 9.0): it supports compute capabilities 8.6, 8.9, 12.0 (see the
    TensorRT-RTX support matrix); use the tensorrt package on this GPU". An empty ``supported`` points to
    the support matrix instead of a list.
    """
    listed = ", ".join(format_cc(c) for c in sorted(tuple(c) for c in supported))
    what = (f"it supports compute capabilities {listed} (see the TensorRT-RTX support matrix)" if listed
            else "see the TensorRT-RTX support matrix for the supported GPUs")
    return (f"TensorRT-RTX cannot run engines on {gpu_name} (compute capability {format_cc(cc)}): {what}; "
            "use the tensorrt package on this GPU")


#: TensorRT ``DataType`` member name -> torch dtype name.
TORCH_DTYPES: dict[str, str] = {"FLOAT": "float32", "HALF": "float16", "BF16": "bfloat16", "INT8": "int8",
                                "INT32": "int32", "INT64": "int64", "BOOL": "bool", "UINT8": "uint8"}


def torch_dtype(trt_dtype: Any) -> Any:
    """The torch dtype of a TensorRT ``DataType`` (FLOAT -> torch.float32, HALF -> torch.float16, ...)."""
    import torch

    name = getattr(trt_dtype, "name", str(trt_dtype).rpartition(".")[2])
    try:
        return getattr(torch, TORCH_DTYPES[name])
    except KeyError:
        raise BackendError(f"TensorRT tensor type {name} has no torch equivalent; allowed: "
                           f"{', '.join(TORCH_DTYPES)}") from None


def cuda_device_info(index: int | None = None) -> tuple[str, tuple[int, int]]:
    """``(name, (major, minor))`` of CUDA device ``index`` (the current device if ``None``), via torch."""
    import torch

    if index is None:
        index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    return torch.cuda.get_device_name(index), (int(major), int(minor))


# -- logging ----------------------------------------------------------------------------------------------
_LOGGERS: dict[int, Any] = {}
_LOGGERS_LOCK = threading.Lock()
_LEVELS = {"INTERNAL_ERROR": logging.CRITICAL, "ERROR": logging.ERROR, "WARNING": logging.WARNING,
           "INFO": logging.DEBUG, "VERBOSE": logging.DEBUG}


def trt_logger(module: Any) -> Any:
    """The process-wide ``ILogger`` for ``module`` (one per module: TensorRT wants one logger per process).

    Messages go to this module's :mod:`logging` logger (TensorRT's INFO and VERBOSE at DEBUG); errors are
    also kept, so that a failed call can quote them: ``take_errors()`` returns and clears them.
    """
    with _LOGGERS_LOCK:
        logger = _LOGGERS.get(id(module))
        if logger is None:
            logger = _logger_class(module)()
            _LOGGERS[id(module)] = logger
        return logger


def _logger_class(module: Any) -> type:
    base = module.ILogger

    class _Logger(base):  # type: ignore[misc, valid-type]
        """Forwards TensorRT messages to :mod:`logging` and keeps the recent errors."""

        def __init__(self) -> None:
            base.__init__(self)
            self._errors: collections.deque[str] = collections.deque(maxlen=20)
            self._lock = threading.Lock()

        def log(self, severity: Any, msg: str) -> None:
            level = _LEVELS.get(getattr(severity, "name", str(severity).rpartition(".")[2]), logging.WARNING)
            if level >= logging.ERROR:
                with self._lock:
                    self._errors.append(str(msg).strip())
            if log.isEnabledFor(level):
                log.log(level, "TensorRT: %s", str(msg).strip())

        def take_errors(self) -> list[str]:
            with self._lock:
                errors = list(self._errors)
                self._errors.clear()
            return errors

    return _Logger


def _major(version: str) -> int | None:
    match = re.match(r"(\d+)", version)
    return int(match.group(1)) if match else None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:200]
