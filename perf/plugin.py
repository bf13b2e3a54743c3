"""The perf suite's pytest plugin (registered by the root conftest.py): hooks, each a one-line call into the
`perf.session.PerfSession` in ``config.stash[PERF_SESSION]``, and the session's fixtures."""

from __future__ import annotations

import functools
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from perf.measure.cases import parametrize
from perf.measure.controls import Controls
from perf.measure.samples import record_samples
from perf.measure.stability import measure_stable
from perf.options import add_options, start_up_errors
from perf.roles.processes import ProcessesRun
from perf.session import PERF_SESSION, PerfOptions, PerfSession

MARKERS = {
    "gpu": "needs a CUDA device; skipped when --perf-device is cpu, or auto and no CUDA device is visible.",
    "trt": "needs TensorRT (tensorrt or tensorrt_rtx) and a CUDA device; skipped otherwise.",
    "nsys": "profiles under Nsight Systems; select with -m nsys (see --perf-nsys).",
    "slow": "takes more than a few seconds; deselect with -m 'not slow'.",
    "e2e": "end-to-end video pipeline: read -> preprocess -> infer -> postprocess -> write.",
    "parity": "compares detections of a backend/precision with the torch fp32 reference.",
    "ci": "a key benchmark of its family: pytest perf -m ci is the selection a CI gate runs on every change.",
}


def _session(config: pytest.Config) -> PerfSession:
    return config.stash[PERF_SESSION]


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)  # before pytest-benchmark (trylast) opens its storage and loads a compared run
def pytest_configure(config: pytest.Config) -> None:
    PerfSession.start(config, MARKERS, start_up_errors, ProcessesRun.start)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Give each xdist worker the controller's run name (its report part is then this run's)."""
    node.workerinput["perf_run"] = _session(node.config).report.run


def pytest_report_header(config: pytest.Config) -> list[str]:
    return _session(config).header()


@pytest.hookimpl(trylast=True)  # after pytest-benchmark's session exists
def pytest_sessionstart(session: pytest.Session) -> None:
    _session(session.config).on_sessionstart(session)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.module.__name__.startswith("perf.test_"):  # tests elsewhere keep their own params of these names
        session = _session(metafunc.config)
        parametrize(metafunc, session.options, session.device, session.subject)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _session(config).gate.select(config, items)


def pytest_collection_finish(session: pytest.Session) -> None:
    _session(session.config).on_collection_finish(session)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    processes = _session(session.config).processes  # --perf-noise / --perf-selftest-processes: orchestrate instead
    return None if processes is None else processes.run(session)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    return _session(item.config).nsys.run_test(item)


def pytest_runtest_setup(item: pytest.Item) -> None:
    _session(item.config).on_runtest_setup(item)


@pytest.hookimpl(hookwrapper=True)  # after the call whatever its outcome
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, None]:
    yield from _session(item.config).on_runtest_call(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    _session(item.config).on_makereport(item, call, report)
    return report


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    machine_info.update(perf=_session(config).fingerprint, perf_subject=_session(config).identity)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
    _session(config).on_update_json(output_json)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_compare_machine_info(config: pytest.Config, benchmarksession: Any, machine_info: dict[str, Any],
                                          compared_benchmark: dict[str, Any]) -> None:  # fmt: skip
    _session(config).check_saved_run(compared_benchmark, str(benchmarksession.storage), "--benchmark-compare")


def pytest_sessionfinish(session: pytest.Session) -> None:
    _session(session.config).on_sessionfinish(session)


@pytest.hookimpl(wrapper=True, tryfirst=True, specname="pytest_sessionfinish")
def pytest_sessionfinish_interrupted(session: pytest.Session) -> Generator[None]:
    """Ctrl-C or SIGTERM while any plugin ends the session: one line and exit status 2, not a traceback."""
    from detector.errors import Terminated

    try:
        return (yield)
    except KeyboardInterrupt as e:
        how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted (Ctrl-C)"
        pytest.exit(f"perf: {how} while finishing the session; what it had not written yet was not written",
                    returncode=pytest.ExitCode.INTERRUPTED)


@pytest.hookimpl(wrapper=True, trylast=True)  # inside pytest's own: after its failures, around pytest-benchmark's table
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> Generator[None]:
    from pytest_benchmark.session import PerformanceRegression

    _session(config).write_summary(terminalreporter)
    try:
        return (yield)
    except PerformanceRegression:  # a failed --benchmark-compare-fail check: one line, not a traceback
        _session(config).gate.compare_failed(terminalreporter)
        return None


@pytest.hookimpl(wrapper=True, tryfirst=True, specname="pytest_terminal_summary")
def pytest_terminal_summary_last(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> Generator[None]:
    """After the whole summary (pytest's short test summary included), just above the final line: the store's."""
    result = yield
    _session(config).write_last_summary(terminalreporter)
    return result


@pytest.fixture(scope="session")
def perf_options(pytestconfig: pytest.Config) -> PerfOptions:
    """The perf options as parsed (device as requested)."""
    return _session(pytestconfig).options


@pytest.fixture(scope="session")
def perf_device(pytestconfig: pytest.Config) -> str:
    """Resolved device ("cpu", "cuda", "cuda:N", then torch's current device)."""
    return _session(pytestconfig).use_device()


@pytest.fixture(scope="session")
def perf_controls(pytestconfig: pytest.Config) -> Controls:
    """The noise controls in force while measuring (``--perf-controls``)."""
    return _session(pytestconfig).options.controls


@pytest.fixture(scope="session")
def perf_frames(perf_options: PerfOptions, perf_device: str) -> int:
    """Frames of the synthetic video (`PerfOptions.frames_for`)."""
    return perf_options.frames_for(perf_device)


@pytest.fixture(scope="session")
def perf_cache_dir(perf_options: PerfOptions) -> Path:
    """--perf-cache-dir, created; shared by xdist workers and the detector CLI."""
    perf_options.cache_dir.mkdir(parents=True, exist_ok=True)
    return perf_options.cache_dir


@pytest.fixture
def perf_samples(pytestconfig: pytest.Config) -> Any:
    """`perf.measure.samples.record_samples` with this run's stability rule: per-block samples as rounds."""
    return functools.partial(record_samples, rule=_session(pytestconfig).gate.settings.rule)


@pytest.fixture
def perf_measure(pytestconfig: pytest.Config) -> Any:
    """`perf.measure.stability.measure_stable` with this run's rule: a benchmark re-measured while unstable."""
    return functools.partial(measure_stable, rule=_session(pytestconfig).gate.settings.rule)
