"""pytest hooks of the perf suite: options, markers, start-up checks, the session's fixtures and the
pytest-benchmark machine-info hooks.

Registered by the root conftest.py (``pytest_plugins = ["perf.plugin", ...]``). Every option of the suite is
registered here, from the one table in `perf.options`; the role plugins (perf/gate/, perf/profile/, perf/preflight.py,
perf/fixtures/reporting.py) only read them. State lives in a `perf.session.PerfSession` kept in
``config.stash[PERF_SESSION]``. Saved benchmark runs carry ``machine_info["perf"]``
(`perf.measure.machine.machine_fingerprint`), and ``--benchmark-compare`` refuses a saved run from another GPU,
driver, CUDA or device unless ``--perf-allow-machine-mismatch`` is given (`perf.session.check_saved_run`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perf.diskfull import stop_if_disk_full
from perf.measure.clock import SUITE_CLOCK
from perf.measure.controls import Controls
from perf.options import add_options, anchor_benchmark_storage, bad_values, benchmark_option_errors
from perf.runs import describe_injected
from perf.session import PERF_SESSION, PerfOptions, PerfSession, SubjectWarning, check_saved_run

MARKERS = {
    "gpu": "needs a CUDA device; skipped when --perf-device is cpu, or auto and no CUDA device is visible.",
    "trt": "needs TensorRT (tensorrt or tensorrt_rtx) and a CUDA device; skipped otherwise.",
    "nsys": "profiles under Nsight Systems; select with -m nsys (see --perf-nsys).",
    "slow": "takes more than a few seconds; deselect with -m 'not slow'.",
    "e2e": "end-to-end video pipeline: read -> preprocess -> infer -> postprocess -> write.",
    "parity": "compares detections of a backend/precision with the torch fp32 reference.",
    "ci": "a key benchmark of its family: pytest perf -m ci is the selection a CI gate runs on every change.",
}


def backend_markers() -> dict[str, str]:
    """The markers backends registered for their cases (``register(..., marks=...)``): marker -> description."""
    from detector.backends import backend, backend_names

    return {mark: f"a case of backend {name!r}; skipped where it cannot run (no CUDA device, not installed)."
            for name in backend_names() for mark in backend(name).marks}


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    from perf.measure.multigpu import bind_worker_gpu

    bind_worker_gpu()  # an xdist worker gets its own GPU, before anything initialises CUDA
    for name, description in {**backend_markers(), **MARKERS}.items():
        config.addinivalue_line("markers", f"{name}: {description}")
    errors = bad_values(config.option) + benchmark_option_errors(config.getoption)  # one line each, not a block
    if errors:
        raise pytest.UsageError("\n".join(errors))
    anchor_benchmark_storage(config.option, config.rootpath)  # before pytest-benchmark opens it (trylast)
    session = PerfSession.from_config(config)
    errors = list(session.usage_errors(autosave=bool(config.getoption("benchmark_autosave", False))))
    if errors:
        raise pytest.UsageError("\n".join(errors))
    config.stash[PERF_SESSION] = session
    for message in session.warnings():
        config.issue_config_time_warning(SubjectWarning(message), stacklevel=2)
    SUITE_CLOCK.configure(lambda: session.device, config.getoption("perf_clock_lead_in"))  # CUDA events on a GPU


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = config.stash[PERF_SESSION]
    options = session.options
    lines = [
        f"perf: device={options.device} backends={','.join(options.backends)} "
        f"batch-sizes={','.join(map(str, options.batch_sizes_for(session.device)))} "
        f"precisions={','.join(options.precisions)} "
        f"cache-dir={options.cache_dir}"
    ]
    if options.injected:
        lines.append(f"perf: INJECTED SLOWDOWN ({describe_injected(options.injected)}): a test-only run, marked as "
                     "such in every saved benchmark; never a baseline")  # fmt: skip
    return lines


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Mark benchmarks of a run with injected slowdowns, so no one mistakes them for the real thing."""
    marks = item.config.stash[PERF_SESSION].options.injected
    funcargs = getattr(item, "funcargs", {})
    bench = funcargs.get("benchmark")
    if marks and bench is not None:
        bench.extra_info["injected"] = marks
    yield
    calibration = getattr(funcargs.get("runner_pool"), "calibration", None)
    if marks and bench is not None and calibration:
        bench.extra_info.setdefault("regression_calibration", calibration)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A test failing on a full disk stops the run in one line (`perf.diskfull`)."""
    report = yield
    if report.failed and call.excinfo is not None:
        stop_if_disk_full(item.config, call.excinfo.value)
    return report


def pytest_runtest_setup(item: pytest.Item) -> None:
    session = item.config.stash[PERF_SESSION]
    markers = {mark.name for mark in item.iter_markers()} & session.gated_markers
    if markers:
        reason = session.skip_reason(markers)
        if reason is not None:
            pytest.skip(reason)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    session = config.stash[PERF_SESSION]
    machine_info["perf"] = session.fingerprint
    machine_info["perf_subject"] = session.identity


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
    """The run's own marks, beside machine_info (which must stay the same from run to run on one machine, or
    pytest-benchmark warns at every compare): ``perf_run`` = ``{"run_id", "injected"}``; and every benchmark's
    ``params`` as JSON (`perf.runs.param_json`), not pytest-benchmark's ``UNSERIALIZABLE[...]`` strings."""
    from perf.runs import param_json

    session = config.stash[PERF_SESSION]
    output_json["perf_run"] = {"run_id": session.run_id, "injected": session.options.injected}
    for bench in output_json.get("benchmarks") or ():
        if isinstance(bench.get("params"), dict):
            bench["params"] = param_json(bench["params"])


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_compare_machine_info(
    config: pytest.Config, benchmarksession: Any, machine_info: dict[str, Any], compared_benchmark: dict[str, Any]
) -> None:
    """Refuse (pytest.UsageError) to compare with a run from another GPU/driver/CUDA/device, or of another model
    or video, unless allowed (`perf.session.check_saved_run`)."""
    check_saved_run(config, compared_benchmark, str(benchmarksession.storage), "--benchmark-compare")


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
    """--perf-cache-dir (default $DETECTOR_CACHE or ~/.cache/detector, the CLI's), created; shared by xdist workers."""
    perf_options.cache_dir.mkdir(parents=True, exist_ok=True)
    return perf_options.cache_dir
