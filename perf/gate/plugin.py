"""pytest plugin of the regression gate: raw rounds in saved runs, ``--perf-compare``, the stability gate and
``--perf-selftest`` (its options are registered with the suite's others, perf/options.py).

* Every run saves its raw rounds: ``--benchmark-save-data`` is switched on, so ``--benchmark-autosave`` files
  hold ``stats.data`` (read them with `perf.runs`).
* ``--perf-compare[=NUM|ID]`` loads a saved run (the latest, or the one matching NUM/ID, as
  ``--benchmark-compare`` does) before the tests run, refuses one from another machine exactly as
  ``--benchmark-compare`` does (unless ``--perf-allow-machine-mismatch``), and at the end prints one verdict per
  benchmark (`perf.gate.compare`), writes ``<reports>/perf-compare.json`` / ``.md``, and fails the session (exit 1)
  on any "slower" -- and on any "unstable" with ``--perf-fail-unstable``; otherwise unstable benchmarks are a
  warning line and a count.
* A failed gate is a failed test: each benchmark is judged as soon as its test has run, and one judged "slower" (or
  "unstable" with ``--perf-fail-unstable``), or caught by pytest-benchmark's ``--benchmark-compare-fail``, makes
  that test's call fail with a one-line reason (`GateFailure`): in the terminal's short summary, in JUnit XML and
  in the verdict file's markdown (the job summary). pytest-benchmark's own end-of-run ``PerformanceRegression``
  becomes a line (`COMPARE_FAIL_LINE`), not a traceback.
* ``perf_measure`` (fixture): ``perf_measure(benchmark, fn, *args, **kwargs)`` is ``benchmark(...)`` plus the
  stability gate (`perf.measure.stability`).
* The noise profile: with ``--perf-compare`` the gate loads this runner's profile from the storage
  (``<storage>/noise/<key>.json``, written by ``--perf-noise``; `perf.gate.noise`), or the file
  ``--perf-noise-profile`` names, and widens every interval by the benchmark's between-process noise. Without
  one the header says the intervals are within-process only.
* ``--perf-selftest`` runs only the gate's self-checks: perf/test_gate_selftest.py, perf/test_clock_truth.py and
  perf/test_noise_sources.py.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from perf.gate.compare import GateSettings
from perf.measure.stability import StabilityRule
from perf.runs import injected_of
from perf.session import PERF_SESSION, check_saved_run

GATE = pytest.StashKey[dict[str, Any]]()
SELFTEST_FILES = ("test_gate_selftest.py", "test_clock_truth.py", "test_noise_sources.py")
#: The line that replaces pytest-benchmark's PerformanceRegression traceback (read back by perf.gate.processes).
COMPARE_FAIL_LINE = "--benchmark-compare-fail: {n} benchmark(s) regressed; each is a failed test above"


@dataclass(frozen=True)
class GateFailure:
    """A test's failure by the gate: ``message`` is its one line. Shaped as pytest's crash report (``reprcrash``
    with ``message``, ``toterminal``) so that the short summary, JUnit XML and the failures section show the
    line and nothing else."""

    message: str

    @property
    def reprcrash(self) -> GateFailure:
        return self

    def toterminal(self, out: Any) -> None:
        out.line(self.message, red=True, bold=True)

    def __str__(self) -> str:
        return self.message


def gate_settings(config: pytest.Config) -> GateSettings:
    """The gate's settings from the options."""
    rule = StabilityRule(config.getoption("perf_max_cv"), config.getoption("perf_max_drift"),
                         config.getoption("perf_max_remeasure"))  # fmt: skip
    return GateSettings(config.getoption("perf_min_effect"), rule=rule,
                        fail_unstable=config.getoption("perf_fail_unstable"))  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "benchmark_save_data"):
        config.option.benchmark_save_data = True  # raw rounds in every saved run (read before pytest-benchmark's)
    config.stash[GATE] = {"settings": gate_settings(config), "baseline": None, "rows": None, "expected": None,
                          "judged": {}, "compare_fail": 0}  # fmt: skip


