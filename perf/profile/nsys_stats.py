"""Reading ``nsys stats`` CSV reports and boiling them down to a summary (`perf.profile.nsys` runs nsys itself).

CSV facts (Nsight Systems stats reports, ``--format csv --output <base>`` writes ``<base>_<report>.csv``): times are
in ns, sizes in decimal MB; NVTX ranges are named ``<domain>:<name>`` and are host time. The ``parse_*`` functions
(through `read_table`) skip anything nsys printed before the header row and read units from the headers.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from detector.errors import DetectorError
from detector.fileio import atomic_write_text
from detector.timing import STAGES
from perf.profile.critical_path_summary import CriticalPathSummary
from perf.profile.torch_profiler import MEASURED_RANGE


class NsysParseError(DetectorError):
    """An ``nsys stats`` CSV without the expected header row (another report, or a changed format)."""


#: The reports `perf.profile.nsys.export_stats` asks ``nsys stats`` for.
STATS_REPORTS = (
    "cuda_gpu_kern_sum", "cuda_api_sum", "nvtx_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum",
    "cuda_gpu_trace", "nvtx_pushpop_trace",
)  # fmt: skip

# --- reading the CSVs -----------------------------------------------------------------------------------------------

_TIME_NS = {"ns": 1.0, "us": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9, "sec": 1e9}
_SIZE_B = {"b": 1.0, "byte": 1.0, "bytes": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1024.0, "mib": 1024.0**2,
           "gib": 1024.0**3}  # fmt: skip
_HEADER_CELL = re.compile(r"^(.*?)\s*(?:\(([^()]*)\))?$")
_NUMBER = re.compile(r"^-?(?:\d+|\d{1,3}(?:,\d{3})+)(?:\.\d*)?(?:[eE][-+]?\d+)?$")


@dataclass(frozen=True)
class Table:
    """Rows of one stats CSV; ``columns`` maps a header's base name ("Total Time") to (index, unit or None)."""

    path: Path | None
    columns: dict[str, tuple[int, str | None]]
    rows: list[list[str]]

    def text(self, row: list[str], name: str) -> str:
        return row[self.columns[name][0]].strip() if name in self.columns else ""

    def number(self, row: list[str], name: str) -> float | None:
        """The cell as a number scaled by its header unit to ns (times) or bytes (sizes); None if empty or absent."""
        if name not in self.columns:
            return None
        index, unit = self.columns[name]
        cell = row[index].strip()
        if not _NUMBER.match(cell):
            return None
        value = float(cell.replace(",", ""))
        unit = (unit or "").strip().lower()
        return value * _TIME_NS.get(unit, _SIZE_B.get(unit, 1.0))


def read_table(path: str | os.PathLike[str] | None, required: Sequence[str]) -> Table:
    """The table in an ``nsys stats --format csv`` file, from the first row holding all ``required`` column names.

    Lines before that header (progress, NOTICE lines) are skipped, as are later rows of another width. A missing
    path, an empty file or a "SKIPPED: ... does not contain ..." file is an empty table; any other file without
    such a header raises `NsysParseError` naming the file and the columns looked for.
    """
    if path is None or not Path(path).is_file():
        return Table(None if path is None else Path(path), {}, [])
    text = Path(path).read_text(encoding="utf-8", errors="replace").lstrip("\ufeff")
    lines = text.splitlines()
    for number, cells in enumerate(csv.reader(lines)):
        columns = {}
        for index, cell in enumerate(cells):
            base, unit = _HEADER_CELL.match(cell.strip()).groups()
            columns.setdefault(base, (index, unit))
        if all(name in columns for name in required):
            rows = [row for row in csv.reader(lines[number + 1 :]) if len(row) == len(cells)]
            return Table(Path(path), columns, rows)
    if not text.strip() or "does not contain" in text or "SKIPPED" in text:
        return Table(Path(path), {}, [])
    raise NsysParseError(f"{path}: no CSV header row with columns {', '.join(map(repr, required))}")


