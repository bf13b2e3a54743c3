"""An Nsight Systems SQLite export (``nsys export --type sqlite``) read once into typed records of one region
(`read_capture`), with the whole capture's totals as ``nsys stats`` sums them. Times are ns on one clock, host
and GPU alike; the tables read and how: docs/method.md, section 13.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import re
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detector.errors import DetectorError
from perf.profile.kernels import short_name
from perf.profile.torch_profiler import MEASURED_RANGE

log = logging.getLogger(__name__)

NVTX_PUSH_POP, NVTX_START_END = 59, 60  # ``NVTX_EVENTS.eventType`` of a push/pop and of a start/end range
NO_STREAM = 0xFFFFFFFF  # CUPTI's "no stream" in synchronization records
#: ``ENUM_CUDA_MEMCPY_OPER`` ids as short names (others: "[memcpy ?]").
MEMCPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD",
                9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD"}  # fmt: skip
NOTHING = "nothing traced"  # the source of the empty region of a capture with no region at all
#: ``copyKind`` ids of host-to-device and device-to-host copies (plain and unified memory).
COPY_DIRECTIONS = {1: "h2d", 11: "h2d", 2: "d2h", 12: "d2h"}
#: ATen's ``spin_kernel`` (``torch.cuda._sleep``: the clock's lead-in, injected slowdowns), launched only by the
#: suite; any nsys spelling (mangled: the 2nd alternative), whole identifiers only. Why: docs/method.md, section 6.
SUITE_KERNEL_NAME = re.compile(r"(?<!\w)spin_kernel(?!\w)|11spin_kernelE")


class CaptureError(DetectorError):
    """A file that is not a readable Nsight Systems SQLite export (the message names it)."""


def stats_api_name(name: str) -> str:
    """A CUDA API name as ``nsys stats`` prints it: a 4-digit ``_v7000`` cut, a longer ``_v11060`` kept."""
    return name[:-6] if name[-6:-4] == "_v" else name


def is_suite_kernel(name: str) -> bool:
    """True for a kernel name (any nsys spelling) the perf suite launches itself (`SUITE_KERNEL_NAME`)."""
    return SUITE_KERNEL_NAME.search(name) is not None


def busy_ns(intervals: Iterable[tuple[int, int]], start_ns: int, end_ns: int) -> int:
    """ns covered by ``[a, b)`` intervals inside ``[start_ns, end_ns)`` (no library has an interval union)."""
    total, reach = 0, start_ns
    for a, b in sorted((max(a, start_ns), min(b, end_ns)) for a, b in intervals):
        if b > reach and b > a:
            total, reach = total + b - max(a, reach), b
    return total


@dataclass(frozen=True)
class Region:
    """The analysed span ``[start_ns, end_ns)`` and where it came from (an NVTX range, the GPU activity)."""

    start_ns: int
    end_ns: int
    source: str

    @property
    def length_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class ThreadInfo:
    """A host thread: nsys's ``globalTid`` (pid << 24 | tid) and its OS name."""

    gtid: int
    name: str

    @property
    def label(self) -> str:
        """``python:2092``: the name and the OS thread id (Python threads all share the process's name)."""
        return f"{self.name}:{self.gtid & 0xFFFFFF}"


@dataclass(frozen=True)
class HostCall:
    """A traced CUDA API call, OS runtime call or NVTX push/pop range (`NvtxRange`) on thread ``gtid``."""

    start_ns: int
    end_ns: int
    gtid: int
    name: str
    correlation_id: int | None = None


NvtxRange = HostCall  # an NVTX range is a host span without a correlation id


@dataclass(frozen=True)
class GpuOp:
    """One kernel, memcpy or memset (``kind``) on ``device`` / ``stream``; ``name`` short for kernels."""

    start_ns: int
    end_ns: int
    stream: int
    name: str
    kind: str = "kernel"
    device: int = 0
    correlation_id: int | None = None


@dataclass(frozen=True)
class Total:
    """One name's total over the whole capture: ``ns``, ``count`` (calls, launches, ranges), ``bytes``."""

    name: str
    ns: int
    count: int
    bytes: int = 0


@dataclass
class Capture:
    """The records overlapping ``region``, sorted by start, and the whole capture's totals, largest ``ns``
    first: ``kernels`` (demangled name), ``api`` (`stats_api_name`), ``nvtx`` (range name, any kind and
    domain), ``copies`` ("h2d", "d2h"), ``memsets`` and ``pushpop`` (counts)."""

    path: Path
    region: Region
    threads: dict[int, ThreadInfo] = field(default_factory=dict)
    cuda_calls: list[HostCall] = field(default_factory=list)
    os_calls: list[HostCall] = field(default_factory=list)
    gpu_ops: list[GpuOp] = field(default_factory=list)
    ranges: list[NvtxRange] = field(default_factory=list)
    #: What a synchronising call (its correlation id) waited for: (stream, an event record's correlation id).
    sync_targets: dict[int, tuple[int | None, int | None]] = field(default_factory=dict)
    #: The thread holding the region's NVTX range, else the one with the most CUDA API time, else None.
    region_thread: int | None = None
    range_name: str = MEASURED_RANGE
    kernels: list[Total] = field(default_factory=list)
    api: list[Total] = field(default_factory=list)
    nvtx: list[Total] = field(default_factory=list)
    copies: dict[str, Total] = field(default_factory=dict)
    memsets: int = 0
    pushpop: int = 0

    @property
    def found(self) -> bool:
        """Whether the capture had a region (a range or GPU work), not an empty one at 0."""
        return self.region.source != NOTHING

    def thread(self, gtid: int) -> ThreadInfo:
        return self.threads.get(gtid) or ThreadInfo(gtid, "thread")


