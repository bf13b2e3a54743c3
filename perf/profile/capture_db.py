"""An Nsight Systems SQLite export (``nsys export --type sqlite``) read once into typed records of one region
(`read_capture`), with the whole capture's totals as ``nsys stats`` sums them (for `perf.profile.nsys_summary`).
Times are ns on one clock, host and GPU alike; the tables read and how: docs/method.md, section 13.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import sqlite3
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from detector.errors import DetectorError
from perf.profile.kernels import short_name
from perf.profile.torch_profiler import MEASURED_RANGE

log = logging.getLogger(__name__)

NVTX_PUSH_POP, NVTX_START_END = 59, 60  # ``NVTX_EVENTS.eventType`` of a push/pop and of a start/end range
NO_STREAM = 0xFFFFFFFF  # CUPTI's "no stream" in synchronization records
#: ``ENUM_CUDA_MEMCPY_OPER`` ids as short names (others: "[memcpy]").
MEMCPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
                10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD"}  # fmt: skip
NOTHING = "nothing traced"  # the source of the empty region of a capture with no region at all
#: ``copyKind`` ids of host-to-device and device-to-host copies (plain and unified memory).
COPY_DIRECTIONS = {1: "h2d", 11: "h2d", 2: "d2h", 12: "d2h"}
_VERSION_SUFFIX = re.compile(r"_v\d+$")
#: ATen's ``spin_kernel`` (``torch.cuda._sleep``: the clock's lead-in, an injected slowdown), launched by the suite
#: and never by the model, in any nsys spelling (demangled, bare, or mangled: the second alternative); a whole
#: identifier only, so "my_spin_kernel" is a model kernel. Why it is left out: docs/method.md, section 6.
SUITE_KERNEL_NAME = re.compile(r"(?<!\w)spin_kernel(?!\w)|11spin_kernelE")


class CaptureError(DetectorError):
    """A file that is not a readable Nsight Systems SQLite export (the message names it)."""


def api_name(name: str) -> str:
    """A CUDA API name without nsys's version suffix: ``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``."""
    return _VERSION_SUFFIX.sub("", name)


def stats_api_name(name: str) -> str:
    """A CUDA API name as ``nsys stats`` prints it: a 4-digit version suffix cut (``cudaLaunchKernel_v7000`` ->
    ``cudaLaunchKernel``), a longer one kept (``cudaLaunchKernelExC_v11060``)."""
    return name[:-6] if name[-6:-4] == "_v" else name


def is_suite_kernel(name: str) -> bool:
    """True for a kernel name (any nsys spelling) that the perf suite launches itself: see `SUITE_KERNEL_NAME`."""
    return SUITE_KERNEL_NAME.search(name) is not None


def busy_ns(intervals: Iterable[tuple[int, int]], start_ns: int, end_ns: int) -> int:
    """Length in ns of the union of ``[a, b)`` intervals clipped to ``[start_ns, end_ns)`` (overlaps count once);
    a sweep over the sorted intervals (neither numpy nor the stdlib has an interval union)."""
    total, reach = 0, start_ns
    for a, b in sorted((max(a, start_ns), min(b, end_ns)) for a, b in intervals):
        if b <= reach or b <= a:
            continue
        total += b - max(a, reach)
        reach = b
    return total


@dataclass(frozen=True)
class Region:
    """The analysed span ``[start_ns, end_ns)`` and where it came from (an NVTX range or the GPU activity)."""

    start_ns: int
    end_ns: int
    source: str

    @property
    def length_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class ThreadInfo:
    """A host thread: nsys's ``globalTid`` (pid << 24 | tid) and its OS name ("python" when Python never named it)."""

    gtid: int
    name: str

    @property
    def label(self) -> str:
        """``python:2092``: the name and the OS thread id (Python threads all share the process's name)."""
        return f"{self.name}:{self.gtid & 0xFFFFFF}"


@dataclass(frozen=True)
class HostCall:
    """One traced CUDA API or OS runtime call on host thread ``gtid`` (ns); CUDA names without version suffix."""

    start_ns: int
    end_ns: int
    gtid: int
    name: str
    correlation_id: int | None = None


