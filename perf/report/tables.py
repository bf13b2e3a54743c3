"""perf-report's summary tables (`perf.report.schema.SUMMARY`, cells as text that carries its unit), what is
said of the runs above them, and the markdown summary."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from detector.timing import STAGES, percentile
from perf.report import schema
from perf.report.changes import DEFAULT_THRESHOLD, history
from perf.report.inputs import ReportInputs
from perf.report.readable import as_float, change, duration, finite_numbers, natural_key, number, ratio
from perf.report.schema import TableSpec
from perf.runs import BenchmarkRecord, describe_injected
from perf.tabletext import markdown_cell
from perf.validate import is_number
from perf.verdicts import note_phrase


@dataclass(frozen=True)
class Table:
    """Formatted cells: ``rows`` keyed by ``spec``'s column names (a key the schema lacks is a
    `perf.report.schema.SchemaError`; a missing one a blank cell), and a ``note`` said above them."""

    spec: TableSpec
    rows: list[Mapping[str, str]] = field(default_factory=list)
    note: str = ""

    def __post_init__(self) -> None:
        for row in self.rows:
            self.spec.check(row)


class Notice(NamedTuple):
    """A line above the tables: ``kind`` ``"run"`` (what was measured where) or ``"injected"`` (shown as a banner)."""

    kind: str
    text: str


def throughput(bench: BenchmarkRecord) -> float:
    """Images (frames) per second: ``images_per_s`` or ``e2e_fps`` from extra_info, else batch / median, else
    1 / median for samples in seconds per frame (`perf.measure.samples`), else NaN."""
    info = bench.extra_info
    for key in ("images_per_s", "e2e_fps"):
        if is_number(info.get(key)):
            return float(info[key])
    batch, median = info.get("batch", bench.params.get("batch")), bench.stat("median")
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
    """What the report is of (the newest run, its device and machine, how many runs), every injected run."""
    if (latest := inputs.latest) is None:
        return []
    fingerprint = latest.fingerprint if isinstance(latest.fingerprint, Mapping) else {}
    device = inputs.device or "an unknown device"
    where = fingerprint.get("gpu_name" if device != "cpu" else "cpu_model")
    out = [Notice("run", f"Run {latest.label} on {device}" + (f" ({where})" if where else "") + f", machine "
                  f"`{latest.machine_id}`; {len(inputs.runs)} saved run(s) in the history.")]  # fmt: skip
    if latest.injected:
        out.append(Notice("injected", f"Injected run: run {latest.name} was made with "
                          f"{describe_injected(latest.injected)}, a test-only option. Its times are not the "
                          "code's own; the history never takes it as the base of a change."))  # fmt: skip
    if older := [run for run in inputs.runs[:-1] if run.injected]:
        runs = ", ".join(r.name for r in older)
        options = "; ".join(sorted({describe_injected(run.injected) for run in older}))
        which = f"Run {runs} of the history was" if len(older) == 1 else f"Runs {runs} of the history were"
        out.append(Notice("injected", f"{which} made with a test-only option, {options}: drawn apart in the "
                          "history (grey crosses), never the base of a change."))  # fmt: skip
    return out


def benchmark_table(inputs: ReportInputs, threshold: float = DEFAULT_THRESHOLD) -> Table | None:
    """The newest run's benchmarks: p99 of the saved rounds, else ``extra_info["p99_ms"]``; the verdict if judged."""
    if (latest := inputs.latest) is None:
        return None
    rows = []
    for bench in ordered(list(latest.benchmarks.values())):
        p99 = as_float(bench.extra_info.get("p99_ms")) / 1e3
        rows.append({
            "benchmark": bench.name, "group": bench.group or "ungrouped",
            "median": duration(bench.stat("median")), "IQR": duration(bench.stat("iqr")),
            "p99": duration(percentile(finite_numbers(bench.data.tolist()), 99) if bench.has_rounds else p99),
            "rounds": number(bench.stats.get("rounds")), "images/s": number(throughput(bench)),
            "vs previous": change(history(inputs, bench.fullname, threshold)[-1].change),
            "verdict": (inputs.verdict_for(latest, bench) or {}).get("verdict", ""),
        })  # fmt: skip
    return Table(schema.SUMMARY_BENCHMARKS, rows, (
        "vs previous: the median against the previous normal run (a difference of two runs, not a verdict). "
        "verdict: the gate's verdict of this run (slower, faster, no change, inconclusive), when it was the "
        "run judged; none otherwise."))


def stage_rows(inputs: ReportInputs) -> list[tuple[str, dict[str, float], float, int | None]]:
    """End-to-end (label, {stage: ms per frame}, e2e FPS, frames): the newest run's, else the suite report's."""
    rows = [(bench.name, _finite_stages(stages, stages), as_float(bench.extra_info.get("e2e_fps")),
             bench.extra_info.get("frames"))
            for bench in (ordered(list(inputs.latest.benchmarks.values())) if inputs.latest else ())
            if isinstance(stages := bench.extra_info.get("stage_ms_per_frame"), dict)]  # fmt: skip
    return rows or [(str(row.get("Model Type", "?")), _finite_stages(row, STAGES), as_float(row.get("e2e FPS")),
                     row.get("frames")) for row in inputs.rows(schema.STAGES_TABLE)]  # fmt: skip


def _finite_stages(row: Mapping[str, object], stages: Iterable[str]) -> dict[str, float]:
    """``{stage: ms}`` of the ``stages`` ``row`` measured: a null, NaN or infinite cell is a stage not shown."""
    return {str(s): value for s in stages if math.isfinite(value := as_float(row.get(s)))}


