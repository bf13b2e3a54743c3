"""Cut an Nsight Systems SQLite export down to a few iterations: a small, real test fixture.

    python tests/data/nsys/trim_capture.py capture.sqlite tests/data/nsys/h100_e2e_torch_fp32.sqlite \
        --range read --skip 20 --count 4

The window runs from the start of the ``--skip``-th NVTX range named ``--range`` (on the thread holding the
``measured`` range; default: the first of ``read`` / ``preprocess`` there) to the start of the one ``--count``
later. The copy keeps the tables `perf.profile.capture_db` reads, with their own schema, and only the rows that
overlap the window (synchronization and CUDA event rows: those of the calls kept; StringIds and ThreadNames: those
referenced), cuts the ``measured`` range to the window, keeps the capture's META_DATA_EXPORT, then VACUUMs.
"""

from __future__ import annotations

import argparse
import logging
import sqlite3
import sys
from pathlib import Path

log = logging.getLogger("trim_capture")

MEASURED = "measured"
#: Tables whose rows are kept when they overlap the window (``start < window end and end > window start``).
TIMED = ("CUPTI_ACTIVITY_KIND_RUNTIME", "OSRT_API", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
         "CUPTI_ACTIVITY_KIND_MEMSET")  # fmt: skip
#: Small tables copied whole.
WHOLE = ("ENUM_CUPTI_SYNC_TYPE", "ENUM_CUDA_MEMCPY_OPER", "ENUM_NSYS_EVENT_TYPE", "META_DATA_EXPORT")
#: Columns holding StringIds ids, per table.
STRING_COLUMNS = {"NVTX_EVENTS": ("textId",), "CUPTI_ACTIVITY_KIND_RUNTIME": ("nameId",), "OSRT_API": ("nameId",),
                  "CUPTI_ACTIVITY_KIND_KERNEL": ("demangledName", "shortName", "mangledName"),
                  "ThreadNames": ("nameId",)}  # fmt: skip


def _tables(conn: sqlite3.Connection, schema: str = "main") -> dict[str, str]:
    return dict(conn.execute(f"SELECT name, sql FROM {schema}.sqlite_master WHERE type = 'table'"))


def _measured(conn: sqlite3.Connection) -> tuple[int, int, int]:
    row = conn.execute(
        "SELECT n.rowid, n.globalTid, n.start FROM src.NVTX_EVENTS n LEFT JOIN src.StringIds s ON s.id = n.textId "
        "WHERE n.eventType = 59 AND coalesce(n.text, s.value) = ? ORDER BY n.start LIMIT 1", (MEASURED,)).fetchone()
    if row is None:
        raise SystemExit(f"no NVTX range {MEASURED!r} in the capture: cannot choose a window")
    return row


def window(conn: sqlite3.Connection, range_name: str | None, skip: int, count: int) -> tuple[int, int]:
    """(start, end) ns: from the start of the ``skip``-th ``range_name`` range of the measured range's thread to the
    start of the ``skip + count``-th (the end of the last one when there are fewer)."""
    _, gtid, _ = _measured(conn)
    names = [range_name] if range_name else ["read", "preprocess"]
    for name in names:
        rows = conn.execute(
            "SELECT n.start, n.end FROM src.NVTX_EVENTS n LEFT JOIN src.StringIds s ON s.id = n.textId "
            "WHERE n.eventType = 59 AND n.globalTid = ? AND coalesce(n.text, s.value) = ? ORDER BY n.start",
            (gtid, name)).fetchall()  # fmt: skip
        if len(rows) > skip:
            last = rows[skip + count] if len(rows) > skip + count else None
            return rows[skip][0], last[0] if last else rows[-1][1]
    raise SystemExit(f"fewer than {skip + 1} NVTX ranges named {' or '.join(map(repr, names))} on the measured thread")


def trim(source: Path, dest: Path, range_name: str | None, skip: int, count: int) -> tuple[int, int]:
    """Write the trimmed copy of ``source`` to ``dest`` (replaced); return the window (ns)."""
    dest.unlink(missing_ok=True)
    conn = sqlite3.connect(dest)
    conn.execute("ATTACH DATABASE ? AS src", (f"{source.resolve().as_uri()}?mode=ro",))
    have = _tables(conn, "src")
    lo, hi = window(conn, range_name, skip, count)
    kept = [t for t in (*TIMED, "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
                        "StringIds", "ThreadNames", *WHOLE) if t in have]  # fmt: skip
    for table in kept:
        conn.execute(have[table])
    for table in TIMED:
        if table in have:
            conn.execute(f"INSERT INTO {table} SELECT * FROM src.{table} WHERE start < ? AND end > ?", (hi, lo))
    conn.execute("INSERT INTO NVTX_EVENTS SELECT * FROM src.NVTX_EVENTS WHERE eventType = 59 AND end IS NOT NULL "
                 "AND start < ? AND end > ?", (hi, lo))  # fmt: skip
    _, gtid, start = _measured(conn)  # the measured range overlaps the window: cut it to the window
    conn.execute("UPDATE NVTX_EVENTS SET start = ?, end = ? WHERE eventType = 59 AND globalTid = ? AND start = ?",
                 (lo, hi, gtid, start))
    if "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in have:
        conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SELECT * FROM "
                     "src.CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE correlationId IN "
                     "(SELECT correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME)")  # fmt: skip
    if "CUPTI_ACTIVITY_KIND_CUDA_EVENT" in have:
        conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_CUDA_EVENT SELECT * FROM src.CUPTI_ACTIVITY_KIND_CUDA_EVENT "
                     "WHERE correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME) "
                     "OR (eventSyncId > 0 AND eventSyncId IN "
                     "(SELECT eventSyncId FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION))")  # fmt: skip
    if "ThreadNames" in have:
        threads = " UNION ".join(f"SELECT globalTid FROM {t}" for t in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME",
                                                                        "OSRT_API") if t in kept)  # fmt: skip
        conn.execute(f"INSERT INTO ThreadNames SELECT * FROM src.ThreadNames WHERE globalTid IN ({threads})")
    ids = " UNION ".join(f"SELECT {column} FROM {table}" for table, columns in STRING_COLUMNS.items()
                         if table in kept for column in columns)  # fmt: skip
    conn.execute(f"INSERT INTO StringIds SELECT * FROM src.StringIds WHERE id IN ({ids})")
    for table in WHOLE:
        if table in have:
            conn.execute(f"INSERT INTO {table} SELECT * FROM src.{table}")
    conn.commit()
    conn.execute("DETACH DATABASE src")
    conn.execute("VACUUM")
    conn.close()
    return lo, hi


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="an nsys SQLite export (nsys export --type sqlite)")
    parser.add_argument("dest", type=Path, help="the trimmed copy (replaced)")
    parser.add_argument("--range", default=None,
                        help="NVTX range that marks iterations. Default: read, else preprocess")
    parser.add_argument("--skip", type=int, default=10, help="iterations skipped first. Default: 10")
    parser.add_argument("--count", type=int, default=4, help="iterations kept. Default: 4")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    lo, hi = trim(args.source, args.dest, args.range, args.skip, args.count)
    log.info("%s: [%d, %d) ns (%.3f ms), %d bytes", args.dest, lo, hi, (hi - lo) / 1e6, args.dest.stat().st_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
