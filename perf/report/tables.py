"""The report's tables (latest run, end-to-end stages, parity, compare verdicts), what is said of the runs above
them, and the markdown summary. Each `Table` is one of `perf.report.schema.SUMMARY`'s, its cells text that carries
its unit (`perf.report.readable`), rendered as ``summary.md`` (no detail columns) and by `perf.report.html`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from detector.timing import STAGES, percentile
from perf.report import schema
from perf.report.changes import DEFAULT_THRESHOLD, history
from perf.report.inputs import ReportInputs
from perf.report.readable import change, duration, natural_key, number, ratio
from perf.report.schema import TableSpec
from perf.runs import BenchmarkRecord, describe_injected
from perf.tabletext import markdown_cell
from perf.verdicts import Verdicts, note_phrase


@dataclass(frozen=True)
class Table:
    """A table of already formatted cells: ``rows`` keyed by ``spec``'s column names (checked: a key the schema
    lacks is a `perf.report.schema.SchemaError`; a missing one is a blank cell)."""

    spec: TableSpec
    rows: list[Mapping[str, str]] = field(default_factory=list)
    note: str = ""

    def __post_init__(self) -> None:
        for row in self.rows:
            self.spec.check(row)

    def columns(self, detail: bool = True) -> list[str]:
        """The schema's columns in its order; ``detail=False``: without its detail columns (the markdown)."""
        return self.spec.names(self.rows, detail=detail)

    def cells(self, detail: bool = True) -> list[list[str]]:
        """Each row's cells in :meth:`columns` order ("" where a row has no value)."""
        columns = self.columns(detail)
        return [[str(row.get(c, "")) for c in columns] for row in self.rows]


@dataclass(frozen=True)
class Notice:
    """A line said above the tables: ``kind`` is ``"run"`` (what was measured where) or ``"injected"`` (a run
    made with test-only options: shown as a banner)."""

    kind: str
    text: str


def p99_seconds(bench: BenchmarkRecord) -> float:
    """p99 of the rounds (s): from the saved rounds, else ``extra_info["p99_ms"]``, else NaN."""
    if bench.has_rounds:
        return percentile(bench.data.tolist(), 99)
    value = bench.extra_info.get("p99_ms")
    return value / 1e3 if isinstance(value, (int, float)) else math.nan


def throughput(bench: BenchmarkRecord) -> float:
    """Images (frames) per second: ``images_per_s`` or ``e2e_fps`` from extra_info, else batch / median, else
    1 / median for samples in seconds per frame (`perf.measure.samples`)."""
    info = bench.extra_info
    for key in ("images_per_s", "e2e_fps"):
        if isinstance(info.get(key), (int, float)):
            return float(info[key])
    batch = info.get("batch", bench.params.get("batch"))
    median = bench.stat("median")
    if not median > 0:
        return math.nan
    if isinstance(batch, int) and not isinstance(batch, bool):
        return batch / median
    return 1 / median if bench.metric_info("time").get("unit") == "s per frame" else math.nan


def ordered(benches: Sequence[BenchmarkRecord]) -> list[BenchmarkRecord]:
    """``benches`` by group (in the order groups first appear), then by name with numbers in numeric order."""
    groups = list(dict.fromkeys(b.group or "ungrouped" for b in benches))
    return sorted(benches, key=lambda b: (groups.index(b.group or "ungrouped"), natural_key(b.name)))


def notices(inputs: ReportInputs) -> list[Notice]:
    """What the report is of (the newest run, its device and machine, how many runs) and every injected run."""
    latest = inputs.latest
    if latest is None:
        return []
    fingerprint = latest.fingerprint if isinstance(latest.fingerprint, Mapping) else {}
    device = inputs.device or "an unknown device"
    where = fingerprint.get("gpu_name") if device != "cpu" else fingerprint.get("cpu_model")
    out = [Notice("run", f"Run {latest.label} on {device}" + (f" ({where})" if where else "") +
                  f", machine `{latest.machine_id}`; {len(inputs.runs)} saved run(s) in the history.")]  # fmt: skip
    if latest.injected:
        out.append(Notice("injected", f"Injected run: run {latest.name} was made with "
                          f"{describe_injected(latest.injected)}, a test-only option. Its times are not the code's "
                          "own; the history never takes it as the base of a change."))  # fmt: skip
    older = [run for run in inputs.runs[:-1] if run.injected]
    if older:
        runs = ", ".join(r.name for r in older)
        options = "; ".join(sorted({describe_injected(run.injected) for run in older}))
        which = f"Run {runs} of the history was" if len(older) == 1 else f"Runs {runs} of the history were"
        out.append(Notice("injected", f"{which} made with a test-only option, {options}: drawn apart in the "
                          "history (grey crosses), never the base of a change."))  # fmt: skip
    return out


