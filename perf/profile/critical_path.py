"""The critical path through a capture's region, walked back from its end (after nvprof's dependency analysis), and
how long each host thread and GPU stream worked and waited (`analyze`, `critical_path_summary`). The walk's rules
and limits: docs/method.md, section 13; a thread visited twice at one instant takes no second jump, so the walk
always moves back in time and the segments tile the region exactly.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from perf.profile.capture_db import Capture, HostCall, busy_ns, read_capture
from perf.profile.critical_path_summary import (
    CriticalPathSummary,
    PathShare,
    Segment,
    StreamLoad,
    ThreadLoad,
    Wait,
)
from perf.profile.timeline import Timeline, merge_runs
from perf.profile.torch_profiler import MEASURED_RANGE

log = logging.getLogger(__name__)

#: CUDA calls that block the host until GPU work is done (no ``_v<version>`` suffix; queries and async copies are not).
GPU_SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaThreadSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
    "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol", "cudaMemcpyPeer",
    "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpyDtoD", "cuMemcpy2D", "cuMemcpy3D",
})  # fmt: skip
#: OS runtime calls in which a thread waits for another thread, a file descriptor or a timer.
BLOCKING_OS_CALLS = frozenset({
    "pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait", "pthread_join", "pthread_timedjoin_np",
    "pthread_mutex_lock", "pthread_mutex_timedlock", "pthread_rwlock_rdlock", "pthread_rwlock_wrlock",
    "pthread_barrier_wait", "sem_wait", "sem_timedwait", "sem_clockwait", "poll", "__poll", "ppoll", "select",
    "pselect", "pselect6", "epoll_wait", "epoll_pwait", "futex", "wait", "waitpid", "waitid", "msgrcv",
    "nanosleep", "clock_nanosleep", "usleep", "sleep",
})  # fmt: skip
#: Blocking OS calls that end by themselves (timers): never resolved to another thread.
SLEEP_CALLS = frozenset({"nanosleep", "clock_nanosleep", "usleep", "sleep"})
#: OS calls with which a thread wakes another one.
WAKE_CALLS = frozenset({"pthread_cond_signal", "pthread_cond_broadcast", "sem_post", "pthread_mutex_unlock",
                        "write", "pthread_kill", "futex", "eventfd_write"})  # fmt: skip
STREAM_TOLERANCE_NS = 2_000  # queued work starts within about a microsecond of the work before it
CLOCK_TOLERANCE_NS = 5_000  # CPU and GPU timestamps differ by a few microseconds
#: A thread without CUDA calls or NVTX ranges has its waits listed when this share of the region is on the path.
PATH_SHARE_THAT_MATTERS = 0.01
#: Longest waits and wait names kept in the summary.
TOP = 10


@dataclass
class CriticalPath:
    """The walk's ``segments`` (time order, tiling the region), the ``waits`` of the threads that matter (longest
    first) and the loads (busiest first)."""

    capture: Capture
    segments: list[Segment]
    waits: list[Wait]
    threads: list[ThreadLoad]
    streams: list[StreamLoad]


class _Walker:
    """Walks one capture back from its region's end; ``tl`` answers the lookups (`perf.profile.timeline`)."""

    def __init__(self, capture: Capture) -> None:
        self.c, self.tl = capture, Timeline(capture, GPU_SYNC_CALLS, BLOCKING_OS_CALLS, WAKE_CALLS)
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
        """The segments from the region's start to its end, touching ones of one kind, place and name merged."""
        t, owner = self.end, self.c.region_thread
        where: tuple[str, int] | None = ("host", owner) if owner is not None else self.tl.last_op(self.end)
        budget = 8 * (len(self.c.cuda_calls) + len(self.c.os_calls) + len(self.c.gpu_ops)) + 100
        seen: set[tuple[str, int]] = set()  # places visited at this very time: a second visit stops the jumps
        while t > self.start and where is not None and budget > 0:
            budget -= 1
            here, before = where, t
            if here[0] == "host":
                where, t = self.host_step(here[1], t, jump=here not in seen)
            else:
                where, t = self.gpu_step(here[1], t)
            seen = set() if t < before else seen | {here}
        if t > self.start:  # nothing to follow: said, not hidden
            reason = "(walk stopped)" if budget <= 0 else "(no dependency found)"
            self.emit("wait", "-", reason, self.start, t)
        return merge_runs(sorted(self.out, key=lambda s: s.start_ns))

    def host_step(self, gtid: int, t: int, jump: bool = True) -> tuple[tuple[str, int] | None, int]:
        tl, label = self.tl, self.c.thread(gtid).label
        if t <= tl.span(gtid)[0] and gtid != self.c.region_thread:
            return (("host", self.c.region_thread) if self.c.region_thread is not None else None), t
        wait = tl.wait_at(gtid, t)
        if wait is None:
            begin = max(tl.wait_end_before(gtid, t), tl.span(gtid)[0], self.start)
            self.host_work(gtid, begin, t)
            return ("host", gtid), begin
        if wait.gpu:
            op = tl.release_op(wait.call, wait.start_ns, t, gtid, CLOCK_TOLERANCE_NS)
            if op is None:  # the GPU was done already: the call's own CPU time
                self.host_work(gtid, wait.start_ns, t)
                return ("host", gtid), wait.start_ns
            released = min(op.end_ns, t)
            self.host_work(gtid, released, t)
            return ("gpu", tl.op_index(op)), released
        if wait.call.name not in SLEEP_CALLS and jump:
            found = tl.releaser(gtid, wait.start_ns, t)
            if found is not None:  # the woken thread's latency after the wake-up call stays on the path
                self.emit("wait", label, f"{wait.call.name} (wake-up)", found[1], t)
                return ("host", found[0]), found[1]
        name = wait.call.name if wait.call.name in SLEEP_CALLS else f"{wait.call.name} (unresolved)"
        self.emit("wait", label, name, wait.start_ns, t)
        return ("host", gtid), wait.start_ns

    def gpu_step(self, index: int, t: int) -> tuple[tuple[str, int] | None, int]:
        tl, tol = self.tl, STREAM_TOLERANCE_NS
        op = tl.ops[index]
        where = tl.stream_label(op)
        if op.start_ns <= self.start:
            self.emit("gpu", where, op.name, op.start_ns, t)
            return None, op.start_ns
        before = tl.previous_on_stream(index, tol)
        launch = tl.launch_of(op)
        ready = min(launch.end_ns, op.start_ns) if launch is not None else None
        queued = before is not None and (before.end_ns >= ready - tol if ready is not None
                                         else op.start_ns - before.end_ns <= tol)  # fmt: skip
        dependency = before if queued else None
        if op.start_ns - (before.end_ns if queued else ready if ready is not None else -tol - 1) > tol:
            dependency = tl.cross_stream(op, tol) or dependency  # it waited for something else
        if dependency is not None:  # a gap after the work it waited for counts with the work that waited
            released = min(dependency.end_ns, op.start_ns)
            self.emit("gpu", where, op.name, released, t)
            return ("gpu", tl.op_index(dependency)), released
        self.emit("gpu", where, op.name, op.start_ns, t)
        if launch is not None and ready is not None:
            self.emit("launch", self.c.thread(launch.gtid).label, launch.name, ready, op.start_ns)
            return ("host", launch.gtid), ready
        owner = self.c.region_thread
        return (("host", owner) if owner is not None else None), op.start_ns


