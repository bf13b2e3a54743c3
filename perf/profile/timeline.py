"""Lookups over one capture for the critical-path walk (`perf.profile.critical_path`): each thread's waits,
span and innermost NVTX ranges, each stream's work, launches by correlation id, who released a wait. Times in
ns; a wait "covers" ``t`` when ``start < t <= end``. Which calls wait and wake: docs/method.md, section 13.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from operator import attrgetter, itemgetter

from perf.profile.capture_db import Capture, GpuOp, HostCall

#: CUDA calls that block the host until GPU work is done (no ``_v<version>``); queries, async copies do not.
GPU_SYNC_CALLS = frozenset((
    "cudaDeviceSynchronize cudaThreadSynchronize cudaStreamSynchronize cudaEventSynchronize cuCtxSynchronize "
    "cuStreamSynchronize cuEventSynchronize cudaMemcpy cudaMemcpy2D cudaMemcpy3D cudaMemcpyToSymbol cuMemcpy "
    "cudaMemcpyFromSymbol cudaMemcpyPeer cuMemcpyDtoH cuMemcpyHtoD cuMemcpyDtoD cuMemcpy2D cuMemcpy3D").split())
#: Blocking OS calls that end by themselves (timers): never resolved to another thread.
SLEEP_CALLS = frozenset(("nanosleep", "clock_nanosleep", "usleep", "sleep"))
#: OS runtime calls in which a thread waits for another thread, a file descriptor or a timer.
BLOCKING_OS_CALLS = SLEEP_CALLS | frozenset((
    "pthread_cond_wait pthread_cond_timedwait pthread_cond_clockwait pthread_join pthread_timedjoin_np "
    "pthread_mutex_lock pthread_mutex_timedlock pthread_rwlock_rdlock pthread_rwlock_wrlock "
    "pthread_barrier_wait sem_wait sem_timedwait sem_clockwait poll __poll ppoll select pselect pselect6 "
    "epoll_wait epoll_pwait futex wait waitpid waitid msgrcv").split())
#: OS calls with which a thread wakes another one.
WAKE_CALLS = frozenset(("pthread_cond_signal pthread_cond_broadcast sem_post pthread_mutex_unlock write "
                        "pthread_kill futex eventfd_write").split())  # fmt: skip
STREAM_TOLERANCE_NS = 2_000  # queued work starts within about a microsecond of the work before it
CLOCK_TOLERANCE_NS = 5_000  # CPU and GPU timestamps differ by a few microseconds
_STREAM_LOOKBACK = 32  # activities `previous_on_stream` looks back (graph branches share a stream id)
_RELEASE_LOOKBACK = 20_000  # activities `Timeline.release_op` looks at per rule (a long wait on a busy GPU)
_START, _END = attrgetter("start_ns"), attrgetter("end_ns")


@dataclass(frozen=True)
class WaitSpan:
    """A thread's overlapping blocking calls merged; ``call`` the longest (a GPU-synchronising one first)."""

    start_ns: int
    end_ns: int
    call: HostCall


def _merge(calls: list[HostCall]) -> list[WaitSpan]:
    spans: list[WaitSpan] = []
    for call in sorted(calls, key=_START):
        if spans and call.start_ns < (last := spans[-1]).end_ns:
            longest = max(last.call, call, key=lambda c: (c.name in GPU_SYNC_CALLS, c.end_ns - c.start_ns))
            spans[-1] = WaitSpan(last.start_ns, max(last.end_ns, call.end_ns), longest)
        else:
            spans.append(WaitSpan(call.start_ns, call.end_ns, call))
    return spans


