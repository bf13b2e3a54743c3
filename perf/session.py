"""The state the perf suite's hooks share: the options as parsed (`PerfOptions`) and the run's `PerfSession`.

`perf.plugin` builds one `PerfSession` in ``pytest_configure`` and keeps it in ``config.stash[PERF_SESSION]``;
hooks, fixtures and tests read it from there. `check_saved_run` is the one refusal to compare with a saved run of
another model, video or machine, or of a run made with a deliberate slowdown, used by ``--perf-compare`` and
``--benchmark-compare`` alike.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from detector.devices import parse_device
from perf.report.suite import PerfReport
from perf.runs import describe_injected, injected_of
from perf.subject import Subject, subject_differences, subject_mismatch_message

#: Batch sizes of the inference benchmarks when --perf-batch-sizes is not given; the CPU pass is a smoke test (batch
#: 32 of the shipped model took 2.9 s a call on the 2-core CI machine, 150 s of its 275 s pass with ONNX Runtime's).
DEFAULT_BATCH_SIZES = {"cuda": (1, 8, 32), "cpu": (1, 8)}
#: Frames of the synthetic video for e2e/parity tests when --perf-frames is not given: 10 s of 30 fps video on a
#: GPU; 2 s on CPU, where the torch backend runs at a few frames per second and the CPU pass must stay short.
DEFAULT_FRAMES = {"cuda": 300, "cpu": 60}
#: Stream counts of the multi-stream test when --perf-streams is not given (the CPU run is a smoke test).
DEFAULT_STREAMS = {"cuda": (1, 2, 4, 8, 16), "cpu": (1, 2)}
#: Skip intervals of the skip-interval test when --perf-skip-interval is not given: NVIDIA's DeepStream lab table.
DEFAULT_SKIP_INTERVALS = (0, 1, 2, 4)


def backend_names() -> tuple[str, ...]:
    """Backend names from the registry (:func:`detector.backends.backend_names`), in registration order."""
    from detector.backends import backend_names as registered  # on first use, not with this module

    return tuple(registered())


@dataclass(frozen=True)
class PerfOptions:
    """The perf suite's options as parsed (what the ``perf_options`` fixture returns).

    ``device`` is the *requested* device ("auto" included); the ``perf_device`` fixture gives the resolved one.
    ``frames`` is None unless --perf-frames was given; see `frames_for` (``batch_sizes`` likewise, `batch_sizes_for`).
    """

    backends: tuple[str, ...]
    device: str
    batch_sizes: tuple[int, ...] | None
    precisions: tuple[str, ...]
    allow_machine_mismatch: bool
    cache_dir: Path
    frames: int | None
    nsys: bool
    nsys_path: str
    profile: str
    streams: tuple[int, ...] | None = None
    allow_model_mismatch: bool = False
    #: --perf-skip-interval: the skip intervals (frames skipped between inferences) of the skip-interval test.
    skip_intervals: tuple[int, ...] = DEFAULT_SKIP_INTERVALS
    #: --perf-inject-delay in ms (0: off) and --perf-regression (None: off): test-only slowdowns.
    inject_delay_ms: float = 0.0
    regression: Any = None
    #: --perf-sources: `perf.measure.sources.Source` of the end-to-end and pipelined tests (mp4v alone if empty).
    sources: tuple[Any, ...] = ()

    def batch_sizes_for(self, device: str) -> tuple[int, ...]:
        """Batch sizes of the inference benchmarks on `device`: --perf-batch-sizes, else `DEFAULT_BATCH_SIZES`."""
        return self.batch_sizes or DEFAULT_BATCH_SIZES["cpu" if device == "cpu" else "cuda"]

    def streams_for(self, device: str) -> tuple[int, ...]:
        """Stream counts of the multi-stream test on `device`: --perf-streams, else `DEFAULT_STREAMS`."""
        return self.streams or DEFAULT_STREAMS["cpu" if device == "cpu" else "cuda"]

    def frames_for(self, device: str) -> int:
        """Synthetic-video length in frames for `device` ("cpu", "cuda", "cuda:N")."""
        return self.frames or DEFAULT_FRAMES["cpu" if device == "cpu" else "cuda"]

    @property
    def injected(self) -> dict[str, Any]:
        """The test-only changes this run was made with ({} for a normal run): marked in every benchmark."""
        out: dict[str, Any] = {}
        if self.inject_delay_ms:
            out["inject_delay_ms"] = self.inject_delay_ms
        if self.regression is not None:
            out["regression"] = str(self.regression)
        return out


def resolve_device(requested: str, cuda_device_count: int) -> tuple[str, str | None]:
    """Turn a --perf-device value into the device tests run on, and why it does not exist (or None).

    "auto" is "cuda" when a CUDA device is visible, else "cpu". "cuda" / "cuda:N" stay as asked; without that
    device the reason is "no CUDA device (found 0)" or "no CUDA device N (found K)", which
    `PerfSession.usage_errors` reports: a device asked for by name must exist, only "auto" falls back to the CPU.
    ``requested`` is parsed by `detector.devices.parse_device` (ValueError for another name).
    """
    kind, index = parse_device(requested)
    if kind == "auto":
        return ("cuda" if cuda_device_count > 0 else "cpu"), None
    if kind == "cpu":
        return "cpu", None
    if index is not None and index >= cuda_device_count:
        return requested, f"no CUDA device {index} (found {cuda_device_count})"
    if cuda_device_count == 0:
        return requested, "no CUDA device (found 0)"
    return requested, None


class PerfSession:
    """Per-run state of the perf plugin: options, what is measured (`perf.subject.Subject`), the resolved device
    and the machine fingerprint (both lazy)."""

    def __init__(self, options: PerfOptions, subject: Subject | None = None) -> None:
        self.options = options
        self.subject = subject if subject is not None else Subject()

    @classmethod
    def from_config(cls, config: pytest.Config) -> PerfSession:
        """Build from the options (`perf.options`) and the subject's ini settings; relative paths of options are
        taken from the directory pytest was started in, of ini values from the ini file's folder."""
        from detector.spec import default_cache_dir  # one cache with the detector CLI

        getoption, invocation_dir = config.getoption, config.invocation_params.dir
        ini_dir = config.inipath.parent if config.inipath is not None else config.rootpath
        cache_dir = getoption("perf_cache_dir")
        return cls(
            PerfOptions(
                backends=getoption("perf_backends") or backend_names(),
                device=getoption("perf_device"),
                batch_sizes=getoption("perf_batch_sizes"),
                precisions=getoption("perf_precisions"),
                allow_machine_mismatch=getoption("perf_allow_machine_mismatch"),
                cache_dir=(invocation_dir / cache_dir).resolve() if cache_dir else default_cache_dir(),
                frames=getoption("perf_frames"),
                nsys=getoption("perf_nsys"),
                nsys_path=getoption("perf_nsys_path"),
                profile=getoption("perf_profile"),
                streams=getoption("perf_streams"),
                skip_intervals=getoption("perf_skip_interval"),
                allow_model_mismatch=bool(getoption("perf_allow_model_mismatch")),
                inject_delay_ms=getoption("perf_inject_delay"),
                regression=getoption("perf_regression"),
                sources=getoption("perf_sources"),
            ),
            Subject.from_config(getoption, config.getini, invocation_dir, ini_dir),
        )

    def usage_errors(self, *, autosave: bool = False) -> Iterable[str]:
        """Messages for option values that cannot work together or point at nothing, such as a CUDA device asked
        for by name (``--perf-device cuda`` / ``cuda:N``) that does not exist (checking that one imports torch), or
        a run with a deliberate slowdown that ``--benchmark-autosave`` (``autosave``) would make the next baseline."""
        if self.options.device.startswith("cuda") and self.device_unavailable is not None:
            yield f"--perf-device {self.options.device}: {self.device_unavailable}"
        if autosave and self.options.injected:
            yield (f"--benchmark-autosave refuses a run made with {describe_injected(self.options.injected)}: it "
                   "would become the next baseline; save it apart (--benchmark-save=NAME --benchmark-storage=DIR) "
                   "or drop the option")  # fmt: skip
        yield from self.subject.problems()
        if self.options.nsys and self.options.profile != "none":
            yield (
                f"--perf-nsys and --perf-profile={self.options.profile} cannot be combined: both profilers use "
                "CUPTI and would distort each other; run them separately"
            )

    def warnings(self) -> Iterable[str]:
        """One line per setting that works but is likely wrong (`perf.subject.Subject.warnings`): issued as a
        `SubjectWarning` at start-up, after `usage_errors` found nothing."""
        yield from self.subject.warnings()

    @functools.cached_property
    def _device(self) -> tuple[str, str | None]:
        from perf.measure.machine import cuda_device_count

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

    @functools.cached_property
    def run_id(self) -> str:
        """This pytest session's id (uuid4 hex): ``perf_run["run_id"]`` of the run it saves and
        ``current.run_id`` of the verdicts it writes, so reports tie verdicts to the run they judged."""
        import uuid

        return uuid.uuid4().hex

    @functools.cached_property
    def gated_markers(self) -> frozenset[str]:
        """The markers whose tests may be skipped here: "gpu" and every backend's own (``register(..., marks=)``)."""
        from detector.backends import backend

        return frozenset({"gpu", *(mark for name in backend_names() for mark in backend(name).marks)})

    def skip_reason(self, markers: set[str]) -> str | None:
        """Why a test marked with `markers` ("gpu", "trt") cannot run here, or None when it can: "gpu" needs a CUDA
        device; a backend's own marker needs that backend to run on this device (`detector.backends.availability`:
        "tensorrt not installed (...)", an RTX refusal), so a CPU backend's marker does not skip a CPU run."""
        from detector.backends import availability, backend

        device_type = self.device.partition(":")[0]
        no_cuda = None
        if device_type == "cpu":
            found = "is cpu" if self.options.device == "cpu" else "auto found no CUDA device"
            no_cuda = f"needs a CUDA device; --perf-device {found}"
            if "gpu" in markers:
                return no_cuda
        for name in backend_names():
            entry = backend(name)
            if not markers & set(entry.marks):
                continue
            if device_type not in entry.devices:
                if no_cuda is not None and "cuda" in entry.devices:
                    return no_cuda
                return f"{name} runs on {', '.join(entry.devices)} only, not {self.device}"
            reason = availability(name, self.device)  # "tensorrt not installed (...)", an RTX refusal, or None
            if reason is not None:
                return reason
        return None

    @functools.cached_property
    def identity(self) -> dict[str, Any]:
        """``machine_info["perf_subject"]``: what this run measures (`perf.subject.Subject.identity`)."""
        spec = self.subject.model_spec(self.options.cache_dir)
        return self.subject.identity(spec, synthetic_frames=self.options.frames_for(self.device),
                                     precisions=self.options.precisions, backends=self.options.backends)  # fmt: skip

    def described(self) -> dict[str, str]:
        """What this run measures and where, as every report names it (`perf.subject.describe_subject`)."""
        import platform

        from perf.subject import describe_subject

        return describe_subject(self.identity, self.fingerprint, platform.node())

    @functools.cached_property
    def fingerprint(self) -> dict[str, Any]:
        """``machine_info["perf"]``: `perf.measure.machine.machine_fingerprint` of the GPU in use, plus ``device``: the
        device type the run used ("cpu" or "cuda"; the index is ``gpu_index``)."""
        from perf.measure.machine import machine_fingerprint

        device_type, _, index = self.device.partition(":")
        return {**machine_fingerprint(gpu_index=int(index or 0)), "device": device_type}