def _int(value: float | None) -> int:
    return int(round(value)) if value is not None else 0


def split_range_name(full: str) -> tuple[str, str]:
    """``":infer"`` -> ("", "infer"); ``"perf:infer"`` -> ("perf", "infer"); ``"aten::conv2d"`` stays whole.

    nsys names NVTX ranges ``<domain>:<message>``; the default domain is empty.
    """
    match = re.match(r"^([^:]*):(?!:)(.*)$", full)
    return (match.group(1), match.group(2)) if match else ("", full)


@dataclass(frozen=True)
class KernelRow:
    """One kernel of ``cuda_gpu_kern_sum``: times in ns; ``time_pct`` is its share of all kernel time."""

    name: str
    total_ns: int
    instances: int
    avg_ns: float | None = None
    med_ns: float | None = None
    min_ns: float | None = None
    max_ns: float | None = None
    time_pct: float | None = None


@dataclass(frozen=True)
class ApiRow:
    """One CUDA API function of ``cuda_api_sum`` (host time in ns)."""

    name: str
    total_ns: int
    calls: int
    avg_ns: float | None = None
    max_ns: float | None = None
    time_pct: float | None = None


@dataclass(frozen=True)
class NvtxRow:
    """One NVTX range name of ``nvtx_sum``: host (CPU) time in ns; ``name`` without its domain prefix."""

    name: str
    domain: str
    total_ns: int
    instances: int
    avg_ns: float | None = None
    style: str | None = None
    time_pct: float | None = None


@dataclass(frozen=True)
class MemcpyTotals:
    """Host-to-device and device-to-host copies: bytes (from MB with 3 decimals, so +-500 B per row), ns, count."""

    h2d_bytes: int = 0
    h2d_ns: int = 0
    h2d_count: int = 0
    d2h_bytes: int = 0
    d2h_ns: int = 0
    d2h_count: int = 0


@dataclass(frozen=True)
class GpuActivity:
    """One kernel, memcpy or memset of ``cuda_gpu_trace``: start and duration in ns, size in bytes for copies."""

    start_ns: int
    duration_ns: int
    name: str
    kind: str  # "kernel", "memcpy" or "memset"
    bytes: int | None = None
    stream: str = ""

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.duration_ns


@dataclass(frozen=True)
class NvtxInterval:
    """One NVTX push/pop range instance of ``nvtx_pushpop_trace`` (host timestamps in ns, same clock as the GPU's)."""

    name: str
    start_ns: int
    end_ns: int
    level: int = 0


def parse_kernel_summary(path: str | os.PathLike[str] | None) -> list[KernelRow]:
    """Rows of a ``cuda_gpu_kern_sum`` CSV, as written (sorted by total time, largest first)."""
    t = read_table(path, ("Total Time", "Instances", "Name"))
    return [KernelRow(t.text(r, "Name"), _int(t.number(r, "Total Time")), _int(t.number(r, "Instances")),
                      t.number(r, "Avg"), t.number(r, "Med"), t.number(r, "Min"), t.number(r, "Max"),
                      t.number(r, "Time")) for r in t.rows]  # fmt: skip


def parse_api_summary(path: str | os.PathLike[str] | None) -> list[ApiRow]:
    """Rows of a ``cuda_api_sum`` CSV."""
    t = read_table(path, ("Total Time", "Num Calls", "Name"))
    return [ApiRow(t.text(r, "Name"), _int(t.number(r, "Total Time")), _int(t.number(r, "Num Calls")),
                   t.number(r, "Avg"), t.number(r, "Max"), t.number(r, "Time")) for r in t.rows]  # fmt: skip


