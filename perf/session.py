"""The state the perf suite's hooks share: the options as parsed (`PerfOptions`) and the run's `PerfSession`,
kept in ``config.stash[PERF_SESSION]`` (docs/architecture.md, "The session and its parts")."""

from __future__ import annotations

import dataclasses
import functools
import os
import platform
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from detector.devices import parse_device
from detector.errors import catch_sigterm
from detector.fileio import resolved, symlink_loop
from detector.spec import default_cache_dir  # one cache with the detector CLI
from perf.diskfull import stop_on_folder_error
from perf.measure.clock import SUITE_CLOCK
from perf.measure.machine import cuda_device_count, device_fingerprint, fingerprint_differences
from perf.measure.multigpu import bind_worker_gpu
from perf.preflight import check_options, check_selection
from perf.roles.gate import GateRun, gate_settings
from perf.roles.nsys import NsysRun, nsys_selected
from perf.roles.report import ReportRun
from perf.roles.store import StoreRun, save_under_lock
from perf.runs import as_text, describe_injected, injected_of, mismatch_lines, param_json
from perf.store import store_location
from perf.subject import Subject, describe_subject, subject_differences

#: Defaults by device kind of --perf-batch-sizes, --perf-frames, --perf-streams; the CPU pass is a smoke test
#: (batch 32 took 2.9 s a call on the 2-core CI machine), the GPU's video 10 s at 30 fps.
DEFAULT_BATCH_SIZES = {"cuda": (1, 8, 32), "cpu": (1, 8)}
DEFAULT_FRAMES = {"cuda": 300, "cpu": 60}
DEFAULT_STREAMS = {"cuda": (1, 2, 4, 8, 16), "cpu": (1, 2)}
#: --perf-skip-interval's default: NVIDIA's DeepStream lab table.
DEFAULT_SKIP_INTERVALS = (0, 1, 2, 4)


def backend_names() -> tuple[str, ...]:
    """Backend names from the registry (:func:`detector.backends.backend_names`), in registration order."""
    from detector.backends import backend_names as registered  # on first use, not with this module

    return tuple(registered())


def backend_markers() -> dict[str, str]:
    """The markers backends registered for their cases (``register(..., marks=...)``): marker -> description."""
    from detector.backends import backend

    return {mark: f"a case of backend {name!r}; skipped where it cannot run (no CUDA device, not installed)."
            for name in backend_names() for mark in backend(name).marks}


@dataclass(frozen=True)
class PerfOptions:
    """The ``--perf-*`` options as parsed (the ``perf_options`` fixture; docs/options.md). ``device`` is as requested
    ("auto" included); ``frames``, ``batch_sizes``, ``streams`` are None unless given (see the ``*_for`` methods)."""

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
    streams: tuple[int, ...] | None
    allow_model_mismatch: bool
    skip_intervals: tuple[int, ...]
    inject_delay_ms: float  #: ms, 0: off
    regression: Any  #: `perf.gate.regressions.Regression` or None
    sources: tuple[Any, ...]  #: `perf.measure.sources.Source` (mp4v alone if empty)
    controls: Any  #: `perf.measure.controls.Controls`
    clock_lead_in_ms: float
    kernels: int  #: calls, 0: off
    nsys_child: bool  #: the hidden flag of a run inside Nsight Systems (`perf.profile.nsys.NSYS_CHILD_FLAG`)
    reports_dir: Path  #: resolved (default ``reports/`` in the rootdir)
    html: str | None  #: as given
    compare: Any  #: None: off, True: the latest comparable run, else NUM / ID
    history: int  #: runs
    noise_profile: str | None  #: a path, "none", or None: this runner's own
    selftest: bool
    selftest_trials: int | None  #: None: the device's default
    selftest_levels: tuple[float, ...] | None
    noise: int | None  #: K processes, None: off (selftest_processes too)
    selftest_processes: int | None
    selftest_regressions: tuple[Any, ...] | None
    processes_budget: float | None  #: s
    runs_dir: str | None  #: as given
    store: str | None  #: --perf-store, else ini ``perf_store``: a path made absolute, ``none`` and URLs as given

    def batch_sizes_for(self, device: str) -> tuple[int, ...]:
        """Batch sizes of the inference benchmarks on `device` ("cpu", "cuda", "cuda:N")."""
        return self.batch_sizes or DEFAULT_BATCH_SIZES[parse_device(device)[0]]

    def streams_for(self, device: str) -> tuple[int, ...]:
        """Stream counts of the multi-stream test on `device`."""
        return self.streams or DEFAULT_STREAMS[parse_device(device)[0]]

    def frames_for(self, device: str) -> int:
        """Synthetic-video length in frames on `device`."""
        return self.frames or DEFAULT_FRAMES[parse_device(device)[0]]

    @property
    def injected(self) -> dict[str, Any]:
        """The test-only changes this run was made with ({} for a normal run): marked in every benchmark."""
        out: dict[str, Any] = {"inject_delay_ms": self.inject_delay_ms} if self.inject_delay_ms else {}
        return out | ({} if self.regression is None else {"regression": str(self.regression)})


