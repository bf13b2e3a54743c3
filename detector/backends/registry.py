"""The backend registry: each backend is one :func:`register` call naming its runner and its variants.

A *backend* is a runner class, named ``"module:Class"`` and imported only when asked for (so registering
TensorRT costs nothing on a machine without it). A *variant* is a named preset of a backend: runner options
plus the device types it applies to (``torch-graph`` = the torch runner with ``fuse_bn``, ``channels_last``
and ``cuda_graph``, CUDA only). Everything that lists backends or variants reads them from here: the
``detector`` command's ``--backend``, the perf suite's ``--perf-backends`` and its cases, and the runner
contract tests::

    register("mine", "my_package.runner:MyRunner", title="Mine", devices=("cuda",), variants=[
        Variant("mine"),                                   # the plain runner
        Variant("mine-fast", {"fast_path": True}),         # a preset, named in the suite's case ids
    ])

The built-in backends are registered in :mod:`detector.backends`.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from detector.devices import DEVICES
from detector.errors import BackendError, BackendUnavailable

if TYPE_CHECKING:
    from detector.backends.base import Runner
    from detector.spec import ModelSpec

__all__ = ["Backend", "Variant", "availability", "available_backends", "backend", "backend_names", "create_runner",
           "display_name", "register", "runner_class", "unregister", "variant", "variant_names", "variants"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # one item of a comma-separated list, usable in a pytest id


@dataclasses.dataclass(frozen=True)
class Variant:
    """A named preset of a backend: the runner options it sets and the device types it applies to.

    Attributes:
        name: unique across backends; the perf suite's case ids start with it (``torch-graph-fp16-b1``).
        options: runner options (see the runner's ``options``); read-only.
        devices: device types (from :data:`detector.backends.base.DEVICES`) it is measured on; empty when
            given to :func:`register`, which then fills in the backend's devices.
        summary: one line on what it is, for documentation and listings.
        backend: the backend it presets; filled in by :func:`register`.
    """

    name: str
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)
    devices: tuple[str, ...] = ()
    summary: str = ""
    backend: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", types.MappingProxyType(dict(self.options)))
        object.__setattr__(self, "devices", tuple(self.devices))


@dataclasses.dataclass(frozen=True)
class Backend:
    """A registered backend: ``target`` is ``"module:Class"``, ``title`` its name in tables ("ONNX Runtime"),
    ``devices`` the device types its runner supports, ``variants`` the names of its presets in order, ``marks``
    the pytest markers the perf suite puts on its cases (``("trt",)``: skipped where TensorRT cannot run)."""

    name: str
    target: str
    title: str
    devices: tuple[str, ...]
    variants: tuple[str, ...]
    marks: tuple[str, ...] = ()


_BACKENDS: dict[str, Backend] = {}
_VARIANTS: dict[str, Variant] = {}


def register(name: str, target: str, *, title: str | None = None, devices: Sequence[str] = DEVICES,
             variants: Iterable[Variant] | None = None, marks: Sequence[str] = ()) -> Backend:
    """Register (or replace) backend ``name``, run by ``target`` (``"package.module:Class"``, imported on first use).

    Args:
        name: the backend's name (``--backend``, ``--perf-backends``); letters, digits, ``_.-``.
        target: the runner class, a subclass of :class:`detector.backends.base.Runner`.
        title: its name in result tables (``detector detect``'s "Model Type"); default ``name``.
        devices: the device types the runner supports (must agree with the class's ``devices``).
        variants: its presets, each measured by the perf suite; default one variant named ``name`` with no
            options. A variant without devices applies to all of ``devices``.
        marks: pytest markers (Python identifiers) the perf suite adds to every case of this backend, e.g.
            ``("trt",)``; the suite declares each one and skips its cases where the backend cannot run.

    Raises:
        BackendError: a malformed name, target or marker, an unknown device type, a variant on a device type its
            backend lacks, or a variant name another backend already registered.
    """
    _check_name("backend", name)
    if not isinstance(target, str) or not re.fullmatch(r"[\w.]+:\w+", target):
        raise BackendError(f"cannot register backend {name!r}: target {target!r} is not 'module:Class'")
    devices = _check_devices(f"backend {name!r}", devices, DEVICES)
    marks = _check_marks(name, marks)
    given = list(variants) if variants is not None else [Variant(name)]
    resolved: list[Variant] = []
    for preset in given:
        if not isinstance(preset, Variant):
            raise BackendError(f"cannot register backend {name!r}: variant {preset!r} is not a Variant")
        _check_name("variant", preset.name)
        owner = _VARIANTS.get(preset.name)
        if (owner is not None and owner.backend != name) or any(v.name == preset.name for v in resolved):
            raise BackendError(f"cannot register variant {preset.name!r} of backend {name!r}: the name is taken "
                               f"(by backend {owner.backend if owner else name!r}); choose another")
        on = _check_devices(f"variant {preset.name!r}", preset.devices, devices) if preset.devices else devices
        resolved.append(dataclasses.replace(preset, devices=on, backend=name))
    unregister(name)
    entry = Backend(name, target, title or name, devices, tuple(v.name for v in resolved), marks)
    _BACKENDS[name] = entry
    _VARIANTS.update((v.name, v) for v in resolved)
    return entry


def unregister(name: str) -> None:
    """Remove backend ``name`` and its variants (nothing happens for an unknown name)."""
    entry = _BACKENDS.pop(name, None)
    if entry is not None:
        for variant_name in entry.variants:
            _VARIANTS.pop(variant_name, None)


def backend_names() -> list[str]:
    """Registered backend names, in registration order."""
    return list(_BACKENDS)


def backend(name: str) -> Backend:
    """The registration of backend ``name``; :class:`BackendError` listing the known ones for an unknown name."""
    try:
        return _BACKENDS[name]
    except KeyError:
        raise BackendError(f"unknown backend {name!r}; known backends: {', '.join(_BACKENDS)}") from None


def display_name(name: str) -> str:
    """Backend ``name``'s title for tables ("PyTorch"); an unregistered name is returned as it is."""
    entry = _BACKENDS.get(name)
    return entry.title if entry is not None else name


def variant_names() -> list[str]:
    """Registered variant names, backend by backend in registration order."""
    return [name for entry in _BACKENDS.values() for name in entry.variants]


def variant(name: str) -> Variant:
    """Variant ``name``; :class:`BackendError` listing the known ones for an unknown name."""
    try:
        return _VARIANTS[name]
    except KeyError:
        raise BackendError(f"unknown variant {name!r}; known variants: {', '.join(variant_names())}") from None


def variants(backends: Iterable[str] | None = None, device: str | None = None) -> list[Variant]:
    """Registered variants in order, only those of ``backends`` (all when ``None``) that apply to ``device``
    (``"cpu"``, ``"cuda"`` or ``"cuda:N"``; any device when ``None``)."""
    chosen = set(backend_names() if backends is None else backends)
    device_type = device.partition(":")[0] if device is not None else None
    found = [_VARIANTS[name] for name in variant_names()]
    return [v for v in found if v.backend in chosen and (device_type is None or device_type in v.devices)]


def runner_class(name: str) -> type[Runner]:
    """The runner class of backend ``name``.

    Raises:
        BackendError: ``name`` is not registered (the message lists the known names).
        BackendUnavailable: its module cannot be imported here (the message gives the reason).
    """
    module_name, _, class_name = backend(name).target.partition(":")
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
    ``options``; a variant's are ``variant(v).options``). Raises :class:`BackendError` for unknown names and
    :class:`BackendUnavailable` if the backend's module cannot be imported; availability on this machine is
    checked by ``activate()``.
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
    for name in backend_names():
        try:
            result[name] = availability(name, device, precision)
        except BackendError as e:
            result[name] = str(e)
    return result


def _check_name(kind: str, name: Any) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BackendError(f"cannot register {kind} {name!r}: a name is letters, digits and '_.-', starting with a "
                           "letter or digit")


def _check_devices(what: str, devices: Sequence[str], allowed: Sequence[str]) -> tuple[str, ...]:
    found = tuple(devices)
    if not found or any(d not in allowed for d in found):
        raise BackendError(f"cannot register {what}: devices {list(found)}; allowed: {', '.join(allowed)}")
    return found


def _check_marks(backend: str, marks: Sequence[str]) -> tuple[str, ...]:
    found = None if isinstance(marks, str) else tuple(marks)
    if found is None or not all(isinstance(m, str) and m.isidentifier() for m in found):
        raise BackendError(f"cannot register backend {backend!r}: marks {marks!r}; allowed: a sequence of Python "
                           "identifiers, e.g. ('trt',)")
    return found
