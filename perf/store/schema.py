"""The history store's tables (SQLAlchemy Core, the same on SQLite and PostgreSQL) and versioned `MIGRATIONS`,
applied by `perf.store.db.HistoryStore` when it opens: ``perf_schema`` (the migrations applied), ``perf_runs`` (one
row per saved run, ``document`` its whole JSON), ``perf_benchmarks`` (one per benchmark of a run: what history
queries read), ``perf_verdicts`` and ``perf_noise`` (the verdicts and the noise profile that judged a run)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (JSON, Boolean, Column, Float, ForeignKey, Index, Integer, MetaData, String, Table, Text,
                        UniqueConstraint, select)  # fmt: skip

from perf.validate import utc_time

metadata = MetaData()

schema_versions = Table(
    "perf_schema", metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("applied_at", String(40), nullable=False),
)  # fmt: skip

runs = Table(
    "perf_runs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(80), nullable=False, unique=True),
    Column("saved_at", String(40)),          # `utc_text` of the saved run's datetime: its order is time's
    Column("machine_id", String(200)),       # the host (machine_info's node)
    Column("machine_key", String(64), nullable=False),  # `perf.store.db.machine_key`: host and fingerprint hashed
    Column("commit", String(80)), Column("branch", String(250)),
    Column("dirty", Boolean, nullable=False, default=False),
    Column("injected", JSON, nullable=False),  # the test-only options (`perf.runs.injected_of`), {} for none
    Column("test_only", Boolean, nullable=False, default=False),  # injected: never a baseline, never a history
    Column("source", Text),                  # where the run came from: its saved file, or None
    Column("document", JSON, nullable=False),  # read back with `perf.runs.run_from_json`
    Index("perf_runs_machine_branch", "machine_key", "branch", "saved_at"),
)  # fmt: skip

benchmarks = Table(
    "perf_benchmarks", metadata,
    Column("run", Integer, ForeignKey("perf_runs.id", ondelete="CASCADE"), nullable=False),
    Column("fullname", Text, nullable=False), Column("name", Text, nullable=False), Column("group", Text),
    Column("median_s", Float), Column("rounds", Integer),
    UniqueConstraint("run", "fullname"), Index("perf_benchmarks_fullname", "fullname"),
)  # fmt: skip

verdicts = Table(
    "perf_verdicts", metadata,
    Column("run", Integer, ForeignKey("perf_runs.id", ondelete="CASCADE"), nullable=False),
    Column("baseline_run_id", String(80)), Column("fullname", Text, nullable=False),
    Column("verdict", String(20), nullable=False), Column("ratio", Float), Column("lo", Float), Column("hi", Float),
    Column("row", JSON, nullable=False),     # the whole verdict row (`perf.gate.compare.Row`)
    UniqueConstraint("run", "fullname"),
)  # fmt: skip

noise = Table(
    "perf_noise", metadata,
    Column("run", Integer, ForeignKey("perf_runs.id", ondelete="CASCADE"), primary_key=True),
    Column("profile", JSON, nullable=False),
)  # fmt: skip


def utc_text(when: str | None) -> str | None:
    """ISO 8601 ``when`` in UTC without an offset, to the microsecond (a time without an offset is UTC, as
    pytest-benchmark writes it), so that the text orders as the times do; None for no ISO 8601 time."""
    return None if (moment := utc_time(when)) is None else moment.isoformat(timespec="microseconds")


def _utc_saved_at(connection: Any) -> None:
    for pk, when in connection.execute(select(runs.c.id, runs.c.saved_at)).all():
        connection.execute(runs.update().where(runs.c.id == pk).values(saved_at=utc_text(when)))


#: (version, what it does, the migration). Append; never edit one that has shipped.
MIGRATIONS: list[tuple[int, str, Callable[[Any], None]]] = [
    (1, "runs, benchmarks, verdicts and noise profiles", lambda connection: metadata.create_all(
        connection, tables=[runs, benchmarks, verdicts, noise], checkfirst=False)),
    (2, "saved_at in UTC, so that runs saved with a time-zone offset order by their time", _utc_saved_at),
]  # fmt: skip
LATEST = MIGRATIONS[-1][0]
