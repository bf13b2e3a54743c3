"""The history store's tables, and its versioned migrations.

Tables (SQLAlchemy Core, the same on SQLite and PostgreSQL):

* ``perf_schema``: one row per migration applied (``version``, ``applied_at``); the store's version is the largest.
* ``perf_runs``: one row per saved run. ``run_id`` (the pytest session's ``perf_run.run_id``; for a run saved before
  ids were recorded, ``sha256:`` of its file's content) is unique, so storing a run twice stores it once.
  ``machine_key`` is the hash of the machine fingerprint (GPU, driver, CUDA, device): a history is one benchmark
  on one ``machine_key``. ``document`` is the saved run's whole JSON (raw rounds included), read back with
  `perf.runs.run_from_json`: the store adds no second model of a run.
* ``perf_benchmarks``: one row per benchmark of a run (full name, name, group, median in seconds, rounds), what
  the history queries and change points read without opening every document.
* ``perf_verdicts``: the ``--perf-compare`` verdicts that judged a run, with the run they were judged against.
* ``perf_noise``: the noise profile (`perf.gate.noise`) a run was judged with, if any.

A migration is a function of a connection; `MIGRATIONS` lists them in order, and `perf.store.db.migrate` applies
the missing ones in one transaction each. A store written by a newer version (a larger version) is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (JSON, Boolean, Column, Float, ForeignKey, Index, Integer, MetaData, String, Table, Text,
                        UniqueConstraint)  # fmt: skip

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
    Column("saved_at", String(40)),          # ISO 8601, as pytest-benchmark saved it (UTC)
    Column("machine_id", String(200)),       # pytest-benchmark's machine folder, e.g. Linux-CPython-3.12-64bit
    Column("machine_key", String(64), nullable=False),
    Column("commit", String(80)),
    Column("branch", String(250)),
    Column("dirty", Boolean, nullable=False, default=False),
    Column("injected", JSON, nullable=False),  # the test-only options (`perf.runs.injected_of`), {} for none
    Column("test_only", Boolean, nullable=False, default=False),  # injected: never a baseline, never a history
    Column("source", Text),                  # where the run came from: its saved file, or "pytest session"
    Column("document", JSON, nullable=False),
    Index("perf_runs_machine_branch", "machine_key", "branch", "saved_at"),
)  # fmt: skip

benchmarks = Table(
    "perf_benchmarks", metadata,
    Column("run", Integer, ForeignKey("perf_runs.id", ondelete="CASCADE"), nullable=False),
    Column("fullname", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("group", Text),
    Column("median_s", Float),
    Column("rounds", Integer),
    UniqueConstraint("run", "fullname"),
    Index("perf_benchmarks_fullname", "fullname"),
)  # fmt: skip

verdicts = Table(
    "perf_verdicts", metadata,
    Column("run", Integer, ForeignKey("perf_runs.id", ondelete="CASCADE"), nullable=False),
    Column("baseline_run_id", String(80)),
    Column("fullname", Text, nullable=False),
    Column("verdict", String(20), nullable=False),
    Column("ratio", Float),
    Column("lo", Float),
    Column("hi", Float),
    Column("row", JSON, nullable=False),     # the whole verdict row (`perf.gate.compare.Row`)
    UniqueConstraint("run", "fullname"),
)  # fmt: skip

noise = Table(
    "perf_noise", metadata,
    Column("run", Integer, ForeignKey("perf_runs.id", ondelete="CASCADE"), primary_key=True),
    Column("profile", JSON, nullable=False),
)  # fmt: skip


def _create_v1(connection: Any) -> None:
    for table in (runs, benchmarks, verdicts, noise):
        table.create(connection)


#: (version, what it does, the migration). Append; never edit one that has shipped.
MIGRATIONS: list[tuple[int, str, Callable[[Any], None]]] = [
    (1, "runs, benchmarks, verdicts and noise profiles", _create_v1),
]
LATEST = MIGRATIONS[-1][0]
