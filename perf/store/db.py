"""The history store: every saved run also in a database, one transaction per run (docs/method.md, section 11).

Where (``--perf-store`` / ``perf-history --store``): a path or ``sqlite:///path`` (SQLite, created with its folder),
or ``postgresql://user:password@host:port/dbname`` (or ``postgres://``: psycopg 3, the ``postgres`` extra).
``open_store(where)`` gives a `HistoryStore`: ``save_run``, ``runs`` (`perf.runs.SavedRun`, oldest first),
``history`` (`HistoryPoint`), ``machines``, ``noise_profile_json``, ``verdicts``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, func, inspect, select
from sqlalchemy.engine import make_url

from detector.fileio import content_key
from perf.store import schema
from perf.runs import HistoryError, SavedRun, injected_of, run_from_json, run_marks

log = logging.getLogger(__name__)

#: Branch names that say nothing (a detached checkout); ``GITHUB_REF_NAME`` / ``--perf-store-branch`` replace them.
NO_BRANCH = (None, "", "HEAD", "(detached head)")


class StoreError(HistoryError):
    """A store that cannot be opened, read or written; one line naming it (password hidden)."""


@dataclass(frozen=True)
class HistoryPoint:
    """One benchmark of one stored run: what change points are found on (``median_s`` in seconds)."""

    run_id: str
    saved_at: str | None
    commit: str | None
    branch: str | None
    machine_key: str
    fullname: str
    name: str
    median_s: float | None
    injected: bool


def machine_key(machine_info: Mapping[str, Any]) -> str:
    """The key of a run's history: its host (``node``) and its machine fingerprint's compared fields, hashed."""
    from perf.measure.machine import COMPARED_FIELDS  # the fields that make timings comparable, as the compare's

    fingerprint = machine_info.get("perf") or {}
    fields = {name: fingerprint.get(name) for name in COMPARED_FIELDS} if isinstance(fingerprint, Mapping) else {}
    return content_key(str(machine_info.get("node") or ""), fields)


def run_id_of(document: Mapping[str, Any]) -> str:
    """A run's id: ``perf_run["run_id"]``, or ``sha256:<hash of the document>`` for a run saved before ids
    were recorded (the same file gives the same id, so importing it twice stores it once)."""
    given = run_marks(document).get("run_id")
    if isinstance(given, str) and given:
        return given
    text = json.dumps(document, sort_keys=True, default=str).encode("utf-8")
    return "sha256:" + hashlib.sha256(text).hexdigest()[:40]


def branch_of(document: Mapping[str, Any], override: str | None = None) -> str | None:
    """The branch a run measured: ``override``, else ``commit_info["branch"]``, else (a detached checkout, as in CI)
    ``GITHUB_REF_NAME``'s branch where GitHub Actions sets it."""
    if override:
        return override
    branch = (document.get("commit_info") or {}).get("branch")
    if branch in NO_BRANCH:
        branch = os.environ.get("GITHUB_HEAD_REF") or os.environ.get("GITHUB_REF_NAME") or None
    return branch


def engine_url(where: str) -> str:
    """The SQLAlchemy URL of a store given as a path, ``sqlite:///...`` or ``postgresql://...``."""
    if where.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + where.split("://", 1)[1]
    if "://" in where and not where.startswith(("sqlite://", "postgresql+")):
        raise StoreError(f"store '{where}': not a path, sqlite:///path or postgresql:// URL")
    if where.startswith(("sqlite://", "postgresql+")):
        return where
    return f"sqlite:///{Path(where).expanduser().resolve()}"


def _shown(where: str) -> str:
    try:
        return make_url(engine_url(where)).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - only to name the store in a message
        return "<unparsable store URL>"


