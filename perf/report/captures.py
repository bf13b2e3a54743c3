"""The Nsight Systems captures in the report: each ``<reports>/nsys/<test>/summary.json`` (``pytest perf -m
nsys``) a row of a table in the summary and the page, its critical path folded in the page."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

from perf.profile.critical_path_summary import CriticalPathSummary
from perf.tabletext import html_table, markdown_table

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
                f"{100 * self.idle_fraction:.1f} %" if self.idle_fraction is not None else "",
                path.bounded_by().removeprefix("Bounded by: ") if path else "no critical path",
                f"{waits[0].name} on {waits[0].where}, {waits[0].duration_ns / 1e6:.3f} ms" if waits else ""]


def load_captures(reports: Path, warnings: list[str]) -> list[CaptureRow]:
    """The captures' summaries under ``reports/nsys``, by folder name; a warning for each unreadable one."""
    rows = []
    for path in sorted((reports / CAPTURES).glob("*/summary.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            region, critical = data.get("region") or None, data.get("critical_path")
            region_ms = (region["end_ns"] - region["start_ns"]) / 1e6 if region else None
            summary = CriticalPathSummary.from_dict(critical) if isinstance(critical, dict) else None
            rows.append(CaptureRow(path.parent.name, region_ms, data.get("idle_fraction"), summary))
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
            warnings.append(f"skipped unreadable nsys summary '{path}': {e}")
    return rows


def captures_markdown(rows: list[CaptureRow]) -> str:
    """The section of the markdown summary: one table row per capture (empty without captures)."""
    if not rows:
        return ""
    table = markdown_table(_COLUMNS, [row.cells() for row in rows], right=("region ms", "GPU idle"))
    return "\n".join([f"### {SECTION}", "", *table]) + "\n"


def captures_html(rows: list[CaptureRow]) -> str:
    """The section of the HTML page: the table, then each capture's critical path (markdown), folded."""
    if not rows:
        return ""
    table = html_table(_COLUMNS, [row.cells() for row in rows], right=())
    return f"<h2>{html.escape(SECTION)}</h2>{table}" + "".join(
        f"<details><summary>{html.escape(row.name)}: critical path and waits</summary>"
        f"<pre>{html.escape(row.critical_path.to_markdown())}</pre></details>"
        for row in rows if row.critical_path is not None)
