"""perf-report's output: ``summary.md`` and ``index.html`` (one self-contained page, figures inlined),
rendered in memory, then written atomically; what each holds: docs/method.md, section 9."""

from __future__ import annotations

import base64
import contextlib
import logging
from dataclasses import dataclass, field
from html import escape
from itertools import groupby
from pathlib import Path
from string import Template
from typing import Any

from detector.fileio import atomic_path
from perf.report import plots, schema
from perf.report.captures import captures_html, captures_markdown
from perf.report.changes import DEFAULT_THRESHOLD, history
from perf.report.inputs import ReportInputs, load_inputs
from perf.report.readable import finite_numbers
from perf.report.suite import PerfReport
from perf.report.tables import (Notice, Table, benchmark_table, change_table, notices, ordered, parity_table,
                                stage_rows, stages_table, to_markdown, verdict_table)
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
#: The page; ``body``: its parts, a line each.
_PAGE = Template("""<!DOCTYPE html><html><head><meta charset='utf-8'><title>$title</title>
<style>$css</style></head><body><h1>$title</h1>
$body
</body></html>""")


@dataclass(frozen=True)
class Figure:
    """One figure of the page: ``section`` heading, ``caption``, PNG bytes, CSS ``kind`` (its class) and ``details``
    (lines folded under the caption: what each mark of the history is)."""

    section: str
    caption: str
    png: bytes
    kind: str = ""
    details: tuple[str, ...] = ()


@dataclass
class Report:
    """The rendered report; ``captures``: `perf.report.captures.CaptureRow`, ``subject``: shown first."""

    markdown: str
    tables: list[Table]
    figures: list[Figure] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    suite: PerfReport = field(default_factory=PerfReport)
    captures: list[Any] = field(default_factory=list)
    subject: dict[str, str] = field(default_factory=dict)


def _history_figure(inputs: ReportInputs, threshold: float) -> list[Figure]:
    """One figure of small multiples (none without runs): a panel per benchmark, grouped, in numeric name order."""
    names = dict.fromkeys(name for run in reversed(inputs.runs) for name in run.benchmarks)
    series = (history(inputs, name, threshold) for name in names)
    if not (by_name := {points[-1].bench.fullname: points for points in series if points}):
        return []
    order = ordered([points[-1].bench for points in by_name.values()])
    grouped = len({b.group for b in order}) > 1
    panels = [(f"{b.group or 'ungrouped'} · {plots.short_name(b)}" if grouped else plots.short_name(b),
               by_name[b.fullname]) for b in order]  # fmt: skip
    labels = [str(r.number) if r.number is not None else r.path.stem[:8] for r in inputs.runs]
    marks = tuple(f"{plots.short_name(p.bench)}, run {p.run.name}: {p.mark or 'change point'}, {p.reason}"
                  for _, points in panels for p in points if p.mark or p.level)  # fmt: skip
    caption = (f"{len(panels)} benchmark(s) over {len(inputs.runs)} saved run(s), each panel in its own time unit; "
               f"{len(marks) or 'no'} point(s) marked.")
    return [Figure(HISTORY, caption, plots.history_grid(panels, labels, threshold), kind="history", details=marks)]


def _figures(inputs: ReportInputs, threshold: float) -> list[Figure]:
    """The newest run's latency distributions (a figure per group), its stages, the history, each parity IoU."""
    from perf.measure.parity import TOLERANCES

    out = []
    if (latest := inputs.latest) is not None:
        for group, each in groupby(ordered(list(latest.benchmarks.values())), key=lambda b: b.group or "ungrouped"):
            benches = list(each)
            raw = "every round" if all(b.has_rounds for b in benches) else "saved statistics (no rounds saved)"
            caption = (f"{group}: run {latest.label}, from {raw}; a violin from {plots.VIOLIN_MIN_ROUNDS} rounds on, "
                       "else a box (min to max) with each round as a dot")
            out.append(Figure("Latency distribution", caption, plots.latency_distribution(benches, group)))
    if rows := stage_rows(inputs):
        out.append(Figure("End-to-end stages", "ms per frame of each pipeline stage", plots.stage_breakdown(rows)))
    out += _history_figure(inputs, threshold)
    for row in inputs.rows(schema.PARITY):
        if ious := finite_numbers(row.get("ious")):
            tol, label = TOLERANCES.get(str(row.get("precision"))), str(row.get("candidate", "?"))
            caption = f"{label}: IoU of each matched detection vs torch fp32 ({row.get('verdict')})"
            out.append(Figure("Parity IoU", caption, plots.iou_histogram(label, ious, tol.mean_iou if tol else None)))
    return out


