"""Parsers and state for the perf suite's command-line options (the hooks that use them live in perf/plugin.py).

Parsers are argparse ``type=`` callables: they return the parsed value or raise
``argparse.ArgumentTypeError("Could not parse value: 'x'. <what is allowed>")``, which pytest reports as a usage
error naming the option.
"""

from __future__ import annotations

import argparse
import functools
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perf.subject import Subject

#: Backends assumed while detector/backends (the registry) cannot be imported.
FALLBACK_BACKENDS = ("torch", "onnxruntime", "tensorrt")
PRECISIONS = ("fp32", "fp16", "int8")
PROFILERS = ("none", "torch")
DEFAULT_BATCH_SIZES = (1, 8, 32)
DEFAULT_PRECISIONS = ("fp32", "fp16")
#: Frames of the synthetic video for e2e/parity tests when --perf-frames is not given: 10 s of 30 fps video on a
#: GPU; 2 s on CPU, where the torch backend runs at a few frames per second and the CPU pass must stay short.
DEFAULT_FRAMES = {"cuda": 300, "cpu": 60}
#: Stream counts of the multi-stream test when --perf-streams is not given (the CPU run is a smoke test).
DEFAULT_STREAMS = {"cuda": (1, 2, 4, 8, 16), "cpu": (1, 2)}
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


@dataclass(frozen=True)
class BadValue:
    """An option value its parser rejected (``message``); `bad_values` reports it as a one-line usage error."""

    message: str


