"""The suite's report of a session: the rows tests add, merged across xdist workers, printed and saved; then
``--perf-html`` (docs/architecture.md, "The session and its parts")."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from perf.report.suite import REPORT_STEM, PerfReport

if TYPE_CHECKING:
    from perf.session import PerfSession


@dataclass
class ReportRun:
    """The report of one session: rows, the run's name (its xdist workers' too), worker id (None: the controller)."""

    perf: PerfSession
    run: str
    worker: str | None = None
    rows: PerfReport = field(default_factory=PerfReport)
    html_lines: list[str] = field(default_factory=list)

    def finish(self, config: pytest.Config) -> None:
        """Write the report (a worker: its part; the controller: every part merged), then --perf-html's."""
        if self.perf.options.nsys_child:
            return  # a Nsight Systems child: its parent run owns the report
        report, folder = self.rows, self.perf.options.reports_dir
        if self.worker is not None:
            if report.tables:
                report.write(folder, stem=f"{REPORT_STEM}-{self.run}-{self.worker}")
            return
        for part in sorted(folder.glob(f"{REPORT_STEM}-{self.run}-gw*.json")):
            report.merge(json.loads(part.read_text())["tables"])
            part.unlink()
            part.with_suffix(".md").unlink(missing_ok=True)
        if report.tables:
            report.device = self.perf.device.partition(":")[0]  # what the figures mean depends on it
            report.subject = self.perf.described()
            report.add_speedups()
            report.write(folder, stem=f"{REPORT_STEM}-{self.run}")
            report.write(folder)  # the latest copy, what perf-report and --perf-html read
        if self.perf.options.html:  # pytest-benchmark saved the run before this hook (its hookwrapper)
            self.html_lines = self._write_html(config, self.perf.options.html)

    def _write_html(self, config: pytest.Config, out: str) -> list[str]:
        """Build the --perf-html report; the lines to print (never raises for bad input)."""
        from perf.report.html import build_report
        from perf.runs import HistoryError

        bench: Any = getattr(config, "_benchmarksession", None)
        saved = bench is not None and bool(bench.save or bench.autosave)
        lines = [] if saved else ["perf html: this run was not saved (add --benchmark-autosave): no benchmark tables"]
        storage = getattr(bench.storage, "path", None) if saved else None  # None: not saved, or not a folder
        folder, where = self.perf.options.reports_dir, config.invocation_params.dir / out
        try:
            paths, warnings = build_report(storage, folder if folder.is_dir() else None, where,
                                           machine_id=bench.machine_id if saved else None)  # fmt: skip
        except (HistoryError, OSError) as e:
            return [*lines, f"perf html: not written: {e}"]
        return lines + [f"perf html: warning: {w}" for w in warnings] + [f"perf html: wrote {p}" for p in paths]

    def write_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        for line in self.html_lines:
            terminalreporter.write_line(line)
        if self.rows.tables and self.worker is None:
            folder = self.perf.options.reports_dir
            terminalreporter.write_sep("=", "perf report")
            terminalreporter.write_line(self.rows.to_markdown())
            own, latest = folder / f"{REPORT_STEM}-{self.run}.md", folder / f"{REPORT_STEM}.md"
            terminalreporter.write_line(f"saved: {own} (and .json); latest copy: {latest}")
