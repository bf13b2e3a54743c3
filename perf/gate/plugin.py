"""pytest plugin of the regression gate: raw rounds in saved runs, ``--perf-compare`` judged against main's
history with confirmation, the stability gate and ``--perf-selftest`` (options in perf/options.py).

* Every run saves its raw rounds: ``--benchmark-save-data`` is switched on, so ``--benchmark-autosave`` files
  hold ``stats.data`` (read them with `perf.runs`).
* ``--perf-compare[=NUM|ID]`` reads the storage before the tests run and keeps main's history on this runner
  (`perf.gate.history.history_runs`: the last ``--perf-history`` comparable runs, up to NUM / ID when given). A
  storage with runs but none comparable is refused with the fields that differ, as ``--benchmark-compare`` does
  (unless ``--perf-allow-machine-mismatch`` / ``--perf-allow-model-mismatch``).
* Each benchmark is judged as soon as its test has run (`perf.gate.compare.judge_benchmark`, at the first-pass
  level of the run's budget). With ``--perf-confirm=0`` a "slower" fails that test at once (`GateFailure`: one line,
  also in JUnit XML); otherwise it is a suspect, and at the end of the session the suspects are measured again in
  fresh processes (`perf.gate.confirm`): a confirmed one fails the run (exit 1, one line each), an unconfirmed one
  is "no change" or "inconclusive: cannot rule out +X%". The verdicts go to ``<reports>/perf-compare.json`` / ``.md``.
* ``--benchmark-compare-fail`` (pytest-benchmark's fixed threshold against one saved process) is not trusted where a
  history exists (3 comparable runs, or a noise profile): the gate judges instead, and one line says so and what the
  gate said (`COMPARE_FAIL_REPLACED`). Without one it runs as pytest-benchmark has it, one line says its verdicts
  cannot be trusted here (`COMPARE_FAIL_UNTRUSTED`), and its end-of-run ``PerformanceRegression`` becomes a line
  (`COMPARE_FAIL_LINE`), not a traceback.
* ``perf_measure`` (fixture): ``perf_measure(benchmark, fn, *args, **kwargs)`` is ``benchmark(...)`` plus the
  stability gate (`perf.measure.stability`).
* ``--perf-selftest`` runs only the gate's self-checks: perf/test_gate_selftest.py, perf/test_clock_truth.py and
  perf/test_noise_sources.py.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from perf.gate.compare import GateSettings
from perf.gate.judge import MIN_REFERENCE
from perf.gate.processes import COMPARE_FAIL_LINE
from perf.measure.stability import StabilityRule
from perf.runs import injected_of
from perf.session import PERF_SESSION, RUN_KEY, check_saved_run, reports_dir

SELFTEST_FILES = ("test_gate_selftest.py", "test_clock_truth.py", "test_noise_sources.py")
#: The line that says why --benchmark-compare-fail's verdicts cannot be trusted where the gate has no history.
COMPARE_FAIL_UNTRUSTED = ("--benchmark-compare-fail: applied as pytest-benchmark has it, against one saved process; this "
                          "runner's history has {runs} comparable run(s), fewer than the {need} the gate needs to know "
                          "how far identical code moves between processes, so its verdicts cannot be trusted here "
                          "(seed a history: pytest perf -m ci --perf-noise=10)")
#: The line that says why --benchmark-compare-fail was not applied, and what the gate judged instead.
COMPARE_FAIL_REPLACED = ("--benchmark-compare-fail={checks} not applied: it compares one saved process, and identical "
                         "code moved up to {spread:.1f}% between the {runs} processes of this runner's history; it "
                         "flagged {n} benchmark(s); the gate judged against that history instead: {verdict}")


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


@dataclass
class GateState:
    """What the gate's hooks share in one session (``config.stash[GATE]``): its settings, main's history
    (`perf.gate.compare.Baseline`, None without --perf-compare), the expected benchmarks and the first-pass rows as
    each test ended, the final rows, the run's error budget, and what the terminal summary says."""

    settings: GateSettings
    session: pytest.Session | None = None
    baseline: Any = None
    expected: list[str] | None = None
    judged: dict[str, Any] = field(default_factory=dict)
    rows: list[Any] | None = None
    budget: Any = None
    compare_fail: int = 0  #: benchmarks --benchmark-compare-fail flagged (pytest-benchmark's own check)
    replaced: int = 0  #: of those, where the gate judged instead
    untrusted: str | None = None  #: COMPARE_FAIL_UNTRUSTED, filled in
    confirm_note: str | None = None
    confirm_seconds: float | None = None
    path: Path | None = None  #: the verdict file written
    summary: dict[str, Any] | None = None


