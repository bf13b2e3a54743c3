"""pytest plugin of the perf suite: options, markers, fixtures and the pytest-benchmark machine-info hooks.

Registered by the root conftest.py (``pytest_plugins = ["perf.plugin"]``); state lives in a
`perf.options.PerfSession` kept in ``config.stash``. Saved benchmark runs carry ``machine_info["perf"]``
(`perf.measure.machine.machine_fingerprint`), and ``--benchmark-compare`` refuses a saved run from another GPU, driver,
CUDA or device unless ``--perf-allow-machine-mismatch`` is given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perf.measure.clock import DEFAULT_LEAD_IN_MS, SUITE_CLOCK
from perf.measure.controls import NAMES as CONTROL_NAMES
from perf.measure.controls import Controls, parse_controls
from perf.measure.machine import fingerprint_differences, mismatch_message
from perf.gate.regressions import parse_regression
from perf.measure.slowdown import parse_delay_ms
from perf.subject import add_options as add_subject_options
from perf.options import (
    DEFAULT_BATCH_SIZES,
    DEFAULT_FRAMES,
    DEFAULT_PRECISIONS,
    DEFAULT_STREAMS,
    PROFILERS,
    PerfOptions,
    PerfSession,
    backend_names,
    bad_values,
    benchmark_option_errors,
    deferred,
    parse_backends,
    parse_batch_sizes,
    parse_device,
    parse_positive_int,
    parse_precisions,
    parse_profiler,
)

PERF_SESSION = pytest.StashKey[PerfSession]()


class MachineMismatchWarning(pytest.PytestWarning):
    """--benchmark-compare against a run from another machine, allowed by --perf-allow-machine-mismatch."""


MARKERS = {
    "gpu": "needs a CUDA device; skipped when --perf-device is cpu, or auto and no CUDA device is visible.",
    "trt": "needs TensorRT (tensorrt or tensorrt_rtx) and a CUDA device; skipped otherwise.",
    "nsys": "profiles under Nsight Systems; select with -m nsys (see --perf-nsys).",
    "slow": "takes more than a few seconds; deselect with -m 'not slow'.",
    "e2e": "end-to-end video pipeline: read -> preprocess -> infer -> postprocess -> write.",
    "parity": "compares detections of a backend/precision with the torch fp32 reference.",
    "ci": "a key benchmark of its family: pytest perf -m ci is the selection a CI gate runs on every change.",
}


def _join(values: tuple[Any, ...]) -> str:
    return ",".join(str(v) for v in values)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perf", "perf suite (perf/)")
    group.addoption(
        "--perf-backends", metavar="NAMES", type=deferred(parse_backends), default=None,
        help=f"Comma-separated backends to run. Default: all registered ({_join(backend_names())}).",
    )  # fmt: skip
    group.addoption(
        "--perf-device", metavar="DEVICE", type=deferred(parse_device), default="auto",
        help="Device to run on: auto, cpu, cuda or cuda:N; a CUDA device named here must exist (else a usage "
        "error), auto falls back to cpu where none is visible and GPU tests skip. Default: auto (cuda if available, "
        "else cpu).",
    )  # fmt: skip
    group.addoption(
        "--perf-batch-sizes", metavar="SIZES", type=deferred(parse_batch_sizes), default=DEFAULT_BATCH_SIZES,
        help=f"Comma-separated batch sizes for the inference benchmarks. Default: {_join(DEFAULT_BATCH_SIZES)}.",
    )  # fmt: skip
    group.addoption(
        "--perf-precisions", metavar="NAMES", type=deferred(parse_precisions), default=DEFAULT_PRECISIONS,
        help="Comma-separated precisions from fp32, fp16, int8; each runs only where the backend and device "
        f"support it and skips elsewhere. Default: {_join(DEFAULT_PRECISIONS)}.",
    )  # fmt: skip
    group.addoption(
        "--perf-allow-machine-mismatch", action="store_true", default=False,
        help="With --benchmark-compare, accept a saved run recorded on another GPU, driver, CUDA version or "
        "device (warn instead of failing). Default: False.",
    )  # fmt: skip
    group.addoption(
        "--perf-allow-model-mismatch", action="store_true", default=False,
        help="With --perf-compare or --benchmark-compare, accept a saved run of another model or video (warn "
        "instead of failing). Default: False.",
    )  # fmt: skip
    add_subject_options(group, parser)
    group.addoption(
        "--perf-cache-dir", metavar="DIR", default=None,
        help="Directory for generated videos, exported models and engines (relative to the current directory). "
        "Default: .perf-cache in the rootdir.",
    )  # fmt: skip
    group.addoption(
        "--perf-frames", metavar="N", type=deferred(parse_positive_int), default=None,
        help="Frames of the synthetic video for the end-to-end and parity tests. "
        f"Default: {DEFAULT_FRAMES['cuda']} on CUDA, {DEFAULT_FRAMES['cpu']} on CPU.",
    )  # fmt: skip
    group.addoption(
        "--perf-streams", metavar="COUNTS", type=deferred(parse_batch_sizes), default=None,
        help="Comma-separated stream counts for the multi-stream test (one inference at batch N per tick). "
        f"Default: {_join(DEFAULT_STREAMS['cuda'])} on CUDA, {_join(DEFAULT_STREAMS['cpu'])} on CPU.",
    )  # fmt: skip
    group.addoption(
        "--perf-nsys", action="store_true", default=False,
        help="Profile the nsys-marked tests under Nsight Systems. Default: False.",
    )  # fmt: skip
    group.addoption(
        "--perf-nsys-path", "--nsys-path", dest="perf_nsys_path", metavar="PATH", default="nsys",
        help="The nsys executable. Default: nsys (found on PATH).",
    )  # fmt: skip
    group.addoption(
        "--perf-inject-delay", metavar="MS", type=deferred(parse_delay_ms), default=0.0,
        help="Deliberately slow every runner by MS milliseconds per inference (GPU sleep on its stream), to check "
        "that --benchmark-compare-fail catches a regression. Default: 0 (off).",
    )  # fmt: skip
    group.addoption(
        "--perf-regression", metavar="KIND:PERCENT", type=deferred(parse_regression), default=None,
        help="Test only: inject a real code change that makes the suite slower, calibrated by a bare loop: "
        "layer:5%% (an extra layer in the model, +5%% per inference call at batch 32) or preprocess:5%% (the "
        "pipeline's preprocess does extra work, +5%% per frame end to end); runs made with it are marked "
        "injected. Default: none.",
    )  # fmt: skip
    group.addoption(
        "--perf-controls", metavar="NAMES", type=deferred(parse_controls), default=Controls(),
        help=f"Noise sources controlled while measuring: all, none, or names from {', '.join(CONTROL_NAMES)} (a "
        "leading - leaves one out, e.g. -pin). See perf/measure/controls.py. Default: all.",
    )  # fmt: skip
    group.addoption(
        "--perf-clock-lead-in", metavar="MS", type=deferred(parse_delay_ms), default=DEFAULT_LEAD_IN_MS,
        help="GPU busy-wait enqueued ahead of each timed call's start event, so that the host's launch latency "
        f"stays out of the CUDA-event reading; 0 = off (time from an idle GPU). Default: {DEFAULT_LEAD_IN_MS:g}ms.",
    )  # fmt: skip
    group.addoption(
        "--perf-profile", metavar="NAME", type=deferred(parse_profiler), default="none",
        help=f"Profiler around the benchmarks: {' or '.join(PROFILERS)}. Default: none.",
    )  # fmt: skip


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    from perf.measure.multigpu import bind_worker_gpu

    bind_worker_gpu()  # an xdist worker gets its own GPU, before anything initialises CUDA
    for name, description in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")
    errors = bad_values(config.option) + benchmark_option_errors(config.getoption)  # one line each, not a block
    if errors:
        raise pytest.UsageError("\n".join(errors))
    ini_dir = config.inipath.parent if config.inipath is not None else config.rootpath
    session = PerfSession.from_config(config.getoption, config.rootpath, config.invocation_params.dir,
                                      config.getini, ini_dir)  # fmt: skip
    errors = list(session.usage_errors())
    if errors:
        raise pytest.UsageError("\n".join(errors))
    config.stash[PERF_SESSION] = session
    SUITE_CLOCK.configure(lambda: session.device, config.getoption("perf_clock_lead_in"))  # CUDA events on a GPU


def pytest_report_header(config: pytest.Config) -> str:
    options = config.stash[PERF_SESSION].options
    return (
        f"perf: device={options.device} backends={_join(options.backends)} "
        f"batch-sizes={_join(options.batch_sizes)} precisions={_join(options.precisions)} "
        f"cache-dir={options.cache_dir}"
    )


def injected(config: pytest.Config) -> dict[str, Any]:
    """The test-only changes this run was made with ({} for a normal run): marked in every benchmark."""
    out: dict[str, Any] = {}
    if config.getoption("perf_inject_delay"):
        out["inject_delay_ms"] = config.getoption("perf_inject_delay")
    if config.getoption("perf_regression") is not None:
        out["regression"] = str(config.getoption("perf_regression"))
    return out


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Mark benchmarks of a run with injected slowdowns, so no one mistakes them for the real thing."""
    marks = injected(item.config)
    funcargs = getattr(item, "funcargs", {})
    bench = funcargs.get("benchmark")
    if marks and bench is not None:
        bench.extra_info["injected"] = marks
    yield
    calibration = getattr(funcargs.get("runner_pool"), "calibration", None)
    if marks and bench is not None and calibration:
        bench.extra_info.setdefault("regression_calibration", calibration)


