"""Reading ``nsys stats`` CSV reports and boiling them down to a summary (split out of `perf.nsys`).

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
from perf.profiling import MEASURED_RANGE


class NsysParseError(DetectorError):
    """An ``nsys stats`` CSV without the expected header row (another report, or a changed format)."""


#: The reports `perf.nsys.export_stats` asks ``nsys stats`` for.
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
    spans = [(r.start_ns, r.end_ns) if isinstance(r, GpuActivity) else (int(r[0]), int(r[1])) for r in gpu_trace_rows]
    return 1.0 - busy_ns(spans, region_start_ns, region_end_ns) / (region_end_ns - region_start_ns)


def measured_region(activities: Sequence[GpuActivity], nvtx: Sequence[NvtxInterval] = (),
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
    largest other ranges (per-call ranges, TensorRT layer names). ``missing`` lists reports that had no data.
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
        return "\n".join(lines) + "\n"


def summarize(
    csvs: Mapping[str, str | os.PathLike[str]],
    *,
    report_path: str | os.PathLike[str] | None = None,
    stages: Sequence[str] = STAGES,
    top_n: int = 10,
    range_name: str = MEASURED_RANGE,
) -> NsysSummary:
    """Summarize the stats CSVs ``{report name: path}`` (as `export_stats` returns; absent reports count as empty)."""
    kernels = parse_kernel_summary(csvs.get("cuda_gpu_kern_sum"))
    kernel_total = sum(k.total_ns for k in kernels)
    top = sorted(kernels, key=lambda k: -k.total_ns)[:top_n]
    top_kernels = [{"name": k.name, "total_ns": k.total_ns, "instances": k.instances,
                    "avg_ns": k.total_ns / max(k.instances, 1),
                    "percent": 100.0 * k.total_ns / kernel_total if kernel_total else 0.0} for k in top]  # fmt: skip
    by_name: dict[str, dict] = {}
    for row in parse_nvtx_summary(csvs.get("nvtx_sum")):
        entry = by_name.setdefault(row.name, {"name": row.name, "total_ns": 0, "instances": 0})
        entry["total_ns"] += row.total_ns
        entry["instances"] += row.instances
    stage_rows = {name: {k: v for k, v in by_name[name].items() if k != "name"} for name in stages if name in by_name}
    others = sorted((r for n, r in by_name.items() if n not in stage_rows), key=lambda r: -r["total_ns"])[:top_n]
    copies = parse_memcpy_summary(csvs.get("cuda_gpu_mem_time_sum"), csvs.get("cuda_gpu_mem_size_sum"))
    activities = parse_gpu_trace(csvs.get("cuda_gpu_trace"))
    region = measured_region(activities, parse_nvtx_trace(csvs.get("nvtx_pushpop_trace")), range_name)
    idle = None
    if region and region[1] > region[0] and "cuda_gpu_trace" in csvs:
        idle = gpu_idle_fraction(activities, region[0], region[1])
    api = sorted(parse_api_summary(csvs.get("cuda_api_sum")), key=lambda a: -a.total_ns)[:5]
    return NsysSummary(
        report=os.fspath(report_path) if report_path is not None else None,
        kernel_total_ns=kernel_total,
        kernel_instances=sum(k.instances for k in kernels),
        top_kernels=top_kernels,
        stages=stage_rows,
        nvtx_ranges=others,
        h2d={"bytes": copies.h2d_bytes, "ns": copies.h2d_ns, "count": copies.h2d_count},
        d2h={"bytes": copies.d2h_bytes, "ns": copies.d2h_ns, "count": copies.d2h_count},
        region=None if region is None else {"start_ns": region[0], "end_ns": region[1], "source": region[2]},
        idle_fraction=idle,
        top_api=[{"name": a.name, "total_ns": a.total_ns, "calls": a.calls} for a in api],
        missing=[name for name in STATS_REPORTS if name not in csvs],
    )


def write_summary(summary: NsysSummary, folder: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write ``summary.json`` and ``summary.md`` into ``folder`` atomically; return their paths."""
    folder = Path(folder)
    return (atomic_write_text(folder / "summary.json", summary.to_json()),
            atomic_write_text(folder / "summary.md", summary.to_markdown()))  # fmt: skip