GATE = pytest.StashKey[GateState]()


def gate_settings(config: pytest.Config) -> GateSettings:
    """The gate's settings from the options."""
    rule = StabilityRule(config.getoption("perf_max_cv"), config.getoption("perf_max_drift"),
                         config.getoption("perf_max_remeasure"))  # fmt: skip
    return GateSettings(config.getoption("perf_min_effect"), rule=rule,
                        fail_inconclusive=config.getoption("perf_fail_inconclusive"),
                        confirm=config.getoption("perf_confirm"))  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "benchmark_save_data"):
        config.option.benchmark_save_data = True  # raw rounds in every saved run (read before pytest-benchmark's)
    config.stash[GATE] = GateState(gate_settings(config))


def _benchmark_session(config: pytest.Config) -> Any:
    session = getattr(config, "_benchmarksession", None)
    if session is None:
        raise pytest.UsageError("--perf-compare needs pytest-benchmark (it is disabled: drop -p no:benchmark)")
    return session


def _compare_fail_given(config: pytest.Config) -> bool:
    return bool(config.getoption("benchmark_compare_fail", None)) and bool(getattr(
        getattr(config, "_benchmarksession", None), "compare_fail", None))


#: What a refusal says when no saved run is comparable with this one ("latest" is the latest comparable run).
NO_COMPARABLE_RUN = (
    "None of the {runs} saved run(s) in '{storage}' measured this machine, model and video, so there is no latest "
    "comparable run: record a baseline of this one (--benchmark-autosave), or pick a run: --perf-compare=NUM (with "
    "--perf-allow-model-mismatch or --perf-allow-machine-mismatch); `perf-history runs` lists each run's model and "
    "`perf-history comparable RUN` says whether a run's machine matches this one.")


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Read main's history before measuring; a storage with no comparable run is a usage error."""
    config = session.config
    config.stash[GATE].session = session
    wanted = config.getoption("perf_compare")
    takeover = wanted is None and _compare_fail_given(config)
    if (wanted is None and not takeover) or hasattr(config, "workerinput"):
        return
    benchmarks = _benchmark_session(config)
    if benchmarks.disabled:
        if takeover:
            return
        raise pytest.UsageError("--perf-compare: benchmarks are disabled (--benchmark-disable, or pytest-xdist's -n "
                                "turns them off): there would be nothing to compare; run without them")
    baseline = _history(config, benchmarks.storage, True if takeover else wanted, quiet=takeover)
    state = config.stash[GATE]
    if takeover and (baseline is None or (len(baseline.runs) < MIN_REFERENCE and baseline.noise is None)):
        runs = 0 if baseline is None else len(baseline.runs)
        state.untrusted = COMPARE_FAIL_UNTRUSTED.format(runs=runs, need=MIN_REFERENCE)
        return
    state.baseline = baseline


