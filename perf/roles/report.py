"""The suite's report of a session (`ReportRun`): the rows tests add (``perf_report``), merged across xdist workers,
printed and saved under ``--perf-reports-dir``; then ``--perf-html`` (docs/architecture.md, "The session and its
parts")."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perf.report.suite import PerfReport

if TYPE_CHECKING:
    from perf.session import PerfSession


@dataclass
class ReportRun:
    """The report of one session: the rows, this run's name (shared with its xdist workers), the worker id (None:
    the controller or a plain run), the --perf-html lines to print."""


    perf: PerfSession
    run: str
    worker: str | None = None
    rows: PerfReport = field(default_factory=PerfReport)
    html_lines: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path:
        """This run's own markdown report, ``<reports>/perf-report-<run>.md`` (the JSON beside it)."""
        return self.perf.options.reports_dir / f"perf-report-{self.run}.md"

    def finish(self, config: pytest.Config) -> None:
        """Write the report (a worker: its part; the controller: every part merged), then the --perf-html report."""
        if self.perf.options.nsys_child:
            return  # a Nsight Systems child: its parent run owns the report
        report, folder = self.rows, self.perf.options.reports_dir
        if self.worker is not None:
            if report.tables:
                report.write(folder, stem=f"perf-report-{self.run}-{self.worker}")
            return
        for part in sorted(folder.glob(f"perf-report-{self.run}-gw*.json")):
            report.merge(json.loads(part.read_text())["tables"])
            os.unlink(part)
            part.with_suffix(".md").unlink(missing_ok=True)
        if report.tables:
            report.device = self.perf.device.partition(":")[0]  # what the figures mean depends on it
            report.subject = self.perf.described()
            report.add_speedups()
            report.write(folder, stem=f"perf-report-{self.run}")
            report.write(folder)  # the latest copy, what perf-report and --perf-html read
        if self.perf.options.html:  # pytest-benchmark saved the run before this hook (its hookwrapper)
            self.html_lines = self._write_html(config, self.perf.options.html)

    def _write_html(self, config: pytest.Config, out: str) -> list[str]:
        """Build the --perf-html report; the lines to print (never raises for bad input)."""
        from perf.report.html import build_report
        from perf.runs import HistoryError

        bench: Any = getattr(config, "_benchmarksession", None)
        saved = bench is not None and bool(bench.save or bench.autosave)
        storage = getattr(bench.storage, "path", None) if saved else None  # None: not saved, or not file storage
        lines = [] if saved else ["perf html: this run was not saved (add --benchmark-autosave): no benchmark tables"]
        folder = self.perf.options.reports_dir
        try:
            paths, warnings = build_report(storage, folder if folder.is_dir() else None,
                                           config.invocation_params.dir / out,
                                           machine_id=bench.machine_id if saved else None)
            lines += [f"perf html: warning: {w}" for w in warnings] + [f"perf html: wrote {p}" for p in paths]
        except (HistoryError, OSError) as e:
            lines.append(f"perf html: not written: {e}")
        return lines

    def write_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        for line in self.html_lines:
            terminalreporter.write_line(line)
        if not self.rows.tables or self.worker is not None:
            return
        terminalreporter.write_sep("=", "perf report")
        terminalreporter.write_line(self.rows.to_markdown())
        terminalreporter.write_line(f"saved: {self.path} (and .json); latest copy: "
                                    f"{self.perf.options.reports_dir / 'perf-report.md'}")
