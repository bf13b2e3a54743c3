"""The report's tables (latest run, end-to-end stages, parity, compare verdicts) and the markdown summary.

Each :class:`Table` is one of `perf.report.schema.SUMMARY`'s, its rows keyed by the schema's column names; the
same objects are rendered as markdown (``summary.md``, for ``$GITHUB_STEP_SUMMARY``) and as HTML
(``perf.report.html``), every column of the schema in both. Times are shown in milliseconds with 4 significant
digits.
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
from perf.report.schema import TableSpec
from perf.runs import BenchmarkRecord


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

    @property
    def title(self) -> str:
        return self.spec.title

    @property
    def columns(self) -> list[str]:
        """Every column of the schema's table, in its order."""
        return self.spec.names(self.rows)

    def cells(self) -> list[list[str]]:
        """Each row's cells in :attr:`columns` order ("" where a row has no value)."""
        columns = self.columns
        return [[str(row.get(c, "")) for c in columns] for row in self.rows]


def ms(seconds: float) -> str:
    """Seconds -> milliseconds, 4 significant digits (``"n/a"`` for NaN)."""
    return num(seconds * 1e3)


def num(value: Any, digits: int = 4) -> str:
    """A number with ``digits`` significant digits; other values as text (empty for None)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "" if value is None else str(value)
    if isinstance(value, float) and value != value:
        return "n/a"
    return f"{value:.{digits}g}" if abs(value) < 1e5 else f"{value:,.0f}"


def p99_seconds(bench: BenchmarkRecord) -> float:
    """p99 of the rounds (s): from the saved rounds, else ``extra_info["p99_ms"]``, else NaN."""
    if bench.has_rounds:
        return percentile(bench.data.tolist(), 99)
    value = bench.extra_info.get("p99_ms")
    return value / 1e3 if isinstance(value, (int, float)) else math.nan


def throughput(bench: BenchmarkRecord) -> float:
    """Images (frames) per second: ``images_per_s`` or ``e2e_fps`` from extra_info, else batch / median."""
    info = bench.extra_info
    for key in ("images_per_s", "e2e_fps"):
        if isinstance(info.get(key), (int, float)):
            return float(info[key])
    batch = info.get("batch", bench.params.get("batch"))
    median = bench.stat("median")
    return batch / median if isinstance(batch, int) and median > 0 else math.nan


def benchmark_table(inputs: ReportInputs, threshold: float = DEFAULT_THRESHOLD) -> Table | None:
    """The newest run's benchmarks: median, IQR, p99, rounds, images/s, change vs the previous run."""
    latest = inputs.latest
    if latest is None:
        return None
    rows = []
    for bench in latest.benchmarks.values():
        point = history(inputs, bench.fullname, threshold)[-1]
        rows.append({
            "benchmark": bench.name, "group": bench.group or "ungrouped", "median ms": ms(bench.stat("median")),
            "IQR ms": ms(bench.stat("iqr")), "p99 ms": ms(p99_seconds(bench)), "rounds": num(bench.stats.get("rounds")),
            "images/s": num(throughput(bench)), "change": "" if point.change is None else f"{point.change:+.1%}",
            "marked": point.mark or "", "verdict": (inputs.verdict_for(bench) or {}).get("verdict", ""),
        })  # fmt: skip
    note = (f"Run {latest.label} of machine `{latest.machine_id}`, {len(inputs.runs)} saved run(s); "
            f"change: median vs the previous run, marked beyond {threshold:.0%}.")
    return Table(schema.SUMMARY_BENCHMARKS, rows, note)


def stage_rows(inputs: ReportInputs) -> list[tuple[str, dict[str, float], float, int | None]]:
    """End-to-end (label, {stage: ms per frame}, e2e FPS, frames): the newest run's benchmarks, else the report."""
    latest = inputs.latest
    rows = []
    for bench in latest.benchmarks.values() if latest else ():
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


def stages_table(inputs: ReportInputs) -> Table | None:
    rows = stage_rows(inputs)
    if not rows:
        return None
    return Table(schema.SUMMARY_STAGES, [
        {"case": label, "frames": num(frames), "e2e FPS": num(fps), **{s: num(stages.get(s)) for s in STAGES}}
        for label, stages, fps, frames in rows])


def parity_table(inputs: ReportInputs) -> Table | None:
    rows = inputs.rows(schema.PARITY)
    if not rows:
        return None
    out = []
    for row in rows:
        ious = [v for v in row.get("ious") or [] if isinstance(v, (int, float))]
        out.append({"candidate": str(row.get("candidate", "?")), "verdict": str(row.get("verdict", "?")),
                    "match rate": num(row.get("match rate")), "mean IoU": num(row.get("mean IoU")),
                    "min IoU": num(min(ious)) if ious else "n/a", "p1 IoU": num(percentile(ious, 1)),
                    "matched pairs": str(len(ious)) if ious else "n/a",
                    "failures": "; ".join(row.get("failures") or [])})  # fmt: skip
    return Table(schema.SUMMARY_PARITY, out)


def _verdict_ratio(entry: dict[str, Any]) -> str:
    ratio, lo, hi = (entry.get(k) for k in ("ratio", "lo", "hi"))
    if not isinstance(ratio, (int, float)):
        return ""
    ci = f" [{num(lo, 3)}, {num(hi, 3)}]" if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else ""
    return f"{num(ratio, 3)}{ci}"


def verdict_table(inputs: ReportInputs) -> Table | None:
    """The compare verdicts: benchmark, verdict, baseline and current medians, ratio current/baseline, note."""
    if inputs.verdicts is None:
        return None
    rows = []
    for e in inputs.verdicts.entries:
        medians = {k: ms(float(e[key])) if isinstance(e.get(key), (int, float)) else ""
                   for k, key in (("baseline ms", "baseline_median_s"), ("current ms", "current_median_s"))}
        rows.append({"benchmark": str(e.get("name") or e.get("fullname")), "verdict": str(e["verdict"]), **medians,
                     "ratio [CI]": _verdict_ratio(e), "note": str(e.get("note") or "")})  # fmt: skip
    return Table(schema.SUMMARY_VERDICTS, rows, f"From `{inputs.verdicts.path}`.")


def all_tables(inputs: ReportInputs, threshold: float = DEFAULT_THRESHOLD) -> list[Table]:
    """Every table that has rows, in report order (`perf.report.schema.SUMMARY`)."""
    tables = [benchmark_table(inputs, threshold), verdict_table(inputs), stages_table(inputs), parity_table(inputs)]
    return [t for t in tables if t is not None]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(tables: Sequence[Table], warnings: Sequence[str], title: str = "Performance report") -> str:
    """The summary: one markdown table per :class:`Table`, then the warnings as a quoted list."""
    lines = [f"## {title}", ""]
    for w in warnings:
        lines.append(f"> warning: {_md_cell(w)}")
    if warnings:
        lines.append("")
    for table in tables:
        lines += [f"### {table.title}", ""]
        if table.note:
            lines += [table.note, ""]
        lines.append("| " + " | ".join(_md_cell(c) for c in table.columns) + " |")
        lines.append("|" + "|".join("---" for _ in table.columns) + "|")
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.cells()]
        lines.append("")
    return "\n".join(lines)