def _history(config: pytest.Config, storage: Any, wanted: Any, quiet: bool = False) -> Any:
    """The `perf.gate.compare.Baseline` of ``--perf-compare[=wanted]``: see the module docstring. ``quiet``: None
    instead of a usage error when nothing can be judged (pytest-benchmark's own compare then runs as it is)."""
    from perf.gate.compare import Baseline
    from perf.gate.history import history_runs
    from perf.runs import HistoryError, run_from_json

    every = list(storage.load())
    if wanted is not True:
        chosen = list(storage.load(wanted))
        if not chosen:
            raise pytest.UsageError(f"--perf-compare: no saved run matching {wanted!r} in '{storage}'")
        if injected_of(chosen[-1][1]):
            check_saved_run(config, chosen[-1][1], str(Path(str(storage)) / chosen[-1][0]), "--perf-compare")
        upto = [str(path) for path, _ in every].index(str(chosen[-1][0]))
        every = every[: upto + 1]
    clean = [(path, data) for path, data in every if not injected_of(data)]
    if not clean:
        if quiet:
            return None
        which = "no saved run" if wanted is True else f"no saved run up to {wanted!r}"
        raise pytest.UsageError(f"--perf-compare: {which} in '{storage}' (runs made with test-only options are "
                                "never a baseline); record one with --benchmark-autosave")  # fmt: skip
    try:
        runs = [run_from_json(data, Path(str(storage)) / path) for path, data in clean]
    except HistoryError as e:  # the start-up check (perf.preflight) refuses these first
        raise pytest.UsageError(f"--perf-compare: {e}") from None
    perf = config.stash[PERF_SESSION]
    fingerprint = None if perf.options.allow_machine_mismatch else perf.fingerprint
    identity = None if perf.options.allow_model_mismatch else perf.identity
    kept = history_runs(runs, fingerprint=fingerprint, identity=identity, last=config.getoption("perf_history"))
    if not kept:
        if quiet:
            return None
        path, data = clean[-1]
        try:  # names what differs from the latest run
            check_saved_run(config, data, str(Path(str(storage)) / path), "--perf-compare")
        except pytest.UsageError as e:
            raise pytest.UsageError(f"{e}\n{NO_COMPARABLE_RUN.format(storage=storage, runs=len(clean))}") from None
        kept = runs[-config.getoption("perf_history"):]
    else:  # the latest run judged against: its warnings (allowed mismatches, a run without identity) are said once
        check_saved_run(config, kept[-1].raw, str(kept[-1].path), "--perf-compare")
    return Baseline(kept, _noise_profile(config, storage))


def _noise_profile(config: pytest.Config, storage: Any) -> Any:
    """The profile that seeds a short history: --perf-noise-profile's file, none, or this runner's in the storage."""
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
    state = session.config.stash[GATE]
    state.expected = [item.nodeid for item in session.items]
    if state.baseline is not None:
        from perf.gate.compare import budget

        state.budget = budget(state.baseline, state.settings, state.expected)


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
    """The first pass on one benchmark, kept for the session's table; the reason when it fails the test now
    (a "slower" with no confirmation to come)."""
    state = config.stash[GATE]
    baseline, settings = state.baseline, state.settings
    if baseline is None:
        return []
    from perf.gate.compare import SLOWER, explain_slower, judge_benchmark
    from perf.gate.table import describe_failure

    record = _record(metadata)
    row = judge_benchmark(baseline, record, state.budget, settings.min_effect)
    state.judged[metadata.fullname] = row
    if row.verdict == SLOWER and settings.confirm <= 0:
        explain_slower(row, baseline, record)
        return [describe_failure(row, settings, baseline)]
    return []


def _compare_fail_failure(config: pytest.Config, metadata: Any) -> list[str]:
    """pytest-benchmark's own ``--benchmark-compare-fail`` checks on one benchmark (its code, its message); where
    the gate judges against a history they are counted, not applied."""
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
    state = config.stash[GATE]
    if out and state.baseline is not None:
        state.replaced += 1
        return []
    if out:
        state.compare_fail += 1
    return out


def _reports_dir(config: pytest.Config) -> Path:
    try:
        return reports_dir(config)
    except ValueError:  # --perf-reports-dir is not registered (perf.plugin is not loaded)
        return config.rootpath / "reports"


def _header(state: GateState) -> str:
    baseline, settings = state.baseline, state.settings
    confirm = (f"suspects confirmed in at most {settings.confirm} pair(s) of fresh processes"
               if settings.confirm > 0 else "no confirmation (--perf-confirm=0)")
    spent = f" ({state.confirm_seconds:.0f} s of processes)" if state.confirm_seconds else ""
    return (f"--perf-compare against {baseline.describe()}: {state.budget.describe()}; slower/faster = "
            f"significant and beyond {settings.min_effect:.1%}; {confirm}{spent}")


