"""The critical path through a capture's region, walked back from its end (after nvprof's dependency analysis),
and each host thread's and GPU stream's work and waits (`analyze`); its short form (`summarize_path`,
`CriticalPathSummary.from_dict`) and markdown. Times in ns, shares 0..1. The walk's rules: docs/method.md, section 13.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from perf.profile.capture_db import Capture, GpuOp, HostCall, busy_ns
from perf.profile.timeline import GPU_SYNC_CALLS, SLEEP_CALLS, STREAM_TOLERANCE_NS, Timeline
from perf.tabletext import markdown_table

#: A thread without CUDA calls or NVTX ranges has its waits listed with this share of the region on the path.
PATH_SHARE_THAT_MATTERS = 0.01
#: Longest waits and wait names kept in the summary.
TOP = 10
Place = int | GpuOp | None  # where the walk is: a host thread (its gtid), a GPU activity, or nowhere to go
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


def merge_runs(segments: Iterable[Segment]) -> list[Segment]:
    """Consecutive segments (time order) of the same kind, place and name that touch, merged into one."""
    runs: list[Segment] = []
    for s in segments:
        last = runs[-1] if runs else None
        if last and (last.kind, last.where, last.name, last.end_ns) == (s.kind, s.where, s.name, s.start_ns):
            runs[-1] = replace(last, end_ns=s.end_ns)
        else:
            runs.append(s)
    return runs


@dataclass
class CriticalPath:
    """The walk's ``segments`` (tiling the region), ``waits`` (longest first), loads (busiest first)."""

    capture: Capture
    segments: list[Segment]
    waits: list[Wait]
    threads: list[ThreadLoad]
    streams: list[StreamLoad]


class _Walker:
    """Walks one capture back from its region's end; ``tl`` answers the lookups (`perf.profile.timeline`)."""

    def __init__(self, capture: Capture) -> None:
        self.c, self.tl = capture, Timeline(capture)
        self.start, self.end = capture.region.start_ns, capture.region.end_ns
        self.out: list[Segment] = []

    def emit(self, kind: str, where: str, name: str, start: int, end: int) -> None:
        start = max(start, self.start)
        if end > start:
            self.out.append(Segment(kind, where, name, start, end))

    def host_work(self, gtid: int, start: int, end: int) -> None:
        label = self.c.thread(gtid).label
        for name, a, b in reversed(self.tl.named_pieces(gtid, max(start, self.start), end)):
            self.emit("host", label, name, a, b)

    def walk(self) -> list[Segment]:
        """The segments from the region's start to its end, touching ones of one kind, place, name merged."""
        t, owner = self.end, self.c.region_thread
        place: Place = owner if owner is not None else self.tl.last_op(self.end)
        budget = 8 * (len(self.c.cuda_calls) + len(self.c.os_calls) + len(self.c.gpu_ops)) + 100
        seen: set[Place] = set()  # places visited at this very time: a second visit stops the jumps
        while t > self.start and place is not None and budget > 0:
            budget -= 1
            here, before = place, t
            if isinstance(here, GpuOp):
                place, t = self.gpu_step(here, t)
            else:
                place, t = self.host_step(here, t, jump=here not in seen)
            seen = set() if t < before else seen | {here}
        if t > self.start:  # nothing to follow: said, not hidden
            reason = "(walk stopped)" if budget <= 0 else "(no dependency found)"
            self.emit("wait", "-", reason, self.start, t)
        return merge_runs(sorted(self.out, key=lambda s: s.start_ns))

    def host_step(self, gtid: int, t: int, jump: bool) -> tuple[Place, int]:
        tl, label = self.tl, self.c.thread(gtid).label
        if t <= tl.span(gtid)[0] and gtid != self.c.region_thread:
            return self.c.region_thread, t
        wait = tl.last_wait(gtid, t)
        if wait is None or wait.end_ns < t:
            begin = max(wait.end_ns if wait else self.start, tl.span(gtid)[0], self.start)
            self.host_work(gtid, begin, t)
            return gtid, begin
        if wait.call.name in GPU_SYNC_CALLS:
            op = tl.release_op(wait.call, wait.start_ns, t, gtid)
            if op is None:  # the GPU was done already: the call's own CPU time
                self.host_work(gtid, wait.start_ns, t)
                return gtid, wait.start_ns
            released = min(op.end_ns, t)
            self.host_work(gtid, released, t)
            return op, released
        if wait.call.name not in SLEEP_CALLS and jump:
            found = tl.releaser(gtid, wait.start_ns, t)
            if found is not None:  # the woken thread's latency after the wake-up call stays on the path
                self.emit("wait", label, f"{wait.call.name} (wake-up)", found[1], t)
                return found
        name = wait.call.name if wait.call.name in SLEEP_CALLS else f"{wait.call.name} (unresolved)"
        self.emit("wait", label, name, wait.start_ns, t)
        return gtid, wait.start_ns

    def gpu_step(self, op: GpuOp, t: int) -> tuple[Place, int]:
        tl, tol, where = self.tl, STREAM_TOLERANCE_NS, self.tl.stream_label(op)
        if op.start_ns <= self.start:
            self.emit("gpu", where, op.name, op.start_ns, t)
            return None, op.start_ns
        before, launch = tl.previous_on_stream(op), tl.launch_of(op)
        ready = min(launch.end_ns, op.start_ns) if launch is not None else None
        queued = before is not None and (before.end_ns >= ready - tol if ready is not None
                                         else op.start_ns - before.end_ns <= tol)  # fmt: skip
        dependency = before if queued else None
        if op.start_ns - (before.end_ns if queued else ready if ready is not None else -tol - 1) > tol:
            dependency = tl.cross_stream(op) or dependency  # it waited for something else
        if dependency is not None:  # a gap after the work it waited for counts with the work that waited
            released = min(dependency.end_ns, op.start_ns)
            self.emit("gpu", where, op.name, released, t)
            return dependency, released
        self.emit("gpu", where, op.name, op.start_ns, t)
        if launch is not None:
            self.emit("launch", self.c.thread(launch.gtid).label, launch.name, ready, op.start_ns)
            return launch.gtid, ready
        return self.c.region_thread, op.start_ns