def benchmark_table(inputs: ReportInputs, threshold: float = DEFAULT_THRESHOLD) -> Table | None:
    """The newest run's benchmarks: median, IQR, p99, rounds, images/s, change vs the previous normal run, and the
    compare verdict when the verdicts judged this run."""
    latest = inputs.latest
    if latest is None:
        return None
    rows = []
    for bench in ordered(list(latest.benchmarks.values())):
        point = history(inputs, bench.fullname, threshold)[-1]
        moved = change(point.change)
        rows.append({
            "benchmark": bench.name, "group": bench.group or "ungrouped", "median": duration(bench.stat("median")),
            "IQR": duration(bench.stat("iqr")), "p99": duration(p99_seconds(bench)),
            "rounds": number(bench.stats.get("rounds")), "images/s": number(throughput(bench)),
            "vs previous": moved, "verdict": (inputs.verdict_for(latest, bench) or {}).get("verdict", ""),
        })  # fmt: skip
    note = ("vs previous: the median against the previous normal run (a difference of two runs, not a verdict). "
            "verdict: the gate's verdict of this run (slower, faster, no change, inconclusive), when it was the run "
            "judged; none otherwise.")
    return Table(schema.SUMMARY_BENCHMARKS, rows, note)


def stage_rows(inputs: ReportInputs) -> list[tuple[str, dict[str, float], float, int | None]]:
    """End-to-end (label, {stage: ms per frame}, e2e FPS, frames): the newest run's benchmarks, else the report."""
    latest = inputs.latest
    rows = []
    for bench in ordered(list(latest.benchmarks.values())) if latest else ():
        stages = bench.extra_info.get("stage_ms_per_frame")
        if isinstance(stages, dict):
            rows.append((bench.name, {k: float(v) for k, v in stages.items() if isinstance(v, (int, float))},
                         float(bench.extra_info.get("e2e_fps", math.nan)), bench.extra_info.get("frames")))
    if rows:
        return rows
    for row in inputs.rows(schema.STAGES_TABLE):
        rows.append((str(row.get("Model Type", "?")),
                     {s: float(row[s]) for s in STAGES if isinstance(row.get(s), (int, float))},
                     float(row.get("e2e FPS", math.nan)), row.get("frames")))
    return rows


def _slowest(stages: Mapping[str, float]) -> str:
    total = sum(stages.values())
    if not stages or total <= 0:
        return ""
    name = max(stages, key=lambda s: stages[s])
    return f"{name} ({stages[name] / total:.0%})"


def stages_table(inputs: ReportInputs) -> Table | None:
    rows = stage_rows(inputs)
    if not rows:
        return None
    return Table(schema.SUMMARY_STAGES, [
        {"case": label, "frames": number(frames), "FPS": number(fps), "slowest stage": _slowest(stages),
         "per frame": duration(sum(stages.values()) / 1e3) if stages else "",
         **{s: duration(stages[s] / 1e3) if s in stages else "" for s in STAGES}}
        for label, stages, fps, frames in rows])  # fmt: skip


def parity_table(inputs: ReportInputs) -> Table | None:
    rows = inputs.rows(schema.PARITY)
    if not rows:
        return None
    out = []
    for row in rows:
        ious = [v for v in row.get("ious") or [] if isinstance(v, (int, float))]
        out.append({"candidate": str(row.get("candidate", "?")), "verdict": str(row.get("verdict", "?")),
                    "match rate": number(row.get("match rate"), 4), "mean IoU": number(row.get("mean IoU"), 4),
                    "min IoU": number(min(ious), 4) if ious else "n/a", "p1 IoU": number(percentile(ious, 1), 4),
                    "matched pairs": str(len(ious)) if ious else "n/a",
                    "failures": "; ".join(row.get("failures") or [])})  # fmt: skip
    return Table(schema.SUMMARY_PARITY, out)


def _verdict_ratio(entry: dict[str, Any]) -> str:
    value, lo, hi = (entry.get(k) for k in ("ratio", "lo", "hi"))
    if not isinstance(value, (int, float)):
        return ""
    ci = f" [{number(lo)}, {number(hi)}]" if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else ""
    return f"{ratio(value)}{ci}"


