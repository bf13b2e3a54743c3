"""The report's tables (latest run, end-to-end stages, parity, compare verdicts) and the markdown summary.

The same :class:`Table` objects are rendered as markdown (``summary.md``, for ``$GITHUB_STEP_SUMMARY``) and as
HTML (``perf.report.html``). Times are shown in milliseconds with 4 significant digits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from detector.timing import STAGES, percentile
from perf.report.changes import DEFAULT_THRESHOLD, history
from perf.report_inputs import PARITY_TABLE, STAGES_TABLE, Bench, ReportInputs

@dataclass(frozen=True)
class Table:
    """A titled table of already formatted cells."""

    title: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]]
    note: str = ""


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


def p99_seconds(bench: Bench) -> float:
    """p99 of the rounds (s): from the saved rounds, else ``extra_info["p99_ms"]``, else NaN."""
    if bench.data:
        return percentile(bench.data, 99)
    value = bench.extra_info.get("p99_ms")
    return value / 1e3 if isinstance(value, (int, float)) else math.nan


def throughput(bench: Bench) -> float:
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
    for bench in latest.benchmarks:
        point = history(inputs, bench.fullname, threshold)[-1]
        change = "" if point.change is None else f"{point.change:+.1%}"
        verdict = (inputs.verdict_for(bench) or {}).get("verdict", "")
        flag = {"slower": "slower", "faster": "faster"}.get(point.mark or "", "")
        rows.append((bench.name, bench.group, ms(bench.stat("median")), ms(bench.stat("iqr")), ms(p99_seconds(bench)),
                     num(bench.stats.get("rounds")), num(throughput(bench)), change, flag, verdict))
    note = (f"Run {latest.label} of machine `{latest.machine_id}`, {len(inputs.runs)} saved run(s); "
            f"change: median vs the previous run, marked beyond {threshold:.0%}.")
    return Table("Benchmarks (latest run)", ("benchmark", "group", "median ms", "IQR ms", "p99 ms", "rounds",
                                             "images/s", "change", "marked", "verdict"), rows, note)


def stage_rows(inputs: ReportInputs) -> list[tuple[str, dict[str, float], float, int | None]]:
    """End-to-end (label, {stage: ms per frame}, e2e FPS, frames): the newest run's benchmarks, else the report."""
    latest = inputs.latest
    rows = []
    for bench in latest.benchmarks if latest else ():
        stages = bench.extra_info.get("stage_ms_per_frame")
        if isinstance(stages, dict):
            rows.append((bench.name, {k: float(v) for k, v in stages.items() if isinstance(v, (int, float))},
                         float(bench.extra_info.get("e2e_fps", math.nan)), bench.extra_info.get("frames")))
    if rows:
        return rows
    for row in inputs.tables.get(STAGES_TABLE, []):
        rows.append((str(row.get("Model Type", "?")),
                     {s: float(row[s]) for s in STAGES if isinstance(row.get(s), (int, float))},
                     float(row.get("e2e FPS", math.nan)), row.get("frames")))
    return rows


def stages_table(inputs: ReportInputs) -> Table | None:
    rows = stage_rows(inputs)
    if not rows:
        return None
    return Table("End-to-end (ms per frame)", ("case", "frames", "e2e FPS", *STAGES),
                 [(label, num(frames), num(fps), *(num(stages.get(s)) for s in STAGES))
                  for label, stages, fps, frames in rows])


def parity_table(inputs: ReportInputs) -> Table | None:
    rows = inputs.tables.get(PARITY_TABLE, [])
    if not rows:
        return None
    out = []
    for row in rows:
        ious = [v for v in row.get("ious") or [] if isinstance(v, (int, float))]
        out.append((str(row.get("candidate", "?")), str(row.get("verdict", "?")), num(row.get("match rate")),
                    num(row.get("mean IoU")), num(min(ious)) if ious else "n/a", num(percentile(ious, 1)),
                    str(len(ious)) if ious else "n/a", "; ".join(row.get("failures") or [])))
    return Table("Parity vs torch fp32", ("candidate", "verdict", "match rate", "mean IoU", "min IoU", "p1 IoU",
                                         "matched pairs", "failures"), out)


def _verdict_ratio(entry: dict[str, Any]) -> str:
    ratio, lo, hi = (entry.get(k) for k in ("ratio", "lo", "hi"))
    if not isinstance(ratio, (int, float)):
        return ""
    ci = f" [{num(lo, 3)}, {num(hi, 3)}]" if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else ""
    return f"{num(ratio, 3)}{ci}"


def verdict_table(inputs: ReportInputs) -> Table | None:
    """The compare verdicts: benchmark, verdict, baseline and current medians, ratio current/baseline, note."""
    if not inputs.verdicts:
        return None
    entries = {id(e): e for e in inputs.verdicts.values()}.values()
    rows = []
    for e in entries:
        medians = [ms(float(e[k])) if isinstance(e.get(k), (int, float)) else ""
                   for k in ("baseline_median_s", "current_median_s")]
        rows.append((str(e.get("name") or e.get("fullname")), str(e["verdict"]), *medians, _verdict_ratio(e),
                     str(e.get("note") or "")))
    return Table("Compare verdicts", ("benchmark", "verdict", "baseline ms", "current ms", "ratio [CI]", "note"),
                 rows, f"From `{inputs.verdict_file}`.")


def all_tables(inputs: ReportInputs, threshold: float = DEFAULT_THRESHOLD) -> list[Table]:
    """Every table that has rows, in report order."""
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
        lines.append("| " + " | ".join(table.columns) + " |")
        lines.append("|" + "|".join("---" for _ in table.columns) + "|")
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows]
        lines.append("")
    return "\n".join(lines)
