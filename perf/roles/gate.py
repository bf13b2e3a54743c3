"""The session's regression gate (`GateRun`): ``--perf-compare`` with confirmation, ``--perf-selftest``, and
``--benchmark-compare-fail`` replaced or said untrusted (docs/method.md, section 8; docs/architecture.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from perf.gate.compare import SLOWER, VERDICTS, GateSettings
from perf.gate.judge import MIN_REFERENCE
from perf.gate.processes import COMPARE_FAIL_LINE
from perf.measure.stability import StabilityRule
from perf.runs import RUN_GLOB, BenchmarkRecord, injected_of, saved_run_files

if TYPE_CHECKING:
    from perf.session import PerfSession


class NoiseProfileWarning(pytest.PytestWarning):
    """This runner's stored noise profile cannot be used: the gate goes on without it."""


SELFTEST_FILES = ("test_gate_selftest.py", "test_clock_truth.py", "test_noise_sources.py")
#: Why --benchmark-compare-fail's verdicts cannot be trusted where the gate has no history.
COMPARE_FAIL_UNTRUSTED = ("--benchmark-compare-fail: applied as pytest-benchmark has it, against one saved process; "
                          "this runner's history has {runs} comparable run(s), fewer than the {need} the gate needs to "
                          "know how far identical code moves between processes, so its verdicts cannot be trusted "
                          "here (seed a history: pytest perf -m ci --perf-noise=10)")
#: Why --benchmark-compare-fail was not applied, and what the gate judged instead.
COMPARE_FAIL_REPLACED = ("--benchmark-compare-fail={checks} not applied: it compares one saved process, and identical "
                         "code moved up to {spread:.1f}% between the {runs} processes of this runner's history; it "
                         "flagged {n} benchmark(s); the gate judged against that history instead: {verdict}")


@dataclass(frozen=True)
class GateFailure:
    """A test's failure by the gate, shaped as pytest's crash report so the short summary, JUnit XML and the
    failures section show its one line ``message`` alone."""

    message: str

    @property
    def reprcrash(self) -> GateFailure:
        return self

    def toterminal(self, out: Any) -> None:
        out.line(self.message, red=True, bold=True)

    def __str__(self) -> str:
        return self.message


def gate_settings(config: pytest.Config) -> GateSettings:
    """The gate's settings from the options (the stability rule's included), read once per session."""
    get = config.getoption
    rule = StabilityRule(get("perf_max_cv"), get("perf_max_drift"), get("perf_max_remeasure"))
    return GateSettings(get("perf_min_effect"), rule=rule, fail_inconclusive=get("perf_fail_inconclusive"),
                        confirm=get("perf_confirm"), confirm_budget_s=get("perf_confirm_budget"))  # fmt: skip


def _record(metadata: Any) -> BenchmarkRecord:
    """pytest-benchmark's in-memory result of one benchmark as the saved-run model's record."""
    return BenchmarkRecord(metadata.fullname, metadata.name, metadata.group,
                           np.asarray(metadata.stats.data, dtype=np.float64), {}, metadata.extra_info)  # fmt: skip


