"""The Nsight Systems captures of a session (``pytest perf -m nsys`` or ``--perf-nsys``; `NsysRun`): each test
marked ``nsys`` runs again in a child pytest under ``nsys profile``, summarised beside its report
(docs/architecture.md, "The session and its parts"; the summary: "The critical path of an nsys capture")."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from perf.session import PerfOptions


def nsys_selected(options: PerfOptions, markexpr: str | None) -> bool:
    """True in the parent run when captures were asked for: ``--perf-nsys`` or a ``-m`` selecting ``nsys``."""
    words = re.findall(r"[\w:+\-.\[\]\\/]+", markexpr or "")  # pytest's marker names, keywords and parentheses
    asked = "nsys" in words and ("not", "nsys") not in zip(words, words[1:])
    return not options.nsys_child and (options.nsys or asked)


def child_options(config: pytest.Config, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The child's pytest options and environment: the parent's command line, ``PYTEST_ADDOPTS`` and ini ``addopts``
    less `perf.gate.processes.NSYS_DROPPED`, the same ini (``-c``), GC off in benchmarks, tests in collection order."""
    from perf.gate.processes import NSYS_DROPPED, forwarded_options

    options = forwarded_options(config.invocation_params.args, config.args, dropped=NSYS_DROPPED)
    ini = [str(arg) for arg in config.getini("addopts")]
    if (kept := forwarded_options(ini, (), dropped=NSYS_DROPPED)) != ini:
        options += ["-o", "addopts=" + shlex.join(kept)]
    if config.inipath is not None:
        options += ["-c", str(config.inipath)]
    child_env = dict(env)
    if addopts := child_env.get("PYTEST_ADDOPTS"):
        child_env["PYTEST_ADDOPTS"] = shlex.join(forwarded_options(shlex.split(addopts), (), dropped=NSYS_DROPPED))
    return [*options, "--benchmark-disable-gc", "-p", "no:randomly"], child_env


@dataclass
class NsysRun:
    """The captures of one session: whether they were asked for, and each test's (node id, `NsysSummary`)."""

    options: PerfOptions
    selected: bool
    summaries: list[tuple[str, Any]] = field(default_factory=list)

    def run_test(self, item: pytest.Item) -> bool | None:
        """``pytest_runtest_protocol``: a test marked ``nsys`` runs in a child under nsys (True) if asked; else None."""
        if item.get_closest_marker("nsys") is None or not self.selected:
            return None
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        call = pytest.CallInfo.from_call(lambda: self.capture(item), when="call")
        ihook.pytest_runtest_logreport(report=pytest.TestReport.from_item_and_call(item, call))
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def capture(self, item: pytest.Item) -> None:
        from perf.profile.nsys import (NsysError, find_nsys, nsys_not_found_reason, run_child_under_nsys,
                                       summarize_report)  # fmt: skip

        config, given = item.config, self.options.nsys_path
        if (nsys := find_nsys(given, os.environ)) is None:
            pytest.skip(nsys_not_found_reason(given, os.environ))
        try:
            options, env = child_options(config, os.environ)
            result = run_child_under_nsys(nsys, item.nodeid, config.rootpath, options, env,
                                          report_root=self.options.reports_dir / "nsys",
                                          cwd=config.invocation_params.dir)  # fmt: skip
            if result.outcome == "skipped":
                pytest.skip(result.skip_reason or "skipped in the nsys child")
            if result.outcome == "failed":
                pytest.fail(f"child test failed under nsys (log: {result.log_path})\n{result.output_tail}",
                            pytrace=False)  # fmt: skip
            summary = summarize_report(nsys, result.report)
        except NsysError as exc:
            pytest.fail(str(exc), pytrace=False)
        self.summaries.append((item.nodeid, summary))

    def write_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.summaries:
            terminalreporter.write_sep("=", "nsys summaries")
        for nodeid, summary in self.summaries:
            terminalreporter.write_line(f"## {nodeid}")
            terminalreporter.write_line(summary.to_markdown())
            if summary.report:
                terminalreporter.write_line(f"saved beside {summary.report}: summary.md, summary.json")
