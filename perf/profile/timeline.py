"""Lookups over one capture for the critical-path walk (`perf.profile.critical_path`): each thread's waits, span and
innermost NVTX ranges, each stream's work, launches by correlation id, who released a wait. Times in ns; a wait
"covers" ``t`` when ``start < t <= end``.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from perf.profile.capture_db import Capture, GpuOp, HostCall
from perf.profile.critical_path_summary import Segment

_STREAM_LOOKBACK = 32  # activities `Timeline.previous_on_stream` looks back (graph branches share a stream id)
_RELEASE_LOOKBACK = 20_000  # activities `Timeline.release_op` looks at per rule (a long wait on a busy GPU)


@dataclass(frozen=True)
class WaitSpan:
    """A thread's overlapping blocking calls merged: ``gpu`` when one synchronises with the GPU, ``call`` the longest
    (GPU-synchronising one first)."""

    start_ns: int
    end_ns: int
    gpu: bool
    call: HostCall


def _merge(calls: list[HostCall], gpu_calls: Collection[str]) -> list[WaitSpan]:
    spans: list[WaitSpan] = []
    group: list[HostCall] = []
    for call in sorted(calls, key=lambda c: c.start_ns) + [None]:  # type: ignore[list-item]
        if group and (call is None or call.start_ns >= max(c.end_ns for c in group)):
            gpu = [c for c in group if c.name in gpu_calls]
            lead = max(gpu or group, key=lambda c: c.end_ns - c.start_ns)
            spans.append(WaitSpan(group[0].start_ns, max(c.end_ns for c in group), bool(gpu), lead))
            group = []
        if call is not None:
            group.append(call)
    return spans


def innermost_pieces(ranges: Iterable[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Disjoint ``(start, end, name)`` pieces in time order, each named by the innermost of the nested ``ranges``
    covering it; uncovered time has no piece."""
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


def merge_runs(segments: Iterable[Segment]) -> list[Segment]:
    """Consecutive segments (time order) of the same kind, place and name that touch, merged into one."""
    runs: list[Segment] = []
    for s in segments:
        last = runs[-1] if runs else None
        if last and (last.kind, last.where, last.name, last.end_ns) == (s.kind, s.where, s.name, s.start_ns):
            runs[-1] = Segment(s.kind, s.where, s.name, last.start_ns, s.end_ns)
        else:
            runs.append(s)
    return runs


