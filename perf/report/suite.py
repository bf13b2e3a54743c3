"""The suite's own report: tables that tests add rows to, printed in pytest's terminal summary and saved.

Benchmarks go to pytest-benchmark's storage as usual; this report holds what a benchmark table cannot show:
the lab's inference-vs-end-to-end FPS table, per-stage times, parity results and mAP per backend. It is
written to ``<reports>/perf-report.json`` and ``perf-report.md`` (atomically) at the end of the session;
each pytest-xdist worker writes its own ``perf-report-<worker>.json`` and the controller merges them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detector.fileio import atomic_write_text

#: Column order of each known table; unknown tables use their first row's keys.
#: Derived at the end of a run from the "Inference" table: every case against eager torch fp32, same batch.
SPEEDUP_TABLE = "Speed-up vs torch fp32 (same run)"

COLUMNS: dict[str, tuple[str, ...]] = {
    "End-to-end (the lab's table)": (
        "Model Type", "Model Input Size", "Inference Speed (FPS)", "End-to-end speed (FPS)",
    ),
    "End-to-end stages (ms per frame)": (
        "Model Type", "frames", "read", "preprocess", "infer", "postprocess", "write", "e2e FPS",
    ),
    "End-to-end stage spread (IQR of the blocks, ms per frame)": (
        "Model Type", "blocks", "frames per block", "read", "preprocess", "infer", "postprocess", "write",
    ),
    "Inference": (
        "case", "batch", "median ms", "p99 ms", "images/s", "h2d ms", "compute ms", "d2h ms", "enqueue ms",
        "host ms (sync)", "warm-up s",
    ),
    SPEEDUP_TABLE: ("case", "batch", "median ms", "torch fp32 median ms", "speed-up"),
    "Multi-GPU throughput": ("worker", "GPU", "case", "batch", "images/s (all at once)", "images/s (alone)", "scaling"),
    "Harness overhead": ("case", "batch", "suite median ms", "bare loop ms/call", "bare per-call events ms",
                         "suite FPS", "bare loop FPS", "overhead"),
    "Parity vs torch fp32": (
        "candidate", "verdict", "match rate", "mean IoU", "max score diff", "class agreement", "borderline",
        "score max abs", "box max abs px",
    ),
    "Accuracy vs ground truth": ("backend", "mAP@0.5", "mAP@0.5:0.95", "per class AP@0.5"),
    "Pipelined end to end: each path alone": ("case", "path", "FPS", "ms/frame"),
    "Pipelined vs its slowest stage and the sequential loop": (
        "case", "frames", "pipelined", "pipelined FPS", "slowest stage", "slowest stage FPS",
        "pipeline/slowest stage", "meets 0.9", "pipeline/sequential",
    ),
    "Multi-stream batching": (
        "case", "streams", "ticks", "aggregate FPS", "FPS per stream", "latency p50 ms", "latency p99 ms",
        "queue depth",
    ),
}  # fmt: skip


def speedup_rows(inference_rows: Sequence[dict[str, Any]], reference: str = "torch fp32") -> list[dict[str, Any]]:
    """Each "Inference" row's median against the ``reference`` case's at the same batch size, from the same run:
    ``speed-up`` = reference median / case median (2.0 = twice as fast). Rows without a reference are left out."""
    ref = {r["batch"]: r["median ms"] for r in inference_rows if r.get("case") == reference and r.get("median ms")}
    return [{"case": r["case"], "batch": r["batch"], "median ms": r["median ms"], f"{reference} median ms": ref[r["batch"]],
             "speed-up": ref[r["batch"]] / r["median ms"]}
            for r in inference_rows if r.get("case") != reference and r.get("batch") in ref and r.get("median ms")]


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value != value:  # NaN
            return "n/a"
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return "" if value is None else str(value)


@dataclass
class PerfReport:
    """Named tables of rows (dicts); JSON- and markdown-renderable."""

    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, table: str, row: dict[str, Any]) -> None:
        """Append ``row`` to ``table`` (created on first use)."""
        self.tables.setdefault(table, []).append(row)

    def merge(self, other: dict[str, list[dict[str, Any]]]) -> None:
        """Append every row of ``other`` (a :meth:`to_json` dict's ``tables``)."""
        for name, rows in other.items():
            self.tables.setdefault(name, []).extend(rows)

    def to_json(self) -> dict[str, Any]:
        return {"tables": self.tables}

    def to_markdown(self) -> str:
        """Every table as a markdown table, in insertion order."""
        parts = []
        for name, rows in self.tables.items():
            if not rows:
                continue
            columns: Sequence[str] = COLUMNS.get(name) or list(rows[0])
            parts.append(f"### {name}\n")
            parts.append("| " + " | ".join(columns) + " |")
            parts.append("|" + "|".join("---" for _ in columns) + "|")
            for row in rows:
                parts.append("| " + " | ".join(_cell(row.get(c)) for c in columns) + " |")
            parts.append("")
        return "\n".join(parts)

    def add_speedups(self) -> None:
        """(Re)make the :data:`SPEEDUP_TABLE` from the "Inference" table (call once every row is in)."""
        rows = speedup_rows(self.tables.get("Inference", []))
        if rows:
            self.tables[SPEEDUP_TABLE] = rows

    def write(self, folder: str | os.PathLike[str], stem: str = "perf-report") -> list[Path]:
        """Write ``<stem>.json`` and ``<stem>.md`` into ``folder`` atomically; return the paths."""
        folder = Path(folder)
        json_path = atomic_write_text(folder / f"{stem}.json", json.dumps(self.to_json(), indent=2, default=str) + "\n")
        md_path = atomic_write_text(folder / f"{stem}.md", self.to_markdown() + "\n")
        return [json_path, md_path]
