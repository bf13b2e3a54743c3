"""The critical path through a capture's region, walked back from its end (after nvprof's dependency
analysis), and how long each host thread and GPU stream worked and waited (`analyze`, `summarize_path`). The
walk's rules and limits: docs/method.md, section 13; a thread visited twice at one instant takes no second
jump, so the walk always moves back in time and the segments tile the region exactly.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

from perf.profile.capture_db import Capture, GpuOp, HostCall, busy_ns
from perf.profile.critical_path_summary import CriticalPathSummary, PathShare, Segment, StreamLoad, ThreadLoad, Wait
from perf.profile.timeline import GPU_SYNC_CALLS, SLEEP_CALLS, STREAM_TOLERANCE_NS, Timeline, merge_runs

#: A thread without CUDA calls or NVTX ranges has its waits listed with this share of the region on the path.
PATH_SHARE_THAT_MATTERS = 0.01
#: Longest waits and wait names kept in the summary.
TOP = 10
Place = int | GpuOp | None  # where the walk is: a host thread (its gtid), a GPU activity, or nowhere to go


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
