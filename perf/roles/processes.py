"""The cross-process measurements of a session (`ProcessesRun`): ``--perf-noise=K`` (docs/method.md, section 3) and
``--perf-selftest-processes=K`` (section 5), each in K fresh processes (`perf.gate.processes`); the process the user
starts only orchestrates (docs/architecture.md, "The session and its parts")."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perf.options import DEFAULT_REGRESSIONS, MAX_PROCESSES, parse_regressions
from perf.report import schema

if TYPE_CHECKING:
    from perf.gate.processes import Child
    from perf.session import PerfSession

DEFAULT_COMPARE_FAIL = "median:5%"


@dataclass
class ProcessesRun:
    """One session's cross-process measurement: mode, K, start (monotonic s), what the children left."""

    perf: PerfSession
    mode: str
    k: int
    started: float
    folder: Path | None = None
    results: list[Any] = field(default_factory=list)
    compare_fail: str | None = None
    error: str | None = None
    incomplete: str | None = None
    failed: list[Any] = field(default_factory=list)
    profile_path: Path | None = None
    summary_path: Path | None = None

    @classmethod
    def start(cls, perf: PerfSession, config: pytest.Config) -> ProcessesRun | None:
        """What --perf-noise / --perf-selftest-processes asks for (None: neither), or a usage error."""
        options = perf.options
        modes = (("selftest", options.selftest_processes), ("noise", options.noise))
        mode, k = next(((m, k) for m, k in modes if isinstance(k, int)), (None, 0))
        if options.nsys_child or mode is None:
            return None
        if hasattr(config, "workerinput") or config.getoption("numprocesses", None):
            option = "noise" if mode == "noise" else "selftest-processes"
            raise pytest.UsageError(f"--perf-{option} runs its own processes one at a time: drop -n (pytest-xdist)")
        if options.compare is not None:
            raise pytest.UsageError("--perf-noise / --perf-selftest-processes measure, they do not compare: "
                                    "drop --perf-compare")
        return cls(perf, mode, k, time.monotonic())

    def run(self, session: pytest.Session) -> bool | None:
        """``pytest_runtestloop``: orchestrate the child processes instead of running the tests here."""
        if session.config.option.collectonly:
            return None
        if not session.items:
            self.error = "no tests selected: nothing to run in the child processes"
            return True
        from perf.gate.processes import PlanError, forwarded_options, load_plan, run_children, save_plan

        config, options = session.config, self.perf.options
        folder = ((config.invocation_params.dir / options.runs_dir).resolve() if options.runs_dir else
                  options.reports_dir / "processes" / _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ"))
        plan = _plan(options.selftest_regressions, session.items, self.mode, self.k)
        if len(plan) > MAX_PROCESSES:  # K / 5 per regression comes on top of K
            raise pytest.UsageError(f"--perf-selftest-processes: the plan holds {len(plan)} processes (K and K / 5 per "
                                    f"regression), more than {MAX_PROCESSES}; give a smaller K or fewer regressions")
        try:
            saved = load_plan(folder) if options.runs_dir else None
        except PlanError as e:
            raise pytest.UsageError(f"--perf-runs-dir: {e}") from None
        if saved not in (None, plan):
            raise pytest.UsageError(f"--perf-runs-dir: '{folder}' holds another plan (other tests, K or "
                                    "regressions); give a new folder or delete it")  # fmt: skip
        save_plan(folder, plan)
        bench = getattr(config, "_benchmarksession", None)
        compared = getattr(bench, "compare", None)
        compared = None if compared in (None, True, False) else str(compared)
        forwarded = forwarded_options(config.invocation_params.args, config.args,
                                      {"--perf-compare": None, "--benchmark-compare": compared})
        check = (getattr(bench, "compare_fail", None) or [None])[0]  # the parent's first --benchmark-compare-fail
        if self.mode == "selftest":
            unit = "%" if type(check).__name__.startswith("Percentage") else ""
            self.compare_fail = f"{check.field}:{check.threshold}{unit}" if check else DEFAULT_COMPARE_FAIL
        reporter = config.pluginmanager.get_plugin("terminalreporter")

        def progress(result: Any, done: int, total: int) -> None:
            saved = "saved" if result.run else f"NO RUN SAVED (exit {result.returncode}; {result.log})"
            if reporter is not None:
                reporter.write_line(f"perf processes: {done}/{total} {result.label} ({result.kind}) "
                                    f"{result.seconds:.0f} s, exit {result.returncode}, {saved}")  # fmt: skip

        budget = options.processes_budget
        self.results = run_children(plan, forwarded, folder, config.invocation_params.dir,
                                    compare_fail=self.compare_fail, on_done=progress,
                                    deadline=None if budget is None else self.started + budget)  # fmt: skip
        self.folder = folder
        if len(self.results) < len(plan):
            self.incomplete = (f"{len(self.results)} of {len(plan)} planned processes ran within "
                               f"--perf-processes-budget; resume with --perf-runs-dir={folder}")  # fmt: skip
        self._analyse(getattr(getattr(bench, "storage", None), "path", None))
        return True

    def _analyse(self, storage: Path | None) -> None:
        """The runs table, the noise profile (saved under ``storage``) and, for a self-test, the simulated CI
        runs' verdicts; all to the report and a JSON summary in the reports folder."""
        from detector.fileio import atomic_write_text
        from perf.crossprocess import IDENTICAL, compare_fail_rows, identical_rows, regression_rows, simulate
        from perf.gate.noise import benchmark_rows, compute_profile, family_rows, save_profile
        from perf.measure.machine import fingerprint_differences
        from perf.runs import HistoryError, load_run

        report, results = self.perf.report.rows, self.results
        identical: dict[str, Any] = {}
        regressed: dict[str, dict[str, Any]] = {}
        for r in results:
            report.add(schema.CROSSPROCESS_RUNS, {"run": r.label, "kind": r.kind, "exit": r.returncode,
                                                  "seconds": round(r.seconds, 1), "saved": r.run.name if r.run else "-",
                                                  "compare-fail": r.compare_fail or "-"})  # fmt: skip
            try:  # a run saved by an earlier call may have been damaged since, or made on another machine
                run = load_run(r.run) if r.run is not None else None
                if run is not None and (moved := fingerprint_differences(run.fingerprint, self.perf.fingerprint)):
                    raise HistoryError(f"'{r.run}': measured on another machine ("
                                       + ", ".join(f"{f}: saved {a!r}, this machine {b!r}" for f, a, b in moved) + ")")
            except HistoryError as e:
                self.error = f"{e}; move it away to run {r.label} again"
                return
            if run is not None:
                (identical if r.kind == IDENTICAL else regressed.setdefault(r.kind, {}))[r.label] = run
        self.failed = [r for r in results if r.run is None or r.failed_tests]
        if len(identical) < 2:
            self.error = f"only {len(identical)} identical process(es) saved a run: no noise profile"
            return
        profile = compute_profile(list(identical.values()), self.perf.fingerprint)
        if storage is not None:
            self.profile_path = save_profile(storage, profile)
        summary: dict[str, Any] = {"runs_dir": str(self.folder), "profile": str(self.profile_path),
                                   "family": family_rows(profile)}  # fmt: skip
        tables = [(schema.NOISE_FAMILY, summary["family"]), (schema.NOISE_BENCHMARK, benchmark_rows(profile))]
        if self.mode == "selftest":
            verdicts = simulate(identical, regressed, self.perf.gate.settings, history=self.perf.options.history)
            real = [r.compare_fail for r in results if r.compare_fail is not None]
            compare_fail = {**compare_fail_rows(identical, self.compare_fail),
                            "consecutive processes run with it": f"{real.count('passed')}/{len(real)} passed"}
            summary |= {"identical": identical_rows(verdicts), "regressed": regression_rows(verdicts),
                        "compare_fail": compare_fail, "verdicts": [dataclasses.asdict(v) for v in verdicts]}
            tables += [(schema.SELFTEST_IDENTICAL, summary["identical"]),
                       (schema.SELFTEST_REGRESSED, summary["regressed"]),
                       (schema.SELFTEST_COMPARE_FAIL, [compare_fail])]  # fmt: skip
        for table, rows in tables:
            for row in rows:
                report.add(table, row)
        name = "selftest-processes.json" if self.mode == "selftest" else "noise-profile.json"
        text = json.dumps(summary, indent=2, default=str) + "\n"
        self.summary_path = atomic_write_text(self.perf.options.reports_dir / name, text)

    def finish(self, session: pytest.Session) -> None:
        if (self.error or self.failed) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def write_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.folder is None and self.error is None:
            return
        write = terminalreporter.write_line
        terminalreporter.write_sep("=", f"perf {'noise' if self.mode == 'noise' else 'self-test'} across processes")
        if self.error:
            write(f"perf processes: {self.error}", red=True)
        if self.incomplete:
            write(f"perf processes: {self.incomplete}", yellow=True)
        for r in self.failed:
            write(f"perf processes: {r.label} exited {r.returncode}; log: {r.log}", red=True)
        if self.profile_path:
            write(f"noise profile saved: {self.profile_path}")
        if self.summary_path:
            write(f"summary: {self.summary_path}; runs and logs: {self.folder}")


def _plan(given: Any, items: list[pytest.Item], mode: str, k: int) -> list[Child]:
    """The children to run: K identical; for a self-test also K / 5 (at least 2) per regression (``given``,
    else the default), each of its benchmarks, spread over the run: each is judged against all K identical."""
    from perf.gate.processes import Child

    nodeids = tuple(item.nodeid for item in items)
    if mode == "noise":
        return [Child(f"a{i:02d}", "identical", nodeids) for i in range(k)]
    plan, regressions = [], given or parse_regressions(DEFAULT_REGRESSIONS)
    every = max(1, k // max(2, k // 5))
    for i in range(k):
        plan.append(Child(f"a{i:02d}", "identical", nodeids))
        if i % every:
            continue
        for regression in regressions:
            grouped = [item for item in items if _group(item) in regression.groups]
            # what its detection is judged on (`Regression.slows`: layer1 at batch 1 alone), else the whole group
            chosen = tuple(item.nodeid for item in grouped if regression.slows(_group(item), _batch(item))) or tuple(
                item.nodeid for item in grouped)  # e.g. a CPU selection of batch 1 only
            if chosen:
                label = f"{regression.kind}{100 * regression.fraction:g}-{i // every:02d}"
                plan.append(Child(label, str(regression), chosen, (f"--perf-regression={regression}",)))
    return plan


def _group(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("benchmark")
    return None if mark is None else mark.kwargs.get("group")


def _batch(item: pytest.Item) -> int:
    case = getattr(item, "callspec", None)
    return int(getattr(case.params.get("case") if case is not None else None, "batch", 1))
