"""What an Nsight Systems capture says, in short (`NsysSummary`), from the one `perf.profile.capture_db.Capture` of its
SQLite export: top kernels, time per NVTX stage, copies, the GPU idle share of the measured region, and the suite's
own activity apart (docs/method.md, section 6). Whole-capture figures are summed as ``nsys stats`` sums them.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from detector.fileio import atomic_write_text
from detector.timing import STAGES
from perf.profile.capture_db import Capture, GpuOp, Total, busy_ns, is_suite_kernel
from perf.profile.critical_path_summary import CriticalPathSummary, shorten
from perf.tabletext import markdown_table

#: The summary's tables (`perf.tabletext.markdown_table`): top kernels, NVTX ranges, CUDA API calls.
KERNEL_COLUMNS = ("#", "Kernel", "Time %", "Total ms", "Calls", "Avg µs")
NVTX_COLUMNS = ("NVTX range (host time)", "Total ms", "Calls", "Avg ms")
API_COLUMNS = ("CUDA API", "Total ms", "Calls")
#: How ``missing`` names the data a capture lacks: the ``nsys stats`` reports that hold it.
DATA_NAMES = (
    "cuda_gpu_kern_sum", "cuda_api_sum", "nvtx_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum",
    "cuda_gpu_trace", "nvtx_pushpop_trace",
)  # fmt: skip

#: CUDA event API calls (``cudaEvent*``, ``cuEvent*``, any suffix): the suite clock's and the runners' timing.
TIMING_EVENT_API_NAME = re.compile(r"^cu(?:da)?Event(?:Record|Synchronize|ElapsedTime|Create|Destroy|Query)")

#: How the summary names the event API calls it leaves out of its CUDA API table.
TIMING_EVENT_LABEL = "timing events (suite clock and runner timers)"


def is_timing_event_api(name: str) -> bool:
    """True for a CUDA API function name of the event family (see `TIMING_EVENT_API_NAME`)."""
    return TIMING_EVENT_API_NAME.match(name) is not None


def busy_fraction(ops: Sequence[GpuOp | tuple[int, int]], region_start_ns: int, region_end_ns: int) -> float:
    """Fraction (0..1) of the region (ns) covered by ``ops`` (GPU work or ns intervals); 0.0 for an empty one."""
    if region_end_ns <= region_start_ns:
        return 0.0
    spans = [(op.start_ns, op.end_ns) if isinstance(op, GpuOp) else (int(op[0]), int(op[1])) for op in ops]
    return busy_ns(spans, region_start_ns, region_end_ns) / (region_end_ns - region_start_ns)


def gpu_idle_fraction(ops: Sequence[GpuOp | tuple[int, int]], region_start_ns: int, region_end_ns: int) -> float:
    """Fraction (0..1) of the region (ns) in which none of ``ops`` ran; ValueError for an empty region."""
    if region_end_ns <= region_start_ns:
        raise ValueError(f"empty measured region [{region_start_ns}, {region_end_ns}) ns")
    return 1.0 - busy_fraction(ops, region_start_ns, region_end_ns)


@dataclass
class NsysSummary:
    """A capture in short; times in ns, fractions 0..1 of the region. ``stages``: the pipeline stages among the NVTX
    ranges (host time), ``nvtx_ranges`` the largest others, ``missing`` the `DATA_NAMES` lacking, ``critical_path``
    None when not made. The model's figures count no suite kernel (`is_suite_kernel`: its span is idle) and no event
    API call (`is_timing_event_api`); those are the ``suite_*`` and ``timing_event_api_*`` fields."""

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
        short = functools.partial(shorten, width=name_width)

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
            lines += ["", *markdown_table(KERNEL_COLUMNS, ([
                str(i), f"`{short(k['name'])}`", f"{k['percent']:.1f}", f"{k['total_ns'] / 1e6:.3f}",
                str(k["instances"]), f"{k['avg_ns'] / 1e3:.1f}"] for i, k in enumerate(self.top_kernels, 1)),
                right=KERNEL_COLUMNS[:1] + KERNEL_COLUMNS[2:])]  # fmt: skip
        if self.stages or self.nvtx_ranges:
            ranges = [*self.stages.items(), *((r["name"], r) for r in self.nvtx_ranges)]
            lines += ["", *markdown_table(NVTX_COLUMNS, ([
                short(name), f"{s['total_ns'] / 1e6:.3f}", str(s["instances"]),
                f"{s['total_ns'] / max(s['instances'], 1) / 1e6:.3f}"] for name, s in ranges), right=NVTX_COLUMNS[1:])]
        if self.top_api:
            lines += ["", *markdown_table(API_COLUMNS, ([short(a["name"]), f"{a['total_ns'] / 1e6:.3f}", str(a["calls"])]
                                                        for a in self.top_api), right=API_COLUMNS[1:])]
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


def _kernel_figures(kernels: Sequence[Total], top_n: int) -> dict:
    """The kernel fields of `NsysSummary` (``percent``: of the model's kernel time)."""
    suite = [k for k in kernels if is_suite_kernel(k.name)]
    model = [k for k in kernels if not is_suite_kernel(k.name)]
    total = sum(k.ns for k in model)
    return {
        "kernel_total_ns": total,
        "kernel_instances": sum(k.count for k in model),
        "top_kernels": [{"name": k.name, "total_ns": k.ns, "instances": k.count, "avg_ns": k.ns / max(k.count, 1),
                         "percent": 100.0 * k.ns / total if total else 0.0} for k in model[:top_n]],  # fmt: skip
        "suite_kernel_ns": sum(k.ns for k in suite),
        "suite_kernel_instances": sum(k.count for k in suite),
    }


def _region_figures(capture: Capture) -> dict:
    """``region``, ``idle_fraction`` (model work only) and ``suite_busy_fraction`` as NsysSummary fields."""
    if not capture.found:
        return {"region": None, "idle_fraction": None, "suite_busy_fraction": None}
    region = capture.region
    suite = [op for op in capture.gpu_ops if op.kind == "kernel" and is_suite_kernel(op.name)]
    model = [op for op in capture.gpu_ops if not (op.kind == "kernel" and is_suite_kernel(op.name))]
    traced = region.end_ns > region.start_ns and bool(capture.kernels or capture.copies or capture.memsets)
    return {
        "region": {"start_ns": region.start_ns, "end_ns": region.end_ns, "source": region.source},
        "idle_fraction": gpu_idle_fraction(model, region.start_ns, region.end_ns) if traced else None,
        "suite_busy_fraction": busy_fraction(suite, region.start_ns, region.end_ns) if traced else None,
    }


def _api_figures(api: Sequence[Total], top_n: int = 5) -> dict:
    """``top_api`` (the ``top_n`` largest by host time, event calls left out) and ``timing_event_api_*`` fields."""
    events = [a for a in api if is_timing_event_api(a.name)]
    top = [a for a in api if not is_timing_event_api(a.name)][:top_n]
    return {
        "top_api": [{"name": a.name, "total_ns": a.ns, "calls": a.count} for a in top],
        "timing_event_api_ns": sum(a.ns for a in events),
        "timing_event_api_calls": sum(a.count for a in events),
    }


def _missing(capture: Capture) -> list[str]:
    """The `DATA_NAMES` of the data the capture lacks."""
    copies = bool(capture.copies or capture.memsets)
    has = {"cuda_gpu_kern_sum": bool(capture.kernels), "cuda_api_sum": bool(capture.api),
           "nvtx_sum": bool(capture.nvtx), "cuda_gpu_mem_time_sum": copies, "cuda_gpu_mem_size_sum": copies,
           "cuda_gpu_trace": bool(capture.kernels) or copies, "nvtx_pushpop_trace": bool(capture.pushpop)}  # fmt: skip
    return [name for name in DATA_NAMES if not has[name]]


def summarize(
    capture: Capture,
    *,
    report_path: str | os.PathLike[str] | None = None,
    stages: Sequence[str] = STAGES,
    top_n: int = 10,
) -> NsysSummary:
    """Summarize ``capture`` over its region (see `NsysSummary`); the caller adds the critical path."""
    by_name: dict[str, dict] = {}
    for row in capture.nvtx:
        entry = by_name.setdefault(row.name, {"name": row.name, "total_ns": 0, "instances": 0})
        entry["total_ns"] += row.ns
        entry["instances"] += row.count
    stage_rows = {name: {k: v for k, v in by_name[name].items() if k != "name"} for name in stages if name in by_name}
    others = sorted((r for n, r in by_name.items() if n not in stage_rows), key=lambda r: -r["total_ns"])[:top_n]
    copies = {d: capture.copies.get(d, Total(d, 0, 0)) for d in ("h2d", "d2h")}
    return NsysSummary(
        report=os.fspath(report_path) if report_path is not None else None,
        stages=stage_rows,
        nvtx_ranges=others,
        **{d: {"bytes": c.bytes, "ns": c.ns, "count": c.count} for d, c in copies.items()},
        missing=_missing(capture),
        **_kernel_figures(capture.kernels, top_n),
        **_region_figures(capture),
        **_api_figures(capture.api),
    )


def write_summary(summary: NsysSummary, folder: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write ``summary.json`` and ``summary.md`` into ``folder`` atomically; return their paths."""
    folder = Path(folder)
    return (atomic_write_text(folder / "summary.json", summary.to_json()),
            atomic_write_text(folder / "summary.md", summary.to_markdown()))  # fmt: skip