def pytest_runtest_setup(item: pytest.Item) -> None:
    markers = {mark.name for mark in item.iter_markers()} & {"gpu", "trt"}
    if markers:
        reason = item.config.stash[PERF_SESSION].skip_reason(markers)
        if reason is not None:
            pytest.skip(reason)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    machine_info["perf"] = config.stash[PERF_SESSION].fingerprint
    machine_info["perf_subject"] = config.stash[PERF_SESSION].identity


def check_subject(config: pytest.Config, saved_run: dict[str, Any], location: str, option: str) -> None:
    """Refuse (pytest.UsageError) a saved run of another model or video, unless --perf-allow-model-mismatch; a
    saved run that recorded no identity (made before identities were saved) is compared with a warning."""
    from perf.subject import subject_differences, subject_mismatch_message

    session = config.stash[PERF_SESSION]
    saved = (saved_run.get("machine_info") or {}).get("perf_subject")
    if not saved:
        config.issue_config_time_warning(MachineMismatchWarning(
            f"{option}: the saved run in '{location}' records no model or video identity (saved before they were "
            "recorded); it is compared as if it measured this model and video"), stacklevel=2)
        return
    differences = subject_differences(saved, session.identity)
    if not differences:
        return
    allowed = session.options.allow_model_mismatch
    message = subject_mismatch_message(differences, saved_run, location, allowed=allowed, option=option)
    if not allowed:
        raise pytest.UsageError(message)
    config.issue_config_time_warning(MachineMismatchWarning(message), stacklevel=2)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_compare_machine_info(
    config: pytest.Config, benchmarksession: Any, machine_info: dict[str, Any], compared_benchmark: dict[str, Any]
) -> None:
    """Refuse (pytest.UsageError) to compare with a run from another GPU/driver/CUDA/device, unless allowed, or of
    another model or video (`check_subject`)."""
    check_subject(config, compared_benchmark, str(benchmarksession.storage), "--benchmark-compare")
    differences = fingerprint_differences(compared_benchmark["machine_info"].get("perf"), machine_info["perf"])
    if not differences:
        return
    allowed = config.stash[PERF_SESSION].options.allow_machine_mismatch
    message = mismatch_message(differences, compared_benchmark, str(benchmarksession.storage), allowed=allowed)
    if not allowed:
        raise pytest.UsageError(message)
    config.issue_config_time_warning(MachineMismatchWarning(message), stacklevel=2)