def parse_nvtx_summary(path: str | os.PathLike[str] | None) -> list[NvtxRow]:
    """Rows of an ``nvtx_sum`` (or older ``nvtx_pushpop_sum``) CSV, range names split from their domain."""
    t = read_table(path, ("Total Time", "Instances", "Range"))
    rows = []
    for r in t.rows:
        domain, name = split_range_name(t.text(r, "Range"))
        rows.append(NvtxRow(name, domain, _int(t.number(r, "Total Time")), _int(t.number(r, "Instances")),
                            t.number(r, "Avg"), t.text(r, "Style") or None, t.number(r, "Time")))  # fmt: skip
    return rows


def copy_direction(name: str) -> str | None:
    """"h2d" / "d2h" for "[CUDA memcpy Host-to-Device]" / "[CUDA memcpy DtoH]" (either spelling), else None."""
    if "memcpy" not in name:
        return None
    if "Host-to-Device" in name or "HtoD" in name:
        return "h2d"
    if "Device-to-Host" in name or "DtoH" in name:
        return "d2h"
    return None


def parse_memcpy_summary(
    time_csv: str | os.PathLike[str] | None, size_csv: str | os.PathLike[str] | None
) -> MemcpyTotals:
    """H2D and D2H totals from ``cuda_gpu_mem_time_sum`` (ns, count) and ``cuda_gpu_mem_size_sum`` (bytes)."""
    totals = {"h2d_bytes": 0, "h2d_ns": 0, "h2d_count": 0, "d2h_bytes": 0, "d2h_ns": 0, "d2h_count": 0}
    times = read_table(time_csv, ("Total Time", "Count", "Operation"))
    for r in times.rows:
        direction = copy_direction(times.text(r, "Operation"))
        if direction:
            totals[f"{direction}_ns"] += _int(times.number(r, "Total Time"))
            totals[f"{direction}_count"] += _int(times.number(r, "Count"))
    sizes = read_table(size_csv, ("Total", "Count", "Operation"))
    for r in sizes.rows:
        direction = copy_direction(sizes.text(r, "Operation"))
        if direction:
            totals[f"{direction}_bytes"] += _int(sizes.number(r, "Total"))
            if not times.rows:
                totals[f"{direction}_count"] += _int(sizes.number(r, "Count"))
    return MemcpyTotals(**totals)


def parse_gpu_trace(path: str | os.PathLike[str] | None) -> list[GpuActivity]:
    """Rows of a ``cuda_gpu_trace`` CSV (kernels, memcpys and memsets, by start time)."""
    t = read_table(path, ("Start", "Duration", "Name"))
    out = []
    for r in t.rows:
        name = t.text(r, "Name")
        kind = "kernel"
        if name.startswith("[CUDA"):
            kind = "memcpy" if "memcpy" in name else "memset" if "memset" in name else "kernel"
        size = t.number(r, "Bytes")
        out.append(GpuActivity(_int(t.number(r, "Start")), _int(t.number(r, "Duration")), name, kind,
                               None if size is None else _int(size), t.text(r, "Strm")))  # fmt: skip
    return out


def parse_nvtx_trace(path: str | os.PathLike[str] | None) -> list[NvtxInterval]:
    """Rows of an ``nvtx_pushpop_trace`` CSV, names without their domain prefix."""
    t = read_table(path, ("Start", "End", "Name"))
    return [NvtxInterval(split_range_name(t.text(r, "Name"))[1], _int(t.number(r, "Start")), _int(t.number(r, "End")),
                         _int(t.number(r, "Lvl"))) for r in t.rows]  # fmt: skip


# --- the suite's own activity ---------------------------------------------------------------------------------------

