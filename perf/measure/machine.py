"""What a benchmark ran on (`machine_fingerprint`) and whether runs compare (`fingerprint_differences`)."""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import logging
import os
import platform
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from detector.devices import device_index

log = logging.getLogger(__name__)

#: Fields that must match for two runs' timings to be comparable ("device": "cpu" or "cuda", of --perf-device).
COMPARED_FIELDS = ("device", "gpu_name", "compute_capability", "driver_version", "cuda_version")

#: Python modules whose versions are recorded, as (fingerprint key, importable module names tried in order).
_VERSIONED_MODULES = (("torch_version", ("torch",)), ("onnxruntime_version", ("onnxruntime",)),
                      ("tensorrt_version", ("tensorrt", "tensorrt_rtx")), ("opencv_version", ("cv2",)),
                      ("numpy_version", ("numpy",)))  # fmt: skip

_GPU_FIELDS = ("gpu_name", "compute_capability", "gpu_memory_mib", "driver_version", "cuda_driver_version",
               "sm_clock_max_mhz", "mem_clock_max_mhz", "power_limit_w")  # fmt: skip


def machine_fingerprint(gpu_index: int = 0) -> dict[str, Any]:
    """This machine and GPU ``gpu_index`` (of ``cuda:N``), JSON-ready: memory MiB, max clocks MHz, power limit W (no
    current clocks), the versions of `_VERSIONED_MODULES` (``tensorrt_module``: which one), CPUs it may use."""
    info: dict[str, Any] = {"gpu_index": gpu_index, "gpu_count": None, "cuda_version": None, "cudnn_version": None,
                            **dict.fromkeys(_GPU_FIELDS), **_torch_cuda_info(gpu_index)}
    info.pop("_pci", None)
    nvml = _nvml_info(gpu_index, uuid=info.pop("_uuid", None))
    info.update({key: value for key, value in nvml.items() if info.get(key) is None})  # torch's answer first
    info["gpu_count"] = info["gpu_count"] or 0
    if info["gpu_name"] is None:
        info["gpu_index"] = None
    for key, modules in _VERSIONED_MODULES:
        module, info[key] = next(((m, v) for m in modules if (v := module_version(m)) is not None), (None, None))
        if key == "tensorrt_version":
            info["tensorrt_module"] = module
    info["cpu_model"] = _cpu_model()
    info["cpu_count"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return info


def device_fingerprint(device: str) -> dict[str, Any]:
    """``machine_info["perf"]`` of a run on ``device``: `machine_fingerprint` of its GPU (0 for "cpu") and its type."""
    kind = device.partition(":")[0]
    return {**machine_fingerprint(gpu_index=device_index(device) if kind == "cuda" else 0), "device": kind}


def cuda_device_count() -> int:
    """CUDA devices torch can use (as CUDA_VISIBLE_DEVICES allows); 0 without torch, CUDA or a driver."""
    try:
        import torch  # noqa: PLC0415

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except (ImportError, RuntimeError) as e:
        log.debug("CUDA unavailable: %s", e)
        return 0


def fingerprint_differences(saved: Mapping[str, Any] | None, current: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, saved, current) of each differing `COMPARED_FIELDS`; a saved None is ``"<not recorded>"``."""
    if saved is None:
        return [(f, "<not recorded>", current.get(f)) for f in COMPARED_FIELDS if current.get(f) is not None]
    return [(f, saved.get(f), current.get(f)) for f in COMPARED_FIELDS if saved.get(f) != current.get(f)]


def module_version(module: str) -> str | None:
    """Version of the distribution of importable `module` (e.g. "cv2"), else its ``__version__``, or None."""
    if importlib.util.find_spec(module) is None:
        return None
    for dist in _module_distributions().get(module, ()):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(dist)
    try:
        return str(getattr(importlib.import_module(module), "__version__", None) or "") or None
    except ImportError as e:
        log.debug("cannot import %s for its version: %s", module, e)
        return None


_module_distributions = functools.cache(importlib.metadata.packages_distributions)  # it scans every distribution


def _torch_cuda_info(index: int) -> dict[str, Any]:
    """GPU facts torch can give; {} without torch."""
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return {}
    info: dict[str, Any] = {"cuda_version": torch.version.cuda, "cudnn_version": None}
    try:
        info["cudnn_version"] = torch.backends.cudnn.version()
        info["gpu_count"] = torch.cuda.device_count() if torch.cuda.is_available() else None  # visible ones
        if info["gpu_count"] is None or index >= info["gpu_count"]:
            return info
        props = torch.cuda.get_device_properties(index)
    except (RuntimeError, AssertionError) as e:  # broken driver / CUDA init failure
        log.debug("torch cannot describe cuda:%d: %s", index, e)
        return info
    pci = [getattr(props, f"pci_{part}_id", None) for part in ("domain", "bus", "device")]
    return {**info, "gpu_name": props.name, "compute_capability": f"{props.major}.{props.minor}",
            "gpu_memory_mib": props.total_memory // 2**20,
            "_uuid": f"GPU-{props.uuid}" if getattr(props, "uuid", None) else None,
            "_pci": None if None in pci else "{:04x}:{:02x}:{:02x}.0".format(*pci)}  # fmt: skip


def torch_gpu_uuid(index: int) -> str | None:
    """``GPU-<uuid>`` of the GPU torch calls cuda:`index`, or None."""
    return _torch_cuda_info(index).get("_uuid")


def torch_gpu_pci_bus_id(index: int) -> str | None:
    """The sysfs PCI address (``0000:1b:00.0``) of the GPU torch calls cuda:`index`, or None."""
    return _torch_cuda_info(index).get("_pci")


def nvml_handle(nvml: Any, index: int, uuid: str | None = None) -> Any:
    """NVML's handle (NVML ignores CUDA_VISIBLE_DEVICES) of the GPU torch calls cuda:`index`, or None: by torch's
    ``uuid``, else through CUDA_VISIBLE_DEVICES in PCI order; ``MIG-<uuid>`` gives the slice; no UUID prefixes."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [e.strip() for e in visible.split(",") if e.strip()] if visible is not None else None
    entry = uuid or (str(index) if entries is None else entries[index] if index < len(entries) else "")
    try:
        if entry.isdigit():
            return nvml.nvmlDeviceGetHandleByIndex(int(entry))
        return nvml.nvmlDeviceGetHandleByUUID(entry) if entry.startswith(("GPU-", "MIG-")) else None
    except nvml.NVMLError as e:
        log.debug("NVML has no GPU %r: %s", entry, e)
        return None


def _nvml_info(index: int, uuid: str | None) -> dict[str, Any]:
    """Driver, clocks and power limit from NVML for the GPU torch calls cuda:`index`; {} without NVML."""
    try:
        import pynvml  # noqa: PLC0415

        pynvml.nvmlInit()
    except ImportError:
        return {}
    except pynvml.NVMLError as e:
        log.debug("NVML unavailable: %s", e)
        return {}

    def read(fn: Callable[..., Any], *args: Any) -> Any:  # a str for bytes (older bindings); None: NVML cannot say
        try:
            value = fn(*args)
        except pynvml.NVMLError as e:  # not supported on this GPU / MIG slice / permissions
            log.debug("NVML %s failed: %s", fn.__name__, e)
            return None
        return value.decode(errors="replace") if isinstance(value, bytes) else value

    try:
        info: dict[str, Any] = {"driver_version": read(pynvml.nvmlSystemGetDriverVersion)}
        cuda_driver = read(pynvml.nvmlSystemGetCudaDriverVersion)  # e.g. 12080
        info["cuda_driver_version"] = f"{cuda_driver // 1000}.{cuda_driver % 1000 // 10}" if cuda_driver else None
        info["gpu_count"] = read(pynvml.nvmlDeviceGetCount) or 0
        if (handle := nvml_handle(pynvml, index, uuid)) is None:
            return info
        capability = read(pynvml.nvmlDeviceGetCudaComputeCapability, handle)
        memory = read(pynvml.nvmlDeviceGetMemoryInfo, handle)
        power_mw = read(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        return {**info, "gpu_name": read(pynvml.nvmlDeviceGetName, handle),
                "compute_capability": "{}.{}".format(*capability) if capability else None,
                "gpu_memory_mib": memory.total // 2**20 if memory else None,
                "sm_clock_max_mhz": read(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM),
                "mem_clock_max_mhz": read(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_MEM),
                "power_limit_w": power_mw / 1000 if power_mw else None}
    finally:
        read(pynvml.nvmlShutdown)


def _cpu_model() -> str | None:
    """CPU model name from /proc/cpuinfo on Linux, else platform.processor(); None if neither says."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return value.strip()
    return platform.processor() or None