def _released_by(capture: Capture, tl: Timeline, call: HostCall, gtid: int) -> str | None:
    if call.name in GPU_SYNC_CALLS:
        op = tl.release_op(call, call.start_ns, call.end_ns, gtid)
        return None if op is None else f"{op.name} ({tl.stream_label(op)})"
    found = None if call.name in SLEEP_CALLS else tl.releaser(gtid, call.start_ns, call.end_ns)
    return None if found is None else capture.thread(found[0]).label


def analyze(capture: Capture) -> CriticalPath:
    """The critical path of ``capture`` and the waits (clipped to the region) of the threads with CUDA calls,
    NVTX ranges or `PATH_SHARE_THAT_MATTERS` of the region on the path."""
    walker = _Walker(capture)
    tl, region = walker.tl, capture.region
    segments = walker.walk() if region.length_ns > 0 else []
    on_path: Counter[str] = Counter()
    for s in segments:
        if s.kind != "launch":
            on_path[s.where] += s.duration_ns
    threads = []
    for gtid, info in capture.threads.items():
        lo, hi = tl.span(gtid)
        calls = tl.wait_calls.get(gtid, [])
        every = busy_ns([(c.start_ns, c.end_ns) for c in calls], lo, hi)
        gpu = busy_ns([(c.start_ns, c.end_ns) for c in calls if c.name in GPU_SYNC_CALLS], lo, hi)
        threads.append(ThreadLoad(info.label, hi - lo, hi - lo - every, gpu, every - gpu, on_path[info.label]))
    threads.sort(key=lambda t: (-t.busy_ns, -t.on_path_ns, t.where))
    busy = {label: busy_ns([(op.start_ns, op.end_ns) for op in ops], region.start_ns, region.end_ns)
            for label, ops in tl.streams.items()}  # fmt: skip
    streams = sorted((StreamLoad(label, ns, region.length_ns - ns, on_path[label]) for label, ns in busy.items()),
                     key=lambda s: (-s.busy_ns, s.where))  # fmt: skip
    matter = {t.where for t in threads if t.on_path_ns >= PATH_SHARE_THAT_MATTERS * region.length_ns}
    wanted = {c.gtid for c in (*capture.cuda_calls, *capture.ranges)}
    wanted |= {g for g, info in capture.threads.items() if info.label in matter}
    waits = [Wait(capture.thread(gtid).label, call.name, "gpu" if call.name in GPU_SYNC_CALLS else "os",
                  max(call.start_ns, region.start_ns), min(call.end_ns, region.end_ns),
                  _released_by(capture, tl, call, gtid))
             for gtid in sorted(wanted) for call in tl.wait_calls.get(gtid, [])
             if min(call.end_ns, region.end_ns) > max(call.start_ns, region.start_ns)]  # fmt: skip
    waits.sort(key=lambda w: (-w.duration_ns, w.start_ns))
    return CriticalPath(capture, segments, waits, threads, streams)


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
            part = f"{label} {percent(ns, self.region_ns)}"
            mine = [s for s in self.shares if s.kind == kind]
            if (top := [s for s in mine if s.share >= least][:names]) and kind != "launch":
                listed = ", ".join(f"{shorten(s.name, 40)} {percent(s.share)}" for s in top)
                part += f" ({listed}{', ...' if len(mine) > len(top) else ''})"
            parts.append(part)
        return "Bounded by: " + (", ".join(parts) if parts else "nothing traced")

    def to_markdown(self) -> str:
        """A few lines and small tables (markdown) for the terminal, summary.md and the report."""
        region, start = self.region_ns, int(self.region["start_ns"])
        pct = functools.partial(percent, whole=region, unit="")
        lines = [f"#### Critical path: {self.source}", "",
                 f"- Region: {ms(region)} ms ({self.region.get('source', '?')}); the path has "
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


def summarize_path(path: CriticalPath, top: int = TOP) -> CriticalPathSummary:
    """The short form of ``path`` (`CriticalPathSummary`)."""
    region = path.capture.region
    by_kind: Counter[str] = Counter()
    by_name: Counter[tuple[str, str]] = Counter()
    for s in path.segments:
        by_kind[s.kind] += s.duration_ns
        by_name[(s.kind, s.name)] += s.duration_ns
    waits: dict[str, list[Wait]] = {}
    for w in path.waits:
        waits.setdefault(w.name, []).append(w)
    totals = [{"name": name, "kind": ws[0].kind, "ns": sum(w.duration_ns for w in ws), "calls": len(ws),
               "threads": len({w.where for w in ws})} for name, ws in waits.items()]  # fmt: skip
    return CriticalPathSummary(
        source=path.capture.path.name, segments=len(path.segments), by_kind=dict(by_kind),
        region=asdict(region),
        shares=[PathShare(k, n, ns, ns / (region.length_ns or 1)) for (k, n), ns in by_name.most_common()],
        longest=sorted(merge_runs(path.segments), key=lambda s: -s.duration_ns)[:top], threads=path.threads,
        streams=path.streams, top_waits=path.waits[:top], wait_totals=sorted(totals, key=lambda e: -e["ns"])[:top],
        notes=[] if path.capture.os_calls else [
            "no OS runtime calls traced (--trace osrt): blocking waits between threads are not seen"])  # fmt: skip


def ms(ns: float) -> str:
    """ns as ms, 3 decimals."""
    return f"{ns / 1e6:.3f}"


def percent(part: float, whole: float = 1.0, unit: str = " %") -> str:
    """``part`` of ``whole`` as a percentage, 1 decimal (``12.5 %``); "n/a" of a zero whole."""
    return f"{100 * part / whole:.1f}{unit}" if whole else "n/a"


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the last one "…"."""
    return text if len(text) <= width else text[: width - 1] + "…"
