"""The critical-path summary of one capture (`perf.profile.critical_path` computes it): its records, read back
from ``summary.json`` (``from_dict``), and markdown. Times in ns, shares 0..1.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from typing import Any

from perf.tabletext import markdown_table

#: Kinds of path segments and their names: CPU work, GPU work, launch latency, a wait (docs/method.md, 13).
KINDS = {"host": "host CPU", "gpu": "GPU", "launch": "launch latency", "wait": "waits"}
#: Rows of each markdown table, and the widest name in a cell (characters).
SHOWN, CELL = 8, 60
#: The critical path's tables (`perf.tabletext.markdown_table`).
LOAD_COLUMNS = ("Thread / stream", "Active ms", "Busy ms", "GPU-sync wait ms", "OS wait ms", "On path %")
LONGEST_COLUMNS = ("Longest on the path", "Kind", "Where", "ms", "At ms")
WAIT_COLUMNS = ("Longest waits", "Thread", "ms", "Released by")
TOTAL_COLUMNS = ("Waits in all", "Kind", "Calls", "Threads", "Total ms")


class _Span:
    start_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class Segment(_Span):
    """A piece ``[start_ns, end_ns)`` of the path: ``kind`` (`KINDS`), ``where`` (``python:2092``,
    ``stream 13``), ``name`` (innermost NVTX range, kernel, API or OS call)."""

    kind: str
    where: str
    name: str
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class Wait(_Span):
    """A blocking call in the region (clipped): ``kind`` "gpu" (GPU-synchronising) or "os"; ``released_by``
    the GPU work or thread that ended it, when found."""

    where: str
    name: str
    kind: str
    start_ns: int
    end_ns: int
    released_by: str | None = None


@dataclass(frozen=True)
class ThreadLoad:
    """A host thread in the region (docs/method.md, section 13): ``busy_ns`` = active - waits, untraced time
    counting as busy; ``on_path_ns`` its host and wait time on the path."""

    where: str
    active_ns: int
    busy_ns: int
    gpu_wait_ns: int
    os_wait_ns: int
    on_path_ns: int


@dataclass(frozen=True)
class StreamLoad:
    """A GPU stream in the region: ``busy_ns`` (its work) + ``idle_ns`` = region; ``on_path_ns`` its GPU time."""

    where: str
    busy_ns: int
    idle_ns: int
    on_path_ns: int


@dataclass(frozen=True)
class PathShare:
    """The critical path summed per (kind, name): ``ns`` and ``share`` of the region."""

    kind: str
    name: str
    ns: int
    share: float


_NESTED = {"shares": PathShare, "longest": Segment, "threads": ThreadLoad, "streams": StreamLoad, "top_waits": Wait}


@dataclass
class CriticalPathSummary:
    """What bounded a region: the path per kind (``by_kind``, ns) and per (kind, name) (``shares``, largest
    first), its ``longest`` stretches, the loads, the ``top_waits`` and ``wait_totals`` per call name
    (``{"name", "kind", "ns", "calls", "threads"}``) of the threads that matter."""

    source: str
    region: dict[str, Any]
    segments: int
    by_kind: dict[str, int]
    shares: list[PathShare]
    longest: list[Segment]
    threads: list[ThreadLoad]
    streams: list[StreamLoad]
    top_waits: list[Wait]
    wait_totals: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)

    @property
    def region_ns(self) -> int:
        return int(self.region["end_ns"]) - int(self.region["start_ns"])

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CriticalPathSummary:
        values = {f.name: data.get(f.name, [] if f.name == "notes" else None) for f in fields(cls)}
        values.update({name: [kind(**item) for item in data.get(name, [])] for name, kind in _NESTED.items()})
        return cls(**values)

    def bounded_by(self, names: int = 4, least: float = 0.005) -> str:
        """``Bounded by: host CPU 82.0 % (write 45.0 %, read 20.0 %, ...), GPU 12.0 %, waits 6.0 %``: each
        kind with 0.1 % of the region or more, with up to ``names`` of its names taking ``least`` or more."""
        parts = []
        for kind, label in KINDS.items():
            ns = self.by_kind.get(kind, 0)
            if not self.region_ns or ns < 0.001 * self.region_ns:
                continue
            part = f"{label} {_pct(ns, self.region_ns)}"
            mine = [s for s in self.shares if s.kind == kind]
            if (top := [s for s in mine if s.share >= least][:names]) and kind != "launch":
                listed = ", ".join(f"{shorten(s.name, 40)} {100 * s.share:.1f} %" for s in top)
                part += f" ({listed}{', ...' if len(mine) > len(top) else ''})"
            parts.append(part)
        return "Bounded by: " + (", ".join(parts) if parts else "nothing traced")

    def to_markdown(self) -> str:
        """A few lines and small tables (markdown) for the terminal, summary.md and the report."""
        region, start = self.region_ns, int(self.region["start_ns"])
        pct = functools.partial(_pct, total=region, unit="")
        lines = [f"#### Critical path: {self.source}", "",
                 f"- Region: {region / 1e6:.3f} ms ({self.region.get('source', '?')}); the path has "
                 f"{self.segments:,} segments", f"- {self.bounded_by()}", *(f"- {n}" for n in self.notes)]
        loads = [[t.where, ms(t.active_ns), ms(t.busy_ns), ms(t.gpu_wait_ns), ms(t.os_wait_ns),
                  pct(t.on_path_ns)] for t in self.threads[:SHOWN]]  # fmt: skip
        if rest := self.threads[SHOWN:]:
            loads.append([f"{len(rest)} more threads", "", ms(sum(t.busy_ns for t in rest)), "", "",
                          pct(sum(t.on_path_ns for t in rest))])  # fmt: skip
        loads += [[s.where, ms(region), ms(s.busy_ns), "", f"idle {ms(s.idle_ns)}", pct(s.on_path_ns)]
                  for s in self.streams[:SHOWN]]
        tables = (
            (LOAD_COLUMNS, loads, LOAD_COLUMNS[1:]),
            (LONGEST_COLUMNS, [[s.name, s.kind, s.where, ms(s.duration_ns), ms(s.start_ns - start)]
                               for s in self.longest[:SHOWN]], LONGEST_COLUMNS[3:]),
            (WAIT_COLUMNS, [[w.name, w.where, ms(w.duration_ns), w.released_by or "not found"]
                            for w in self.top_waits[:SHOWN]], ("ms",)),
            (TOTAL_COLUMNS, [[w["name"], w["kind"], f"{w['calls']:,}", str(w["threads"]), ms(w["ns"])]
                             for w in self.wait_totals[:SHOWN]], TOTAL_COLUMNS[2:]),
        )  # fmt: skip
        for columns, rows, right in tables:
            if rows:  # every cell cut to CELL characters: only names are ever that long
                lines += ["", *markdown_table(columns, ([shorten(c, CELL) for c in r] for r in rows), right)]
        return "\n".join(lines) + "\n"


def ms(ns: float) -> str:
    """ns as ms, 3 decimals."""
    return f"{ns / 1e6:.3f}"


def _pct(ns: float, total: float, unit: str = " %") -> str:
    return f"{100 * ns / total:.1f}{unit}" if total else "n/a"


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the last one "…"."""
    return text if len(text) <= width else text[: width - 1] + "…"
