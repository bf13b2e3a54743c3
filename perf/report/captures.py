"""The Nsight Systems captures of a run in the report: one line each in the markdown summary, a table and the
critical-path details (folded) in the HTML page.

``pytest perf -m nsys`` leaves ``<reports>/nsys/<test>/summary.json`` beside each capture
(`perf.profile.nsys_summary.NsysSummary`); `load_captures` reads them back. A summary that cannot be read is
skipped with a warning naming the file; one without a critical path (an older summary, a failed SQLite
export) is shown without it.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perf.profile.critical_path_summary import CriticalPathSummary
from perf.tabletext import html_table, markdown_table

#: Where the captures are, relative to the reports folder (`perf.profile.nsys.DEFAULT_REPORT_ROOT`'s last part).
CAPTURES = "nsys"
SECTION = "Nsight Systems captures"


@dataclass(frozen=True)
class CaptureRow:
    """One capture: its folder's name, region length (ms), GPU idle share (0..1) and critical path, where known."""

    name: str
    region_ms: float | None
    idle_fraction: float | None
    critical_path: CriticalPathSummary | None

    @property
    def longest_wait(self) -> str:
        waits = self.critical_path.top_waits if self.critical_path else []
        return f"{waits[0].name} on {waits[0].where}, {waits[0].duration_ns / 1e6:.3f} ms" if waits else ""


def _row(folder: Path, data: dict[str, Any]) -> CaptureRow:
    region = data.get("region") or None
    length = (region["end_ns"] - region["start_ns"]) / 1e6 if region else None
    path = data.get("critical_path")
    return CaptureRow(folder.name, length, data.get("idle_fraction"),
                      CriticalPathSummary.from_dict(path) if isinstance(path, dict) else None)  # fmt: skip


def load_captures(reports: Path) -> tuple[list[CaptureRow], list[str]]:
    """The captures' summaries under ``reports/nsys`` (by folder name) and warnings for unreadable ones."""
    rows, warnings = [], []
    for path in sorted((reports / CAPTURES).glob("*/summary.json")):
        try:
            rows.append(_row(path.parent, json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
            warnings.append(f"skipped unreadable nsys summary '{path}': {e}")
    return rows, warnings


def _cells(row: CaptureRow) -> list[str]:
    idle = f"{100 * row.idle_fraction:.1f} %" if row.idle_fraction is not None else ""
    bounded = row.critical_path.bounded_by().removeprefix("Bounded by: ") if row.critical_path else "no critical path"
    return [row.name, f"{row.region_ms:.3f}" if row.region_ms is not None else "", idle, bounded, row.longest_wait]


_COLUMNS = ["capture", "region ms", "GPU idle", "bounded by (critical path)", "longest wait"]


def captures_markdown(rows: list[CaptureRow]) -> str:
    """The section of the markdown summary: one table row per capture (empty without captures)."""
    if not rows:
        return ""
    table = markdown_table(_COLUMNS, [_cells(row) for row in rows], right=("region ms", "GPU idle"))
    return "\n".join([f"### {SECTION}", "", *table]) + "\n"


def captures_html(rows: list[CaptureRow]) -> str:
    """The section of the HTML page: the table, then each capture's critical-path summary (markdown), folded."""
    if not rows:
        return ""
    parts = [f"<h2>{html.escape(SECTION)}</h2>{html_table(_COLUMNS, [_cells(row) for row in rows], right=())}"]
    for row in rows:
        if row.critical_path is not None:
            parts.append(f"<details><summary>{html.escape(row.name)}: critical path and waits</summary>"
                         f"<pre>{html.escape(row.critical_path.to_markdown())}</pre></details>")  # fmt: skip
    return "".join(parts)