#: Kernels that the perf suite itself launches and the model never does, found by name. ``torch.cuda._sleep`` runs
#: ATen's ``spin_kernel`` (aten/src/ATen/cuda/Sleep.cu), a GPU busy-wait that `detector.timing.CudaEventClock`
#: enqueues before each start event (its ``lead_in_ms``) and that `perf.measure.slowdown` injects as a slowdown; counted as
#: model work it topped the kernel table and made an idle GPU look busy. nsys prints the name demangled with or
#: without arguments and with either spelling of the anonymous namespace ("at::cuda::(anonymous
#: namespace)::spin_kernel(long)", "void at::cuda::<unnamed>::spin_kernel(long)"), bare ("spin_kernel") or mangled
#: ("_ZN2at4cuda12_GLOBAL__N_111spin_kernelEl": the second alternative). A whole identifier is required, so
#: "spin_kernels" or "my_spin_kernel" are model kernels.
SUITE_KERNEL_NAME = re.compile(r"(?<!\w)spin_kernel(?!\w)|11spin_kernelE")

#: CUDA event API calls (runtime ``cudaEvent*`` and driver ``cuEvent*``, ``...WithFlags`` variants and nsys's
#: ``_v<version>`` suffixes such as "cudaEventRecordWithFlags_v11010"): timing machinery, not the model's work. The
#: suite clock creates, records, waits for and reads events at every reading, and runners time calls with events.
TIMING_EVENT_API_NAME = re.compile(r"^cu(?:da)?Event(?:Record|Synchronize|ElapsedTime|Create|Destroy|Query)")

#: How the summary names the event API calls it leaves out of its CUDA API table.
TIMING_EVENT_LABEL = "timing events (suite clock and runner timers)"


def is_suite_kernel(name: str) -> bool:
    """True for a kernel name (any nsys spelling) that the perf suite launches itself: see `SUITE_KERNEL_NAME`."""
    return SUITE_KERNEL_NAME.search(name) is not None


def is_timing_event_api(name: str) -> bool:
    """True for a CUDA API function name of the event family (see `TIMING_EVENT_API_NAME`)."""
    return TIMING_EVENT_API_NAME.match(name) is not None


def is_suite_activity(activity: GpuActivity) -> bool:
    """True for a ``cuda_gpu_trace`` row that is one of the suite's own kernels (never a copy or memset)."""
    return activity.kind == "kernel" and is_suite_kernel(activity.name)


# --- idle time and the summary --------------------------------------------------------------------------------------


def busy_ns(intervals: Sequence[tuple[int, int]], start_ns: int, end_ns: int) -> int:
    """Length in ns of the union of ``[a, b)`` intervals clipped to ``[start_ns, end_ns)`` (overlaps count once)."""
    total, reach = 0, start_ns
    for a, b in sorted((max(a, start_ns), min(b, end_ns)) for a, b in intervals):
        if b <= reach or b <= a:
            continue
        total += b - max(a, reach)
        reach = b
    return total


def gpu_idle_fraction(gpu_trace_rows: Sequence[GpuActivity | tuple[int, int]], region_start_ns: int,
                      region_end_ns: int) -> float:  # fmt: skip
    """Fraction (0..1) of ``[region_start_ns, region_end_ns)`` in which no kernel, memcpy or memset ran on any
    stream (the union of their intervals). Raises ValueError for an empty region."""
    if region_end_ns <= region_start_ns:
        raise ValueError(f"empty measured region [{region_start_ns}, {region_end_ns}) ns")
    return 1.0 - busy_fraction(gpu_trace_rows, region_start_ns, region_end_ns)


def busy_fraction(gpu_trace_rows: Sequence[GpuActivity | tuple[int, int]], region_start_ns: int,
                  region_end_ns: int) -> float:  # fmt: skip
    """Fraction (0..1) of ``[region_start_ns, region_end_ns)`` covered by the rows (ns intervals, overlaps count
    once); 0.0 for an empty region."""
    if region_end_ns <= region_start_ns:
        return 0.0
    spans = [(r.start_ns, r.end_ns) if isinstance(r, GpuActivity) else (int(r[0]), int(r[1])) for r in gpu_trace_rows]
    return busy_ns(spans, region_start_ns, region_end_ns) / (region_end_ns - region_start_ns)


