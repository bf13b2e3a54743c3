"""Every table of the suite's report (`SUITE`) and perf-report's summary (`SUMMARY`), declared once; a table
or row key not declared here is a `SchemaError`. What shows where: docs/method.md, section 9."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from detector.timing import STAGES
from perf.report.readable import number
from perf.tabletext import html_table, markdown_table
from perf.validate import NUMBER, NUMBERS, TEXT, TEXTS


class SchemaError(ValueError):
    """A row or table the report schema does not declare; the message names it and what is declared."""


@dataclass(frozen=True)
class Column:
    """One column: ``name``, the row key (``{}`` in it: a family of keys); ``unit`` ("" for labels, counts and
    text; ``time``: each cell carries its own); ``kind``; the flags: docs/method.md, section 9."""

    name: str
    unit: str = ""
    kind: str = NUMBER
    detail: bool = False
    gpu_only: bool = False
    header: str = ""

    @property
    def family(self) -> bool:
        return "{}" in self.name

    def matches(self, key: str) -> bool:
        """Whether row key ``key`` is this column (its name, or one of a family's names)."""
        return re.fullmatch(re.escape(self.name).replace(r"\{\}", ".+"), key) is not None


#: A `NUMBER` column: `Column` with its default kind.
num = Column
#: A `TEXT` column: ``text(name, unit="", **flags)``.
text = functools.partial(Column, kind=TEXT)


#: The most columns a markdown table may have: what fits a GitHub page (job summary, pull request).
MARKDOWN_COLUMNS = 6
#: Columns whose cells are prose: wrapped in the HTML page (`TableSpec.html`).
PROSE = frozenset({"note", "failures", "why", "per class AP@0.5", "reasons"})
_Rows = Sequence[Mapping[str, object]]


def on_cpu(device: str | None) -> bool:
    """Whether ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``; None when unknown) is known to be a CPU."""
    return device is not None and device.split(":")[0] == "cpu"


@dataclass(frozen=True)
class TableSpec:
    """One table: ``key`` (its constant's name), ``title`` (its heading and key in the saved JSON), the
    ``columns`` shown in order; ``kept``, the notes and ``gpu_only``: docs/method.md, section 9."""

    key: str
    title: str
    columns: tuple[Column, ...]
    kept: tuple[Column, ...] = ()
    note: str = ""
    cpu_note: str = ""
    gpu_only: bool = False

    def column(self, key: str) -> Column | None:
        """The declared column (shown or kept) that row key ``key`` is, or None."""
        return next((c for c in (*self.columns, *self.kept) if c.matches(key)), None)

    def check(self, row: Mapping[str, object]) -> None:
        """`SchemaError` naming the first key of ``row`` this table does not declare."""
        for key in row:
            if not isinstance(key, str) or self.column(key) is None:
                declared = ", ".join(repr(c.name) for c in (*self.columns, *self.kept))
                raise SchemaError(f"report table {self.title!r} has no column {key!r} (its columns: "
                                  f"{declared}); declare it in perf/report/schema.py or rename the key")

    def names(self, rows: _Rows = (), *, detail: bool = True, device: str | None = None) -> list[str]:
        """The row keys to render in declared order (a family: the keys of ``rows`` that match it), less the
        detail columns (``detail=False``) and, on a CPU ``device``, the GPU-only ones."""
        cpu = on_cpu(device)
        keys = list(dict.fromkeys(k for row in rows for k in row))
        return [] if self.gpu_only and cpu else [
            name for c in self.columns if (detail or not c.detail) and not (c.gpu_only and cpu)
            for name in ([k for k in keys if c.matches(k)] if c.family else [c.name])]  # fmt: skip

    def headers(self, names: Sequence[str]) -> list[str]:
        """The heading of each row key of ``names``: its column's ``header`` when it has one, else the key."""
        return [(column.header if (column := self.column(n)) else "") or n for n in names]

    def _cells(self, rows: _Rows, detail: bool, device: str | None) -> tuple[list[str], list[list[str]]]:
        """The keys `names` shows and each row's cells: a float to 4 significant digits, None or missing blank."""
        names = self.names(rows, detail=detail, device=device)
        return names, [[number(v, 4) if isinstance(v := row.get(c), float) else "" if v is None else str(v)
                        for c in names] for row in rows]  # fmt: skip

    def markdown(self, rows: _Rows, *, detail: bool = True, device: str | None = None,
                 numbers_right: bool = False) -> list[str]:  # fmt: skip
        """The markdown table's lines (none when no column is shown); ``numbers_right``: unit columns aligned right."""
        names, cells = self._cells(rows, detail, device)
        right = [n for n in names if numbers_right and (c := self.column(n)) and c.unit]
        return markdown_table(self.headers(names), cells, self.headers(right)) if names else []

    def html(self, rows: _Rows, device: str | None = None) -> str:
        """The HTML table of ``rows``, the `PROSE` columns wrapped ("" when no column is shown)."""
        names, cells = self._cells(rows, True, device)
        return html_table(self.headers(names), cells, prose=PROSE) if names else ""

    def notes(self, device: str | None = None) -> list[str]:
        """What to say under the title on ``device``: the note, and on a CPU run the CPU note."""
        return [n for n in (self.note, self.cpu_note if on_cpu(device) else "") if n]


_STAGE_MS = tuple(num(stage, "ms per frame") for stage in STAGES)

# The suite's report: what tests add rows to.
LAB = TableSpec("LAB", "End-to-end (the lab's table)", (
    text("Model Type"), text("Model Input Size", "px"), num("Inference Speed (FPS)", "FPS"),
    num("End-to-end speed (FPS)", "FPS")))
STAGES_TABLE = TableSpec("STAGES_TABLE", "End-to-end stages (ms per frame)", (
    text("Model Type"), num("frames", "frames"), *_STAGE_MS, num("e2e FPS", "FPS")))
STAGE_SPREAD = TableSpec("STAGE_SPREAD", "End-to-end stage spread (IQR of the blocks, ms per frame)", (
    text("Model Type"), num("blocks"), num("frames per block", "frames"), *_STAGE_MS))
INFERENCE = TableSpec("INFERENCE", "Inference", (
    text("case"), num("batch", "images"), num("median ms", "ms"), num("p99 ms", "ms"), num("images/s", "img/s"),
    *(num(f"{io} ms", "ms", gpu_only=io != "compute", header=f"{io} ms (host I/O loop)")
      for io in ("h2d", "compute", "d2h", "enqueue")), num("host ms (sync)", "ms"), num("warm-up s", "s")),
    note="Three measurements. median ms, p99 ms, images/s: the benchmark itself (input and output on the device; GPU "
    "time from CUDA events on a GPU, host time on a CPU), what --perf-compare judges. Columns marked (host I/O loop): "
    "a separate loop of a few calls with the input and output on the host (what a pipeline pays), each stage timed "
    "on its own; its compute is not a part of the median and may exceed it. host ms (sync): a third loop, host wall "
    "time of each call with synchronisation.",
    cpu_note="On a CPU there are no host-device copies and no asynchronous launches: h2d, d2h and enqueue are left "
    "out.")
SPEEDUP = TableSpec("SPEEDUP", "Speed-up vs torch fp32 (same run)", (
    text("case"), num("batch", "images"), num("median ms", "ms"), num("torch fp32 median ms", "ms"),
    num("speed-up", "x")))
MULTI_GPU = TableSpec("MULTI_GPU", "Multi-GPU throughput", (
    text("worker"), text("GPU"), text("case"), num("batch", "images"), num("images/s (all at once)", "img/s"),
    num("images/s (alone)", "img/s"), num("scaling", "x")))
HARNESS = TableSpec("HARNESS", "Harness overhead", (
    text("case"), num("batch", "images"), num("suite median ms", "ms"), num("bare loop ms/call", "ms"),
    num("bare per-call events ms", "ms"), num("suite FPS", "img/s"), num("bare loop FPS", "img/s"),
    num("overhead", "fraction", gpu_only=True)),
    note="overhead = suite median / bare loop ms per call - 1: what pytest-benchmark and the suite's clock add to a "
    "call on a GPU (0.02 = 2%).",
    cpu_note="On a CPU this is a smoke test: a handful of calls per reading and no CUDA events, so the suite and the "
    "bare loop differ by noise alone; the overhead is not shown (run it on a GPU for that figure).")
PARITY = TableSpec("PARITY", "Parity vs torch fp32", (
    text("candidate"), text("verdict"), num("reference boxes", "detections"), num("match rate", "fraction"),
    num("mean IoU"), num("max score diff", "score"), num("class agreement", "fraction"),
    num("borderline", "detections"), num("score max abs", "score"), num("box max abs px", "px")),
    kept=(text("backend"), text("precision"), Column("failures", "", TEXTS), Column("ious", "IoU", NUMBERS)))
ACCURACY = TableSpec("ACCURACY", "Accuracy vs ground truth", (
    text("backend"), num("mAP@0.5"), num("mAP@0.5:0.95"), text("per class AP@0.5")))
PIPELINED_PATHS = TableSpec("PIPELINED_PATHS", "Pipelined end to end: each path alone", (
    text("case"), text("path"), num("FPS", "FPS"), num("ms/frame", "ms per frame")))
PIPELINED_RATIOS = TableSpec("PIPELINED_RATIOS", "Pipelined vs its slowest stage and the sequential loop", (
    text("case"), num("frames", "frames"), text("pipelined"), num("pipelined FPS", "FPS"), text("slowest stage"),
    num("slowest stage FPS", "FPS"), num("pipeline/slowest stage", "x"), text("meets 0.9", gpu_only=True),
    num("pipeline/sequential", "x")),
    note="pipeline/slowest stage: the best pipelined FPS over the slowest stage measured alone, the most a pipeline "
    "can reach ('meets 0.9': at least 0.9 of it, the GPU target; unknown above 1, where the stage alone ran at "
    "another speed of a CPU whose speed moves, as the H100 machines' vCPUs do); pipeline/sequential: over the "
    "sequential loop (above 1 when overlapping the stages pays).",
    cpu_note="On a CPU the video is cut to a few frames and every stage competes for the same cores: the ratios are a "
    "smoke test, and the 0.9 target, which holds for a GPU only, is not shown.")
SKIP_INTERVAL = TableSpec("SKIP_INTERVAL", "Skip interval (DeepStream interval): FPS and mAP", (
    text("case"), num("N", "frames skipped"), num("inferred frames", "frames"), num("FPS, no video written", "FPS"),
    num("mAP@0.5"), num("mAP@0.5:0.95"), text("note")),
    note="N: frames skipped between inferences, as DeepStream's interval: N=0 infers every frame, N=1 frames 0,2,4,"
    "..., N=2 frames 0,3,6,..., N=4 frames 0,5,10,...; a constant-velocity IoU tracker moves the last boxes over the "
    "skipped frames. FPS: every frame (read, preprocess, infer, postprocess and track: the sequential loop, no video "
    "written, as DeepStream's figures use a fake sink) over wall time; mAP over the same frames against the video's "
    "ground truth (n/a without one, the note says why).",
    cpu_note="On a CPU the video is cut to a few frames: FPS and mAP are a smoke test.")
MULTISTREAM = TableSpec("MULTISTREAM", "Multi-stream batching", (
    text("case"), num("streams"), num("ticks"), num("aggregate FPS", "FPS"), num("FPS per stream", "FPS"),
    num("latency p50 ms", "ms"), num("latency p99 ms", "ms"), num("queue depth", "frames")))
CLOCK_TRUTH = TableSpec("CLOCK_TRUTH", "Clock truth", (
    num("known ms", "ms"), num("CUDA-event ms", "ms"), num("event error %", "%"), num("event offset us", "us"),
    num("host+sync ms", "ms"), num("host error %", "%")))
GPU_MEMORY = TableSpec("GPU_MEMORY", "GPU memory at backend release (MiB)", (
    text("backend"), num("runners"), num("allocated_mib before", "MiB"), num("reserved_mib before", "MiB"),
    num("device_used_mib before", "MiB"), num("allocated_mib after", "MiB"), num("reserved_mib after", "MiB"),
    num("device_used_mib after", "MiB"), text("why")), gpu_only=True,
    cpu_note="GPU memory: a CPU run has none to measure, so the table is left out.")
NOISE_CONTROLS = TableSpec("NOISE_CONTROLS", "Noise sources: each control off and on, alternating in one process", (
    text("control"), text("subject"), num("passes"), num("median ms off", "ms"), num("median ms on", "ms"),
    num("on/off", "x"), num("on/off (CPU-reference units)", "x"), num("pass spread % off", "%"),
    num("pass spread % on", "%"), num("within CV % off", "%"), num("within CV % on", "%"), num("p99 ms off", "ms"),
    num("p99 ms on", "ms")))
NOISE_CLOCKS = TableSpec("NOISE_CLOCKS", "Noise sources: clocks over the study's passes", (
    text("subject"), num("passes"), text("GPU SM clock MHz range", "MHz"), num("corr(median, GPU SM clock MHz)"),
    text("CPU reference ms range", "ms"), num("corr(median, CPU reference ms)")))
GATE_SELFTEST = TableSpec("GATE_SELFTEST", "Gate self-test", (
    text("subject"), num("rounds"), text("injected"), num("measured ratio", "x"), num("unstable", "trials"),
    text("slower @ min effect {}", "trials")))
GPU_THROTTLING = TableSpec("GPU_THROTTLING", "GPU throttling", (text("test"), text("reasons")))

# The cross-process self-test and noise profile (perf.roles.processes; shorter titles: the
# `python -m perf.crossprocess` command).
_FAMILY_NOISE = (text("family"), num("benchmarks"), num("processes"), num("median CV %", "%"), num("max CV %", "%"),
                 num("max |ratio-1| %", "%"), num("CV target %", "%"), text("meets target"))
_IDENTICAL = (text("family"), num("rows"), num("slower"), num("faster"), text("inconclusive", "rows"),
              num("median detectable %", "%"), num("runs"), text("red runs", "runs"),
              text("runs with suspects", "runs"), text("meets targets"))
_REGRESSED = (text("regression"), text("family"), text("batch", "images"), num("runs"), num("median ratio", "x"),
              text("slower", "runs"), text("slower, stage named", "runs"), text("inconclusive", "runs"),
              num("confirmation processes"), text("target"), text("meets target"))
_COMPARE_FAIL = (text("check"), num("ordered pairs"), text("pairs passing", "pairs"),
                 text("benchmarks that failed (pairs)"))
NOISE_FAMILY = TableSpec(
    "NOISE_FAMILY", "Noise between processes, per family (per-process median of each benchmark)", _FAMILY_NOISE)
NOISE_BENCHMARK = TableSpec("NOISE_BENCHMARK", "Noise between processes, per benchmark and metric", (
    text("benchmark"), text("metric"), text("family"), num("processes"), num("median of medians ms", "ms"),
    num("CV %", "%"), num("max |ratio-1| %", "%"), num("between sd %", "%"), num("within se %", "%")))
SELFTEST_IDENTICAL = TableSpec(
    "SELFTEST_IDENTICAL", "Cross-process self-test: simulated CI runs of identical code", _IDENTICAL)
SELFTEST_REGRESSED = TableSpec(
    "SELFTEST_REGRESSED", "Cross-process self-test: simulated CI runs of injected regressions", _REGRESSED)
SELFTEST_COMPARE_FAIL = TableSpec(
    "SELFTEST_COMPARE_FAIL", "Cross-process self-test: pytest-benchmark --benchmark-compare-fail on identical code",
    (*_COMPARE_FAIL, text("consecutive processes run with it", "processes")))
CROSSPROCESS_RUNS = TableSpec("CROSSPROCESS_RUNS", "Cross-process runs", (
    text("run"), text("kind"), num("exit"), num("seconds", "s"), text("saved"), text("compare-fail")))
RERUN_FAMILY = TableSpec("RERUN_FAMILY", "Noise between processes, per family", _FAMILY_NOISE)
RERUN_IDENTICAL = TableSpec("RERUN_IDENTICAL", "Identical code", _IDENTICAL)
RERUN_REGRESSED = TableSpec("RERUN_REGRESSED", "Injected regressions", _REGRESSED)
RERUN_COMPARE_FAIL = TableSpec("RERUN_COMPARE_FAIL", "pytest-benchmark compare-fail on identical code", _COMPARE_FAIL)

#: The suite report's tables: every table declared above, in their order (the order the documentation lists them).
SUITE: tuple[TableSpec, ...] = (
    LAB, STAGES_TABLE, STAGE_SPREAD, INFERENCE, SPEEDUP, MULTI_GPU, HARNESS, PARITY, ACCURACY, PIPELINED_PATHS,
    PIPELINED_RATIOS, SKIP_INTERVAL, MULTISTREAM, CLOCK_TRUTH, GPU_MEMORY, NOISE_CONTROLS, NOISE_CLOCKS, GATE_SELFTEST,
    GPU_THROTTLING, NOISE_FAMILY, NOISE_BENCHMARK, SELFTEST_IDENTICAL, SELFTEST_REGRESSED, SELFTEST_COMPARE_FAIL,
    CROSSPROCESS_RUNS, RERUN_FAMILY, RERUN_IDENTICAL, RERUN_REGRESSED, RERUN_COMPARE_FAIL)

# perf-report's summary: cells are formatted text carrying their units; detail columns are in the HTML page
# only, so each markdown table keeps to MARKDOWN_COLUMNS.
SUMMARY_BENCHMARKS = TableSpec("SUMMARY_BENCHMARKS", "Benchmarks (latest run)", (
    text("benchmark"), text("group", detail=True), text("median", "time"), text("IQR", "time", detail=True),
    text("p99", "time", detail=True), text("rounds", detail=True), text("images/s", "img/s"),
    text("vs previous", "%"), text("verdict")))
SUMMARY_VERDICTS = TableSpec("SUMMARY_VERDICTS", "Compare verdicts", (
    text("benchmark"), text("verdict"), text("baseline", "time"), text("current", "time"), text("ratio [CI]", "x"),
    text("detectable", "%"), text("note", detail=True)))
SUMMARY_STAGES = TableSpec("SUMMARY_STAGES", "End-to-end", (
    text("case"), text("frames", "frames", detail=True), text("FPS", "FPS"), text("per frame", "time"),
    text("slowest stage"), *(text(s, "ms per frame", detail=True) for s in STAGES)))
SUMMARY_PARITY = TableSpec("SUMMARY_PARITY", "Parity vs torch fp32", (
    text("candidate"), text("verdict"), text("match rate", "fraction"), text("mean IoU", "IoU"),
    text("min IoU", "IoU"), text("p1 IoU", "IoU", detail=True), text("matched pairs", "pairs", detail=True),
    text("failures")))
SUMMARY_CHANGES = TableSpec("SUMMARY_CHANGES", "Change points in the history", (
    text("benchmark"), text("changed at"), text("before", "time"), text("after", "time"), text("size", "%"),
    num("runs after", "runs")),
    note="where a benchmark's level changed in this machine's history (perf.store.changepoints: PELT on the log "
    "medians, kept when beyond the minimum effect and 4 standard errors); changed at: the commit and run of the first "
    "run at the new level; runs after: how many runs are at it (one alone may be a slow run)")
#: perf-report's summary tables, in report order.
SUMMARY: tuple[TableSpec, ...] = (SUMMARY_BENCHMARKS, SUMMARY_VERDICTS, SUMMARY_CHANGES, SUMMARY_STAGES, SUMMARY_PARITY)

_SUITE_BY_TITLE = {spec.title: spec for spec in SUITE}
#: The suite report's table of a title, or None (a saved report of another version).
find_suite_table = _SUITE_BY_TITLE.get


def suite_table(table: TableSpec | str) -> TableSpec:
    """The suite report's table ``table`` (a spec, or its title); `SchemaError` when the schema lacks it."""
    title = table.title if isinstance(table, TableSpec) else table
    if (spec := _SUITE_BY_TITLE.get(title)) is None or (isinstance(table, TableSpec) and spec != table):
        titles = ", ".join(repr(s.title) for s in SUITE)
        raise SchemaError(f"no report table {title!r} in perf/report/schema.py: declare it there, or use one of its "
                          f"tables ({titles})")
    return spec