@dataclass(frozen=True)
class GpuOp:
    """One kernel, memcpy or memset (``kind``) on ``device`` / ``stream`` (ns); ``name`` short for kernels."""

    start_ns: int
    end_ns: int
    stream: int
    name: str
    kind: str = "kernel"
    device: int = 0
    correlation_id: int | None = None


@dataclass(frozen=True)
class NvtxRange:
    """One NVTX push/pop range on host thread ``gtid`` (ns)."""

    start_ns: int
    end_ns: int
    gtid: int
    name: str


@dataclass(frozen=True)
class SyncTarget:
    """What a synchronising call waited for, where CUPTI says: the stream, and (event syncs) the correlation id of
    the event record, so only work launched before it can have released the call."""

    stream: int | None
    before_correlation: int | None = None


@dataclass(frozen=True)
class Total:
    """One name's total over the whole capture: ``ns`` (summed durations), ``count`` (calls, launches or range
    instances) and ``bytes`` (copies only)."""

    name: str
    ns: int
    count: int
    bytes: int = 0


@dataclass
class Capture:
    """The records overlapping ``region``, sorted by start, and the whole capture's totals, largest ``ns`` first:
    ``kernels`` (demangled name), ``api`` (`stats_api_name`), ``nvtx`` (range name, any kind and domain), ``copies``
    ("h2d", "d2h"), ``memsets`` and ``pushpop`` (counts)."""

    path: Path
    region: Region
    threads: dict[int, ThreadInfo] = field(default_factory=dict)
    cuda_calls: list[HostCall] = field(default_factory=list)
    os_calls: list[HostCall] = field(default_factory=list)
    gpu_ops: list[GpuOp] = field(default_factory=list)
    ranges: list[NvtxRange] = field(default_factory=list)
    sync_targets: dict[int, SyncTarget] = field(default_factory=dict)
    #: The thread holding the region's NVTX range (else the one with the most CUDA API time); None without one.
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
        """Whether the capture had a region (a range, GPU work or one given), not an empty one at 0."""
        return self.region.source != NOTHING

    def thread(self, gtid: int) -> ThreadInfo:
        return self.threads.get(gtid) or ThreadInfo(gtid, "thread")