PERF_SESSION = pytest.StashKey[PerfSession]()
REPORT_KEY = pytest.StashKey[PerfReport]()  # the suite's report, `perf.fixtures.reporting` fills and writes it
RUN_KEY = pytest.StashKey[str]()  # this run's name in the report files, shared with its xdist workers


def reports_dir(config: pytest.Config) -> Path:
    """The reports folder, ``--perf-reports-dir`` or ``reports/`` in the rootdir (not created)."""
    value = config.getoption("perf_reports_dir")
    return (config.invocation_params.dir / value).resolve() if value else config.rootpath / "reports"


class MachineMismatchWarning(pytest.PytestWarning):
    """A compare with a saved run of another machine, model or video, allowed by --perf-allow-machine-mismatch or
    --perf-allow-model-mismatch."""


class SubjectWarning(pytest.PytestWarning):
    """A model or video setting that works but is likely wrong, such as ground-truth categories that are not the
    model's class names."""


def check_saved_run(config: pytest.Config, saved_run: Mapping[str, Any], location: str, option: str) -> None:
    """Refuse (pytest.UsageError) to compare with ``saved_run`` (a saved run's JSON, found in ``location``, for
    ``option``) when it measured another model or video, unless --perf-allow-model-mismatch, or comes from another
    GPU, driver, CUDA version or device, unless --perf-allow-machine-mismatch; allowed, each is a warning. A saved
    run that recorded no model or video identity (saved before identities were saved) is compared with a warning.
    A run made with a deliberate slowdown (`perf.runs.injected_of`) is never a baseline: always refused."""
    from perf.measure.machine import fingerprint_differences, mismatch_message

    session = config.stash[PERF_SESSION]
    injected = injected_of(saved_run)
    if injected:
        raise pytest.UsageError(f"{option}: the saved run in '{location}' (saved {saved_run.get('datetime')}) was made "
                                f"with {describe_injected(injected)}, a deliberate slowdown: it is not a baseline; "
                                "compare with another run (NUM or ID)")  # fmt: skip
    machine_info = saved_run.get("machine_info") or {}
    saved_subject = machine_info.get("perf_subject")
    if not saved_subject:
        config.issue_config_time_warning(MachineMismatchWarning(
            f"{option}: the saved run in '{location}' records no model or video identity (saved before they were "
            "recorded); it is compared as if it measured this model and video"), stacklevel=2)
    elif differences := subject_differences(saved_subject, session.identity):
        allowed = session.options.allow_model_mismatch
        _refuse_or_warn(config, subject_mismatch_message(differences, saved_run, location, allowed=allowed,
                                                         option=option), allowed)  # fmt: skip
    differences = fingerprint_differences(machine_info.get("perf"), session.fingerprint)
    if differences:
        allowed = session.options.allow_machine_mismatch
        _refuse_or_warn(config, mismatch_message(differences, saved_run, location, allowed=allowed, option=option),
                        allowed)  # fmt: skip


def _refuse_or_warn(config: pytest.Config, message: str, allowed: bool) -> None:
    if not allowed:
        raise pytest.UsageError(message)
    config.issue_config_time_warning(MachineMismatchWarning(message), stacklevel=3)
