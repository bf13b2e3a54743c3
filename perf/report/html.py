"""The suite's HTML report and markdown summary, built from saved runs and the suite's report.

``build_report`` reads the inputs (:mod:`perf.report.inputs`), renders ``summary.md`` (its subject -- model and
digests, input size, classes, video and frames, backends, device, machine -- what the newest run is and where it ran, a banner for an injected run, and the narrow tables, for ``$GITHUB_STEP_SUMMARY``) and
``index.html`` (one self-contained file): the same notices and tables with every column, then the figures,
embedded as base64 PNGs -- the latency distribution per benchmark group, the end-to-end stage breakdown, one
history figure with a panel per benchmark, parity IoU histograms per candidate -- and last the suite's own tables
(``perf-report.json``, folded), shown as the device they were measured on allows (`perf.report.schema`: GPU-only columns
left out of a CPU run, with a note saying why). Both files are rendered in memory first and then written
atomically, so bad input leaves no partial output.
"""

from __future__ import annotations

import base64
import html
import importlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detector.fileio import atomic_write_text
from detector.timing import STAGES
from perf.report import plots, schema
from perf.report.captures import captures_html, captures_markdown
from perf.report.changes import DEFAULT_THRESHOLD, bench_names, history
from perf.report.inputs import ReportInputs, load_inputs
from perf.report.suite import cell
from perf.report.tables import (
    Notice,
    Table,
    all_tables,
    notices,
    ordered,
    stage_rows,
    to_markdown,
)
from perf.runs import HistoryError

log = logging.getLogger(__name__)