class HistoryStore:
    """An open store (see the module docstring). Methods raise `StoreError` naming the store."""

    def __init__(self, where: str) -> None:
        self.shown = _shown(where)
        url = engine_url(where)
        if url.startswith("sqlite:///"):
            Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        try:
            self.engine = create_engine(url, connect_args={"timeout": 30} if url.startswith("sqlite") else {})
        except Exception as e:  # a missing driver, a malformed URL
            reason = _reason(e)
            if isinstance(e, ImportError) and url.startswith("postgresql"):  # psycopg 3: the postgres extra
                reason = (f"PostgreSQL needs psycopg 3, which is not installed here ({reason}): "
                          "pip install -e '.[postgres]'")
            raise StoreError(f"store '{self.shown}': {reason}") from e
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_foreign_keys)
        migrate(self)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _begin(self) -> Any:
        try:
            return self.engine.begin()
        except Exception as e:
            raise StoreError(f"store '{self.shown}': {_reason(e)}") from e

    def save_run(self, document: Mapping[str, Any], *, source: str | None = None,
                 verdicts: Mapping[str, Any] | None = None, noise: Mapping[str, Any] | None = None,
                 branch: str | None = None) -> tuple[str, bool]:  # fmt: skip
        """Store a saved run's JSON ``document`` (checked as `perf.runs.run_from_json` checks it) with the verdict
        document that judged it and the noise profile it was judged with, in one transaction. Returns (run id,
        whether it was new); a run already stored is left as it is."""
        document = _plain(document)  # JSON types only (numpy values, paths): what both databases store
        run = run_from_json(document, source or "<run>")
        rid = run_id_of(document)
        try:
            with self._begin() as conn:
                if conn.execute(select(schema.runs.c.id).where(schema.runs.c.run_id == rid)).first() is not None:
                    return rid, False
                pk = conn.execute(schema.runs.insert().values(
                    run_id=rid, saved_at=run.datetime, machine_id=(document.get("machine_info") or {}).get("node"),
                    machine_key=machine_key(run.machine_info), commit=run.commit, branch=branch_of(document, branch),
                    dirty=run.dirty, injected=injected_of(document), test_only=bool(injected_of(document)),
                    source=source, document=document,
                )).inserted_primary_key[0]  # fmt: skip
                conn.execute(schema.benchmarks.insert(), [
                    {"run": pk, "fullname": b.fullname, "name": b.name, "group": b.group, "median_s": b.median_s,
                     "rounds": None if b.data is None else int(b.data.size)} for b in run.benchmarks.values()])
                rows = list((verdicts or {}).get("rows") or [])
                if rows:
                    baseline = ((verdicts or {}).get("baseline") or {}).get("run_id")
                    conn.execute(schema.verdicts.insert(), [
                        {"run": pk, "baseline_run_id": baseline, "fullname": r["fullname"], "verdict": r["verdict"],
                         "ratio": r.get("ratio"), "lo": r.get("lo"), "hi": r.get("hi"), "row": _plain(r)}
                        for r in rows])  # fmt: skip
                if noise:
                    conn.execute(schema.noise.insert().values(run=pk, profile=_plain(noise)))
        except StoreError:
            raise
        except Exception as e:
            raise StoreError(f"store '{self.shown}': cannot save run {rid}: {_reason(e)}") from e
        log.info("stored run %s in %s", rid, self.shown)
        return rid, True

    def _all(self, query: Any, mappings: bool = False) -> list[Any]:
        with self._begin() as conn:
            result = conn.execute(query)
            return list(result.mappings().all() if mappings else result.all())

    def runs(self, *, machine_key: str | None = None, branch: str | None = None,
             include_injected: bool = False) -> list[SavedRun]:  # fmt: skip
        """Stored runs, oldest first (by saved date, then storing order), of one history when given."""
        query = _where(schema.runs.select(), machine_key, branch, include_injected)
        found = self._all(query.order_by(schema.runs.c.saved_at, schema.runs.c.id), mappings=True)
        return [run_from_json(row["document"], row["source"] or f"{self.shown}#run={row['run_id']}") for row in found]

    def history(self, *, machine_key: str | None = None, branch: str | None = None,
                include_injected: bool = False) -> list[HistoryPoint]:  # fmt: skip
        """One point per stored run and benchmark, oldest run first."""
        r, b = schema.runs.c, schema.benchmarks.c
        query = select(r.run_id, r.saved_at, r.commit, r.branch, r.machine_key, b.fullname, b.name, b.median_s,
                       r.test_only).join_from(schema.runs, schema.benchmarks, b.run == r.id)  # fmt: skip
        query = _where(query, machine_key, branch, include_injected).order_by(r.saved_at, r.id, b.fullname)
        return [HistoryPoint(*row[:-1], bool(row[-1])) for row in self._all(query)]

    def machines(self) -> list[tuple[str, str | None, int]]:
        """Each history's machine key, host name and number of runs, most runs first."""
        r = schema.runs.c
        query = select(r.machine_key, func.max(r.machine_id), func.count()).group_by(r.machine_key)
        return [(row[0], row[1], int(row[2])) for row in self._all(query.order_by(func.count().desc()))]

    def noise_profile_json(self, machine_key: str | None = None) -> str | None:
        """The noise profile the newest run (of one history) was judged with, as JSON text for
        `perf.gate.noise.NoiseProfile.from_json` (the store keeps it, the gate reads it), or None."""
        r, n = schema.runs.c, schema.noise.c
        query = select(n.profile).join_from(schema.noise, schema.runs, n.run == r.id)
        if machine_key is not None:
            query = query.where(r.machine_key == machine_key)
        found = self._all(query.order_by(r.saved_at.desc(), r.id.desc()).limit(1))
        return json.dumps(found[0][0]) if found else None

    def verdicts(self, run_id: str) -> list[dict[str, Any]]:
        """The verdict rows that judged run ``run_id`` (each the gate's row, as written)."""
        r, v = schema.runs.c, schema.verdicts.c
        query = select(v.row).join_from(schema.verdicts, schema.runs, v.run == r.id).where(r.run_id == run_id)
        return [dict(row[0]) for row in self._all(query)]