def _sync_targets(rows: Callable[[str, tuple[str, ...]], list[tuple]]) -> dict[int, tuple[int | None, int | None]]:
    """`Capture.sync_targets`: the stream a call's record names, else the event record it waited for (same
    ``eventSyncId``, else the latest of the same ``eventId`` before the call)."""
    by_sync: dict[int, tuple[int, int]] = {}  # (stream, correlation id) of an event record
    by_event: dict[int, list[tuple[int, int]]] = {}  # (correlation id, stream), in order
    wanted = ("eventId", "streamId", "correlationId", "eventSyncId")
    for event, stream, corr, sync_id in rows("CUPTI_ACTIVITY_KIND_CUDA_EVENT", wanted):
        if corr is not None:
            bisect.insort(by_event.setdefault(event, []), (corr, stream))
            if sync_id:
                by_sync[sync_id] = (stream, corr)
    targets = {}
    for event, stream, corr, sync_id in rows("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", wanted):
        if corr is None:
            continue
        if stream is not None and stream != NO_STREAM:
            targets[corr] = (stream, None)
        elif sync_id and sync_id in by_sync:
            targets[corr] = by_sync[sync_id]
        elif event is not None and (i := bisect.bisect_left(by_event.get(event, []), (corr, -1)) - 1) >= 0:
            targets[corr] = by_event[event][i][::-1]
    return targets


def _totals(rows: Iterable[tuple[str, int, int | None]]) -> list[Total]:
    """(name, ns, bytes) rows summed per name, largest ``ns`` first (then by name)."""
    sums: dict[str, list[int]] = {}
    for name, ns, size in rows:
        entry = sums.setdefault(name, [0, 0, 0])
        entry[0], entry[1], entry[2] = entry[0] + ns, entry[1] + 1, entry[2] + (size or 0)
    return sorted((Total(name, *v) for name, v in sums.items()), key=lambda t: (-t.ns, t.name))


def _calls(rows: Iterable[tuple]) -> list[HostCall]:
    """``(start, end, gtid, name[, correlation id])`` rows as host calls by start, the longer first."""
    return sorted((HostCall(*row) for row in rows), key=lambda c: (c.start_ns, -c.end_ns))


