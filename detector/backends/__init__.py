"""Backend runners by name; the runner modules (and torch, onnxruntime, tensorrt) load only when asked for.

    >>> from detector.backends import create_runner, available_backends
    >>> available_backends("cpu")            # {'torch': None, 'onnxruntime': None, 'tensorrt': '...'}
    >>> with create_runner("onnxruntime", spec, device="cpu") as runner:
    ...     decoded = runner.infer(batch)

Every runner follows :class:`detector.backends.base.Runner`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from detector.errors import BackendError, BackendUnavailable

if TYPE_CHECKING:
    from detector.backends.base import Runner
    from detector.spec import ModelSpec

__all__ = ["RUNNERS", "availability", "available_backends", "backend_names", "create_runner", "register",
           "runner_class"]

#: Backend name -> "module:Class", imported on first use.
RUNNERS: dict[str, str] = {
    "torch": "detector.backends.torch_runner:TorchRunner",
    "onnxruntime": "detector.backends.onnxruntime_runner:OnnxRuntimeRunner",
    "tensorrt": "detector.backends.tensorrt_runner:TensorRTRunner",
}


def backend_names() -> list[str]:
    """Registered backend names, in registration order."""
    return list(RUNNERS)


def register(name: str, target: str) -> None:
    """Register (or replace) backend ``name`` as ``"package.module:Class"``, imported on first use."""
    if ":" not in target:
        raise BackendError(f"cannot register backend {name!r}: target {target!r} is not 'module:Class'")
    RUNNERS[name] = target


def runner_class(name: str) -> type[Runner]:
    """The runner class of backend ``name``.

    Raises:
        BackendError: ``name`` is not registered (the message lists the known names).
        BackendUnavailable: its module cannot be imported here (the message gives the reason).
    """
    try:
        target = RUNNERS[name]
    except KeyError:
        raise BackendError(f"unknown backend {name!r}; known backends: {', '.join(RUNNERS)}") from None
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        missing = getattr(e, "name", None)
        reason = f"{missing} is not installed" if missing and missing != module_name else str(e)
        raise BackendUnavailable(f"backend {name!r} is unavailable: {reason}") from e
    try:
        return getattr(module, class_name)
    except AttributeError as e:
        raise BackendUnavailable(f"backend {name!r} is unavailable: {module_name} has no {class_name}") from e


def create_runner(name: str, spec: ModelSpec, **options: Any) -> Runner:
    """A new, inactive runner of backend ``name`` for ``spec``.

    ``options`` holds ``device`` and ``precision`` and the backend's own options (see each runner's
    ``options``). Raises :class:`BackendError` for unknown names and :class:`BackendUnavailable` if the
    backend's module cannot be imported; availability on this machine is checked by ``activate()``.
    """
    return runner_class(name)(spec, **options)


def availability(name: str, device: str = "cpu", precision: str = "fp32") -> str | None:
    """``None`` if backend ``name`` can run here on ``device`` at ``precision``, else the reason (one line).

    Unknown backend, device or precision names raise :class:`BackendError`.
    """
    try:
        cls = runner_class(name)
    except BackendUnavailable as e:
        return str(e)
    return cls.unavailable_reason(device, precision)


def available_backends(device: str = "cpu", precision: str = "fp32") -> dict[str, str | None]:
    """Every registered backend -> ``None`` (runs here) or why not; a backend lacking ``device`` or
    ``precision`` altogether gets a reason too, instead of an error."""
    result: dict[str, str | None] = {}
    for name in RUNNERS:
        try:
            result[name] = availability(name, device, precision)
        except BackendError as e:
            result[name] = str(e)
    return result
