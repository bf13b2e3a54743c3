"""The Nsight Systems captures in the report: each ``<reports>/nsys/<test>/summary.json`` (``pytest perf -m
nsys``) a row of a table in the summary and the page, its critical path folded in the page."""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from detector.fileio import parse_json, read_text
from perf.profile.critical_path import CriticalPathSummary, ms, percent
from perf.tabletext import html_table, markdown_table
from perf.validate import is_number, kind_of, value_problem

#: Where the captures are in the reports folder (`perf.roles.nsys` runs them with ``report_root=<reports>/nsys``).
CAPTURES = "nsys"
SECTION = "Nsight Systems captures"
_COLUMNS = ["capture", "region ms", "GPU idle", "bounded by (critical path)", "longest wait"]


@dataclass(frozen=True)
class CaptureRow:
    """One capture: its folder's name, region length (ms), GPU idle share (0..1), critical path (None: unknown)."""

    name: str
    region_ms: float | None
    idle_fraction: float | None
    critical_path: CriticalPathSummary | None

    def cells(self) -> list[str]:
        """Its row of the captures' table (`_COLUMNS`)."""
        path, waits = self.critical_path, self.critical_path.top_waits if self.critical_path else []
        return [self.name, f"{self.region_ms:.3f}" if self.region_ms is not None else "",
                percent(self.idle_fraction) if self.idle_fraction is not None else "",
                path.bounded_by().removeprefix("Bounded by: ") if path else "no critical path",
                f"{waits[0].name} on {waits[0].where}, {ms(waits[0].duration_ns)} ms" if waits else ""]


def load_captures(reports: Path, warnings: list[str]) -> list[CaptureRow]:
    """The captures' summaries under ``reports/nsys``, by folder name; a one-line warning names each one that
    cannot be read or shown (another shape than `perf.profile.nsys_summary` writes), and it is left out."""
    rows = []
    for path in sorted((reports / CAPTURES).glob("*/summary.json")):
        try:
            rows.append(_capture(path))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, ArithmeticError) as e:
            warnings.append(f"skipped unreadable nsys summary '{path}': {e}")
    return rows


def _capture(path: Path) -> CaptureRow:
    """The row of one ``summary.json``, shown once here (`captures_markdown`, `captures_html`): a summary of
    another shape fails now, naming what is wrong (ValueError, ...), never when the report is written."""
    data = parse_json(read_text(path))
    if not isinstance(data, dict):
        raise ValueError(f"the top level is {kind_of(data)}, expected an object")
    if (problem := value_problem(data)) is not None:
        raise ValueError(problem)
    region, critical, idle = data.get("region") or None, data.get("critical_path"), data.get("idle_fraction")
    if idle is not None and not is_number(idle):
        raise ValueError(f"'idle_fraction' is {kind_of(idle)}, expected a number")
    if critical is not None and not isinstance(critical, dict):
        raise ValueError(f"'critical_path' is {kind_of(critical)}, expected an object")
    if region is not None:  # None: no region found, no region ms
        _check_span("region", region)
    if critical is not None:
        _check_span("critical_path.region", critical.get("region"))
    row = CaptureRow(path.parent.name, (region["end_ns"] - region["start_ns"]) / 1e6 if region else None, idle,
                     CriticalPathSummary.from_dict(critical) if critical is not None else None)
    captures_html([row])  # everything the report shows of it, the markdown's cells too
    return row


def _check_span(where: str, span: object) -> None:
    """A ``{"start_ns", "end_ns"}`` object of numbers, else ValueError naming ``where``."""
    if not isinstance(span, dict):
        raise ValueError(f"'{where}' is {kind_of(span)}, expected an object with numbers start_ns and end_ns")
    if not all(is_number(span.get(key)) for key in ("start_ns", "end_ns")):
        raise ValueError(f"'{where}' has no numbers start_ns and end_ns")


def captures_markdown(rows: list[CaptureRow]) -> str:
    """The section of the markdown summary: one table row per capture (empty without captures)."""
    table = markdown_table(_COLUMNS, [row.cells() for row in rows], right=("region ms", "GPU idle"))
    return "\n".join([f"### {SECTION}", "", *table]) + "\n" if rows else ""


def captures_html(rows: list[CaptureRow]) -> str:
    """The section of the HTML page: the table, then each capture's critical path (markdown), folded."""
    if not rows:
        return ""
    table = html_table(_COLUMNS, [row.cells() for row in rows], right=())
    return f"<h2>{html.escape(SECTION)}</h2>{table}" + "".join(
        f"<details><summary>{html.escape(row.name)}: critical path and waits</summary>"
        f"<pre>{html.escape(row.critical_path.to_markdown())}</pre></details>"
        for row in rows if row.critical_path is not None)