class Timeline:
    """Per-thread and per-stream indexes of ``capture`` for the walk; ``ops`` are its GPU activities by start."""

    def __init__(self, capture: Capture, gpu_calls: Collection[str], blocking: Collection[str],
                 wake: Collection[str]) -> None:  # fmt: skip
        self.c, region = capture, capture.region
        self.ops = capture.gpu_ops
        self._index = {id(op): i for i, op in enumerate(self.ops)}
        self._by_end = sorted(self.ops, key=lambda op: op.end_ns)
        self._ends = [op.end_ns for op in self._by_end]
        self._launch = {c.correlation_id: c for c in capture.cuda_calls if c.correlation_id is not None}
        self._streams: dict[tuple[int, int], list[GpuOp]] = {}
        for op in self.ops:
            self._streams.setdefault((op.device, op.stream), []).append(op)
        self._stream_pos = {id(op): i for ops in self._streams.values() for i, op in enumerate(ops)}
        self._devices = {op.device for op in self.ops}
        wait_calls: dict[int, list[HostCall]] = {}
        events: dict[int, list[int]] = {}
        for call in (*capture.cuda_calls, *capture.os_calls):
            events.setdefault(call.gtid, []).extend((call.start_ns, call.end_ns))
            if call.name in gpu_calls or call.name in blocking:
                wait_calls.setdefault(call.gtid, []).append(call)
        ranges: dict[int, list[tuple[int, int, str]]] = {}
        for r in capture.ranges:
            events.setdefault(r.gtid, []).extend((r.start_ns, r.end_ns))
            if r.name != capture.range_name:
                ranges.setdefault(r.gtid, []).append((r.start_ns, r.end_ns, r.name))
        self._wait_calls = wait_calls
        self._waits = {g: _merge(calls, gpu_calls) for g, calls in wait_calls.items()}
        self._wait_starts = {g: [w.start_ns for w in spans] for g, spans in self._waits.items()}
        self._events = {g: sorted(times) for g, times in events.items()}
        self._pieces = {g: innermost_pieces(rs) for g, rs in ranges.items()}
        self._piece_ends = {g: [p[1] for p in ps] for g, ps in self._pieces.items()}
        self._spans = {}
        for g, times in self._events.items():
            whole = g == capture.region_thread
            self._spans[g] = (region.start_ns if whole else max(times[0], region.start_ns),
                              region.end_ns if whole else min(times[-1], region.end_ns))  # fmt: skip
        self._wakes = sorted((c for c in capture.os_calls if c.name in wake), key=lambda c: c.start_ns)
        self._wake_starts = [c.start_ns for c in self._wakes]

    def span(self, gtid: int) -> tuple[int, int]:
        """First to last traced event of the thread, clipped to the region (the region's thread: all of it)."""
        return self._spans.get(gtid, (self.c.region.start_ns, self.c.region.start_ns))

    def wait_calls(self, gtid: int) -> list[HostCall]:
        """The thread's blocking calls one by one (GPU-synchronising and OS), by start."""
        return self._wait_calls.get(gtid, [])

    def wait_at(self, gtid: int, t: int) -> WaitSpan | None:
        """The thread's (merged) wait covering ``t``, if any."""
        starts = self._wait_starts.get(gtid, [])
        i = bisect.bisect_left(starts, t) - 1
        if i >= 0 and self._waits[gtid][i].end_ns >= t:
            return self._waits[gtid][i]
        return None

    def wait_end_before(self, gtid: int, t: int) -> int:
        """The end of the thread's last wait that ended before ``t`` (the region's start if none)."""
        starts = self._wait_starts.get(gtid, [])
        i = bisect.bisect_left(starts, t) - 1
        while i >= 0 and self._waits[gtid][i].end_ns >= t:
            i -= 1
        return self._waits[gtid][i].end_ns if i >= 0 else self.c.region.start_ns

    def named_pieces(self, gtid: int, start: int, end: int) -> list[tuple[str, int, int]]:
        """``[start, end)`` cut at NVTX boundaries: ``(innermost range or "<thread> (no range)", start, end)``."""
        pieces, ends = self._pieces.get(gtid, []), self._piece_ends.get(gtid, [])
        untagged = f"{self.c.thread(gtid).label} (no range)"
        out, cursor = [], start
        for i in range(bisect.bisect_right(ends, start), len(pieces)):
            a, b, name = pieces[i]
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
        """(thread, time) that ended ``gtid``'s wait over ``[start, t]``: the last wake-up call's thread, at its end
        (capped at ``t``), else the thread not waiting at ``t`` whose last event came last (docs/method.md, 13)."""
        i = bisect.bisect_left(self._wake_starts, t) - 1
        while i >= 0 and self._wakes[i].start_ns >= start:
            call = self._wakes[i]
            if call.gtid != gtid and self.wait_at(call.gtid, min(call.end_ns, t)) is None:
                return call.gtid, min(call.end_ns, t)
            i -= 1
        best: tuple[int, int] | None = None
        for other, times in self._events.items():
            if other == gtid or self.span(other)[0] >= t or self.wait_at(other, t) is not None:
                continue
            j = bisect.bisect_left(times, t) - 1
            if j >= 0 and times[j] >= start and (best is None or times[j] > best[1]):
                best = (other, times[j])
        return None if best is None else (best[0], t)

    def op_index(self, op: GpuOp) -> int:
        return self._index[id(op)]

    def stream_label(self, op: GpuOp) -> str:
        return f"stream {op.stream}" if len(self._devices) <= 1 else f"GPU {op.device} stream {op.stream}"

    def streams(self) -> dict[str, list[GpuOp]]:
        return {self.stream_label(ops[0]): ops for ops in self._streams.values()}

    def launch_of(self, op: GpuOp) -> HostCall | None:
        """The CUDA call that launched ``op`` (same correlation id), if it was traced in the region."""
        return self._launch.get(op.correlation_id) if op.correlation_id is not None else None

    def last_op(self, t: int) -> tuple[str, int] | None:
        """("gpu", index) of the activity that ended last by ``t``; None without one."""
        i = bisect.bisect_right(self._ends, t) - 1
        return ("gpu", self.op_index(self._by_end[i])) if i >= 0 else None

    def previous_on_stream(self, index: int, tolerance: int) -> GpuOp | None:
        """The latest-ending work of ``ops[index]``'s stream that started before it and ended by its start (+ tolerance)."""
        op = self.ops[index]
        ops = self._streams[(op.device, op.stream)]
        best = None
        for j in range(self._stream_pos[id(op)] - 1, max(-1, self._stream_pos[id(op)] - 1 - _STREAM_LOOKBACK), -1):
            other = ops[j]
            fits = other.start_ns < op.start_ns and other.end_ns <= op.start_ns + tolerance
            if fits and (best is None or other.end_ns > best.end_ns):
                best = other
        return best

    def cross_stream(self, op: GpuOp, tolerance: int) -> GpuOp | None:
        """The latest-ending work on another stream of the device, started before ``op``, ended within ``tolerance``."""
        i = bisect.bisect_right(self._ends, op.start_ns + tolerance) - 1
        while i >= 0 and self._ends[i] >= op.start_ns - tolerance:
            other = self._by_end[i]
            if other.device == op.device and other.stream != op.stream and other.start_ns < op.start_ns:
                return other
            i -= 1
        return None

    def release_op(self, call: HostCall, start: int, t: int, gtid: int, tolerance: int) -> GpuOp | None:
        """The GPU work whose end released ``call`` (waiting over ``[start, t]``): the last to end in ``(start, t +
        tolerance]`` on the stream CUPTI names, else of ``gtid``'s launches, else any (docs/method.md, 13)."""
        target = self.c.sync_targets.get(call.correlation_id) if call.correlation_id is not None else None
        rules = []
        if target is not None and target.stream is not None:
            rules.append(lambda op: op.stream == target.stream and (
                target.before_correlation is None or op.correlation_id is None
                or op.correlation_id < target.before_correlation))  # fmt: skip
        else:
            rules.append(lambda op: (launch := self.launch_of(op)) is not None and launch.gtid == gtid)
            rules.append(lambda op: True)
        last = bisect.bisect_right(self._ends, t + tolerance) - 1
        for rule in rules:
            i, looked = last, 0
            while i >= 0 and self._ends[i] > start and looked < _RELEASE_LOOKBACK:
                op = self._by_end[i]
                if op.start_ns < min(op.end_ns, t) and rule(op):
                    return op
                i, looked = i - 1, looked + 1
        return None