def _where(query: Any, machine_key: str | None, branch: str | None, include_injected: bool) -> Any:
    r = schema.runs.c
    if machine_key is not None:
        query = query.where(r.machine_key == machine_key)
    if branch is not None:
        query = query.where(r.branch == branch)
    return query if include_injected else query.where(r.test_only.is_(False))


def _plain(value: Any) -> Any:
    """``value`` as JSON types (numpy numbers and arrays, paths: what a saved run may hold in memory)."""
    return json.loads(json.dumps(value, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v)))


def _reason(error: BaseException) -> str:
    """The first line of a driver's message, without SQLAlchemy's background link."""
    text = str(getattr(error, "orig", None) or error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _sqlite_foreign_keys(connection: Any, _record: Any) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def migrate(store: HistoryStore) -> int:
    """Bring the store's tables to `perf.store.schema.LATEST`, one transaction per migration; return the version.
    A store of a newer version than this code knows is refused (`StoreError`)."""
    try:
        with store.engine.begin() as conn:
            if not inspect(conn).has_table(schema.schema_versions.name):
                schema.schema_versions.create(conn)
            version = conn.execute(select(func.max(schema.schema_versions.c.version))).scalar() or 0
    except Exception as e:
        raise StoreError(f"store '{store.shown}': {_reason(e)}") from e
    if version > schema.LATEST:
        raise StoreError(f"store '{store.shown}': schema version {version} is newer than this version of the suite "
                         f"knows ({schema.LATEST}); upgrade detector-perf")  # fmt: skip
    for number, what, apply in schema.MIGRATIONS:
        if number <= version:
            continue
        with store.engine.begin() as conn:
            apply(conn)
            now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
            conn.execute(schema.schema_versions.insert().values(version=number, applied_at=now))
        log.info("store %s: migrated to schema %d (%s)", store.shown, number, what)
        version = number
    return version


def open_store(where: str) -> HistoryStore:
    """Open (creating, migrating) the store at ``where`` (see the module docstring)."""
    return HistoryStore(where)


def import_runs(store: HistoryStore, documents: Iterable[tuple[str, Mapping[str, Any]]]) -> tuple[int, int]:
    """Store saved runs given as (source, document); return (stored, already there)."""
    new = old = 0
    for source, document in documents:
        _, added = store.save_run(document, source=source)
        new, old = new + added, old + (not added)
    return new, old