def _confirm(config: pytest.Config, state: GateState, rows: list[Any]) -> None:
    """Confirm the suspects in fresh processes (`perf.gate.confirm`), the base in a worktree where one is needed."""
    from perf.gate.confirm import Sides, confirm_rows
    from perf.gate.processes import (DROPPED, INJECTING, GitError, base_worktree, forwarded_options, git,
                                     remove_worktree, same_code)  # fmt: skip

    baseline, settings = state.baseline, state.settings
    folder = _reports_dir(config) / "confirm" / str(config.stash.get(RUN_KEY, None) or "run")
    repo = config.rootpath
    commit = baseline.latest.commit
    tree, base_dir = None, None
    if same_code(repo, commit) is False:
        try:
            top = Path(git(repo, "rev-parse", "--show-toplevel"))
            tree = base_worktree(repo, str(commit), folder / "base-src")
            base_dir = tree / repo.resolve().relative_to(top.resolve())  # the rootdir's place in the base tree
        except (GitError, ValueError) as e:
            state.confirm_note = f"base commit {str(commit)[:12]} not checked out ({e}): candidate processes only"
    values = {"--perf-compare": None, "--benchmark-compare": None}
    options = forwarded_options(config.invocation_params.args, config.args, values, {**DROPPED, **INJECTING})
    injected = forwarded_options(config.invocation_params.args, config.args, values,
                                 {k: v for k, v in DROPPED.items() if k not in INJECTING})  # fmt: skip
    extra = tuple(token for token in injected if token not in options)
    reporter = config.pluginmanager.get_plugin("terminalreporter")

    def progress(result: Any, done: int, total: int) -> None:
        if reporter is not None:
            reporter.write_line(f"perf-compare confirmation: {result.label} ({result.kind}) {result.seconds:.0f} s, "
                                f"exit {result.returncode}")  # fmt: skip

    sides = Sides(repo, base_dir, folder / "cache-base" if base_dir else None, extra)
    if reporter is not None:
        reporter.write("\n")  # after the progress line of the tests
    try:
        state.confirm_seconds = confirm_rows(rows, baseline, settings, sides, folder, options, progress)
    finally:
        if tree is not None:
            remove_worktree(repo, tree)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Judge, confirm the suspects, write the verdicts, and fail the session on a confirmed slowdown."""
    config = session.config
    state = config.stash.get(GATE, None)
    if state is None or state.baseline is None or session.exitstatus == pytest.ExitCode.USAGE_ERROR:
        return  # refused before measuring (perf.preflight): nothing to compare
    from perf.gate.compare import SLOWER, compare_runs, explain_slower
    from perf.gate.table import summary, write_verdicts

    current = {m.fullname: _record(m) for m in _benchmark_session(config).benchmarks if m and not m.has_error}
    rows = compare_runs(state.baseline, current, state.settings, state.expected,
                        judged=state.judged)  # the first pass as each test ended, not drawn again
    if state.settings.confirm > 0 and any(row.verdict == SLOWER for row in rows):
        _confirm(config, state, rows)
    for row in rows:
        if row.verdict == SLOWER and row.fullname in current:
            explain_slower(row, state.baseline, current[row.fullname])
    state.rows = rows

    perf = config.stash[PERF_SESSION]
    state.path = write_verdicts(_reports_dir(config), rows, state.baseline, state.settings, _header(state),
                                   run=config.stash.get(RUN_KEY, None), budget=state.budget,
                                   current={"run_id": perf.run_id, "injected": perf.options.injected},
                                   subject=perf.described())  # fmt: skip
    state.summary = summary(rows, state.settings)
    if state.summary["failed"] and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(wrapper=True, trylast=True)  # inside pytest's own: after its failures, before the benchmark table
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> Any:
    """The perf-compare section, before pytest-benchmark's table. pytest-benchmark then raises PerformanceRegression
    (a ~60-line traceback) when a --benchmark-compare-fail check failed: one line instead, and no failure where the
    gate judged against a history."""
    from pytest_benchmark.session import PerformanceRegression

    _write_verdicts(terminalreporter, config)
    state = config.stash[GATE]
    if state.untrusted:
        terminalreporter.write_line(state.untrusted, yellow=True)
    try:
        return (yield)
    except PerformanceRegression:
        if state.baseline is not None:
            return None  # COMPARE_FAIL_REPLACED said why, above
        terminalreporter.write_line(COMPARE_FAIL_LINE.format(n=state.compare_fail), red=True)
        session = state.session
        if session is not None and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return None


def _check_text(check: Any) -> str:
    """A parsed --benchmark-compare-fail check as the user typed it (``median:5%``)."""
    field, threshold = getattr(check, "field", None), getattr(check, "threshold", None)
    if field is None or threshold is None:
        return str(check)
    percent = "Percentage" in type(check).__name__
    return f"{field}:{threshold:g}{'%' if percent else ''}"


def _spread(baseline: Any) -> float:
    """The largest between-process move (max / min - 1) of a benchmark's primary median over the history."""
    from perf.gate.history import metric_median

    worst = 0.0
    for name in baseline.benchmarks:
        values = [v for run in baseline.runs if (v := metric_median(run, name)) is not None]
        if len(values) > 1:
            worst = max(worst, max(values) / min(values) - 1)
    return worst


