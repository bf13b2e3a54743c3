"""The names a command line chooses -- backends, a device, a precision -- checked in two steps; each problem is one
line naming the value given and what is allowed.

:func:`check_names` reads only the backend registry and the runner classes' declared devices and precisions
(:meth:`~detector.backends.base.Runner.precisions_on`): torch, OpenCV and ONNX Runtime are not imported, so a
mistyped name fails at once. :func:`check_runs_here` then asks the machine: ``auto`` resolved (torch sees a CUDA
device or not) and each backend's availability from the registry. Names match in any case (``TensorRT``, ``CPU``).
"""

from __future__ import annotations

from collections.abc import Sequence

from detector.argtypes import split_list
from detector.backends.registry import (
    availability,
    available_backends,
    backend,
    backend_names,
    runner_class,
)
from detector.devices import DEVICE_FORMS, PRECISIONS, parse_device
from detector.errors import BackendError, BackendUnavailable

__all__ = ["DEVICE_FORMS", "backend_list", "canonical_backend", "check_names", "check_runs_here", "device_name",
           "resolve_device"]


def backend_list(text: str) -> list[str]:
    """``--backend``'s argparse type: comma-separated names, stripped, each kept (checked by :func:`check_names`)."""
    return split_list(text, unique=False)


def canonical_backend(name: str) -> str:
    """The registered backend called ``name`` in any case; :class:`BackendError` listing the known ones else."""
    by_lower = {known.lower(): known for known in backend_names()}
    return by_lower.get(name.lower()) or backend(name).name


def device_name(text: str) -> str:
    """``text`` stripped and in lower case when :func:`detector.devices.parse_device` accepts it (auto, cpu, cuda or
    cuda:N); else :class:`BackendError` (``unknown device``)."""
    name = text.strip().lower()
    try:
        parse_device(name)
    except ValueError as e:
        raise BackendError(f"unknown device {text!r} for --device; allowed: {DEVICE_FORMS}") from e
    return name


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a CUDA device, else ``cpu``; other names pass through (imports torch
    for ``auto``)."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _offered(name: str) -> dict[str, tuple[str, ...]]:
    """Device type -> the precisions backend ``name`` offers there, by its runner's rules (nothing probed)."""
    cls = runner_class(name)
    return {device_type: cls.precisions_on(device_type) for device_type in backend(name).devices}


def _listing(precisions: Sequence[str]) -> str:
    return ", ".join(precisions) or "none"


def _per_device(offered: dict[str, tuple[str, ...]]) -> str:
    """``fp32`` when every device type offers the same, else ``fp32 on cpu; fp32, fp16 on cuda``."""
    if len(set(offered.values())) == 1:
        return _listing(next(iter(offered.values())))
    return "; ".join(f"{_listing(precisions)} on {device_type}" for device_type, precisions in offered.items())


def check_names(backends: Sequence[str], device: str, precision: str) -> list[str]:
    """The registered names of ``backends`` (any case) after checking, without probing the machine, that each
    runs on ``device`` (``auto``: on one of its device types) at ``precision``.

    Raises:
        BackendError: no backend, an unknown backend, device or precision, a backend that never runs on that
            device type or at that precision (the message lists what it offers, per device type for ``auto``).
        BackendUnavailable: a backend whose runner module cannot be imported here.
    """
    if not backends:
        raise BackendError(f"--backend names no backend; known backends: {', '.join(backend_names())}")
    names = [canonical_backend(name) for name in backends]
    device = device_name(device)
    device_type = None if device == "auto" else device.partition(":")[0]
    for name in names:
        entry = backend(name)
        if device_type is not None and device_type not in entry.devices:
            here = [b for b in backend_names() if device_type in backend(b).devices]
            raise BackendError(f"--backend {name} runs on {' or '.join(entry.devices)} only, not on --device {device} "
                               f"(backends for {device_type}: {_listing(here)})")
        offered = _offered(name)
        allowed = offered[device_type] if device_type else {p for ps in offered.values() for p in ps}
        if precision not in allowed:
            problem = "unsupported" if precision in PRECISIONS else "unknown"
            where = f"{name} on {device_type}; allowed there: {_listing(offered[device_type])}" if device_type else \
                f"{name}; allowed: {_per_device(offered)}"
            raise BackendError(f"{problem} precision {precision!r} for --backend {where}")
    return names


def _runs_here(device: str, precision: str) -> str:
    """The backends that run on ``device`` at ``precision`` on this machine, as a listing."""
    found = [name for name, reason in available_backends(device, precision).items() if reason is None]
    if found or precision == "fp32":
        return _listing(found)
    fp32 = [name for name, reason in available_backends(device, "fp32").items() if reason is None]
    return f"none at {precision}; at fp32: {_listing(fp32)}"


def check_runs_here(backends: Sequence[str], device: str, precision: str) -> str:
    """The device to run on (``auto`` resolved) after checking that every backend of ``backends`` (registered
    names, as :func:`check_names` returns them) runs on it at ``precision`` on this machine. Imports torch.

    Raises:
        BackendUnavailable: no CUDA device for an explicit ``cuda``, a backend that needs a device type this
            machine lacks, or one the registry finds unavailable; the message lists the backends that run here.
    """
    resolved = resolve_device(device)
    device_type = resolved.partition(":")[0]
    if device != "auto" and device_type == "cuda" and resolve_device("auto") != "cuda":
        raise BackendUnavailable(f"--device {device}: this machine has no CUDA device (torch sees none); use "
                                 "--device cpu or auto")
    for name in backends:
        entry = backend(name)
        if device_type not in entry.devices:  # only --device auto gets here: check_names saw an explicit one
            if "cuda" in entry.devices:
                raise BackendUnavailable(f"--backend {name} needs a CUDA device; this machine has none (backends "
                                         f"that run here: {_runs_here(resolved, precision)})")
            raise BackendUnavailable(f"--backend {name} runs on {' or '.join(entry.devices)} only and --device auto "
                                     f"chose {resolved} here; give --device {entry.devices[0]}")
        offered = runner_class(name).precisions_on(device_type)
        if precision not in offered:
            needs = "needs a CUDA device; this machine has none" if device_type == "cpu" else \
                f"is not offered on {resolved}"
            raise BackendUnavailable(f"--precision {precision} with --backend {name} {needs} (allowed on "
                                     f"{device_type}: {_listing(offered)})")
        reason = availability(name, resolved, precision)
        if reason is not None:
            raise BackendUnavailable(f"--backend {name} cannot run here ({resolved}, {precision}): {reason} "
                                     f"(backends that run here: {_runs_here(resolved, precision)})")
    return resolved