def measured_span(activities: Sequence[GpuActivity], nvtx: Sequence[NvtxInterval] = (),
                  range_name: str = MEASURED_RANGE) -> tuple[int, int, str] | None:  # fmt: skip
    """(start ns, end ns, source): the span of the NVTX range ``range_name`` if it was recorded, else first GPU
    activity start to last activity end; None when there is neither."""
    marked = [r for r in nvtx if r.name == range_name]
    if marked:
        return min(r.start_ns for r in marked), max(r.end_ns for r in marked), f"NVTX range {range_name!r}"
    if activities:
        return min(a.start_ns for a in activities), max(a.end_ns for a in activities), "first to last GPU activity"
    return None


@dataclass
class NsysSummary:
    """What a capture says, in short: top kernels, time per stage, copies, GPU idle share of the measured region.

    Times are ns. ``stages`` holds the pipeline stages found among the NVTX ranges (host time); ``nvtx_ranges`` the
    largest other ranges (per-call ranges, TensorRT layer names). ``missing`` lists reports that had no data, and
    parts that could not be made, with why (``"critical path: ..."``). ``critical_path``: what bounded the region
    and who waited (`perf.profile.critical_path`, from the capture's SQLite export); None when not made.

    The model's figures leave the suite's own activity out: ``kernel_total_ns``, ``kernel_instances`` and
    ``top_kernels`` (and their ``percent``, of the model's kernel time) count no suite kernel (`is_suite_kernel`:
    the clock's busy-wait and injected slowdowns), ``idle_fraction`` (0..1 of the region) counts a span in which
    only a suite kernel ran as idle, and ``top_api`` holds no CUDA event call (`is_timing_event_api`). That
    activity is reported apart: ``suite_kernel_ns`` / ``suite_kernel_instances`` (ns and launches of suite kernels,
    whole capture), ``suite_busy_fraction`` (0..1 of the region covered by suite kernels; None without a region
    or GPU trace) and ``timing_event_api_ns`` / ``timing_event_api_calls`` (host ns and calls of event API
    functions).
    """

    report: str | None
    kernel_total_ns: int
    kernel_instances: int
    top_kernels: list[dict]
    stages: dict[str, dict]
    nvtx_ranges: list[dict]
    h2d: dict
    d2h: dict
    region: dict | None
    idle_fraction: float | None
    top_api: list[dict]
    missing: list[str]
    suite_kernel_ns: int = 0
    suite_kernel_instances: int = 0
    suite_busy_fraction: float | None = None
    timing_event_api_ns: int = 0
    timing_event_api_calls: int = 0
    critical_path: CriticalPathSummary | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    def to_markdown(self, name_width: int = 90) -> str:
        """A few lines and tables for a terminal, a CI job summary or a pull request."""

        def cell(text: str) -> str:
            text = text if len(text) <= name_width else text[: name_width - 1] + "…"
            return text.replace("|", "\\|")

        title = Path(self.report).name if self.report else "capture"
        lines = [f"### Nsight Systems: {title}", ""]
        if self.region:
            length = (self.region["end_ns"] - self.region["start_ns"]) / 1e6
            idle = f"{100 * self.idle_fraction:.1f} %" if self.idle_fraction is not None else "n/a"
            lines.append(f"- Measured region: {length:.3f} ms ({self.region['source']}); GPU idle {idle} of it")
        lines.append(f"- Kernels: {self.kernel_total_ns / 1e6:.3f} ms in {self.kernel_instances} launches")
        suite = self.suite_line()
        if suite:
            lines.append(suite)
        for label, copies in (("Host-to-device", self.h2d), ("Device-to-host", self.d2h)):
            lines.append(f"- {label}: {copies['bytes'] / 1e6:.3f} MB in {copies['count']} copies, "
                         f"{copies['ns'] / 1e6:.3f} ms")  # fmt: skip
        if self.missing:
            lines.append(f"- No data: {', '.join(self.missing)}")
        if self.top_kernels:
            lines += ["", "| # | Kernel | Time % | Total ms | Calls | Avg µs |", "|--:|:--|--:|--:|--:|--:|"]
            for i, k in enumerate(self.top_kernels, 1):
                lines.append(f"| {i} | `{cell(k['name'])}` | {k['percent']:.1f} | {k['total_ns'] / 1e6:.3f} | "
                             f"{k['instances']} | {k['avg_ns'] / 1e3:.1f} |")  # fmt: skip
        if self.stages or self.nvtx_ranges:
            lines += ["", "| NVTX range (host time) | Total ms | Calls | Avg ms |", "|:--|--:|--:|--:|"]
            for name, s in [*self.stages.items(), *((r["name"], r) for r in self.nvtx_ranges)]:
                lines.append(f"| {cell(name)} | {s['total_ns'] / 1e6:.3f} | {s['instances']} | "
                             f"{s['total_ns'] / max(s['instances'], 1) / 1e6:.3f} |")  # fmt: skip
        if self.top_api:
            lines += ["", "| CUDA API | Total ms | Calls |", "|:--|--:|--:|"]
            lines += [f"| {cell(a['name'])} | {a['total_ns'] / 1e6:.3f} | {a['calls']} |" for a in self.top_api]
        if self.critical_path is not None:
            lines += ["", self.critical_path.to_markdown().rstrip("\n")]
        return "\n".join(lines) + "\n"

    def suite_line(self) -> str | None:
        """The markdown line on the suite's own activity (busy-wait kernels, event API calls); None without any."""
        parts = []
        if self.suite_kernel_instances:
            part = f"{self.suite_kernel_ns / 1e6:.3f} ms busy-wait in {self.suite_kernel_instances:,} launches"
            if self.suite_busy_fraction is not None:
                part += f" ({100 * self.suite_busy_fraction:.1f} % of the region)"
            parts.append(part)
        if self.timing_event_api_calls:
            parts.append(f"{TIMING_EVENT_LABEL} {self.timing_event_api_ns / 1e6:.3f} ms in "
                         f"{self.timing_event_api_calls:,} API calls")  # fmt: skip
        return f"- Suite clock (left out of the figures and tables): {'; '.join(parts)}" if parts else None