SUMMARY = "summary.md"
INDEX = "index.html"
#: The section of the history figure (one figure, a panel per benchmark).
HISTORY = "History"
SUITE_SECTION = "The suite's tables (perf-report.json)"
_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1100px;color:#222;padding:0 1em}
h1{margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.4em 0 1.4em;font-size:13px}th,td{border:1px solid #ccc;padding:3px 7px}
th{background:#f3f3f3}td{text-align:right;white-space:nowrap}td:first-child{text-align:left}
td.text{text-align:left}td.prose{text-align:left;white-space:normal}.warn{color:#a15c00}
p.note{font-size:13px;color:#444;margin:.2em 0}
.injected{background:#fff3cd;border:1px solid #e0b200;border-left:6px solid #e0b200;padding:.5em .8em;
margin:.6em 0;font-weight:600}
figure{margin:0 0 1.4em}figcaption{font-size:13px;color:#555}img{max-width:100%}summary{cursor:pointer}
.slower{color:#d62728;font-weight:bold}.faster{color:#2ca02c;font-weight:bold}"""
#: Columns whose cells are prose (wrapped); any cell that does not start like a number is left-aligned.
_PROSE_COLUMNS = frozenset({"note", "failures", "why", "per class AP@0.5", "reasons"})
_NUMBER_LIKE = re.compile(r"^[-+]?[\d.]")


@dataclass(frozen=True)
class Figure:
    """One figure of the page: its ``section`` heading, ``caption``, PNG bytes, a CSS ``kind`` (its class) and
    ``details``: lines listed under the caption, folded (what each mark of the history is)."""

    section: str
    caption: str
    png: bytes
    kind: str = ""
    details: tuple[str, ...] = ()


@dataclass
class Report:
    """The rendered report: markdown, HTML tables, the figures, what is said of the runs, the suite's tables
    (title -> rows) and the device they were measured on."""

    markdown: str
    tables: list[Table]
    figures: list[Figure] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    suite: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    device: str | None = None
    captures: list[Any] = field(default_factory=list)  # perf.report.captures.CaptureRow
    #: What the newest run measured and where (`perf.subject.describe_subject`), shown first.
    subject: dict[str, str] = field(default_factory=dict)


def _latency_figures(inputs: ReportInputs) -> list[Figure]:
    latest = inputs.latest
    if latest is None:
        return []
    groups: dict[str, list] = {}
    for bench in ordered(list(latest.benchmarks.values())):
        groups.setdefault(bench.group or "ungrouped", []).append(bench)
    out = []
    for group, benches in groups.items():
        raw = "every round" if all(b.has_rounds for b in benches) else "saved statistics (no rounds saved)"
        caption = (f"{group}: run {latest.label}, from {raw}; a violin from {plots.VIOLIN_MIN_ROUNDS} rounds on, "
                   "else a box (min to max) with each round as a dot")
        out.append(Figure("Latency distribution", caption, plots.latency_distribution(benches, group)))
    return out


def _history_figure(inputs: ReportInputs, threshold: float) -> Figure | None:
    """One figure of small multiples: a panel per benchmark, grouped and in numeric order of their names."""
    series = [points for name in bench_names(inputs.runs) if (points := history(inputs, name, threshold))]
    if not series:
        return None
    order = ordered([points[-1].bench for points in series])
    by_name = {points[-1].bench.fullname: points for points in series}
    grouped = len({b.group for b in order}) > 1
    panels = [((f"{b.group or 'ungrouped'} · " if grouped else "") + plots.short_name(b), by_name[b.fullname])
              for b in order]  # fmt: skip
    labels = [str(r.number) if r.number is not None else r.path.stem[:8] for r in inputs.runs]
    marks = tuple(f"{plots.short_name(p.bench)}, run {p.run.name}: {p.mark or 'change point'}, {p.reason}"
                  for _, points in panels for p in points if p.mark or p.level)  # fmt: skip
    caption = (f"{len(panels)} benchmark(s) over {len(inputs.runs)} saved run(s), each panel in its own time unit; "
               f"{len(marks) or 'no'} point(s) marked.")  # fmt: skip
    return Figure(HISTORY, caption, plots.history_grid(panels, labels, threshold), kind="history", details=marks)


def _figures(inputs: ReportInputs, threshold: float) -> list[Figure]:
    from perf.measure.parity import TOLERANCES

    out = _latency_figures(inputs)
    rows = stage_rows(inputs)
    if rows:
        out.append(Figure("End-to-end stages", "ms per frame of each pipeline stage",
                          plots.stage_breakdown(rows, STAGES)))
    figure = _history_figure(inputs, threshold)
    if figure is not None:
        out.append(figure)
    for row in inputs.rows(schema.PARITY):
        ious = [float(v) for v in row.get("ious") or [] if isinstance(v, (int, float))]
        if ious:
            tol = TOLERANCES.get(str(row.get("precision")))
            label = str(row.get("candidate", "?"))
            caption = f"{label}: IoU of each matched detection vs torch fp32 ({row.get('verdict')})"
            out.append(Figure("Parity IoU", caption, plots.iou_histogram(label, ious, tol.mean_iou if tol else None)))
    return out


def render(inputs: ReportInputs, threshold: float = DEFAULT_THRESHOLD) -> Report:
    """Tables, markdown and figures of ``inputs`` (nothing written)."""
    tables = all_tables(inputs, threshold)
    said = notices(inputs)
    subject = inputs.subject
    markdown = "\n".join(part for part in (to_markdown(tables, inputs.warnings, said=said, subject=subject),
                                            captures_markdown(inputs.captures)) if part)  # fmt: skip
    report = Report(markdown, tables, warnings=list(inputs.warnings), notices=said, suite=dict(inputs.tables),
                    device=inputs.device, captures=list(inputs.captures), subject=subject)
    report.figures = _figures(inputs, threshold)
    return report


def _td(column: str, text: str) -> str:
    word = text.split(" (")[-1].rstrip(")") if text.endswith(")") else text
    classes = [word] if word in ("slower", "faster") else []
    classes += ["prose"] if column in _PROSE_COLUMNS else [] if _NUMBER_LIKE.match(text) else ["text"]
    return f"<td class='{' '.join(classes)}'>{html.escape(text)}</td>" if classes else f"<td>{html.escape(text)}</td>"


def _table(title: str, columns: list[str], rows: list[list[str]], notes: list[str],
           headers: list[str] | None = None) -> str:  # fmt: skip
    head = "".join(f"<th>{html.escape(c)}</th>" for c in headers or columns)
    body = "".join("<tr>" + "".join(_td(c, v) for c, v in zip(columns, row)) + "</tr>" for row in rows)
    said = "".join(f"<p class='note'>{html.escape(n)}</p>" for n in notes)
    table = f"<table><tr>{head}</tr>{body}</table>" if columns else ""
    return f"<h3>{html.escape(title)}</h3>{said}{table}"


def _html_table(table: Table) -> str:
    return _table(table.title, table.columns(), table.cells(), [table.note] if table.note else [])


def _suite_tables(tables: dict[str, list[dict[str, Any]]], device: str | None) -> list[str]:
    """The suite's tables as the device allows: GPU-only tables and columns of a CPU run left out, notes said."""
    out = []
    for title, rows in tables.items():
        spec = schema.find_suite_table(title)
        if not rows:
            continue
        if spec is None:  # a report of another version: its columns as saved
            columns = list(dict.fromkeys(k for row in rows for k in row))
            notes: list[str] = []
        else:
            notes = spec.notes(device)
            columns = [] if spec.gpu_only and schema.on_cpu(device) else spec.names(rows, device=device)
        out.append(_table(title, columns, [[cell(row.get(c)) for c in columns] for row in rows], notes,
                          [spec.header(c) for c in columns] if spec is not None else None))
    return out


def to_html(report: Report, title: str = "Performance report") -> str:
    """One self-contained HTML page: notices (an injected run as a banner), warnings, tables, the figures by
    section (PNGs inlined as base64), then the suite's tables."""
    model = report.subject.get("model", "").split(" (")[0]
    size = report.subject.get("input size", "").removesuffix(" px")
    full = f"{title}: {model} {size}".rstrip() if model else title
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(full)}</title>",
             f"<style>{_CSS}</style></head><body><h1>{html.escape(full)}</h1>"]
    if report.subject:
        items = "".join(f"<li>{html.escape(key)}: {html.escape(value)}</li>" for key, value in report.subject.items())
        parts.append(f"<ul class='subject'>{items}</ul>")
    for notice in report.notices:
        kind = "injected" if notice.kind == "injected" else "run"
        parts.append(f"<div class='{kind}'>{html.escape(notice.text)}</div>" if kind == "injected" else
                     f"<p class='run'>{html.escape(notice.text)}</p>")  # fmt: skip
    parts += [f"<p class='warn'>warning: {html.escape(w)}</p>" for w in report.warnings]
    parts += [_html_table(t) for t in report.tables]
    section = None
    for figure in report.figures:
        if figure.section != section:
            parts.append(f"<h2>{html.escape(figure.section)}</h2>")
            section = figure.section
        encoded = base64.b64encode(figure.png).decode("ascii")
        kind = f" class='{figure.kind}'" if figure.kind else ""
        details = "".join(f"<li>{html.escape(line)}</li>" for line in figure.details)
        details = f"<details><summary>what is marked</summary><ul>{details}</ul></details>" if details else ""
        parts.append(f"<figure{kind}><img alt='{html.escape(figure.caption, quote=True)}' "
                     f"src='data:image/png;base64,{encoded}'><figcaption>{html.escape(figure.caption)}{details}"
                     "</figcaption></figure>")  # fmt: skip
    parts.append(captures_html(report.captures))
    suite = _suite_tables(report.suite, report.device)
    if suite:  # detail: folded, so that the page stays a glance long
        opening = (f"<h2>{html.escape(SUITE_SECTION)}</h2><details class='suite'><summary>{len(suite)} table(s) of "
                   "the run's own report: show</summary>")
        parts += [opening, *suite, "</details>"]
    parts.append("</body></html>")
    return "\n".join(parts)


def build_report(storage: Path | None, reports: Path | None, out: Path, *, machine_id: str | None = None,
                 verdicts: Path | None = None, threshold: float = DEFAULT_THRESHOLD,
                 store: str | None = None) -> tuple[list[Path], list[str]]:  # fmt: skip
    """Read the inputs and write ``out/summary.md`` and ``out/index.html`` atomically.

    Returns the written paths and the warnings (skipped input, also shown in both files). Raises
    `perf.runs.HistoryError` (nothing written) when the inputs are unusable or matplotlib is missing.
    """
    try:
        importlib.import_module("matplotlib")  # imported for real by perf.report.plots, lazily
    except ImportError as e:
        raise HistoryError(f"the HTML report needs matplotlib ({e}): pip install -e '.[report]'") from e
    inputs = load_inputs(storage, reports, machine_id=machine_id, verdicts=verdicts, store=store)
    report = render(inputs, threshold)
    page = to_html(report)
    paths = [atomic_write_text(out / SUMMARY, report.markdown), atomic_write_text(out / INDEX, page)]
    log.info("wrote %s (%d figures)", ", ".join(map(str, paths)), len(report.figures))
    return paths, report.warnings