@pytest.fixture(scope="session")
def perf_options(pytestconfig: pytest.Config) -> PerfOptions:
    """The perf options as parsed (device as requested: see perf_device)."""
    return pytestconfig.stash[PERF_SESSION].options


@pytest.fixture(scope="session")
def perf_device(pytestconfig: pytest.Config) -> str:
    """Resolved device ("cpu", "cuda", "cuda:N"); a requested CUDA device that is missing never gets here (it is a
    usage error at start-up)."""
    return pytestconfig.stash[PERF_SESSION].device


@pytest.fixture(scope="session")
def perf_controls(pytestconfig: pytest.Config) -> Controls:
    """The noise controls in force while measuring (``--perf-controls``, see perf/measure/controls.py)."""
    return pytestconfig.getoption("perf_controls")


@pytest.fixture(scope="session")
def perf_frames(perf_options: PerfOptions, perf_device: str) -> int:
    """Frames of the synthetic video: --perf-frames, else 300 on CUDA and 60 on CPU."""
    return perf_options.frames_for(perf_device)


@pytest.fixture(scope="session")
def perf_cache_dir(perf_options: PerfOptions) -> Path:
    """--perf-cache-dir (default <rootdir>/.perf-cache), created; shared by xdist workers."""
    perf_options.cache_dir.mkdir(parents=True, exist_ok=True)
    return perf_options.cache_dir