def _kernel_entry(kernel: KernelRow, total_ns: int) -> dict:
    """One row of ``top_kernels``: ns, launches, mean ns per launch and ``percent`` of ``total_ns``."""
    return {"name": kernel.name, "total_ns": kernel.total_ns, "instances": kernel.instances,
            "avg_ns": kernel.total_ns / max(kernel.instances, 1),
            "percent": 100.0 * kernel.total_ns / total_ns if total_ns else 0.0}  # fmt: skip


def _kernel_figures(kernels: Sequence[KernelRow], top_n: int) -> dict:
    """``kernel_total_ns``, ``kernel_instances``, ``top_kernels`` (of the model's kernels; ``percent`` of their
    total time) and ``suite_kernel_ns`` / ``suite_kernel_instances`` (of the suite's kernels), as NsysSummary fields."""
    model = [k for k in kernels if not is_suite_kernel(k.name)]
    suite = [k for k in kernels if is_suite_kernel(k.name)]
    total = sum(k.total_ns for k in model)
    top = sorted(model, key=lambda k: -k.total_ns)[:top_n]
    return {
        "kernel_total_ns": total,
        "kernel_instances": sum(k.instances for k in model),
        "top_kernels": [_kernel_entry(k, total) for k in top],
        "suite_kernel_ns": sum(k.total_ns for k in suite),
        "suite_kernel_instances": sum(k.instances for k in suite),
    }