def render(inputs: ReportInputs, threshold: float = DEFAULT_THRESHOLD) -> Report:
    """Tables (those with rows, in `perf.report.schema.SUMMARY` order), markdown and figures of ``inputs``."""
    tables = [t for t in (benchmark_table(inputs, threshold), verdict_table(inputs), change_table(inputs),
                          stages_table(inputs), parity_table(inputs)) if t is not None]  # fmt: skip
    said, subject = notices(inputs), inputs.subject
    markdown = "\n".join(part for part in (to_markdown(tables, inputs.warnings, said=said, subject=subject),
                                            captures_markdown(inputs.captures)) if part)  # fmt: skip
    return Report(markdown, tables, _figures(inputs, threshold), list(inputs.warnings), said,
                  PerfReport(dict(inputs.tables), inputs.device), list(inputs.captures), subject)


def _section(title: str, notes: list[str], table: str) -> str:
    """A table's heading, notes and table (``""``: none) on one line of the page."""
    return f"<h3>{escape(title)}</h3>" + "".join(f"<p class='note'>{escape(n)}</p>" for n in notes) + table


def _figure(figure: Figure) -> str:
    """``figure`` as a ``<figure>``: its PNG inlined as base64, its caption, its details folded."""
    kind = f" class='{figure.kind}'" if figure.kind else ""
    details = "".join(f"<li>{escape(line)}</li>" for line in figure.details)
    details = f"<details><summary>what is marked</summary><ul>{details}</ul></details>" if details else ""
    png = base64.b64encode(figure.png).decode("ascii")
    return (f"<figure{kind}><img alt='{escape(figure.caption)}' src='data:image/png;base64,{png}'>"
            f"<figcaption>{escape(figure.caption)}{details}</figcaption></figure>")  # fmt: skip


def to_html(report: Report, title: str = "Performance report") -> str:
    """One self-contained HTML page (`_PAGE`): an injected run's notice as a banner, the suite's tables folded."""
    model = report.subject.get("model", "").split(" (")[0]
    size = report.subject.get("input size", "").removesuffix(" px")
    items = "".join(f"<li>{escape(key)}: {escape(value)}</li>" for key, value in report.subject.items())
    lines = [f"<ul class='subject'>{items}</ul>"] if report.subject else []
    lines += [f"<div class='injected'>{escape(n.text)}</div>" if n.kind == "injected" else
              f"<p class='run'>{escape(n.text)}</p>" for n in report.notices]  # fmt: skip
    lines += [f"<p class='warn'>warning: {escape(w)}</p>" for w in report.warnings]
    lines += [_section(t.spec.title, [t.note] if t.note else [], t.spec.html(t.rows)) for t in report.tables]
    for section, figures in groupby(report.figures, key=lambda figure: figure.section):
        lines += [f"<h2>{escape(section)}</h2>", *map(_figure, figures)]
    lines.append(captures_html(report.captures))
    device = report.suite.device
    suite = [_section(spec.title, spec.notes(device), spec.html(rows, device)) for spec, rows in report.suite.shown()]
    if suite:  # detail: folded, so that the page stays a glance long
        lines += [f"<h2>{escape(SUITE_SECTION)}</h2><details class='suite'><summary>{len(suite)} table(s) of "
                  "the run's own report: show</summary>", *suite, "</details>"]  # fmt: skip
    full = f"{title}: {model} {size}".rstrip() if model else title
    return _PAGE.substitute(title=escape(full), css=_CSS, body="\n".join(lines))


def build_report(storage: Path | None, reports: Path | None, out: Path, *, machine_id: str | None = None,
                 verdicts: Path | None = None, threshold: float = DEFAULT_THRESHOLD,
                 store: str | None = None) -> tuple[list[Path], list[str]]:  # fmt: skip
    """Write ``out/summary.md`` and ``out/index.html``, both or neither; their paths and the warnings (also shown
    in both). `perf.runs.HistoryError` (nothing written): unusable or unreadable inputs, or no matplotlib; an
    OSError: ``out`` cannot be written (nothing written either)."""
    try:
        import matplotlib  # noqa: F401 - imported for real by perf.report.plots, lazily
    except ImportError as e:
        raise HistoryError(f"the HTML report needs matplotlib ({e}): pip install -e '.[report]'") from e
    try:
        inputs = load_inputs(storage, reports, machine_id=machine_id, verdicts=verdicts, store=store)
        report = render(inputs, threshold)
        pages = {out / SUMMARY: report.markdown, out / INDEX: to_html(report)}
    except OSError as e:  # a folder or file the report reads: never "cannot write"
        raise HistoryError(f"cannot read '{e.filename}': {e.strerror or e}" if e.filename else
                           f"cannot read the report's inputs: {e.strerror or e}") from e  # fmt: skip
    paths = _write_all(pages)
    log.info("wrote %s (%d figures)", ", ".join(map(str, paths)), len(report.figures))
    return paths, report.warnings


def _write_all(files: dict[Path, str]) -> list[Path]:
    """Write every file (UTF-8) or none: each to a temporary file beside it (`detector.fileio.atomic_path`, which
    syncs it), renamed only once all are written; any failure removes them all and leaves the files as they were."""
    with contextlib.ExitStack() as stack:
        for path, text in files.items():
            stack.enter_context(atomic_path(path)).write_bytes(text.encode("utf-8"))
    return list(files)