def _read(conn: sqlite3.Connection, tables: set[str], path: Path) -> Capture:
    """Every table read once (a missing one as empty, a missing column as NULL): the region's records, the totals."""
    def bad(table: str, column: str, value: Any, expected: str) -> CaptureError:
        return CaptureError(f"cannot read nsys SQLite export '{path}': {table}.{column} holds {value!r}, "
                            f"expected {expected}")

    strings = conn.execute("SELECT id, value FROM StringIds").fetchall()
    if wrong := [v for _, v in strings if not isinstance(v, str)]:  # an integer 0 too
        raise bad("StringIds", "value", wrong[0], "text")
    name = dict(strings).get

    def rows(table: str, wanted: tuple[str, ...], where: str = "") -> list[tuple]:
        """The ``wanted`` columns of ``table``'s rows: integers (NULL where allowed; ``text`` is text), a
        ``start`` and ``end`` given, the end not before the start; else `CaptureError` naming the value. SQLite
        checks them, a scan a column: a loop over the fetched rows took longer than reading them."""
        if table not in tables:
            return []
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        col = {c: c if c in have else "NULL" for c in (*wanted, "start", "end")}
        scope = f"{where} {'AND' if where else 'WHERE'}"
        for c in wanted:
            kind = "text" if c == "text" else "integer"
            ok = f"typeof({col[c]}) = '{kind}'" + ("" if c in ("start", "end") else f" OR {col[c]} IS NULL")
            if found := conn.execute(f"SELECT {col[c]} FROM {table} {scope} NOT ({ok}) LIMIT 1").fetchone():
                raise bad(table, c, found[0], "text" if c == "text" else "an integer")
        if wanted[:2] == ("start", "end") and (found := conn.execute(
                f"SELECT {col['start']}, {col['end']} FROM {table} {scope} {col['end']} < {col['start']} LIMIT 1"
        ).fetchone()):  # fmt: skip
            raise bad(table, "end", found[1], f"no earlier than its start {found[0]}")
        return conn.execute(f"SELECT {', '.join(col[c] for c in wanted)} FROM {table} {where}").fetchall()

    wanted = ("start", "end", "globalTid", "text", "textId", "eventType")
    where = f"WHERE eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END}) AND end IS NOT NULL"
    nvtx = [(s, e, g or 0, t if t is not None else name(i, "") if i is not None else "", kind)
            for s, e, g, t, i, kind in rows("NVTX_EVENTS", wanted, where)]
    api = rows("CUPTI_ACTIVITY_KIND_RUNTIME", ("start", "end", "globalTid", "nameId", "correlationId"))
    osrt = rows("OSRT_API", ("start", "end", "globalTid", "nameId"))
    gpu = {kind: rows(f"CUPTI_ACTIVITY_KIND_{kind.upper()}",
                      ("start", "end", "deviceId", "streamId", "correlationId", column, "bytes"))
           for kind, column in (("kernel", "demangledName"), ("memcpy", "copyKind"), ("memset", "NULL"))}
    ranges = _calls((s, e, g, text) for s, e, g, text, kind in nvtx if kind == NVTX_PUSH_POP)
    cuda = _calls((s, e, g or 0, re.sub(r"_v\d+$", "", name(n, "?")), c) for s, e, g, n, c in api)
    os_calls = _calls((s, e, g or 0, name(n, "?")) for s, e, g, n in osrt)
    ops = sorted((GpuOp(s, e, stream, short_name(name(x, "kernel"), 60) if kind == "kernel"
                        else f"[memcpy {MEMCPY_KINDS.get(x, '?')}]" if kind == "memcpy" else "[memset]",
                        kind, dev or 0, corr)
                  for kind, records in gpu.items() for s, e, dev, stream, corr, x, _ in records),
                 key=lambda op: (op.start_ns, op.end_ns))  # fmt: skip
    marked = [r for r in ranges if r.name == MEASURED_RANGE]
    model = [op for op in ops if not is_suite_kernel(op.name)] or ops
    found = marked or model
    source = f"NVTX range {MEASURED_RANGE!r}" if marked else "first to last GPU activity" if model else NOTHING
    region = Region(min((x.start_ns for x in found), default=0), max((x.end_ns for x in found), default=0), source)

    def inside(records: Iterable[Any]) -> list[Any]:
        return [r for r in records if r.start_ns < region.end_ns and r.end_ns > region.start_ns]

    c = Capture(path, region, cuda_calls=inside(cuda), os_calls=inside(os_calls), gpu_ops=inside(ops),
                ranges=inside(ranges), sync_targets=_sync_targets(rows))  # fmt: skip
    api_time: Counter[int] = Counter()
    for call in c.cuda_calls:
        api_time[call.gtid] += call.end_ns - call.start_ns
    c.region_thread = (min(marked, key=lambda r: r.start_ns).gtid if marked
                       else max(api_time, key=api_time.__getitem__, default=None))  # fmt: skip
    names = {g: name(n, "thread") for n, g in rows("ThreadNames", ("nameId", "globalTid"))}
    seen = {call.gtid for call in (*c.cuda_calls, *c.os_calls, *c.ranges)}
    c.threads = {g: ThreadInfo(g, names.get(g, "thread")) for g in sorted(seen)}
    c.kernels = _totals((name(x, "kernel"), e - s, 0) for s, e, *_, x, _ in gpu["kernel"])
    c.api = _totals((stats_api_name(name(n, "?")), e - s, 0) for s, e, _, n, _ in api)
    c.nvtx = _totals((text, e - s, 0) for s, e, _, text, _ in nvtx)
    c.pushpop = len(ranges)
    c.copies = {t.name: t for t in _totals((COPY_DIRECTIONS[k], e - s, b) for s, e, *_, k, b in gpu["memcpy"]
                                           if k in COPY_DIRECTIONS)}  # fmt: skip
    c.memsets = len(gpu["memset"])
    return c


def read_capture(path: str | os.PathLike[str]) -> Capture:
    """The export at ``path`` inside its region: the NVTX range `MEASURED_RANGE` (first start to last end), else
    the model's first to last GPU activity; neither: an empty region at 0. Raises `CaptureError` naming ``path``
    when it is not an Nsight Systems SQLite export."""
    path = Path(path)
    if not path.is_file():
        raise CaptureError(f"cannot read nsys SQLite export '{path}': no such file")
    make = "make one with 'nsys export --type sqlite --output X.sqlite X.nsys-rep'"
    with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        try:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as e:
            raise CaptureError(f"'{path}' is not an Nsight Systems SQLite export ({e}); {make}") from e
        if "StringIds" not in tables:
            raise CaptureError(f"'{path}' is an SQLite file but not an Nsight Systems export (no StringIds "
                               f"table); {make}")  # fmt: skip
        try:
            capture = _read(conn, tables, path)
        except sqlite3.DatabaseError as e:
            raise CaptureError(f"cannot read nsys SQLite export '{path}': {e}") from e
    log.debug("read %s: %d CUDA calls, %d OS calls, %d GPU ops, %d NVTX ranges in %s", path, len(capture.cuda_calls),
              len(capture.os_calls), len(capture.gpu_ops), len(capture.ranges), capture.region.source)
    return capture