class _Db:
    """An export opened read-only; queries treat a missing table as empty and a missing column as NULL."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise CaptureError(f"cannot read nsys SQLite export '{path}': no such file")
        self.conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        make = "make one with 'nsys export --type sqlite --output X.sqlite X.nsys-rep'"
        try:
            self.tables = {row[0] for row in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as e:
            self.conn.close()
            raise CaptureError(f"'{path}' is not an Nsight Systems SQLite export ({e}); {make}") from e
        if "StringIds" not in self.tables:
            self.conn.close()
            raise CaptureError(f"'{path}' is an SQLite file but not an Nsight Systems export (no StringIds table); "
                               + make)
        self.strings: dict[int, str] = {}

    def columns(self, table: str) -> set[str]:
        return {row[1] for row in self.conn.execute(f"PRAGMA table_info({table})")}

    def rows(self, table: str, wanted: tuple[str, ...], where: str = "", args: tuple = ()) -> list[tuple]:
        if table not in self.tables:
            return []
        have = self.columns(table)
        select = ", ".join(c if c in have else "NULL" for c in wanted)
        return self.conn.execute(f"SELECT {select} FROM {table} {where}", args).fetchall()

    def text(self, text: str | None, text_id: int | None) -> str:
        return text if text is not None else self.strings.get(text_id, "") if text_id is not None else ""


_OVERLAP = "WHERE start < ? AND end > ?"


def _nvtx(db: _Db, region: tuple[int, int] | None) -> list[NvtxRange]:
    where, args = f"WHERE eventType = {NVTX_PUSH_POP} AND end IS NOT NULL", (region[1], region[0]) if region else ()
    where += " AND start < ? AND end > ?" if region else ""
    rows = db.rows("NVTX_EVENTS", ("start", "end", "globalTid", "text", "textId"), where, args)
    return sorted((NvtxRange(s, e, g or 0, db.text(t, i)) for s, e, g, t, i in rows),
                  key=lambda r: (r.start_ns, -r.end_ns))


def _gpu_ops(db: _Db, region: tuple[int, int] | None) -> list[GpuOp]:
    where, args = (_OVERLAP, (region[1], region[0])) if region else ("", ())
    ops = []
    for s, e, dev, stream, corr, name_id in db.rows("CUPTI_ACTIVITY_KIND_KERNEL", (
            "start", "end", "deviceId", "streamId", "correlationId", "demangledName"), where, args):  # fmt: skip
        ops.append(GpuOp(s, e, stream, short_name(db.strings.get(name_id, "kernel"), 60), "kernel", dev or 0, corr))
    for s, e, dev, stream, corr, kind in db.rows("CUPTI_ACTIVITY_KIND_MEMCPY", (
            "start", "end", "deviceId", "streamId", "correlationId", "copyKind"), where, args):  # fmt: skip
        ops.append(GpuOp(s, e, stream, f"[memcpy {MEMCPY_KINDS.get(kind, '?')}]", "memcpy", dev or 0, corr))
    for s, e, dev, stream, corr in db.rows("CUPTI_ACTIVITY_KIND_MEMSET", (
            "start", "end", "deviceId", "streamId", "correlationId"), where, args):  # fmt: skip
        ops.append(GpuOp(s, e, stream, "[memset]", "memset", dev or 0, corr))
    return sorted(ops, key=lambda op: (op.start_ns, op.end_ns))


def _calls(db: _Db, table: str, region: tuple[int, int], cuda: bool) -> list[HostCall]:
    wanted = ("start", "end", "globalTid", "nameId", "correlationId" if cuda else "NULL")
    rows = db.rows(table, wanted, _OVERLAP, (region[1], region[0]))
    clean = api_name if cuda else str
    return sorted((HostCall(s, e, g or 0, clean(db.strings.get(n, "?")), c) for s, e, g, n, c in rows),
                  key=lambda c: (c.start_ns, -c.end_ns))


def _sync_targets(db: _Db) -> dict[int, SyncTarget]:
    """``{correlation id of a synchronising call: SyncTarget}``: the stream its record names, else the event record
    it waited for (same ``eventSyncId``, else the latest of the same ``eventId`` before the call)."""
    by_sync: dict[int, tuple[int, int]] = {}
    by_event: dict[int, list[tuple[int, int]]] = {}
    for event, stream, corr, sync_id in db.rows("CUPTI_ACTIVITY_KIND_CUDA_EVENT",
                                                ("eventId", "streamId", "correlationId", "eventSyncId")):  # fmt: skip
        if corr is not None:
            by_event.setdefault(event, []).append((corr, stream))
            if sync_id:
                by_sync[sync_id] = (corr, stream)
    for entries in by_event.values():
        entries.sort()
    targets = {}
    for corr, stream, event, sync_id in db.rows("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
                                                ("correlationId", "streamId", "eventId", "eventSyncId")):  # fmt: skip
        if corr is None:
            continue
        if stream is not None and stream != NO_STREAM:
            targets[corr] = SyncTarget(stream)
        elif sync_id and sync_id in by_sync:
            targets[corr] = SyncTarget(by_sync[sync_id][1], by_sync[sync_id][0])
        elif event is not None:
            entries = by_event.get(event, [])
            i = bisect.bisect_left(entries, (corr, -1)) - 1
            if i >= 0:
                targets[corr] = SyncTarget(entries[i][1], entries[i][0])
    return targets


def _region(db: _Db, range_name: str) -> tuple[Region, int | None] | None:
    marked = [r for r in _nvtx(db, None) if r.name == range_name]
    if marked:
        first = min(marked, key=lambda r: r.start_ns)
        return Region(first.start_ns, max(r.end_ns for r in marked), f"NVTX range {range_name!r}"), first.gtid
    ops = _gpu_ops(db, None)
    model = [op for op in ops if not is_suite_kernel(op.name)] or ops
    if not model:
        return None
    return Region(min(o.start_ns for o in model), max(o.end_ns for o in model), "first to last GPU activity"), None


def _totals(rows: Iterable[tuple[str, int, int | None]]) -> list[Total]:
    """(name, ns, bytes) rows summed per name, largest ``ns`` first (then by name)."""
    sums: dict[str, list[int]] = {}
    for name, ns, size in rows:
        entry = sums.setdefault(name, [0, 0, 0])
        entry[0], entry[1], entry[2] = entry[0] + ns, entry[1] + 1, entry[2] + (size or 0)
    return sorted((Total(name, *v) for name, v in sums.items()), key=lambda t: (-t.ns, t.name))


def _read_totals(db: _Db, capture: Capture) -> None:
    """The whole capture's totals into ``capture`` (see `Capture`)."""
    kernels = db.rows("CUPTI_ACTIVITY_KIND_KERNEL", ("demangledName", "start", "end"))
    capture.kernels = _totals((db.strings.get(n, "kernel"), e - s, 0) for n, s, e in kernels)
    api = db.rows("CUPTI_ACTIVITY_KIND_RUNTIME", ("nameId", "start", "end"))
    capture.api = _totals((stats_api_name(db.strings.get(n, "?")), e - s, 0) for n, s, e in api)
    where = f"WHERE eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END}) AND end IS NOT NULL"
    nvtx = db.rows("NVTX_EVENTS", ("text", "textId", "start", "end", "eventType"), where)
    capture.nvtx = _totals((db.text(t, i), e - s, 0) for t, i, s, e, _ in nvtx)
    capture.pushpop = sum(1 for *_, kind in nvtx if kind == NVTX_PUSH_POP)
    copies = db.rows("CUPTI_ACTIVITY_KIND_MEMCPY", ("copyKind", "start", "end", "bytes"))
    capture.copies = {t.name: t for t in _totals((COPY_DIRECTIONS[k], e - s, b) for k, s, e, b in copies
                                                 if k in COPY_DIRECTIONS)}  # fmt: skip
    capture.memsets = len(db.rows("CUPTI_ACTIVITY_KIND_MEMSET", ("start",)))