def _verdict_note(inputs: ReportInputs, verdicts: Verdicts) -> str:
    """Whose verdicts these are: the run judged (or why they belong to no run), the baseline, the file."""
    judged = inputs.judged_run
    if judged is not None:
        whose = f"Verdicts of run {judged.name}"
    elif verdicts.current_run_id is None:
        whose = ("Verdicts of a run the file does not name (written before runs had ids): attached to no run of "
                 "the history")
    else:
        whose = (f"Verdicts of run id {verdicts.current_run_id[:12]}, which is not among these saved runs: attached "
                 "to no run of the history")
    injected = dict(verdicts.current_injected) or (dict(judged.injected) if judged is not None else {})
    marked = f" The judged run was made with {describe_injected(injected)}: a test of the gate." if injected else ""
    return f"{whose}; baseline {verdicts.baseline_label}. From `{verdicts.path}`.{marked}"


def verdict_table(inputs: ReportInputs) -> Table | None:
    """The compare verdicts: benchmark, verdict, baseline and current medians, ratio current/baseline, note; the
    table's note names the run judged and the baseline."""
    if inputs.verdicts is None:
        return None
    rows = []
    for e in sorted(inputs.verdicts.entries, key=lambda e: natural_key(str(e.get("name") or e.get("fullname")))):
        medians = {k: duration(float(e[key])) if isinstance(e.get(key), (int, float)) else ""
                   for k, key in (("baseline", "baseline_median_s"), ("current", "current_median_s"))}
        rows.append({"benchmark": str(e.get("name") or e.get("fullname")), "verdict": str(e["verdict"]), **medians,
                     "ratio [CI]": _verdict_ratio(e), "detectable": _detectable(e),
                     "note": note_phrase(e)})  # fmt: skip
    return Table(schema.SUMMARY_VERDICTS, rows, _verdict_note(inputs, inputs.verdicts))


def _detectable(entry: dict[str, Any]) -> str:
    """The smallest slowdown the gate could detect for this row ("+3.1%"), or "-" (verdicts from before #28)."""
    value = entry.get("detectable")
    return f"+{100 * value:.1f}%" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def change_table(inputs: ReportInputs) -> Table | None:
    """The change points of the histories: benchmark, the commit and run where the new level starts, the levels
    before and after, the size, the runs at the new level."""
    if not inputs.changes:
        return None
    names = {run.run_id: run.name for run in inputs.runs if run.run_id}
    rows = [{"benchmark": c.name, "changed at": f"{str(c.commit or '?')[:12]} (run {names.get(c.run_id, c.run_id[:12])})",
             "before": duration(c.change.before_s), "after": duration(c.change.after_s),
             "size": f"{100 * (c.change.ratio - 1):+.1f}%", "runs after": c.change.points_after}
            for c in sorted(inputs.changes, key=lambda c: natural_key(c.name))]  # fmt: skip
    return Table(schema.SUMMARY_CHANGES, rows, schema.SUMMARY_CHANGES.note)


def all_tables(inputs: ReportInputs, threshold: float = DEFAULT_THRESHOLD) -> list[Table]:
    """Every table that has rows, in report order (`perf.report.schema.SUMMARY`)."""
    tables = [benchmark_table(inputs, threshold), verdict_table(inputs), change_table(inputs), stages_table(inputs),
              parity_table(inputs)]
    return [t for t in tables if t is not None]


def to_markdown(tables: Sequence[Table], warnings: Sequence[str], title: str = "Performance report",
                said: Sequence[Notice] = (), subject: Mapping[str, str] | None = None) -> str:  # fmt: skip
    """The summary: the subject (`perf.subject.describe_subject`), the notices (an injected run as a bold quote),
    the warnings as a quoted list, then one markdown table per :class:`Table` without its detail columns (those
    are in the HTML page)."""
    from perf.subject import subject_markdown

    lines = [f"## {title}", ""]
    if subject:
        lines += [subject_markdown(subject)]
    for notice in said:
        lines += [f"> **{markdown_cell(notice.text)}**" if notice.kind == "injected" else markdown_cell(notice.text), ""]
    for w in warnings:
        lines.append(f"> warning: {markdown_cell(w)}")
    if warnings:
        lines.append("")
    for table in tables:
        lines += [f"### {table.spec.title}", ""]
        if table.note:
            lines += [table.note, ""]
        lines += [*table.spec.markdown(table.columns(detail=False), table.cells(detail=False), numbers_right=True), ""]
    if tables:
        lines += ["IQR, p99, rounds, every stage and the figures (latency, history, parity) are in the HTML report.",
                  ""]
    return "\n".join(lines)