def _region_figures(csvs: Mapping[str, str | os.PathLike[str]], range_name: str) -> dict:
    """``region``, ``idle_fraction`` (model work only) and ``suite_busy_fraction`` as NsysSummary fields.

    Without the NVTX range, the region runs from the model's first GPU activity to its last (all activities when
    the trace holds suite kernels only), so a leading or trailing busy-wait does not stretch it.
    """
    activities = parse_gpu_trace(csvs.get("cuda_gpu_trace"))
    model = [a for a in activities if not is_suite_activity(a)]
    suite = [a for a in activities if is_suite_activity(a)]
    region = measured_span(model or activities, parse_nvtx_trace(csvs.get("nvtx_pushpop_trace")), range_name)
    idle = suite_busy = None
    if region and region[1] > region[0] and "cuda_gpu_trace" in csvs:
        idle = gpu_idle_fraction(model, region[0], region[1])
        suite_busy = busy_fraction(suite, region[0], region[1])
    return {
        "region": None if region is None else {"start_ns": region[0], "end_ns": region[1], "source": region[2]},
        "idle_fraction": idle,
        "suite_busy_fraction": suite_busy,
    }


def _api_figures(api: Sequence[ApiRow], top_n: int = 5) -> dict:
    """``top_api`` (the ``top_n`` largest CUDA API functions by host time, event calls left out) and
    ``timing_event_api_ns`` / ``timing_event_api_calls`` (the event calls' host ns and count) as NsysSummary fields."""
    events = [a for a in api if is_timing_event_api(a.name)]
    top = sorted((a for a in api if not is_timing_event_api(a.name)), key=lambda a: -a.total_ns)[:top_n]
    return {
        "top_api": [{"name": a.name, "total_ns": a.total_ns, "calls": a.calls} for a in top],
        "timing_event_api_ns": sum(a.total_ns for a in events),
        "timing_event_api_calls": sum(a.calls for a in events),
    }


def summarize(
    csvs: Mapping[str, str | os.PathLike[str]],
    *,
    report_path: str | os.PathLike[str] | None = None,
    stages: Sequence[str] = STAGES,
    top_n: int = 10,
    range_name: str = MEASURED_RANGE,
) -> NsysSummary:
    """Summarize the stats CSVs ``{report name: path}`` (as `export_stats` returns; absent reports count as empty).

    The suite's own kernels and event API calls are kept out of the model's figures and counted apart (see
    `NsysSummary`).
    """
    by_name: dict[str, dict] = {}
    for row in parse_nvtx_summary(csvs.get("nvtx_sum")):
        entry = by_name.setdefault(row.name, {"name": row.name, "total_ns": 0, "instances": 0})
        entry["total_ns"] += row.total_ns
        entry["instances"] += row.instances
    stage_rows = {name: {k: v for k, v in by_name[name].items() if k != "name"} for name in stages if name in by_name}
    others = sorted((r for n, r in by_name.items() if n not in stage_rows), key=lambda r: -r["total_ns"])[:top_n]
    copies = parse_memcpy_summary(csvs.get("cuda_gpu_mem_time_sum"), csvs.get("cuda_gpu_mem_size_sum"))
    return NsysSummary(
        report=os.fspath(report_path) if report_path is not None else None,
        stages=stage_rows,
        nvtx_ranges=others,
        h2d={"bytes": copies.h2d_bytes, "ns": copies.h2d_ns, "count": copies.h2d_count},
        d2h={"bytes": copies.d2h_bytes, "ns": copies.d2h_ns, "count": copies.d2h_count},
        missing=[name for name in STATS_REPORTS if name not in csvs],
        **_kernel_figures(parse_kernel_summary(csvs.get("cuda_gpu_kern_sum")), top_n),
        **_region_figures(csvs, range_name),
        **_api_figures(parse_api_summary(csvs.get("cuda_api_sum"))),
    )


def write_summary(summary: NsysSummary, folder: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write ``summary.json`` and ``summary.md`` into ``folder`` atomically; return their paths."""
    folder = Path(folder)
    return (atomic_write_text(folder / "summary.json", summary.to_json()),
            atomic_write_text(folder / "summary.md", summary.to_markdown()))  # fmt: skip
