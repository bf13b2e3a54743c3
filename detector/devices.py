"""Device and precision names: the one place they are defined and parsed.

Every reader calls :func:`parse_device` and reads :data:`PRECISIONS`: the ``detector`` command
(:func:`detector.choices.device_name`), the runners (:class:`detector.backends.base.Runner`), the TensorRT engine
builder and the suite's ``--perf-device`` / ``--perf-precisions`` (:mod:`perf.options`, :mod:`perf.session`,
:mod:`perf.subject`). Each words its own error around the one rule. Nothing is imported, so a name is checked
before any heavy import. :func:`device_index` is the one reading of the GPU a CUDA name means.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["DEVICES", "DEVICE_FORMS", "PRECISIONS", "device_index", "parse_device"]

#: Every precision name any runner may support (a runner declares its own subset in ``precisions``).
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8")
#: Every device type any runner may support; "cuda:N" selects GPU N.
DEVICES: tuple[str, ...] = ("cpu", "cuda")
#: The device names a command line accepts, as its help and errors list them.
DEVICE_FORMS = "auto, cpu, cuda or cuda:N"


def parse_device(name: str, *, allow_auto: bool = True) -> tuple[str, int | None]:
    """The device type and GPU index of ``name``: ``"cpu"`` -> ``("cpu", None)``, ``"cuda"`` -> ``("cuda", None)``,
    ``"cuda:1"`` -> ``("cuda", 1)``, ``"auto"`` -> ``("auto", None)`` (only with ``allow_auto``).

    The match is exact: a caller that accepts any case or spaces (a command line) strips and lower-cases first.
    The index is ASCII digits.

    Raises:
        ValueError: any other name, naming it and what is allowed.
    """
    kind, colon, index = name.partition(":")
    if allow_auto and name == "auto":
        return "auto", None
    if kind in DEVICES and not colon:
        return kind, None
    if kind == "cuda" and index.isascii() and index.isdecimal():
        return kind, int(index)
    allowed = DEVICE_FORMS if allow_auto else "cpu, cuda or cuda:N"
    raise ValueError(f"unknown device {name!r}; allowed: {allowed}")


def device_index(device: str | torch.device) -> int:
    """The index of the CUDA device ``device`` names (``"cuda:N"``, ``"cuda"`` or a ``torch.device``): N, and for a
    bare ``"cuda"`` torch's current device (``torch.cuda.current_device()``, which ``torch.cuda.set_device`` changes:
    the suite sets it for ``--perf-device cuda:N``), as torch itself reads ``"cuda"``; 0 where torch sees no CUDA
    device (a reader then finds none, as for ``cuda:0``). Imports torch for a bare ``"cuda"`` only.

    Raises:
        ValueError: ``device`` is not a CUDA device, naming it.
    """
    kind, index = parse_device(str(device), allow_auto=False)
    if kind != "cuda":
        raise ValueError(f"device {str(device)!r} is not a CUDA device; expected cuda or cuda:N")
    if index is not None:
        return index
    import torch

    return torch.cuda.current_device() if torch.cuda.is_available() else 0