def deferred(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` as an argparse ``type=`` that returns a `BadValue` instead of raising.

    pytest turns a ``type=`` error into a usage block of several lines; deferring lets ``pytest_configure``
    report it as one line (see `bad_values`).
    """

    def parse_or_keep(value: str) -> Any:
        try:
            return parse(value)
        except argparse.ArgumentTypeError as e:
            return BadValue(str(e))

    parse_or_keep.__name__ = parse.__name__
    return parse_or_keep


def bad_values(option: Any) -> list[str]:
    """``argument --perf-x: Could not parse value: ...`` for every `BadValue` in pytest's ``config.option``."""
    return [f"argument --{dest.replace('_', '-')}: {value.message}" for dest, value in sorted(vars(option).items())
            if isinstance(value, BadValue)]


def _fail(value: str, expected: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"Could not parse value: {value!r}. {expected}")


def _split(value: str) -> list[str]:
    """Comma-separated items, stripped, empty items dropped, first occurrence kept."""
    return list(dict.fromkeys(item.strip() for item in value.split(",") if item.strip()))


def parse_batch_sizes(value: str) -> tuple[int, ...]:
    """``"1,8,32"`` -> ``(1, 8, 32)``; every item a positive integer, duplicates dropped."""
    items = _split(value)
    if not items or not all(item.isdecimal() and int(item) > 0 for item in items):
        raise _fail(value, "Expected comma-separated positive integers, e.g. '1,8,32'.")
    return tuple(int(item) for item in items)


def backend_names() -> tuple[str, ...]:
    """Registered backend names from detector.backends, or `FALLBACK_BACKENDS` until the registry exists."""
    try:
        from detector.backends import backend_names as registered  # noqa: PLC0415
    except ImportError:
        return FALLBACK_BACKENDS
    return tuple(registered())


def parse_backends(value: str) -> tuple[str, ...]:
    """``"torch,onnxruntime"`` -> ``("torch", "onnxruntime")``; each must be a registered backend."""
    known = backend_names()
    items = _split(value)
    if not items or any(item not in known for item in items):
        raise _fail(value, f"Expected comma-separated backends from: {', '.join(known)}.")
    return tuple(items)


def parse_precisions(value: str) -> tuple[str, ...]:
    """``"fp32,fp16"`` -> ``("fp32", "fp16")``; each one of `PRECISIONS` (case-insensitive)."""
    items = _split(value.lower())
    if not items or any(item not in PRECISIONS for item in items):
        raise _fail(value, f"Expected comma-separated precisions from: {', '.join(PRECISIONS)}.")
    return tuple(items)


def parse_device(value: str) -> str:
    """``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (case-insensitive) -> the same, lower-cased."""
    device = value.strip().lower()
    if not _DEVICE.fullmatch(device):
        raise _fail(value, "Expected auto, cpu, cuda or cuda:N.")
    return device


def parse_positive_int(value: str) -> int:
    """``"60"`` -> ``60``; a positive integer."""
    if not value.strip().isdecimal() or int(value) <= 0:
        raise _fail(value, "Expected a positive integer.")
    return int(value)


def parse_profiler(value: str) -> str:
    """``"torch"`` -> ``"torch"``; one of `PROFILERS` (case-insensitive)."""
    name = value.strip().lower()
    if name not in PROFILERS:
        raise _fail(value, f"Expected one of: {', '.join(PROFILERS)}.")
    return name


def resolve_device(requested: str, cuda_device_count: int) -> tuple[str, str | None]:
    """Turn a --perf-device value into the device tests run on, and why it does not exist (or None).

    "auto" is "cuda" when a CUDA device is visible, else "cpu". "cuda" / "cuda:N" stay as asked; without that
    device the reason is "no CUDA device (found 0)" or "no CUDA device N (found K)", which
    `PerfSession.usage_errors` reports: a device asked for by name must exist, only "auto" falls back to the CPU.
    """
    if requested == "auto":
        return ("cuda" if cuda_device_count > 0 else "cpu"), None
    if requested == "cpu":
        return "cpu", None
    _, colon, index = requested.partition(":")
    if colon and int(index) >= cuda_device_count:
        return requested, f"no CUDA device {index} (found {cuda_device_count})"
    if cuda_device_count == 0:
        return requested, "no CUDA device (found 0)"
    return requested, None


#: pytest-benchmark's options whose values its own parsers accept although they cannot work:
#: dest -> (flag, the test a good value passes, what is allowed).
_BENCHMARK_LIMITS: dict[str, tuple[str, Callable[[float], bool], str]] = {
    "benchmark_max_time": ("--benchmark-max-time", lambda v: 0 < v < math.inf, "Expected seconds > 0, e.g. 1.0."),
    "benchmark_min_time": ("--benchmark-min-time", lambda v: 0 <= v < math.inf,
                           "Expected seconds >= 0, e.g. 0.000005."),
    "benchmark_min_rounds": ("--benchmark-min-rounds", lambda v: v >= 1, "Expected an integer >= 1."),
    "benchmark_calibration_precision": ("--benchmark-calibration-precision", lambda v: v >= 1,
                                        "Expected an integer >= 1."),
    "benchmark_warmup_iterations": ("--benchmark-warmup-iterations", lambda v: v >= 0, "Expected an integer >= 0."),
}  # fmt: skip


def benchmark_option_errors(getoption: Callable[..., Any]) -> list[str]:
    """``argument --benchmark-x: Could not parse value: ...`` for each pytest-benchmark option (read with
    ``config.getoption``) that its parser accepted but that cannot work: zero or negative times, fewer than one
    round, a negative warmup. Empty where pytest-benchmark is not loaded."""
    out = []
    for dest, (flag, good, expected) in _BENCHMARK_LIMITS.items():
        value = getoption(dest, None)
        if value is None:
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not good(number):
            out.append(f"argument {flag}: {_fail(str(value), expected)}")
    return out


@dataclass(frozen=True)
class PerfOptions:
    """The perf suite's options as parsed (what the ``perf_options`` fixture returns).

    ``device`` is the *requested* device ("auto" included); the ``perf_device`` fixture gives the resolved one.
    ``frames`` is None unless --perf-frames was given; see `frames_for`.
    """

    backends: tuple[str, ...]
    device: str
    batch_sizes: tuple[int, ...]
    precisions: tuple[str, ...]
    allow_machine_mismatch: bool
    cache_dir: Path
    frames: int | None
    nsys: bool
    nsys_path: str
    profile: str
    streams: tuple[int, ...] | None = None
    allow_model_mismatch: bool = False

    def streams_for(self, device: str) -> tuple[int, ...]:
        """Stream counts of the multi-stream test on `device`: --perf-streams, else `DEFAULT_STREAMS`."""
        return self.streams or DEFAULT_STREAMS["cpu" if device == "cpu" else "cuda"]

    def frames_for(self, device: str) -> int:
        """Synthetic-video length in frames for `device` ("cpu", "cuda", "cuda:N")."""
        return self.frames or DEFAULT_FRAMES["cpu" if device == "cpu" else "cuda"]


class PerfSession:
    """Per-run state of the perf plugin: options, what is measured (`perf.subject.Subject`), the resolved device
    and the machine fingerprint (both lazy)."""

    def __init__(self, options: PerfOptions, subject: Subject | None = None) -> None:
        from perf.subject import Subject

        self.options = options
        self.subject = subject if subject is not None else Subject()

    @classmethod
    def from_config(cls, getoption: Any, rootdir: Path, invocation_dir: Path, getini: Any = None,
                    ini_dir: Path | None = None) -> PerfSession:  # fmt: skip
        """Build from ``config.getoption`` (and ``config.getini`` for the subject's settings); relative paths of
        options are taken from the directory pytest was started in, of ini values from the ini file's folder."""
        from perf.subject import Subject

        cache_dir = getoption("perf_cache_dir")
        subject = Subject.from_config(getoption, getini or (lambda name: None), invocation_dir, ini_dir or rootdir)
        return cls(
            PerfOptions(
                backends=getoption("perf_backends") or backend_names(),
                device=getoption("perf_device"),
                batch_sizes=getoption("perf_batch_sizes"),
                precisions=getoption("perf_precisions"),
                allow_machine_mismatch=getoption("perf_allow_machine_mismatch"),
                cache_dir=(invocation_dir / cache_dir).resolve() if cache_dir else rootdir / ".perf-cache",
                frames=getoption("perf_frames"),
                nsys=getoption("perf_nsys"),
                nsys_path=getoption("perf_nsys_path"),
                profile=getoption("perf_profile"),
                streams=getoption("perf_streams"),
                allow_model_mismatch=bool(getoption("perf_allow_model_mismatch")),
            ),
            subject,
        )

    def usage_errors(self) -> Iterable[str]:
        """Messages for option values that cannot work together or point at nothing, such as a CUDA device asked
        for by name (``--perf-device cuda`` / ``cuda:N``) that does not exist; checking that one imports torch."""
        if self.options.device.startswith("cuda") and self.device_unavailable is not None:
            yield f"--perf-device {self.options.device}: {self.device_unavailable}"
        yield from self.subject.problems()
        if self.options.nsys and self.options.profile != "none":
            yield (
                f"--perf-nsys and --perf-profile={self.options.profile} cannot be combined: both profilers use "
                "CUPTI and would distort each other; run them separately"
            )

    @functools.cached_property
    def _device(self) -> tuple[str, str | None]:
        from perf.measure.machine import cuda_device_count  # noqa: PLC0415

        requested = self.options.device
        return resolve_device(requested, 0 if requested == "cpu" else cuda_device_count())

    @property
    def device(self) -> str:
        """Resolved device: "cpu", "cuda" or "cuda:N" (imports torch on first use unless --perf-device cpu)."""
        return self._device[0]

    @property
    def device_unavailable(self) -> str | None:
        """Why the requested CUDA device does not exist ("no CUDA device 1 (found 1)"), or None; a usage error
        (`usage_errors`), so tests never see it."""
        return self._device[1]

    def skip_reason(self, markers: set[str]) -> str | None:
        """Why a test marked with `markers` ("gpu", "trt") cannot run here, or None when it can."""
        if self.device == "cpu":
            found = "is cpu" if self.options.device == "cpu" else "auto found no CUDA device"
            return f"needs a CUDA device; --perf-device {found}"
        if "trt" in markers:
            from detector.backends import availability  # noqa: PLC0415

            return availability("tensorrt", self.device)  # "tensorrt not installed (...)", an RTX refusal, or None
        return None

    @functools.cached_property
    def identity(self) -> dict[str, Any]:
        """``machine_info["perf_subject"]``: what this run measures (`perf.subject.Subject.identity`)."""
        spec = self.subject.model_spec(self.options.cache_dir)
        return self.subject.identity(spec, synthetic_frames=self.options.frames_for(self.device),
                                     precisions=self.options.precisions)  # fmt: skip

    @functools.cached_property
    def fingerprint(self) -> dict[str, Any]:
        """``machine_info["perf"]``: `perf.measure.machine.machine_fingerprint` of the GPU in use, plus ``device``: the
        device type the run used ("cpu" or "cuda"; the index is ``gpu_index``)."""
        from perf.measure.machine import machine_fingerprint  # noqa: PLC0415

        device_type, _, index = self.device.partition(":")
        return {**machine_fingerprint(gpu_index=int(index or 0)), "device": device_type}