def _loads(capture: Capture, tl: Timeline, segments: Sequence[Segment]) -> tuple[list[ThreadLoad], list[StreamLoad]]:
    region = capture.region
    on_path: dict[str, int] = defaultdict(int)
    for s in segments:
        if s.kind != "launch":
            on_path[s.where] += s.duration_ns
    threads = []
    for gtid, info in capture.threads.items():
        lo, hi = tl.span(gtid)
        calls = tl.wait_calls(gtid)
        every = busy_ns([(c.start_ns, c.end_ns) for c in calls], lo, hi)
        gpu = busy_ns([(c.start_ns, c.end_ns) for c in calls if c.name in GPU_SYNC_CALLS], lo, hi)
        threads.append(ThreadLoad(info.label, hi - lo, hi - lo - every, gpu, every - gpu, on_path[info.label]))
    streams = []
    for label, ops in tl.streams().items():
        busy = busy_ns([(op.start_ns, op.end_ns) for op in ops], region.start_ns, region.end_ns)
        streams.append(StreamLoad(label, busy, region.length_ns - busy, on_path[label]))
    threads.sort(key=lambda t: (-t.busy_ns, -t.on_path_ns, t.where))
    streams.sort(key=lambda s: (-s.busy_ns, s.where))
    return threads, streams


