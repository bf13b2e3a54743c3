"""The cross-process measurements of a session (`ProcessesRun`): ``--perf-noise=K`` (docs/method.md, section 3)
and ``--perf-selftest-processes=K`` (section 5), each in K fresh processes (`perf.gate.processes`); the process the
user starts only orchestrates (docs/architecture.md, "The session and its parts")."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perf.options import DEFAULT_REGRESSIONS, parse_regression, parse_regressions
from perf.report import schema

if TYPE_CHECKING:
    from perf.session import PerfSession

DEFAULT_COMPARE_FAIL = "median:5%"


@dataclass
class ProcessesRun:
    """The cross-process measurement of one session: mode (``noise`` or ``selftest``), process count, start
    (monotonic s), the runs folder, the children's results and the summary's lines."""

    perf: PerfSession
    mode: str
    k: int
    started: float
    folder: Path | None = None
    results: list[Any] = field(default_factory=list)
    compare_fail: Any = None
    error: str | None = None
    incomplete: str | None = None
    failed: list[Any] = field(default_factory=list)
    profile_path: Path | None = None
    summary_path: Path | None = None

    @classmethod
    def start(cls, perf: PerfSession, config: pytest.Config) -> ProcessesRun | None:
        """The measurement --perf-noise / --perf-selftest-processes asks for (None: neither), or a usage error."""

        options = perf.options
        if options.nsys_child:
            return None
        mode = next(((m, k) for m, k in (("selftest", options.selftest_processes), ("noise", options.noise))
                     if isinstance(k, int)), None)  # fmt: skip
        if mode is None:
            return None
        if hasattr(config, "workerinput") or config.getoption("numprocesses", None):
            raise pytest.UsageError(f"--perf-{'noise' if mode[0] == 'noise' else 'selftest-processes'} runs its own "
                                    "processes one at a time: drop -n (pytest-xdist)")  # fmt: skip
        if options.compare is not None:
            raise pytest.UsageError("--perf-noise / --perf-selftest-processes measure, they do not compare: drop "
                                    "--perf-compare")  # fmt: skip
        return cls(perf, mode[0], mode[1], time.monotonic())

    def run(self, session: pytest.Session) -> bool | None:
        """``pytest_runtestloop``: orchestrate the child processes instead of running the tests here."""
        if session.config.option.collectonly:
            return None
        if not session.items:
            self.error = "no tests selected: nothing to run in the child processes"
            return True
        from perf.gate.processes import forwarded_options, load_plan, run_children, save_plan

        config, options = session.config, self.perf.options
        folder, resumable = self._runs_dir()
        plan = _plan(options.selftest_regressions, session.items, self.mode, self.k)
        existing = load_plan(folder) if resumable else None
        if existing is not None and existing != plan:
            raise pytest.UsageError(f"--perf-runs-dir: '{folder}' holds another plan (other tests, K or regressions); "
                                    "give a new folder or delete it")  # fmt: skip
        save_plan(folder, plan)
        bench = getattr(config, "_benchmarksession", None)
        values = {"--perf-compare": None, "--benchmark-compare": _str(getattr(bench, "compare", None))}
        forwarded = forwarded_options(config.invocation_params.args, config.args, values)
        compare_fail = None
        if self.mode == "selftest":
            compare_fail = _check_text(getattr(bench, "compare_fail", None)) or DEFAULT_COMPARE_FAIL
        reporter = config.pluginmanager.get_plugin("terminalreporter")

        def progress(result: Any, done: int, total: int) -> None:
            if reporter is not None:
                status = "saved" if result.run is not None else f"NO RUN SAVED (exit {result.returncode}; {result.log})"
                reporter.write_line(f"perf processes: {done}/{total} {result.label} ({result.kind}) "
                                    f"{result.seconds:.0f} s, exit {result.returncode}, {status}")  # fmt: skip

        budget = options.processes_budget
        deadline = None if budget is None else self.started + budget
        results = run_children(plan, forwarded, folder, config.invocation_params.dir, compare_fail=compare_fail,
                               on_done=progress, deadline=deadline)  # fmt: skip
        self.folder, self.results, self.compare_fail = folder, results, compare_fail
        if len(results) < len(plan):
            self.incomplete = (f"{len(results)} of {len(plan)} planned processes ran within --perf-processes-budget; "
                               f"resume with --perf-runs-dir={folder}")  # fmt: skip
        self._analyse(bench)
        return True

    def _runs_dir(self) -> tuple[Path, bool]:
        given = self.perf.options.runs_dir
        if given:
            return (self.perf.config.invocation_params.dir / given).resolve(), True
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        return self.perf.options.reports_dir / "processes" / stamp, False

    def _analyse(self, bench: Any) -> None:
        from detector.fileio import atomic_write_text
        from perf.crossprocess import IDENTICAL, compare_fail_rows, identical_rows, regression_rows, simulate
        from perf.gate.noise import benchmark_rows, compute_profile, family_rows, save_profile
        from perf.runs import load_run

        report, results = self.perf.report.rows, self.results
        for r in results:
            report.add(schema.CROSSPROCESS_RUNS, {"run": r.label, "kind": r.kind, "exit": r.returncode,
                                                  "seconds": round(r.seconds, 1), "saved": r.run.name if r.run else "-",
                                                  "compare-fail": r.compare_fail or "-"})  # fmt: skip
        self.failed = [r for r in results if r.run is None or r.extra.get("failed_tests")]
        identical = {r.label: load_run(r.run) for r in results if r.kind == IDENTICAL and r.run is not None}
        regressed: dict[str, dict[str, Any]] = {}
        for r in results:
            if r.kind != IDENTICAL and r.run is not None:
                regressed.setdefault(r.kind, {})[r.label] = load_run(r.run)
        if len(identical) < 2:
            self.error = f"only {len(identical)} identical process(es) saved a run: no noise profile"
            return
        profile = compute_profile(list(identical.values()), self.perf.fingerprint)
        storage = getattr(getattr(bench, "storage", None), "path", None)
        if storage is not None:
            self.profile_path = save_profile(storage, profile)
        for row in family_rows(profile):
            report.add(schema.NOISE_FAMILY, row)
        for row in benchmark_rows(profile):
            report.add(schema.NOISE_BENCHMARK, row)
        summary: dict[str, Any] = {"runs_dir": str(self.folder), "profile": str(self.profile_path),
                                   "family": family_rows(profile)}  # fmt: skip
        if self.mode == "selftest":
            groups = {kind: parse_regression(kind) for kind in regressed}
            verdicts = simulate(identical, regressed, self.perf.gate.settings, history=self.perf.options.history,
                                regressions=groups)  # fmt: skip
            summary["identical"] = identical_rows(verdicts)
            summary["regressed"] = regression_rows(verdicts)
            summary["compare_fail"] = compare_fail_rows(identical, self.compare_fail)
            real = [r for r in results if r.compare_fail is not None]
            summary["compare_fail"]["consecutive processes run with it"] = (
                f"{sum(r.compare_fail == 'passed' for r in real)}/{len(real)} passed")
            summary["verdicts"] = [dataclasses.asdict(v) for v in verdicts]
            for key, table in (("identical", schema.SELFTEST_IDENTICAL), ("regressed", schema.SELFTEST_REGRESSED)):
                for row in summary[key]:
                    report.add(table, row)
            report.add(schema.SELFTEST_COMPARE_FAIL, summary["compare_fail"])
        folder = self.perf.options.reports_dir
        folder.mkdir(parents=True, exist_ok=True)
        name = "selftest-processes.json" if self.mode == "selftest" else "noise-profile.json"
        self.summary_path = atomic_write_text(folder / name, json.dumps(summary, indent=2, default=str) + "\n")

    def finish(self, session: pytest.Session) -> None:
        if (self.error or self.failed) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def write_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.folder is None and self.error is None:
            return
        terminalreporter.write_sep("=", f"perf {'noise' if self.mode == 'noise' else 'self-test'} across processes")
        if self.error:
            terminalreporter.write_line(f"perf processes: {self.error}", red=True)
        if self.incomplete:
            terminalreporter.write_line(f"perf processes: {self.incomplete}", yellow=True)
        for r in self.failed:
            terminalreporter.write_line(f"perf processes: {r.label} exited {r.returncode}; log: {r.log}", red=True)
        if self.profile_path:
            terminalreporter.write_line(f"noise profile saved: {self.profile_path}")
        if self.summary_path:
            terminalreporter.write_line(f"summary: {self.summary_path}; runs and logs: {self.folder}")


def _group(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("benchmark")
    return None if mark is None else mark.kwargs.get("group")


def _plan(given: Any, items: list[pytest.Item], mode: str, k: int) -> list[Any]:
    """The children to run: K identical, and for a self-test K / 5 per regression (``given``, else the default)."""
    from perf.gate.processes import Child

    nodeids = tuple(item.nodeid for item in items)
    if mode == "noise":
        return [Child(f"a{i:02d}", "identical", nodeids) for i in range(k)]
    regressions = given or parse_regressions(DEFAULT_REGRESSIONS)
    plan = []
    every = max(1, k // regressed_per_kind(k))
    for i in range(k):
        plan.append(Child(f"a{i:02d}", "identical", nodeids))
        if i % every:
            continue  # fewer processes per regression, spread over the run: each is judged against all K identical
        for regression in regressions:
            grouped = [item for item in items if _group(item) in regression.groups]
            chosen = tuple(item.nodeid for item in grouped if _batch(item) >= regression.min_batch) or tuple(
                item.nodeid for item in grouped)  # e.g. a CPU selection of batch 1 only
            if chosen:
                label = f"{regression.kind}{100 * regression.fraction:g}-{i // every:02d}"
                plan.append(Child(label, str(regression), chosen, (f"--perf-regression={regression}",)))
    return plan


def regressed_per_kind(k: int) -> int:
    """Processes per injected regression for K identical ones: K / 5, at least 2 (each is compared with all K)."""
    return max(2, k // 5)


def _batch(item: pytest.Item) -> int:
    case = getattr(item, "callspec", None)
    value = case.params.get("case") if case is not None else None
    return int(getattr(value, "batch", 1))


def _str(value: Any) -> str | None:
    return None if value in (None, True, False) else str(value)


def _check_text(checks: Any) -> str | None:
    """The text of the first --benchmark-compare-fail check the parent was given (e.g. "median:5%")."""
    if not checks:
        return None
    check = checks[0]
    unit = "%" if type(check).__name__.startswith("Percentage") else ""
    return f"{check.field}:{check.threshold}{unit}"