def innermost_pieces(ranges: Iterable[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Disjoint ``(start, end, name)`` pieces in time order, named by the innermost range covering them (gaps: none)."""
    pieces: list[tuple[int, int, str]] = []
    stack: list[tuple[int, int, str]] = []
    cursor = 0

    def close_until(x: float) -> None:
        nonlocal cursor
        while stack and stack[-1][1] <= x:
            top = stack.pop()
            if top[1] > cursor:
                pieces.append((cursor, top[1], top[2]))
            cursor = max(cursor, top[1])

    for start, end, name in sorted(ranges, key=lambda r: (r[0], -r[1])):
        close_until(start)
        if stack and start > cursor:
            pieces.append((cursor, start, stack[-1][2]))
        stack.append((start, end, name))
        cursor = max(cursor, start)
    close_until(float("inf"))
    return pieces


class Timeline:
    """Per-thread and per-stream indexes of ``capture`` for the walk."""

    def __init__(self, capture: Capture) -> None:
        self.c, region = capture, capture.region
        self._by_end = sorted(capture.gpu_ops, key=_END)
        self._launch = {c.correlation_id: c for c in capture.cuda_calls if c.correlation_id is not None}
        self._one_device = len({op.device for op in capture.gpu_ops}) <= 1
        self.streams: dict[str, list[GpuOp]] = {}  # by `stream_label`, each in start order
        for op in capture.gpu_ops:
            self.streams.setdefault(self.stream_label(op), []).append(op)
        self._stream_pos = {id(op): i for ops in self.streams.values() for i, op in enumerate(ops)}
        #: Each thread's blocking calls one by one (GPU-synchronising and OS).
        self.wait_calls: dict[int, list[HostCall]] = {}
        events: dict[int, list[int]] = {}
        ranges: dict[int, list[tuple[int, int, str]]] = {}
        for call in (*capture.cuda_calls, *capture.os_calls):
            events.setdefault(call.gtid, []).extend((call.start_ns, call.end_ns))
            if call.name in GPU_SYNC_CALLS or call.name in BLOCKING_OS_CALLS:
                self.wait_calls.setdefault(call.gtid, []).append(call)
        for r in capture.ranges:
            events.setdefault(r.gtid, []).extend((r.start_ns, r.end_ns))
            if r.name != capture.range_name:
                ranges.setdefault(r.gtid, []).append((r.start_ns, r.end_ns, r.name))
        self._waits = {g: _merge(calls) for g, calls in self.wait_calls.items()}
        self._events = {g: sorted(times) for g, times in events.items()}
        self._pieces = {g: innermost_pieces(rs) for g, rs in ranges.items()}
        self._spans = {g: (region.start_ns, region.end_ns) if g == capture.region_thread
                       else (max(times[0], region.start_ns), min(times[-1], region.end_ns))
                       for g, times in self._events.items()}  # fmt: skip
        self._wakes = sorted((c for c in capture.os_calls if c.name in WAKE_CALLS), key=_START)

    def span(self, gtid: int) -> tuple[int, int]:
        """First to last traced event of the thread in the region (the region's thread: all of it)."""
        return self._spans.get(gtid, (self.c.region.start_ns, self.c.region.start_ns))

    def last_wait(self, gtid: int, t: int) -> WaitSpan | None:
        """The thread's last (merged) wait started before ``t``; it covers ``t`` unless it ended before."""
        i = bisect.bisect_left(waits := self._waits.get(gtid, []), t, key=_START) - 1
        return waits[i] if i >= 0 else None

    def wait_at(self, gtid: int, t: int) -> WaitSpan | None:
        """The thread's (merged) wait covering ``t``, if any."""
        wait = self.last_wait(gtid, t)
        return wait if wait is not None and wait.end_ns >= t else None

    def named_pieces(self, gtid: int, start: int, end: int) -> list[tuple[str, int, int]]:
        """``[start, end)`` cut at NVTX boundaries: ``(innermost range or "<thread> (no range)", a, b)``."""
        pieces, untagged = self._pieces.get(gtid, []), f"{self.c.thread(gtid).label} (no range)"
        out, cursor = [], start
        for a, b, name in pieces[bisect.bisect_right(pieces, start, key=itemgetter(1)):]:
            if a >= end:
                break
            if a > cursor:
                out.append((untagged, cursor, a))
            out.append((name, max(a, cursor), min(b, end)))
            cursor = min(b, end)
        if cursor < end:
            out.append((untagged, cursor, end))
        return out

    def releaser(self, gtid: int, start: int, t: int) -> tuple[int, int] | None:
        """(thread, time) that ended ``gtid``'s wait over ``[start, t]``: the last wake-up call's thread at
        its end (capped at ``t``), else the thread not waiting at ``t`` whose last event came last."""
        i = bisect.bisect_left(self._wakes, t, key=_START) - 1
        while i >= 0 and (call := self._wakes[i]).start_ns >= start:
            if call.gtid != gtid and self.wait_at(call.gtid, min(call.end_ns, t)) is None:
                return call.gtid, min(call.end_ns, t)
            i -= 1
        last = {other: times[j] for other, times in self._events.items()
                if other != gtid and self.span(other)[0] < t and self.wait_at(other, t) is None
                and (j := bisect.bisect_left(times, t) - 1) >= 0 and times[j] >= start}  # fmt: skip
        best = max(last, key=last.__getitem__, default=None)
        return None if best is None else (best, t)

    def stream_label(self, op: GpuOp) -> str:
        return f"stream {op.stream}" if self._one_device else f"GPU {op.device} stream {op.stream}"

    def launch_of(self, op: GpuOp) -> HostCall | None:
        """The CUDA call that launched ``op`` (same correlation id), if it was traced in the region."""
        return self._launch.get(op.correlation_id)

    def last_op(self, t: int) -> GpuOp | None:
        """The activity that ended last by ``t``."""
        i = bisect.bisect_right(self._by_end, t, key=_END) - 1
        return self._by_end[i] if i >= 0 else None

    def previous_on_stream(self, op: GpuOp) -> GpuOp | None:
        """The latest-ending of the work just before ``op`` on its stream that started before it and ended by
        its start (+ `STREAM_TOLERANCE_NS`); of equal ends, the one queued last."""
        ops, i = self.streams[self.stream_label(op)], self._stream_pos[id(op)]
        fits = [o for o in reversed(ops[max(0, i - _STREAM_LOOKBACK) : i])
                if o.start_ns < op.start_ns and o.end_ns <= op.start_ns + STREAM_TOLERANCE_NS]  # fmt: skip
        return max(fits, key=_END, default=None)

    def cross_stream(self, op: GpuOp) -> GpuOp | None:
        """The latest-ending work on another stream of the device, started before ``op``, ended near its start."""
        i = bisect.bisect_right(self._by_end, op.start_ns + STREAM_TOLERANCE_NS, key=_END) - 1
        while i >= 0 and (other := self._by_end[i]).end_ns >= op.start_ns - STREAM_TOLERANCE_NS:
            if other.device == op.device and other.stream != op.stream and other.start_ns < op.start_ns:
                return other
            i -= 1
        return None

    def release_op(self, call: HostCall, start: int, t: int, gtid: int) -> GpuOp | None:
        """The GPU work whose end released ``call`` (waiting over ``[start, t]``): the last to end in
        ``(start, t + CLOCK_TOLERANCE_NS]`` on the stream CUPTI names, else of ``gtid``'s launches, else
        any."""
        stream, before = self.c.sync_targets.get(call.correlation_id, (None, None))
        if stream is not None:
            rules = [lambda op: op.stream == stream and (
                before is None or op.correlation_id is None or op.correlation_id < before)]  # fmt: skip
        else:
            rules = [lambda op: getattr(self.launch_of(op), "gtid", None) == gtid, lambda op: True]
        last = bisect.bisect_right(self._by_end, t + CLOCK_TOLERANCE_NS, key=_END) - 1
        for rule in rules:
            for i in range(last, max(-1, last - _RELEASE_LOOKBACK), -1):
                op = self._by_end[i]
                if op.end_ns <= start:
                    break
                if op.start_ns < min(op.end_ns, t) and rule(op):
                    return op
        return None