def _benchmark_session(config: pytest.Config) -> Any:
    session = getattr(config, "_benchmarksession", None)
    if session is None:
        raise pytest.UsageError("--perf-compare needs pytest-benchmark (it is disabled: drop -p no:benchmark)")
    return session


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Load the --perf-compare baseline before measuring; a missing or foreign run is a usage error."""
    config = session.config
    config.stash[GATE]["session"] = session
    wanted = config.getoption("perf_compare")
    if wanted is None or hasattr(config, "workerinput"):
        return
    from perf.runs import HistoryError, run_from_json

    benchmarks = _benchmark_session(config)
    if benchmarks.disabled:
        raise pytest.UsageError("--perf-compare: benchmarks are disabled (--benchmark-disable, or pytest-xdist's -n "
                                "turns them off): there would be nothing to compare; run without them")
    storage = benchmarks.storage
    found = list(storage.load() if wanted is True else storage.load(wanted))
    if wanted is True:  # the latest baseline: never a run made with a deliberate slowdown
        found = [(path, data) for path, data in found if not injected_of(data)]
    if not found:
        which = "no saved run" if wanted is True else f"no saved run matching {wanted!r}"
        raise pytest.UsageError(f"--perf-compare: {which} in '{storage}'; record one with --benchmark-autosave")
    path, data = found[-1]
    check_saved_run(config, data, str(Path(str(storage)) / path), "--perf-compare")
    try:
        baseline = run_from_json(data, Path(str(storage)) / path)
    except HistoryError as e:  # the start-up check (perf.preflight) refuses these first
        raise pytest.UsageError(f"--perf-compare: {e}") from None
    state = config.stash[GATE]
    state["baseline"] = baseline
    state["settings"] = dataclasses.replace(state["settings"], noise=_noise_profile(config, storage))


def _noise_profile(config: pytest.Config, storage: Any) -> Any:
    """The profile --perf-compare uses: --perf-noise-profile's file, none, or this runner's in the storage."""
    from perf.gate.noise import NoiseProfileError, find_profile, load_profile

    wanted = config.getoption("perf_noise_profile")
    try:
        if wanted is None:
            folder = getattr(storage, "path", None)  # file storage only
            return None if folder is None else find_profile(folder, config.stash[PERF_SESSION].fingerprint)
        if wanted.strip().lower() == "none":
            return None
        return load_profile(config.invocation_params.dir / wanted)
    except NoiseProfileError as e:
        raise pytest.UsageError(f"--perf-noise-profile: {e}") from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("perf_selftest"):
        return
    kept = [item for item in items if item.path.name in SELFTEST_FILES]
    dropped = [item for item in items if item.path.name not in SELFTEST_FILES]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[GATE]["expected"] = [item.nodeid for item in session.items]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Fail a passed benchmark's call when the gate judges it (see the module docstring)."""
    report = yield
    if call.when == "call" and report.passed:
        bench = getattr(item, "funcargs", {}).get("benchmark")
        metadata = getattr(bench, "stats", None)
        if metadata is not None:
            reasons = [*_perf_compare_failure(item.config, metadata), *_compare_fail_failure(item.config, metadata)]
            if reasons:
                report.outcome = "failed"
                report.longrepr = GateFailure("; ".join(reasons))
    return report


def _record(metadata: Any) -> Any:
    """pytest-benchmark's in-memory result of one benchmark as the saved-run model's record."""
    import numpy as np

    from perf.runs import BenchmarkRecord

    return BenchmarkRecord(metadata.fullname, metadata.name, metadata.group,
                           np.asarray(metadata.stats.data, dtype=np.float64), {}, metadata.extra_info)  # fmt: skip


def _perf_compare_failure(config: pytest.Config, metadata: Any) -> list[str]:
    """``--perf-compare``'s verdict on one benchmark, kept for the session's table; the reason when it fails."""
    state = config.stash[GATE]
    baseline, settings = state["baseline"], state["settings"]
    if baseline is None or metadata.fullname not in baseline.benchmarks:
        return []
    from perf.gate.compare import SLOWER, UNSTABLE, compare_benchmark, describe_failure

    row = compare_benchmark(baseline.benchmarks[metadata.fullname], _record(metadata), settings)
    state["judged"][metadata.fullname] = row
    if row.verdict == SLOWER or (row.verdict == UNSTABLE and settings.fail_unstable):
        return [describe_failure(row, settings, baseline)]
    return []


def _compare_fail_failure(config: pytest.Config, metadata: Any) -> list[str]:
    """pytest-benchmark's own ``--benchmark-compare-fail`` checks on one benchmark (its code, its message)."""
    session = getattr(config, "_benchmarksession", None)
    checks = getattr(session, "compare_fail", None)
    if not checks:
        return []
    out = []
    for path, mapping in getattr(session, "compared_mapping", {}).items():
        compared = mapping.get(metadata.fullname)
        if compared is None:
            continue
        for check in checks:
            failure = check.fails(metadata, compared["stats"])
            if failure:
                out.append(f"--benchmark-compare-fail against {Path(str(path)).name}: {failure}")
    if out:
        config.stash[GATE]["compare_fail"] += 1
    return out


def _reports_dir(config: pytest.Config) -> Path:
    try:
        from perf.fixtures.reporting import reports_dir

        return reports_dir(config)
    except ValueError:  # the reporting plugin is not loaded
        return config.rootpath / "reports"