def _write_verdicts(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """The perf-compare section: the header, one line per benchmark, the failures, the count."""
    state = config.stash.get(GATE, None)
    if state is None or state.rows is None:
        return
    from perf.gate.compare import SLOWER
    from perf.gate.table import describe_failure, format_lines, why_lines

    counts = state.summary
    terminalreporter.write_sep("=", "perf-compare")
    terminalreporter.write_line(_header(state))
    if state.confirm_note:
        terminalreporter.write_line(state.confirm_note, yellow=True)
    for line in format_lines(state.rows):
        terminalreporter.write_line(line)
    for row in state.rows:
        if row.verdict == SLOWER:
            terminalreporter.write_line(describe_failure(row, state.settings, state.baseline), red=True)
        if why := why_lines(row):
            terminalreporter.write_line(f"why {row.name} is slower (kernels by change in time per call):")
            for line in why:
                terminalreporter.write_line(f"  {line}")
    text = ", ".join(f"{counts[v]} {v}" for v in ("slower", "faster", "no change", "inconclusive", "missing"))
    verdict = "FAILED" if counts["failed"] else "passed"
    terminalreporter.write_line(f"perf-compare {verdict}: {text}; verdicts in {state.path} (and .md)",
                                red=counts["failed"], green=not counts["failed"])  # fmt: skip
    if _compare_fail_given(config):
        checks = " ".join(_check_text(check) for check in config.getoption("benchmark_compare_fail"))
        terminalreporter.write_line(COMPARE_FAIL_REPLACED.format(
            checks=checks, spread=100 * _spread(state.baseline), runs=len(state.baseline.runs),
            n=state.replaced, verdict=text), yellow=True)


@pytest.fixture
def perf_samples(pytestconfig: pytest.Config) -> Any:
    """``perf_samples(benchmark, samples_s, label=, unit=, block=, metrics=)``: make per-block samples the
    benchmark's rounds, judged by the stability rule (`perf.measure.samples.record_samples`)."""
    from perf.measure.samples import record_samples

    return functools.partial(record_samples, rule=pytestconfig.stash[GATE].settings.rule)


@pytest.fixture
def perf_measure(pytestconfig: pytest.Config) -> Any:
    """``perf_measure(benchmark, fn, *args, **kwargs)``: ``benchmark(fn, ...)`` re-measured while unstable."""
    from perf.measure.stability import measure_stable

    return functools.partial(measure_stable, rule=pytestconfig.stash[GATE].settings.rule)
