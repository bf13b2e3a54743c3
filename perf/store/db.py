"""The history store: every saved run also in a database, one transaction per run (docs/method.md, 11).

Where (``--perf-store`` / ``perf-history --store``): a path or ``sqlite:///path`` (SQLite, created with its folder),
or ``postgresql://user:password@host:port/dbname`` (or ``postgres://``: psycopg 3, the ``postgres`` extra).
Tables and migrations: `perf.store.schema`."""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import logging
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, func, inspect, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError

from detector.errors import one_line
from detector.fileio import content_key, file_lock, make_parents, remove_empty, resolved
from perf.measure.machine import COMPARED_FIELDS
from perf.runs import HistoryError, SavedRun, mapping, run_from_json, text_value
from perf.store import in_memory_sqlite, schema
from perf.validate import run_problem

log = logging.getLogger(__name__)
#: How long an SQLite store waits for another process's write to end (its busy timeout); a URL's ?timeout= wins.
SQLITE_WAIT_S = 30.0


class StoreError(HistoryError):
    """A store that cannot be opened, read or written; one line naming it (password hidden)."""


def machine_key(machine_info: Mapping[str, Any]) -> str:
    """The key of a run's history: its host (``node``) and its fingerprint's compared fields, hashed."""
    fingerprint = machine_info.get("perf") or {}
    fields = {name: fingerprint.get(name) for name in COMPARED_FIELDS if isinstance(fingerprint, Mapping)}
    return content_key(str(machine_info.get("node") or ""), fields)


def run_id_of(document: Mapping[str, Any]) -> str:
    """``perf_run["run_id"]``, else ``sha256:<hash of the document>`` (a file imported twice is one run)."""
    if given := text_value(mapping(document.get("perf_run")).get("run_id")):
        return given
    return "sha256:" + hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()[:40]


def branch_of(document: Mapping[str, Any]) -> str | None:
    """The branch a run measured: ``commit_info["branch"]``, else (a detached checkout, as in CI)
    ``GITHUB_HEAD_REF`` or ``GITHUB_REF_NAME`` where GitHub Actions sets them."""
    branch = (document.get("commit_info") or {}).get("branch")
    if branch not in (None, "", "HEAD", "(detached head)"):
        return branch
    return os.environ.get("GITHUB_HEAD_REF") or os.environ.get("GITHUB_REF_NAME") or None


def engine_url(where: str) -> str:
    """The SQLAlchemy URL of a store given as a path, ``sqlite:///...`` or ``postgresql://...``; `StoreError` for
    SQLite's in-memory database (``sqlite://``, ``sqlite:///``, ``:memory:``), which keeps no run."""
    if in_memory_sqlite(where):
        raise StoreError(f"store '{where}': an in-memory SQLite database keeps no run; give a file (a path or "
                         "sqlite:///path)")
    if where.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + where.split("://", 1)[1]
    if where.startswith(("sqlite://", "postgresql+")):
        return where
    if "://" in where:
        raise StoreError(f"store '{where}': not a path, sqlite:///path or postgresql:// URL")
    return f"sqlite:///{resolved(Path(where).expanduser())}"  # a symlink loop: said when opened


def _sqlite_file(url: str) -> Path | None:
    """The file of SQLite ``url``; None for none, a ``file:`` URI (``uri=true``, which SQLite reads) or a bad URL."""
    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001 - a malformed URL: create_engine says why
        return None
    if parsed.query.get("uri") or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def _reason(error: BaseException) -> str:
    """The first line of a driver's message, without SQLAlchemy's background link."""
    text = str(getattr(error, "orig", None) or error).strip().splitlines()
    if text[:1] == ["database is locked"]:  # SQLite's, once its wait is over
        return ("database is locked: another process kept it locked for the whole wait (a sqlite:/// URL's "
                f"?timeout=SECONDS, else {SQLITE_WAIT_S:g} s); try again when it is done")
    return text[0] if text else type(error).__name__


#: A NaN or infinity in a stored document (a statistic not measured), kept as ``{"$json-constant": "NaN"}``:
#: PostgreSQL's JSON has no token for it. A saved object of that one key is kept as ``{"$json-constant": [value]}``.
_CONSTANT = "$json-constant"


def _to_json(value: Any) -> str:
    return json.dumps(json.loads(json.dumps(value), parse_constant=lambda token: {_CONSTANT: token},
                                 object_hook=lambda o: {_CONSTANT: [o[_CONSTANT]]} if o.keys() == {_CONSTANT} else o))


