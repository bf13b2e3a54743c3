"""An Nsight Systems capture in short (`NsysSummary`, from the `Capture` of its SQLite export): top kernels, time per
NVTX stage, copies, the GPU idle share of the measured region, the suite's own activity apart (docs/method.md, 6).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from detector.fileio import atomic_write_text
from detector.timing import STAGES
from perf.profile.capture_db import Capture, Total, busy_ns, is_suite_kernel
from perf.profile.critical_path import CriticalPathSummary, ms, percent, shorten
from perf.tabletext import markdown_table

#: The summary's tables (`perf.tabletext.markdown_table`): top kernels, NVTX ranges, CUDA API calls.
KERNEL_COLUMNS = ("#", "Kernel", "Time %", "Total ms", "Calls", "Avg µs")
NVTX_COLUMNS = ("NVTX range (host time)", "Total ms", "Calls", "Avg ms")
API_COLUMNS = ("CUDA API", "Total ms", "Calls")
#: How ``missing`` names the data a capture lacks: the ``nsys stats`` reports that hold it.
DATA_NAMES = ("cuda_gpu_kern_sum", "cuda_api_sum", "nvtx_sum", "cuda_gpu_mem_time_sum",
              "cuda_gpu_mem_size_sum", "cuda_gpu_trace", "nvtx_pushpop_trace")  # fmt: skip
#: CUDA event API calls (``cudaEvent*``, ``cuEvent*``, any suffix): the suite clock's and the runners' timing.
TIMING_EVENT_API_NAME = re.compile(r"^cu(?:da)?Event(?:Record|Synchronize|ElapsedTime|Create|Destroy|Query)")
#: How the summary names the event API calls it leaves out of its CUDA API table.
TIMING_EVENT_LABEL = "timing events (suite clock and runner timers)"


def is_timing_event_api(name: str) -> bool:
    """True for a CUDA API function name of the event family (see `TIMING_EVENT_API_NAME`)."""
    return TIMING_EVENT_API_NAME.match(name) is not None


@dataclass
class NsysSummary:
    """A capture in short; times in ns, fractions 0..1 of the region. ``stages``: the pipeline stages among the NVTX
    ranges (host time), ``nvtx_ranges`` the largest others, ``missing`` the `DATA_NAMES` lacking, ``critical_path``
    None when not made. The model's figures count no suite kernel (`is_suite_kernel`: its span is idle) and no event
    API call (`is_timing_event_api`): those are the ``suite_*`` and ``timing_event_api_*`` fields."""

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

    def to_markdown(self) -> str:
        """A few lines and tables for a terminal, a CI job summary or a pull request."""
        lines = [f"### Nsight Systems: {Path(self.report).name if self.report else 'capture'}", ""]
        if self.region:
            length = ms(self.region["end_ns"] - self.region["start_ns"])
            idle = percent(self.idle_fraction) if self.idle_fraction is not None else "n/a"
            lines.append(f"- Measured region: {length} ms ({self.region['source']}); GPU idle {idle} of it")
        lines.append(f"- Kernels: {ms(self.kernel_total_ns)} ms in {self.kernel_instances} launches")
        suite, share, launches = [], self.suite_busy_fraction, self.suite_kernel_instances
        if launches:
            suite.append(f"{ms(self.suite_kernel_ns)} ms busy-wait in {launches:,} launches"
                         + ("" if share is None else f" ({percent(share)} of the region)"))  # fmt: skip
        if self.timing_event_api_calls:
            suite.append(f"{TIMING_EVENT_LABEL} {ms(self.timing_event_api_ns)} ms in "
                         f"{self.timing_event_api_calls:,} API calls")  # fmt: skip
        if suite:
            lines.append(f"- Suite clock (left out of the figures and tables): {'; '.join(suite)}")
        lines += [f"- {label}: {c['bytes'] / 1e6:.3f} MB in {c['count']} copies, {ms(c['ns'])} ms"
                  for label, c in (("Host-to-device", self.h2d), ("Device-to-host", self.d2h))]
        if self.missing:
            lines.append(f"- No data: {', '.join(self.missing)}")
        ranges = [*self.stages.items(), *((r["name"], r) for r in self.nvtx_ranges)]
        tables = (
            (KERNEL_COLUMNS, [[str(i), f"`{shorten(k['name'], 90)}`", f"{k['percent']:.1f}",
                               ms(k["total_ns"]), str(k["instances"]), f"{k['avg_ns'] / 1e3:.1f}"]
                              for i, k in enumerate(self.top_kernels, 1)], ("#", *KERNEL_COLUMNS[2:])),
            (NVTX_COLUMNS, [[shorten(name, 90), ms(r["total_ns"]), str(r["instances"]),
                             ms(r["total_ns"] / max(r["instances"], 1))] for name, r in ranges], NVTX_COLUMNS[1:]),
            (API_COLUMNS, [[shorten(a["name"], 90), ms(a["total_ns"]), str(a["calls"])] for a in self.top_api],
             API_COLUMNS[1:]),
        )  # fmt: skip
        for columns, rows, right in tables:
            if rows:
                lines += ["", *markdown_table(columns, rows, right)]
        if self.critical_path is not None:
            lines += ["", self.critical_path.to_markdown().rstrip("\n")]
        return "\n".join(lines) + "\n"


def summarize(capture: Capture, *, report_path: str | os.PathLike[str] | None = None, top_n: int = 10) -> NsysSummary:
    """Summarize ``capture`` (see `NsysSummary`: ``percent`` is of the model's kernel time, the top CUDA API
    calls by host time); the caller adds the critical path."""
    ranges = {t.name: {"total_ns": t.ns, "instances": t.count} for t in capture.nvtx}
    stages = {name: ranges[name] for name in STAGES if name in ranges}
    model = [k for k in capture.kernels if not is_suite_kernel(k.name)]
    suite = [k for k in capture.kernels if is_suite_kernel(k.name)]
    events = [a for a in capture.api if is_timing_event_api(a.name)]
    region, total = capture.region, sum(k.ns for k in model)
    has_copies = bool(capture.copies or capture.memsets)
    has = (capture.kernels, capture.api, capture.nvtx, has_copies, has_copies, capture.kernels or has_copies,
           capture.pushpop)  # fmt: skip
    idle = suite_busy = None
    if capture.found and region.length_ns > 0 and (capture.kernels or has_copies):
        spans: dict[bool, list[tuple[int, int]]] = {True: [], False: []}  # by whether a suite kernel
        for op in capture.gpu_ops:
            spans[op.kind == "kernel" and is_suite_kernel(op.name)].append((op.start_ns, op.end_ns))
        idle = 1.0 - busy_ns(spans[False], region.start_ns, region.end_ns) / region.length_ns
        suite_busy = busy_ns(spans[True], region.start_ns, region.end_ns) / region.length_ns
    copies = {d: capture.copies.get(d, Total(d, 0, 0)) for d in ("h2d", "d2h")}
    return NsysSummary(
        report=os.fspath(report_path) if report_path is not None else None,
        kernel_total_ns=total, kernel_instances=sum(k.count for k in model),
        top_kernels=[{"name": k.name, "total_ns": k.ns, "instances": k.count, "avg_ns": k.ns / max(k.count, 1),
                      "percent": 100.0 * k.ns / total if total else 0.0} for k in model[:top_n]],
        stages=stages, nvtx_ranges=[{"name": name, **r} for name, r in ranges.items() if name not in stages][:top_n],
        **{d: {"bytes": c.bytes, "ns": c.ns, "count": c.count} for d, c in copies.items()},
        region=asdict(region) if capture.found else None, idle_fraction=idle,
        top_api=[{"name": a.name, "total_ns": a.ns, "calls": a.count}
                 for a in capture.api if not is_timing_event_api(a.name)][:5],
        missing=[name for name, present in zip(DATA_NAMES, has) if not present],
        suite_kernel_ns=sum(k.ns for k in suite), suite_kernel_instances=sum(k.count for k in suite),
        suite_busy_fraction=suite_busy, timing_event_api_ns=sum(a.ns for a in events),
        timing_event_api_calls=sum(a.count for a in events))  # fmt: skip


def write_summary(summary: NsysSummary, folder: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write ``summary.json`` and ``summary.md`` into ``folder`` atomically; return their paths."""
    folder = Path(folder)
    return (atomic_write_text(folder / "summary.json", summary.to_json()),
            atomic_write_text(folder / "summary.md", summary.to_markdown()))  # fmt: skip