def _header(state: dict[str, Any]) -> str:
    baseline, settings = state["baseline"], state["settings"]
    noise = (f"intervals include this runner's between-process noise ({settings.noise.describe()})"
             if settings.noise is not None else
             "no noise profile for this runner: intervals are within one process only, so shifts between two "
             "processes are not in them (measure one: pytest perf --perf-noise=10)")  # fmt: skip
    return (f"--perf-compare against {baseline.path} (saved {baseline.datetime}, commit "
            f"{str(baseline.commit or 'unknown')[:12]}): slower/faster = the whole {settings.confidence:.0%} interval "
            f"beyond {settings.min_effect:.1%}; {noise}")  # fmt: skip


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Compare, write the verdicts, and fail the session on a slowdown."""
    config = session.config
    state = config.stash.get(GATE, None)
    if state is None or state["baseline"] is None or session.exitstatus == pytest.ExitCode.USAGE_ERROR:
        return  # refused before measuring (perf.preflight): nothing to compare
    from perf.gate.compare import compare_runs, summary, write_verdicts

    current = {m.fullname: _record(m) for m in _benchmark_session(config).benchmarks if m and not m.has_error}
    rows = compare_runs(state["baseline"], current, state["settings"], state["expected"],
                        judged=state["judged"])  # the verdicts the tests were failed by, not drawn again
    state["rows"] = rows
    from perf.fixtures.reporting import RUN_KEY

    perf = config.stash[PERF_SESSION]
    state["path"] = write_verdicts(_reports_dir(config), rows, state["baseline"], state["settings"], _header(state),
                                   run=config.stash.get(RUN_KEY, None),
                                   current={"run_id": perf.run_id, "injected": perf.options.injected})  # fmt: skip
    state["summary"] = summary(rows, state["settings"])
    if state["summary"]["failed"] and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(wrapper=True, trylast=True)  # inside pytest's own: after its failures, before the benchmark table
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> Any:
    """The perf-compare section, before pytest-benchmark's table. pytest-benchmark then raises PerformanceRegression
    (a ~60-line traceback) when a --benchmark-compare-fail check failed; the failed tests already say which and
    why, so it becomes one line."""
    from pytest_benchmark.session import PerformanceRegression

    _write_verdicts(terminalreporter, config)
    try:
        return (yield)
    except PerformanceRegression:
        terminalreporter.write_line(COMPARE_FAIL_LINE.format(n=config.stash[GATE]["compare_fail"]), red=True)
        session = config.stash[GATE].get("session")
        if session is not None and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return None


def _write_verdicts(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """The perf-compare section: the header, one line per benchmark, the unstable warning and the count."""
    state = config.stash.get(GATE, None)
    if state is None or state.get("rows") is None:
        return
    from perf.gate.compare import format_lines, why_lines

    counts = state["summary"]
    terminalreporter.write_sep("=", "perf-compare")
    terminalreporter.write_line(_header(state))
    for line in format_lines(state["rows"]):
        terminalreporter.write_line(line)
    for row in state["rows"]:
        if why := why_lines(row):
            terminalreporter.write_line(f"why {row.name} is slower (kernels by change in time per call):")
            for line in why:
                terminalreporter.write_line(f"  {line}")
    if counts["unstable"]:
        consequence = "fails the run (--perf-fail-unstable)" if state["settings"].fail_unstable else (
            "not compared; --perf-fail-unstable makes this fail")  # fmt: skip
        terminalreporter.write_line(f"WARNING: {counts['unstable']} benchmark(s) unstable: {consequence}",
                                    yellow=True)  # fmt: skip
    text = ", ".join(f"{counts[v]} {v}" for v in ("slower", "faster", "no change", "unstable", "missing"))
    verdict = "FAILED" if counts["failed"] else "passed"
    terminalreporter.write_line(f"perf-compare {verdict}: {text}; verdicts in {state['path']} (and .md)",
                                red=counts["failed"], green=not counts["failed"])  # fmt: skip


@pytest.fixture
def perf_samples(pytestconfig: pytest.Config) -> Any:
    """``perf_samples(benchmark, samples_s, label=, unit=, block=, metrics=)``: make per-block samples the
    benchmark's rounds, judged by the stability rule (`perf.measure.samples.record_samples`)."""
    from perf.measure.samples import record_samples

    return functools.partial(record_samples, rule=pytestconfig.stash[GATE]["settings"].rule)


@pytest.fixture
def perf_measure(pytestconfig: pytest.Config) -> Any:
    """``perf_measure(benchmark, fn, *args, **kwargs)``: ``benchmark(fn, ...)`` re-measured while unstable."""
    from perf.measure.stability import measure_stable

    return functools.partial(measure_stable, rule=pytestconfig.stash[GATE]["settings"].rule)