@dataclass
class GateRun:
    """The gate of one session: settings, main's history (`perf.gate.compare.Baseline`; None: no compare), rows."""

    perf: PerfSession
    settings: GateSettings
    session: pytest.Session | None = None
    checks: list[Any] = field(default_factory=list)  #: pytest-benchmark's parsed --benchmark-compare-fail
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
    document: dict[str, Any] | None = None  #: what the verdict file holds (its "summary" too), for the store

    def start(self, session: pytest.Session) -> None:
        """Read main's history before measuring; a storage with no comparable run is a usage error."""
        config, wanted = session.config, self.perf.options.compare
        benchmarks = getattr(config, "_benchmarksession", None)
        self.session, self.checks = session, list(getattr(benchmarks, "compare_fail", None) or ())
        takeover = wanted is None and bool(self.checks)
        if (wanted is None and not takeover) or hasattr(config, "workerinput"):
            return
        if benchmarks is None:
            raise pytest.UsageError("--perf-compare needs pytest-benchmark (it is disabled: drop -p no:benchmark)")
        if benchmarks.disabled:
            if takeover:
                return
            raise pytest.UsageError("--perf-compare: benchmarks are disabled (--benchmark-disable, or pytest-xdist's "
                                    "-n turns them off): there would be nothing to compare; run without them")
        baseline = self._history(benchmarks.storage, True if takeover else wanted, quiet=takeover)
        if takeover and (baseline is None or (len(baseline.runs) < MIN_REFERENCE and baseline.noise is None)):
            runs = 0 if baseline is None else len(baseline.runs)
            self.untrusted = COMPARE_FAIL_UNTRUSTED.format(runs=runs, need=MIN_REFERENCE)
            return
        self.baseline = baseline

    def _history(self, storage: Any, wanted: Any, quiet: bool = False) -> Any:
        """The `perf.gate.compare.Baseline` of ``--perf-compare[=wanted]``; ``quiet``: None, not a usage error, when
        nothing can be judged (pytest-benchmark's own compare then runs as it is)."""
        from perf.gate.compare import Baseline
        from perf.gate.history import history_runs
        from perf.runs import HistoryError, run_from_json

        perf, check, options, folder = self.perf, self.perf.check_saved_run, self.perf.options, Path(str(storage))
        loaded = dict(storage.load(RUN_GLOB))  # every saved run, 10000_*.json on too, in the order of their numbers
        every = [(path, loaded[path]) for path in saved_run_files(loaded)]
        if wanted is not True:
            if not (chosen := list(storage.load(wanted))):
                raise pytest.UsageError(f"--perf-compare: no saved run matching {wanted!r} in '{storage}'")
            if injected_of(chosen[-1][1]):
                check(chosen[-1][1], str(folder / chosen[-1][0]), "--perf-compare")
            every = every[: [str(path) for path, _ in every].index(str(chosen[-1][0])) + 1]
        if not (clean := [(path, data) for path, data in every if not injected_of(data)]):
            if quiet:
                return None
            which = "no saved run" if wanted is True else f"no saved run up to {wanted!r}"
            raise pytest.UsageError(f"--perf-compare: {which} in '{storage}' (runs made with test-only options are "
                                    "never a baseline); record one with --benchmark-autosave")  # fmt: skip
        try:
            runs = [run_from_json(data, folder / path) for path, data in clean]
        except HistoryError as e:  # the start-up check (perf.preflight) refuses these first
            raise pytest.UsageError(f"--perf-compare: {e}") from None
        kept = history_runs(runs, fingerprint=None if options.allow_machine_mismatch else perf.fingerprint,
                            identity=None if options.allow_model_mismatch else perf.identity, last=options.history)
        if kept:  # the latest run judged against: its warnings (allowed mismatches, no identity) said once
            check(kept[-1].raw, str(kept[-1].path), "--perf-compare")
        elif quiet:
            return None
        else:
            try:  # names what differs from the latest run
                check(clean[-1][1], str(folder / clean[-1][0]), "--perf-compare")
            except pytest.UsageError as e:
                raise pytest.UsageError(
                    f"{e}\nNone of the {len(clean)} saved run(s) in '{storage}' measured this machine, model "
                    "and video, so there is no latest comparable run: record a baseline of this one "
                    "(--benchmark-autosave), or pick a run: --perf-compare=NUM (with "
                    "--perf-allow-model-mismatch or --perf-allow-machine-mismatch); `perf-history runs` "
                    "lists each run's model and `perf-history comparable RUN` says whether a run's machine "
                    "matches this one.") from None
            kept = runs[-options.history:]
        return Baseline(kept, self._noise_profile(storage))

    def _noise_profile(self, storage: Any) -> Any:
        """The profile that seeds a short history: --perf-noise-profile's file, none, or this runner's stored one."""
        from perf.gate.noise import NoiseProfileError, load_profile, runner_profile

        wanted, folder = self.perf.options.noise_profile, getattr(storage, "path", None)  # file storage only
        if wanted is None:  # found, not named: a bad one is said and left out, as if none were stored
            return runner_profile(
                lambda line: self.perf.config.issue_config_time_warning(NoiseProfileWarning(line), stacklevel=2),
                storage=folder, fingerprint=self.perf.fingerprint)  # fmt: skip
        if wanted.strip().lower() == "none":
            return None
        try:
            return load_profile(self.perf.config.invocation_params.dir / wanted)
        except NoiseProfileError as e:
            raise pytest.UsageError(f"--perf-noise-profile: {e}") from None

    def select(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """--perf-selftest: keep only the gate's self-checks."""
        dropped = [item for item in items if item.path.name not in SELFTEST_FILES]
        if self.perf.options.selftest and dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if item.path.name in SELFTEST_FILES]

    def collected(self, items: list[pytest.Item]) -> None:
        self.expected = [item.nodeid for item in items]
        if self.baseline is not None:
            from perf.gate.compare import budget

            self.budget = budget(self.baseline, self.settings, self.expected)

    def judge_test(self, item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
        """Judge a passed benchmark as its test ends (the first pass) and fail it when slower with no confirmation to
        come, or when --benchmark-compare-fail's checks fail where the gate has no history (else only counted)."""
        metadata = getattr(getattr(item, "funcargs", {}).get("benchmark"), "stats", None)
        if call.when != "call" or not report.passed or metadata is None:
            return
        from perf.gate.compare import explain_slower, judge_benchmark
        from perf.gate.table import describe_failure

        reasons: list[str] = []
        if (baseline := self.baseline) is not None:
            record = _record(metadata)
            row = self.judged[metadata.fullname] = judge_benchmark(baseline, record, self.budget,
                                                                   self.settings.min_effect)  # fmt: skip
            if row.verdict == SLOWER and self.settings.confirm <= 0:
                explain_slower(row, baseline, record)
                reasons.append(describe_failure(row, self.settings, baseline))
        mappings = getattr(item.config._benchmarksession, "compared_mapping", {}) if self.checks else {}
        failures = [f"--benchmark-compare-fail against {Path(str(path)).name}: {failure}"
                    for path, mapping in mappings.items() if metadata.fullname in mapping
                    for check in self.checks if (failure := check.fails(metadata, mapping[metadata.fullname]["stats"]))]
        if failures and baseline is not None:
            self.replaced += 1
        elif failures:
            self.compare_fail += 1
            reasons += failures
        if reasons:
            report.outcome = "failed"
            report.longrepr = GateFailure("; ".join(reasons))  # type: ignore[assignment]

    def _header(self) -> str:
        settings = self.settings
        within = f" within {settings.confirm_budget_s:.0f} s" if settings.confirm_budget_s else ""
        confirm = (f"suspects confirmed in at most {settings.confirm} pair(s) of fresh processes{within}"
                   if settings.confirm > 0 else "no confirmation (--perf-confirm=0)")
        spent = f" ({self.confirm_seconds:.0f} s of processes)" if self.confirm_seconds else ""
        latest = self.baseline.latest.benchmarks
        measured = sum(name in latest for name in self.judged)
        part = (f"; this run measured {measured} of the {len(latest)} benchmarks of the history's latest run: a "
                "process of fewer benchmarks can read one differently (on an H100, torch-compile fp16 b1 2-5% "
                "slower alone), which the first pass takes for a change; fresh processes confirm on this selection"
                if 0 < measured < len(latest) else "")  # fmt: skip
        return (f"--perf-compare against {self.baseline.describe()}: {self.budget.describe()}; slower/faster "
                f"= significant and beyond {settings.min_effect:.1%}; {confirm}{spent}{part}")

    def _confirm(self, config: pytest.Config, rows: list[Any]) -> None:
        """Confirm the suspects in fresh processes (`perf.gate.confirm`), the base in a worktree where needed."""
        from perf.gate.confirm import Sides, confirm_rows
        from perf.gate.processes import (DROPPED, INJECTING, GitError, base_worktree, forwarded_options, git,
                                         remove_worktree, same_code)  # fmt: skip

        folder = self.perf.options.reports_dir / "confirm" / self.perf.report.run
        repo, commit = config.rootpath, self.baseline.latest.commit
        tree, same = None, same_code(repo, commit)
        base_dir = repo if same else None  # this tree is the base's code: both sides run here, paired
        if same is False:
            try:
                top = Path(git(repo, "rev-parse", "--show-toplevel"))
                tree = base_worktree(repo, str(commit), folder / "base-src")
                base_dir = tree / repo.resolve().relative_to(top.resolve())  # the rootdir's place in the base tree
            except (GitError, ValueError) as e:
                self.confirm_note = f"base commit {str(commit)[:12]} not checked out ({e}): candidate processes only"
        args = (config.invocation_params.args, config.args, {"--perf-compare": None, "--benchmark-compare": None})
        options = forwarded_options(*args, {**DROPPED, **INJECTING})
        injected = forwarded_options(*args, {k: v for k, v in DROPPED.items() if k not in INJECTING})
        sides = Sides(repo, base_dir, folder / "cache-base" if tree is not None else None,
                      tuple(token for token in injected if token not in options))  # fmt: skip
        if (reporter := config.pluginmanager.get_plugin("terminalreporter")) is not None:
            reporter.write("\n")  # after the progress line of the tests

        def progress(result: Any, done: int, total: int) -> None:
            if reporter is not None:
                reporter.write_line(f"perf-compare confirmation: {result.label} ({result.kind}) "
                                    f"{result.seconds:.0f} s, exit {result.returncode}")  # fmt: skip

        try:
            self.confirm_seconds = confirm_rows(rows, self.baseline, self.settings, sides, folder, options,
                                                progress, self.budget.confirm_level)
        finally:
            if tree is not None:
                remove_worktree(repo, tree)

    def finish(self, session: pytest.Session) -> None:
        """Judge, confirm the suspects, write the verdicts, and fail the session on a confirmed slowdown."""
        if self.baseline is None or session.exitstatus == pytest.ExitCode.USAGE_ERROR:
            return  # refused before measuring (perf.preflight): nothing to compare
        from perf.gate.compare import compare_runs, explain_slower
        from perf.gate.table import write_verdicts

        config, perf = session.config, self.perf
        current = {m.fullname: _record(m) for m in config._benchmarksession.benchmarks if m and not m.has_error}
        rows = compare_runs(self.baseline, current, self.settings, self.expected,
                            judged=self.judged)  # the first pass as each test ended, not drawn again
        if self.settings.confirm > 0 and any(row.verdict == SLOWER for row in rows):
            self._confirm(config, rows)
        for row in rows:
            if row.verdict == SLOWER and row.fullname in current:
                explain_slower(row, self.baseline, current[row.fullname])
        self.rows = rows
        marks = {"run_id": perf.run_id, "injected": perf.options.injected}
        self.path, self.document = write_verdicts(perf.options.reports_dir, rows, self.baseline, self.settings,
                                                  self._header(), run=perf.report.run, budget=self.budget,
                                                  current=marks, subject=perf.described())  # fmt: skip
        if self.document["summary"]["failed"] and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def compare_failed(self, terminalreporter: pytest.TerminalReporter) -> None:
        """A failed --benchmark-compare-fail check: one line; no failure where the gate judged against a history."""
        if self.baseline is not None:
            return
        terminalreporter.write_line(COMPARE_FAIL_LINE.format(n=self.compare_fail), red=True)
        if self.session is not None and self.session.exitstatus == pytest.ExitCode.OK:
            self.session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def write_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """The perf-compare section, and why --benchmark-compare-fail cannot be trusted here, if it cannot."""
        from perf.gate.history import record_median
        from perf.gate.table import describe_failure, format_lines, why_lines

        write = terminalreporter.write_line
        if self.untrusted:
            write(self.untrusted, yellow=True)
        if self.rows is None or self.document is None:
            return
        counts = self.document["summary"]
        terminalreporter.write_sep("=", "perf-compare")
        write(self._header())
        if self.confirm_note:
            write(self.confirm_note, yellow=True)
        for line in format_lines(self.rows):
            write(line)
        for row in self.rows:
            if row.verdict == SLOWER:
                write(describe_failure(row, self.settings, self.baseline), red=True)
            if why := why_lines(row):
                write(f"why {row.name} is slower (kernels by change in time per call):")
                for line in why:
                    write(f"  {line}")
        text, failed = ", ".join(f"{counts[v]} {v}" for v in VERDICTS), counts["failed"]
        write(f"perf-compare {'FAILED' if failed else 'passed'}: {text}; verdicts in {self.path} (and .md)",
              red=failed, green=not failed)
        if self.checks:  # the largest between-process move (max / min - 1) of a primary median over the history
            medians = ([v for run in self.baseline.runs if (v := record_median(run.benchmarks.get(name))) is not None]
                       for name in self.baseline.benchmarks)  # fmt: skip
            spread = max((max(values) / min(values) - 1 for values in medians if len(values) > 1), default=0.0)
            write(COMPARE_FAIL_REPLACED.format(checks=" ".join(map(_check_text, self.checks)), spread=100 * spread,
                                               runs=len(self.baseline.runs), n=self.replaced, verdict=text),
                  yellow=True)  # fmt: skip


def _check_text(check: Any) -> str:
    """A parsed --benchmark-compare-fail check as the user typed it (``median:5%``)."""
    field, threshold = getattr(check, "field", None), getattr(check, "threshold", None)
    if field is None or threshold is None:
        return str(check)
    return f"{field}:{threshold:g}{'%' if 'Percentage' in type(check).__name__ else ''}"