def stages_table(inputs: ReportInputs) -> Table | None:
    """The end-to-end cases: frames, FPS, time per frame, the slowest stage (its share) and every stage."""
    out = []
    for label, stages, fps, frames in stage_rows(inputs):
        total = sum(stages.values())
        slowest = max(stages, key=stages.__getitem__) if stages and total > 0 else ""
        out.append({"case": label, "frames": number(frames), "FPS": number(fps),
                    "slowest stage": f"{slowest} ({stages[slowest] / total:.0%})" if slowest else "",
                    "per frame": duration(total / 1e3) if stages else "",
                    **{s: duration(stages[s] / 1e3) if s in stages else "" for s in STAGES}})  # fmt: skip
    return Table(schema.SUMMARY_STAGES, out) if out else None


def parity_table(inputs: ReportInputs) -> Table | None:
    """Each candidate against torch fp32: verdict, match rate, mean / min / p1 IoU of the matched pairs."""
    out = []
    for row in inputs.rows(schema.PARITY):
        ious = finite_numbers(row.get("ious"))
        out.append({"candidate": str(row.get("candidate", "?")), "verdict": str(row.get("verdict", "?")),
                    **{k: number(row.get(k), 4) for k in ("match rate", "mean IoU")},
                    "p1 IoU": number(percentile(ious, 1), 4),
                    "min IoU": number(min(ious), 4) if ious else "n/a",
                    "matched pairs": str(len(ious)) if ious else "n/a",
                    "failures": "; ".join(row.get("failures") or [])})  # fmt: skip
    return Table(schema.SUMMARY_PARITY, out) if out else None


def verdict_table(inputs: ReportInputs) -> Table | None:
    """The compare verdicts: medians, ratio current/baseline [interval], the smallest detectable slowdown ("-" in a
    file from before #28), note; the table's note names the run judged (or why none), the baseline and the file."""
    if (verdicts := inputs.verdicts) is None:
        return None
    rows = []
    for e in sorted(verdicts.entries, key=lambda e: natural_key(str(e.get("name") or e.get("fullname")))):
        value, lo, hi, found = (e.get(k) for k in ("ratio", "lo", "hi", "detectable"))
        ci = f" [{number(lo)}, {number(hi)}]" if is_number(lo) and is_number(hi) else ""
        rows.append({"benchmark": str(e.get("name") or e.get("fullname")), "verdict": str(e["verdict"]),
                     **{k: duration(float(e[key])) if is_number(e.get(key)) else ""
                        for k, key in (("baseline", "baseline_median_s"), ("current", "current_median_s"))},
                     "ratio [CI]": f"{ratio(value)}{ci}" if is_number(value) else "",
                     "detectable": f"+{100 * found:.1f}%" if is_number(found) else "-",
                     "note": note_phrase(e)})  # fmt: skip
    if (judged := next((run for run in inputs.runs if verdicts.judges(run)), None)) is not None:
        whose = f"Verdicts of run {judged.name}"
    else:
        unknown = ("a run the file does not name (written before runs had ids)" if verdicts.current_run_id is None
                   else f"run id {verdicts.current_run_id[:12]}, which is not among these saved runs")
        whose = f"Verdicts of {unknown}: attached to no run of the history"
    injected = dict(verdicts.current_injected) or (dict(judged.injected) if judged is not None else {})
    marked = f" The judged run was made with {describe_injected(injected)}: a test of the gate." if injected else ""
    return Table(schema.SUMMARY_VERDICTS, rows,
                 f"{whose}; baseline {verdicts.baseline_label}. From `{verdicts.path}`.{marked}")


def change_table(inputs: ReportInputs) -> Table | None:
    """The histories' change points: benchmark, where the new level starts, levels before and after, size, runs."""
    if not inputs.changes:
        return None
    names = {run.run_id: run.name for run in inputs.runs if run.run_id}
    rows = [{"benchmark": c.name, "changed at": f"{str(c.commit or '?')[:12]} (run "
             f"{names.get(c.run_id, c.run_id[:12])})", "before": duration(c.change.before_s),
             "after": duration(c.change.after_s), "size": f"{100 * (c.change.ratio - 1):+.1f}%",
             "runs after": c.change.points_after}
            for c in sorted(inputs.changes, key=lambda c: natural_key(c.name))]  # fmt: skip
    return Table(schema.SUMMARY_CHANGES, rows, schema.SUMMARY_CHANGES.note)


def to_markdown(tables: Sequence[Table], warnings: Sequence[str], title: str = "Performance report",
                said: Sequence[Notice] = (), subject: Mapping[str, str] | None = None) -> str:  # fmt: skip
    """The summary: an injected run's notice as a bold quote, the warnings quoted, tables less detail columns."""
    from perf.subject import subject_markdown

    lines = [f"## {title}", "", *([subject_markdown(subject)] if subject else [])]
    for notice in said:
        text = markdown_cell(notice.text)
        lines += [f"> **{text}**" if notice.kind == "injected" else text, ""]
    lines += [*(f"> warning: {markdown_cell(w)}" for w in warnings), *([""] if warnings else [])]
    for table in tables:
        lines += [f"### {table.spec.title}", "", *([table.note, ""] if table.note else []),
                  *table.spec.markdown(table.rows, detail=False, numbers_right=True), ""]
    if tables:
        lines += ["IQR, p99, rounds, every stage and the figures (latency, history, parity) are in the HTML "
                  "report.", ""]
    return "\n".join(lines)