def _waits(capture: Capture, tl: Timeline, threads: Sequence[ThreadLoad]) -> list[Wait]:
    """Every blocking call, clipped to the region, longest first, of the threads with CUDA calls or NVTX ranges or
    `PATH_SHARE_THAT_MATTERS` of the region on the path, each with what released it where that can be told."""
    on_path = {t.where for t in threads if t.on_path_ns >= PATH_SHARE_THAT_MATTERS * capture.region.length_ns}
    wanted = {c.gtid for c in capture.cuda_calls} | {r.gtid for r in capture.ranges}
    wanted |= {g for g, info in capture.threads.items() if info.label in on_path}
    out = []
    lo, hi = capture.region.start_ns, capture.region.end_ns
    for gtid in sorted(wanted):
        label = capture.thread(gtid).label
        for call in tl.wait_calls(gtid):
            start, end = max(call.start_ns, lo), min(call.end_ns, hi)
            if end > start:
                out.append(Wait(label, call.name, "gpu" if call.name in GPU_SYNC_CALLS else "os", start, end,
                                _released_by(capture, tl, call, gtid)))  # fmt: skip
    return sorted(out, key=lambda w: (-w.duration_ns, w.start_ns))


def _released_by(capture: Capture, tl: Timeline, call: HostCall, gtid: int) -> str | None:
    if call.name in GPU_SYNC_CALLS:
        op = tl.release_op(call, call.start_ns, call.end_ns, gtid, CLOCK_TOLERANCE_NS)
        return None if op is None else f"{op.name} ({tl.stream_label(op)})"
    if call.name in SLEEP_CALLS:
        return None
    found = tl.releaser(gtid, call.start_ns, call.end_ns)
    return None if found is None else capture.thread(found[0]).label


def analyze(capture: Capture) -> CriticalPath:
    """The critical path, waits and loads of ``capture`` (see the module docstring for the rules)."""
    walker = _Walker(capture)
    segments = walker.walk() if capture.region.length_ns > 0 else []
    threads, streams = _loads(capture, walker.tl, segments)
    return CriticalPath(capture, segments, _waits(capture, walker.tl, threads), threads, streams)


def _wait_totals(waits: Iterable[Wait]) -> list[dict]:
    totals: dict[str, dict] = {}
    for w in waits:
        entry = totals.setdefault(w.name, {"name": w.name, "kind": w.kind, "ns": 0, "calls": 0, "threads": set()})
        entry["ns"] += w.duration_ns
        entry["calls"] += 1
        entry["threads"].add(w.where)
    rows = sorted(totals.values(), key=lambda e: -e["ns"])
    return [{**e, "threads": len(e["threads"])} for e in rows]


def summarize_path(path: CriticalPath, top: int = TOP) -> CriticalPathSummary:
    """The short form of ``path``: shares per kind and (kind, name), longest stretches, loads, top waits."""
    region = path.capture.region
    by_kind: dict[str, int] = defaultdict(int)
    by_name: dict[tuple[str, str], int] = defaultdict(int)
    for s in path.segments:
        by_kind[s.kind] += s.duration_ns
        by_name[(s.kind, s.name)] += s.duration_ns
    length = region.length_ns or 1
    shares = [PathShare(k, n, ns, ns / length) for (k, n), ns in sorted(by_name.items(), key=lambda i: -i[1])]
    longest = sorted(merge_runs(path.segments), key=lambda s: -s.duration_ns)[:top]
    notes = []
    if not path.capture.os_calls:
        notes.append("no OS runtime calls traced (--trace osrt): blocking waits between threads are not seen")
    return CriticalPathSummary(
        source=path.capture.path.name,
        region={"start_ns": region.start_ns, "end_ns": region.end_ns, "source": region.source},
        segments=len(path.segments), by_kind=dict(by_kind), shares=shares, longest=longest,
        threads=path.threads, streams=path.streams, top_waits=path.waits[:top],
        wait_totals=_wait_totals(path.waits)[:top], notes=notes,
    )  # fmt: skip


def critical_path_summary(sqlite_path: str | os.PathLike[str], range_name: str = MEASURED_RANGE) -> CriticalPathSummary:
    """The summarized critical path of the nsys SQLite export at ``sqlite_path`` (`CaptureError` if it is none)."""
    return summarize_path(analyze(read_capture(sqlite_path, range_name)))


__all__ = ["BLOCKING_OS_CALLS", "GPU_SYNC_CALLS", "CriticalPath", "analyze", "critical_path_summary", "summarize_path"]
