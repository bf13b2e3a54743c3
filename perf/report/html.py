"""The suite's HTML report and markdown summary, built from saved runs and the suite's report.

``build_report`` reads the inputs (:mod:`perf.report.inputs`), renders ``summary.md`` (tables of the newest run,
for ``$GITHUB_STEP_SUMMARY``) and ``index.html`` (the same tables and PNG figures embedded as base64, one
self-contained file): latency distribution per benchmark group, the end-to-end stage breakdown, parity IoU
histograms per candidate, and the history of every benchmark across saved runs with changes marked. Both show
every column `perf.report.schema` declares for each table. Both files are rendered in memory first and then
written atomically, so bad input leaves no partial output.
"""

from __future__ import annotations

import base64
import html
import importlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

from detector.fileio import atomic_write_text
from detector.timing import STAGES
from perf.report import plots, schema
from perf.report.changes import DEFAULT_THRESHOLD, bench_names, history
from perf.report.inputs import ReportInputs, load_inputs
from perf.report.tables import Table, all_tables, stage_rows, to_markdown
from perf.runs import HistoryError

log = logging.getLogger(__name__)

SUMMARY = "summary.md"
INDEX = "index.html"
_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}th,td{border:1px solid #ccc;padding:3px 7px}
th{background:#f3f3f3}td{text-align:right}td:first-child{text-align:left}.warn{color:#a15c00}
figure{margin:0 0 1.5em}figcaption{font-size:13px;color:#555}img{max-width:100%}
.slower{color:#d62728;font-weight:bold}.faster{color:#2ca02c;font-weight:bold}"""


@dataclass
class Report:
    """The rendered report: markdown, HTML sections and the figures (caption, PNG bytes)."""

    markdown: str
    tables: list[Table]
    figures: list[tuple[str, str, bytes]] = field(default_factory=list)  # (section, caption, png)
    warnings: list[str] = field(default_factory=list)


def _figures(inputs: ReportInputs, threshold: float) -> list[tuple[str, str, bytes]]:
    from perf.measure.parity import TOLERANCES

    out = []
    latest = inputs.latest
    if latest is not None:
        groups: dict[str, list] = {}
        for bench in latest.benchmarks.values():
            groups.setdefault(bench.group or "ungrouped", []).append(bench)
        for group, benches in groups.items():
            benches.sort(key=lambda b: (plots.backend_of(b), b.name))
            raw = "every round" if all(b.has_rounds for b in benches) else "saved statistics (no rounds saved)"
            out.append(("Latency distribution", f"{group}: run {latest.label}, from {raw}",
                        plots.latency_distribution(benches, f"{group} (run {latest.number:04d})")))
    rows = stage_rows(inputs)
    if rows:
        out.append(("End-to-end stages", "ms per frame of each pipeline stage",
                    plots.stage_breakdown(rows, STAGES)))
    for row in inputs.rows(schema.PARITY):
        ious = [float(v) for v in row.get("ious") or [] if isinstance(v, (int, float))]
        if ious:
            tol = TOLERANCES.get(str(row.get("precision")))
            label = str(row.get("candidate", "?"))
            out.append(("Parity IoU", f"{label}: IoU of each matched detection vs torch fp32 ({row.get('verdict')})",
                        plots.iou_histogram(label, ious, tol.mean_iou if tol else None)))
    for name in bench_names(inputs.runs):
        points = history(inputs, name, threshold)
        marks = [f"{p.run.number:04d}: {p.reason}" for p in points if p.mark]
        caption = f"{points[-1].bench.name}: {len(points)} run(s)" + (f"; marked {'; '.join(marks)}" if marks else "")
        out.append(("History", caption, plots.history(points[-1].bench.name, points, threshold)))
    return out


def render(inputs: ReportInputs, threshold: float = DEFAULT_THRESHOLD) -> Report:
    """Tables, markdown and figures of ``inputs`` (nothing written)."""
    tables = all_tables(inputs, threshold)
    report = Report(to_markdown(tables, inputs.warnings), tables, warnings=list(inputs.warnings))
    report.figures = _figures(inputs, threshold)
    return report


def _html_table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = []
    for row in table.cells():
        cells = []
        for column, cell in zip(table.columns, row):
            cls = f' class="{cell}"' if column in ("marked", "verdict") and cell in ("slower", "faster") else ""
            cells.append(f"<td{cls}>{html.escape(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    note = f"<p>{html.escape(table.note)}</p>" if table.note else ""
    return f"<h3>{html.escape(table.title)}</h3>{note}<table><tr>{head}</tr>{''.join(body)}</table>"


def to_html(report: Report, title: str = "Performance report") -> str:
    """One self-contained HTML page: warnings, tables, then the figures by section (PNGs inlined as base64)."""
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"]
    parts += [f"<p class='warn'>warning: {html.escape(w)}</p>" for w in report.warnings]
    parts += [_html_table(t) for t in report.tables]
    section = None
    for name, caption, data in report.figures:
        if name != section:
            parts.append(f"<h2>{html.escape(name)}</h2>")
            section = name
        encoded = base64.b64encode(data).decode("ascii")
        parts.append(f"<figure><img alt='{html.escape(caption, quote=True)}' src='data:image/png;base64,{encoded}'>"
                     f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts)


def build_report(storage: Path | None, reports: Path | None, out: Path, *, machine_id: str | None = None,
                 verdicts: Path | None = None, threshold: float = DEFAULT_THRESHOLD) -> tuple[list[Path], list[str]]:
    """Read the inputs and write ``out/summary.md`` and ``out/index.html`` atomically.

    Returns the written paths and the warnings (skipped input, also shown in both files). Raises
    `perf.runs.HistoryError` (nothing written) when the inputs are unusable or matplotlib is missing.
    """
    try:
        importlib.import_module("matplotlib")  # imported for real by perf.report.plots, lazily
    except ImportError as e:
        raise HistoryError(f"the HTML report needs matplotlib ({e}): pip install -e '.[report]'") from e
    inputs = load_inputs(storage, reports, machine_id=machine_id, verdicts=verdicts)
    report = render(inputs, threshold)
    page = to_html(report)
    paths = [atomic_write_text(out / SUMMARY, report.markdown), atomic_write_text(out / INDEX, page)]
    log.info("wrote %s (%d figures)", ", ".join(map(str, paths)), len(report.figures))
    return paths, report.warnings