def _busiest_thread(calls: list[HostCall]) -> int | None:
    time: Counter[int] = Counter()
    for c in calls:
        time[c.gtid] += c.end_ns - c.start_ns
    return max(time, key=time.__getitem__) if time else None


def read_capture(path: str | os.PathLike[str], range_name: str = MEASURED_RANGE,
                 region: tuple[int, int] | None = None) -> Capture:  # fmt: skip
    """The export at ``path`` inside its region: the NVTX range ``range_name`` (first start to last end), else the
    model's first to last GPU activity, or ``region`` (ns); none of these: an empty region at 0. Raises
    `CaptureError` naming ``path`` when it is not an Nsight Systems SQLite export."""
    path = Path(path)
    db = _Db(path)
    try:
        db.strings = dict(db.conn.execute("SELECT id, value FROM StringIds"))
        found = _region(db, range_name)
        owner = found[1] if found else None
        chosen = Region(*region, "given") if region is not None else found[0] if found else Region(0, 0, NOTHING)
        span = (chosen.start_ns, chosen.end_ns)
        names = {g: db.strings.get(n, "thread") for n, g in db.rows("ThreadNames", ("nameId", "globalTid"))}
        capture = Capture(path, chosen, range_name=range_name)
        capture.cuda_calls = _calls(db, "CUPTI_ACTIVITY_KIND_RUNTIME", span, cuda=True)
        capture.os_calls = _calls(db, "OSRT_API", span, cuda=False)
        capture.gpu_ops = _gpu_ops(db, span)
        capture.ranges = _nvtx(db, span)
        capture.sync_targets = _sync_targets(db)
        capture.region_thread = owner if owner is not None else _busiest_thread(capture.cuda_calls)
        seen = {c.gtid for c in (*capture.cuda_calls, *capture.os_calls)} | {r.gtid for r in capture.ranges}
        capture.threads = {g: ThreadInfo(g, names.get(g, "thread")) for g in sorted(seen)}
        _read_totals(db, capture)
    except sqlite3.DatabaseError as e:
        raise CaptureError(f"cannot read nsys SQLite export '{path}': {e}") from e
    finally:
        db.conn.close()
    log.debug("read %s: %d CUDA calls, %d OS calls, %d GPU ops, %d NVTX ranges in %s", path,
              len(capture.cuda_calls), len(capture.os_calls), len(capture.gpu_ops), len(capture.ranges),
              chosen.source)  # fmt: skip
    return capture