def resolve_device(requested: str, cuda_device_count: int) -> tuple[str, str | None]:
    """A --perf-device value as the device tests run on, and why that device does not exist (or None): "auto" is
    "cuda" when one is visible, else "cpu"; "cuda" / "cuda:N" stay as asked. ValueError for another name."""
    kind, index = parse_device(requested)
    if kind == "auto":
        return ("cuda" if cuda_device_count > 0 else "cpu"), None
    if kind != "cpu" and (index or 0) >= cuda_device_count:
        return requested, f"no CUDA device{'' if index is None else f' {index}'} (found {cuda_device_count})"
    return requested, None


class PerfSession:
    """Per-run state of the perf plugin: options, subject, device and fingerprint (lazy), the parts (`perf.roles`)."""

    def __init__(self, options: PerfOptions, subject: Subject) -> None:
        self.options, self.subject = options, subject
        self.config: pytest.Config
        self.report: ReportRun
        self.gate: GateRun
        self.nsys: NsysRun
        self.processes: Any = None  #: `perf.roles.processes.ProcessesRun` (built by the plugin's factory) or None
        self.store: StoreRun | None = None

    @classmethod
    def start(cls, config: pytest.Config, markers: Mapping[str, str],
              option_errors: Callable[[pytest.Config], list[str]],
              processes: Callable[[PerfSession, pytest.Config], Any]) -> PerfSession:  # fmt: skip
        """``pytest_configure``: check the options (a usage error, a line each), build the session, its parts
        (``option_errors``, ``processes``: `perf.options.start_up_errors`, `perf.roles.processes.ProcessesRun.start`)"""
        bind_worker_gpu()  # an xdist worker gets its own GPU, before anything initialises CUDA
        config.add_cleanup(catch_sigterm())  # SIGTERM stops the run as Ctrl-C does: every finally runs
        for name, description in {**backend_markers(), **markers}.items():
            config.addinivalue_line("markers", f"{name}: {description}")
        if errors := option_errors(config):
            raise pytest.UsageError("\n".join(errors))
        session = cls.from_config(config)
        if errors := list(session.usage_errors(autosave=bool(config.getoption("benchmark_autosave", False)))):
            raise pytest.UsageError("\n".join(errors))
        session.config = config
        config.stash[PERF_SESSION] = session
        for message in session.subject.warnings():  # settings that work but are likely wrong
            config.issue_config_time_warning(SubjectWarning(message), stacklevel=2)
        SUITE_CLOCK.configure(lambda: session.device, session.options.clock_lead_in_ms)  # CUDA events on a GPU
        worker = getattr(config, "workerinput", None) or {}
        run = worker.get("perf_run") or f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        session.report = ReportRun(session, run, worker.get("workerid"))
        session.processes = processes(session, config)
        check_options(config, session.options)
        if hasattr(config.option, "benchmark_save_data"):
            config.option.benchmark_save_data = True  # raw rounds in every saved run (before pytest-benchmark reads it)
        session.gate = GateRun(session, gate_settings(config))
        session.nsys = NsysRun(session.options, nsys_selected(session.options, config.getoption("markexpr", "")))
        return session

    def on_sessionstart(self, session: pytest.Session) -> None:
        """Open the history store, then read main's history: both refuse a wrong setting before measuring."""
        self.store = StoreRun.open(session.config, self.options.store)
        save_under_lock(session, self._saved)
        self.gate.start(session)

    def on_collection_finish(self, session: pytest.Session) -> None:
        """Refuse folders the selected tests cannot write (`perf.preflight.check_selection`); the gate's selection."""
        check_selection(session, self.options)
        self.gate.collected(session.items)

    def on_runtest_setup(self, item: pytest.Item) -> None:
        """Skip a test whose markers need what this machine lacks (`skip_reason`)."""
        markers = {mark.name for mark in item.iter_markers()} & {"gpu", *backend_markers()}
        if markers and (reason := self.skip_reason(markers)) is not None:
            pytest.skip(reason)

    def on_runtest_call(self, item: pytest.Item) -> Generator[None, Any, None]:
        """Around a test's call: mark a benchmark of a run with injected slowdowns (and, after, the calibration)."""
        marks, funcargs = self.options.injected, getattr(item, "funcargs", {})
        bench = funcargs.get("benchmark") if marks else None
        if bench is not None:
            bench.extra_info["injected"] = marks
        yield
        if bench is not None and (calibration := getattr(funcargs.get("runner_pool"), "calibration", None)):
            bench.extra_info.setdefault("regression_calibration", calibration)

    def on_makereport(self, item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
        """A full disk or a denied file under the suite's folders stops the run (`perf.diskfull`); the gate judges."""
        if report.failed and call.excinfo is not None:
            folders = {"--perf-cache-dir": self.options.cache_dir, "--perf-reports-dir": self.options.reports_dir}
            stop_on_folder_error(folders, call.excinfo.value)
        self.gate.judge_test(item, call, report)

    def on_update_json(self, output_json: dict[str, Any]) -> None:
        """``perf_run`` beside machine_info, ``params`` as JSON; the store keeps it (architecture.md, "Saved runs")."""
        output_json["perf_run"] = {"run_id": self.run_id, "injected": self.options.injected}
        for bench in output_json.get("benchmarks") or ():
            if isinstance(bench.get("params"), dict):
                bench["params"] = param_json(bench["params"])
        output_json.update(as_text(output_json))  # --perf-video $'clip\xff.mp4' in extra_info
        if self.store is not None:
            self.store.saving(output_json)

    def _saved(self, path: Path) -> None:
        if self.store is not None:
            self.store.saved = path

    def on_sessionfinish(self, session: pytest.Session) -> None:
        """After pytest-benchmark saved the run: the cross-process verdict, the gate, the report, then the store."""
        if session.exitstatus in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERRUPTED):
            return  # refused after collection (perf.preflight), or interrupted: nothing partial is written
        if self.processes is not None:
            self.processes.finish(session)
        self.gate.finish(session)
        self.report.finish(session.config)
        if self.store is not None:
            baseline = self.gate.baseline  # the noise profile stored is the one the gate judged with
            self.store.finish(session, self.gate.document, None if baseline is None else baseline.noise)

    def write_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """The run's sections, after pytest's failures and before pytest-benchmark's table."""
        for part in (self.gate, self.report, self.processes, self.nsys):
            if part is not None:
                part.write_summary(terminalreporter)

    def write_last_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """Just above the final line, after pytest's short test summary: the store's line."""
        if self.store is not None:
            self.store.write_summary(terminalreporter)

    def header(self) -> list[str]:
        """``pytest_report_header``: what the run measures, and a warning line for an injected slowdown."""
        options = self.options
        lines = [f"perf: device={options.device} backends={','.join(options.backends)} "
                 f"batch-sizes={','.join(map(str, options.batch_sizes_for(self.device)))} "
                 f"precisions={','.join(options.precisions)} cache-dir={options.cache_dir}"]
        if options.injected:
            lines.append(f"perf: INJECTED SLOWDOWN ({describe_injected(options.injected)}): a test-only run, marked "
                         "as such in every saved benchmark; never a baseline")  # fmt: skip
        return lines

    @classmethod
    def from_config(cls, config: pytest.Config) -> PerfSession:
        """Build from the options and the subject's ini settings; relative paths of options are taken from where
        pytest started, of ini values from the ini file's folder."""
        getoption, invocation_dir = config.getoption, config.invocation_params.dir
        ini_dir = config.inipath.parent if config.inipath is not None else config.rootpath
        # every field is the option ``perf_<field>`` (its dest), but for these three
        dests = {"skip_intervals": "perf_skip_interval", "inject_delay_ms": "perf_inject_delay",
                 "clock_lead_in_ms": "perf_clock_lead_in"}  # fmt: skip
        values = {f.name: getoption(dests.get(f.name, f"perf_{f.name}")) for f in dataclasses.fields(PerfOptions)}
        cache_dir, reports = values["cache_dir"], values["reports_dir"]
        store = store_location(values["store"], invocation_dir) or store_location(config.getini("perf_store"), ini_dir)
        values.update(backends=values["backends"] or backend_names(), store=store,
                      cache_dir=resolved(invocation_dir / cache_dir) if cache_dir else default_cache_dir(),
                      reports_dir=resolved(invocation_dir / reports) if reports else config.rootpath / "reports")
        return cls(PerfOptions(**values), Subject.from_config(getoption, config.getini, invocation_dir, ini_dir))

    def usage_errors(self, *, autosave: bool = False) -> Iterable[str]:
        """Option values that cannot work (together): a missing CUDA device (imports torch), an injected slowdown
        ``autosave`` would make the next baseline, a folder's symbolic link loop, the subject's, nsys + profiler."""
        if self.options.device.startswith("cuda") and (missing := self._device[1]) is not None:
            yield f"--perf-device {self.options.device}: {missing}"
        if autosave and self.options.injected:
            yield (f"--benchmark-autosave refuses a run made with {describe_injected(self.options.injected)}: it "
                   "would become the next baseline; save it apart (--benchmark-save=NAME --benchmark-storage=DIR) "
                   "or drop the option")  # fmt: skip
        folders = {"--perf-cache-dir": self.options.cache_dir, "--perf-reports-dir": self.options.reports_dir}
        yield from (f"{option}: cannot use '{folder}': a symbolic link loop (too many levels of symbolic links)"
                    for option, folder in folders.items() if symlink_loop(folder))
        yield from self.subject.problems()
        if self.options.nsys and self.options.profile != "none":
            yield (f"--perf-nsys and --perf-profile={self.options.profile} cannot be combined: both profilers use "
                   "CUPTI and would distort each other; run them separately")

    def check_saved_run(self, saved_run: Mapping[str, Any], location: str, option: str) -> None:
        """Refuse or warn about comparing with ``saved_run`` (docs/architecture.md, "The session and its parts")."""
        if injected := injected_of(saved_run):
            raise pytest.UsageError(f"{option}: the saved run in '{location}' (saved {saved_run.get('datetime')}) was "
                                    f"made with {describe_injected(injected)}, a deliberate slowdown: it is not a "
                                    "baseline; compare with another run (NUM or ID)")  # fmt: skip
        machine_info = saved_run.get("machine_info") or {}
        if not (saved_subject := machine_info.get("perf_subject")):
            self._refuse_or_warn(f"{option}: the saved run in '{location}' records no model or video identity (saved "
                                 "before they were recorded); it is compared as if it measured this model and video")
        elif differences := subject_differences(saved_subject, self.identity):
            allowed = self.options.allow_model_mismatch
            lines = mismatch_lines(differences, saved_run, location, option, "measured another model or video")
            lines.append("Comparing anyway (--perf-allow-model-mismatch); the figures measure different things."
                         if allowed else "Figures of another model or video are not a regression signal: record a "
                         "baseline of this one, or pass --perf-allow-model-mismatch to compare anyway.")  # fmt: skip
            self._refuse_or_warn("\n".join(lines), allowed)
        if differences := fingerprint_differences(machine_info.get("perf"), self.fingerprint):
            allowed = self.options.allow_machine_mismatch
            lines = mismatch_lines(differences, saved_run, location, option, "comes from a different machine")
            lines.append("Comparing anyway (--perf-allow-machine-mismatch); the timings may not be comparable."
                         if allowed else "Timings from another GPU, driver, CUDA version or device are not "
                         "comparable: record a baseline on this machine, or pass --perf-allow-machine-mismatch to "
                         "compare anyway.")  # fmt: skip
            self._refuse_or_warn("\n".join(lines), allowed)

    def _refuse_or_warn(self, message: str, allowed: bool = True) -> None:
        if not allowed:
            raise pytest.UsageError(message)
        self.config.issue_config_time_warning(MachineMismatchWarning(message), stacklevel=3)

    @functools.cached_property
    def _device(self) -> tuple[str, str | None]:
        """`resolve_device` of --perf-device: the device, and why the CUDA device asked for is missing, or None."""
        return resolve_device(self.options.device, 0 if self.options.device == "cpu" else cuda_device_count())

    @property
    def device(self) -> str:
        """Resolved device: "cpu", "cuda" or "cuda:N" (imports torch on first use unless --perf-device cpu)."""
        return self._device[0]

    def use_device(self) -> str:
        """`device`, made torch's current CUDA device where it is ``cuda:N`` (the ``perf_device`` fixture): calls naming
        no device (synchronize, empty_cache, the profiler, the clock's calibration) then go to it, not to GPU 0."""
        if (index := parse_device(self.device)[1]) is not None:
            import torch

            torch.cuda.set_device(index)
        return self.device

    @functools.cached_property
    def run_id(self) -> str:
        """This pytest session's id (uuid4 hex): ``perf_run["run_id"]`` of its saved run and its verdicts'."""
        return uuid.uuid4().hex

    @functools.cached_property
    def max_time_given(self) -> bool:
        """Whether the user gave ``--benchmark-max-time`` (`perf.measure.clock.max_time_given`), read once."""
        from perf.measure.clock import max_time_given

        return max_time_given(self.config)

    def skip_reason(self, markers: set[str]) -> str | None:
        """Why a test marked with `markers` ("gpu", a backend's) cannot run here, or None (`backends.availability`)."""
        from detector.backends import availability, backend

        device_type = self.device.partition(":")[0]
        found = "is cpu" if self.options.device == "cpu" else "auto found no CUDA device"
        no_cuda = f"needs a CUDA device; --perf-device {found}" if device_type == "cpu" else None
        if no_cuda and "gpu" in markers:
            return no_cuda
        for name in backend_names():
            entry = backend(name)
            if not markers & set(entry.marks):
                continue
            if device_type not in entry.devices:
                return no_cuda if no_cuda and "cuda" in entry.devices else (
                    f"{name} runs on {', '.join(entry.devices)} only, not {self.device}")
            if (reason := availability(name, self.device)) is not None:  # not installed, an RTX refusal
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
        return describe_subject(self.identity, self.fingerprint, platform.node())

    @functools.cached_property
    def fingerprint(self) -> dict[str, Any]:
        """``machine_info["perf"]``: `perf.measure.machine.device_fingerprint` of the device in use."""
        return device_fingerprint(self.device)


PERF_SESSION = pytest.StashKey[PerfSession]()


class MachineMismatchWarning(pytest.PytestWarning):
    """A compare with a saved run of another machine, model or video, allowed by --perf-allow-*-mismatch."""


class SubjectWarning(pytest.PytestWarning):
    """A model or video setting that works but is likely wrong (ground-truth categories not the class names)."""