def _from_json(text: str) -> Any:
    def restore(o: dict[str, Any]) -> Any:
        if o.keys() != {_CONSTANT}:
            return o
        return {_CONSTANT: o[_CONSTANT][0]} if isinstance(o[_CONSTANT], list) else float(o[_CONSTANT])

    return json.loads(text, object_hook=restore)


def _plain(value: Any) -> Any:
    """``value`` as JSON types (numpy numbers and arrays, paths: what a saved run may hold in memory)."""
    return json.loads(json.dumps(value, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v)))


class HistoryStore(contextlib.AbstractContextManager):
    """An open store (see the module docstring); opening it and `save_run` raise `StoreError` naming it."""

    def __init__(self, where: str, create: bool = True) -> None:
        url = engine_url(where)
        try:
            self.shown = make_url(url).render_as_string(hide_password=True)
        except Exception:  # noqa: BLE001 - only to name the store in a message (a path not UTF-8: escaped)
            self.shown = one_line(url) if url.startswith("sqlite") else "<unparsable store URL>"
        sqlite = url.startswith("sqlite")
        file = _sqlite_file(url) if sqlite else None
        try:  # a reader leaves no new store behind (a path through a file is said below, as to a writer)
            if file is not None and stat.S_ISDIR(file.stat().st_mode):
                raise StoreError(f"store '{self.shown}': '{file}' is a folder: name a file in it")
        except FileNotFoundError:
            if not create:
                raise StoreError(f"store '{self.shown}': no such file") from None
        except PermissionError as e:  # a folder on the way that cannot be searched
            raise StoreError(f"store '{self.shown}': {e.strerror}") from None
        except OSError:
            pass
        made: list[Path] = []
        created: Path | None = None
        if file is not None:
            try:
                made = make_parents(file)
            except OSError as e:  # a part of the path is a file, or cannot be written
                raise StoreError(f"store '{self.shown}': cannot make its folder: {e.strerror or e}") from e
            # created empty with the mode open() gives (0o666 less the umask; SQLite creates it 0o644 whatever the
            # umask); one that exists or cannot be created is left to SQLite, which says why in its own words
            with contextlib.suppress(OSError):
                os.close(os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
                created = file
        self.file, self.create = file, create
        try:
            self._connect(url, sqlite)
        except BaseException:
            if created is not None:  # a store that did not open leaves no empty file of ours, nor folder
                with contextlib.suppress(OSError):
                    if created.stat().st_size == 0:
                        created.unlink()
            remove_empty(made)
            raise

    def _connect(self, url: str, sqlite: bool) -> None:
        try:
            wait = {"timeout": SQLITE_WAIT_S} if sqlite and "timeout" not in make_url(url).query else {}
            self.engine = create_engine(url, connect_args=wait,
                                        json_serializer=_to_json, json_deserializer=_from_json)
        except Exception as e:  # a missing driver, a malformed URL
            reason = _reason(e)
            if isinstance(e, ImportError) and not sqlite:  # psycopg 3: the postgres extra
                reason = (f"PostgreSQL needs psycopg 3, which is not installed here ({reason}): "
                          "pip install -e '.[postgres]'")
            raise StoreError(f"store '{self.shown}': {reason}") from e
        if sqlite:
            event.listen(self.engine, "connect", lambda dbapi, _: dbapi.execute("PRAGMA foreign_keys=ON"))
        self._migrate()

    def close(self) -> None:
        self.engine.dispose()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _migrate(self) -> None:
        """Bring the tables to `schema.LATEST`, one transaction per migration; refuse a newer store. One process
        migrates at a time (`_migrating`): two opening a new store at once both created its tables, and one failed."""
        try:
            if (version := self._version()) == 0 and not self.create:  # a reader makes no store of another database
                raise StoreError(f"store '{self.shown}': not a history store (no {schema.schema_versions.name} "
                                 "table); store runs in it first with perf-history import or --perf-store")
            if version < schema.LATEST:
                with self._migrating():
                    with self.engine.begin() as conn:
                        schema.schema_versions.create(conn, checkfirst=True)
                    version = self._version()  # another process may have migrated it meanwhile
                    for number, what, apply in (m for m in schema.MIGRATIONS if m[0] > version):
                        with self.engine.begin() as conn:
                            apply(conn)
                            now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
                            conn.execute(schema.schema_versions.insert().values(version=number, applied_at=now))
                        log.info("store %s: migrated to schema %d (%s)", self.shown, number, what)
        except StoreError:
            raise
        except Exception as e:
            raise StoreError(f"store '{self.shown}': {_reason(e)}") from e
        if version > schema.LATEST:
            raise StoreError(f"store '{self.shown}': schema version {version} is newer than this version of "
                             f"the suite knows ({schema.LATEST}); upgrade detector-perf")  # fmt: skip

    def _version(self) -> int:
        with self.engine.begin() as conn:
            if not inspect(conn).has_table(schema.schema_versions.name):
                return 0
            return conn.execute(select(func.max(schema.schema_versions.c.version))).scalar() or 0

    @contextlib.contextmanager
    def _migrating(self) -> Any:
        """Held while migrating: a lock beside a SQLite file, PostgreSQL's advisory lock on a server."""
        if self.file is not None:
            with file_lock(self.file):
                yield
        elif self.engine.dialect.name == "postgresql":
            with self.engine.connect() as conn:
                conn.execute(text("SELECT pg_advisory_lock(7215)"))
                try:
                    yield
                finally:
                    conn.execute(text("SELECT pg_advisory_unlock(7215)"))
        else:
            yield

    def save_run(self, document: Mapping[str, Any], *, source: str | None = None,
                 verdicts: Mapping[str, Any] | None = None,
                 noise: Mapping[str, Any] | None = None) -> tuple[str, bool]:  # fmt: skip
        """Store a saved run's JSON ``document`` with the verdict document that judged it and its noise
        profile, in one transaction. Returns (run id, whether it was new); a stored run is left as it is."""
        document = _plain(document)  # JSON types only (numpy values, paths): what both databases store
        run, rid, verdicts = run_from_json(document, source or "<run>"), run_id_of(document), verdicts or {}
        values = {"run_id": rid, "saved_at": schema.utc_text(run.datetime), "machine_id": run.machine_info.get("node"),
                  "machine_key": machine_key(run.machine_info), "commit": run.commit, "dirty": run.dirty,
                  "branch": branch_of(document), "injected": dict(run.injected), "test_only": bool(run.injected),
                  "source": source, "document": document}  # fmt: skip
        if problem := _unkept(values):
            raise StoreError(f"store '{self.shown}': cannot save run {rid}: {problem}")
        try:
            with self.engine.begin() as conn:
                if conn.execute(select(schema.runs.c.id).where(schema.runs.c.run_id == rid)).first():
                    return self._stored(rid, document, source)
                pk = conn.execute(schema.runs.insert().values(**values)).inserted_primary_key[0]
                if run.benchmarks:  # an empty executemany is an insert of one row of defaults
                    conn.execute(schema.benchmarks.insert(), [
                        {"run": pk, "fullname": b.fullname, "name": b.name, "group": b.group,
                         "median_s": b.median_s, "rounds": None if b.data is None else int(b.data.size)}
                        for b in run.benchmarks.values()])  # fmt: skip
                baseline = (verdicts.get("baseline") or {}).get("run_id")
                for r in verdicts.get("rows") or ():
                    conn.execute(schema.verdicts.insert().values(
                        run=pk, baseline_run_id=baseline, fullname=r["fullname"], verdict=r["verdict"],
                        ratio=r.get("ratio"), lo=r.get("lo"), hi=r.get("hi"), row=_plain(r)))  # fmt: skip
                if noise:
                    conn.execute(schema.noise.insert().values(run=pk, profile=_plain(noise)))
        except Exception as e:
            if isinstance(e, IntegrityError) and self._all(select(schema.runs.c.id).where(schema.runs.c.run_id == rid)):
                return self._stored(rid, document, source)  # another process stored it meanwhile
            raise StoreError(f"store '{self.shown}': cannot save run {rid}: {_reason(e)}") from e
        log.info("stored run %s in %s", rid, self.shown)
        return rid, True

    def _stored(self, rid: str, document: Any, source: str | None) -> tuple[str, bool]:
        """(``rid``, False) when the run stored under ``rid`` is ``document``; else `StoreError` naming both (a copy
        edited by hand, another run given its id), since the store keeps the first and this one would be lost."""
        r = schema.runs.c
        (stored, stored_from), = self._all(select(r.document, r.source).where(r.run_id == rid))
        if json.dumps(stored, sort_keys=True) != json.dumps(document, sort_keys=True):
            raise StoreError(f"store '{self.shown}': cannot save run {rid} from '{source or '<run>'}': another run of "
                             f"that id is stored (from '{stored_from or '<run>'}'); give it its own perf_run.run_id")
        return rid, False

    def _all(self, query: Any) -> list[Any]:
        """The rows of ``query``, every read's; `StoreError` when they cannot be read (a table or column missing, a
        JSON column that is not JSON, a locked database)."""
        try:
            with self.engine.begin() as conn:
                return list(conn.execute(query).all())
        except Exception as e:  # the driver's, SQLAlchemy's or the JSON column's decoder's
            raise StoreError(f"store '{self.shown}': cannot read it: {_reason(e)}") from e

    def runs(self, *, machine_key: str | None = None, branch: str | None = None,
             include_injected: bool = False) -> list[SavedRun]:  # fmt: skip
        """Stored runs, oldest first (by saved time in UTC, then storing order; a run without one first), of one
        history when given."""
        r = schema.runs.c
        query = _where(select(r.document, r.source, r.run_id), machine_key, branch, include_injected)
        query = query.order_by(r.saved_at.asc().nulls_first(), r.id)
        return [self._run(document, text_value(source) or f"{self.shown}#run={run_id}", run_id)
                for document, source, run_id in self._all(query)]

    def _run(self, document: Any, source: str, run_id: str) -> SavedRun:
        """A stored run; `StoreError` naming the store, not the file it came from, when its copy is no saved run."""
        try:
            return run_from_json(document, source)
        except HistoryError as e:
            raise StoreError(f"store '{self.shown}': cannot read it: run {run_id} is not a usable saved run: "
                             f"{run_problem(document) or e}") from e

    def machines(self) -> list[tuple[str, str | None, int]]:
        """Each history's machine key, host name and number of runs, most runs first."""
        r = schema.runs.c
        query = select(r.machine_key, func.max(r.machine_id), func.count()).group_by(r.machine_key)
        return [(row[0], row[1], int(row[2])) for row in self._all(query.order_by(func.count().desc()))]

    def noise_profile_json(self, machine_key: str | None = None) -> str | None:
        """The noise profile the newest run (of one history) was judged with, as JSON text, or None."""
        r, n = schema.runs.c, schema.noise.c
        query = _where(select(n.profile).join_from(schema.noise, schema.runs, n.run == r.id), machine_key, None, True)
        found = self._all(query.order_by(r.saved_at.desc().nulls_last(), r.id.desc()).limit(1))
        return json.dumps(found[0][0]) if found else None

    def verdicts(self, run_id: str) -> list[dict[str, Any]]:
        """The verdict rows that judged run ``run_id`` (each the gate's row, as written)."""
        r, v = schema.runs.c, schema.verdicts.c
        query = select(v.row).join_from(schema.verdicts, schema.runs, v.run == r.id).where(r.run_id == run_id)
        return [dict(row[0]) for row in self._all(query)]


#: The text columns of a stored run, by where the saved run holds them (the branch may come from CI's variables).
_TEXTS = {"perf_run.run_id": "run_id", "machine_info.node": "machine_id", "commit_info.id": "commit",
          "commit_info.branch": "branch", "its source path": "source"}


def _unkept(values: Mapping[str, Any]) -> str | None:
    """What of a run's text columns ``values`` a store cannot keep, named as in the saved run: a NUL character
    (PostgreSQL's text holds none) or more characters than its column (PostgreSQL refuses them, SQLite would not)."""
    for where, name in _TEXTS.items():
        value, length = values[name], getattr(schema.runs.c[name].type, "length", None)
        if isinstance(value, str) and "\x00" in value:
            return f"{where} holds a NUL character, which a store cannot keep"
        if isinstance(value, str) and length is not None and len(value) > length:
            return f"{where} is {len(value)} characters long, longer than the store keeps ({length})"
    return None


def _where(query: Any, machine_key: str | None, branch: str | None, include_injected: bool) -> Any:
    r = schema.runs.c
    if machine_key is not None:
        query = query.where(r.machine_key == machine_key)
    if branch is not None:
        query = query.where(r.branch == branch)
    return query if include_injected else query.where(r.test_only.is_(False))


def open_store(where: str, create: bool = True) -> HistoryStore:
    """Open (creating unless not ``create``, migrating) the store at ``where`` (see the module docstring)."""
    return HistoryStore(where, create)
