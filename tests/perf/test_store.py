"""The history store (perf.store.db) on SQLite and on a real PostgreSQL server started for the session: runs go
in whole or not at all, once, with their verdicts and noise profile, and come back as the one saved-run model."""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sqlalchemy", reason="the history store needs SQLAlchemy (pip install -e '.[test]')")

from sqlalchemy import select  # noqa: E402

from perf.store import schema  # noqa: E402
from perf.store.db import HistoryStore, StoreError, machine_key, open_store, run_id_of  # noqa: E402

STEADY = list(1e-3 * (1 + 0.01 * np.random.default_rng(0).standard_normal(30)))


def _document(run_id: str | None, scale: float = 1.0, *, injected: dict | None = None, node: str = "runner-1",
              commit: str = "c1", when: str = "2026-11-01T00:00:00") -> dict:  # fmt: skip
    machine = {"node": node, "perf": {"device": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3", "driver_version": "580"}}
    marks = {"run_id": run_id, "injected": injected or {}} if run_id is not None or injected else None
    data = [x * scale for x in STEADY]
    bench = {"fullname": "perf/test_x.py::test_a[b1]", "name": "test_a[b1]", "group": "g",
             "stats": {"median": float(np.median(data)), "data": data}, "extra_info": {}}  # fmt: skip
    return {"benchmarks": [bench], "machine_info": machine, "datetime": when,
            "commit_info": {"id": commit, "branch": "main", "dirty": False},
            **({"perf_run": marks} if marks is not None else {})}  # fmt: skip


def _postgres_bin(name: str) -> str | None:
    found = shutil.which(name) or sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found if isinstance(found, str) else (found[-1] if found else None)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL server for this session (Debian's ``postgresql`` package), on a Unix socket in a fresh
    folder; skipped with the reason where it cannot start."""
    initdb, pg_ctl = _postgres_bin("initdb"), _postgres_bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("PostgreSQL is not installed (no initdb / pg_ctl; apt-get install postgresql)")
    as_user: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="pg"))
    if os.geteuid() == 0:  # the server refuses to run as root
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run the server as")
        os.chown(folder, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = folder / "data"
    setup = subprocess.run([*as_user, initdb, "-D", str(data), "-A", "trust", "-U", "perf", "--no-sync"],
                           capture_output=True, text=True, check=False)  # fmt: skip
    options = f"-p {port} -k {folder} -c listen_addresses='' -c fsync=off"
    start = setup.returncode == 0 and subprocess.run(
        [*as_user, pg_ctl, "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w", "-t", "60", "start"],
        capture_output=True, text=True, check=False).returncode == 0  # fmt: skip
    if not start:
        shutil.rmtree(folder, ignore_errors=True)
        pytest.skip(f"PostgreSQL did not start: {(setup.stderr or setup.stdout).strip()[-300:]}")
    try:
        yield f"postgresql://perf@/postgres?host={folder}&port={port}"
    finally:
        subprocess.run([*as_user, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True, check=False)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HistoryStore]:
    """An empty store of each kind."""
    if request.param == "sqlite":
        opened = open_store(str(tmp_path / "history.sqlite"))
    else:
        opened = open_store(request.getfixturevalue("postgres_url"))
        with opened.engine.begin() as conn:  # empty it: the server lives for the whole session
            for table in (schema.noise, schema.verdicts, schema.benchmarks, schema.runs):
                conn.execute(table.delete())
    yield opened
    opened.close()


def test_a_stored_run_comes_back_as_the_saved_run_model_once(store: HistoryStore) -> None:
    document = _document("run-a")
    assert store.save_run(document, source="storage/m/0001_a.json") == ("run-a", True)
    assert store.save_run(document) == ("run-a", False)  # stored once
    (run,) = store.runs()
    assert run.run_id == "run-a" and run.number == 1 and run.commit == "c1"
    bench = run.benchmarks["perf/test_x.py::test_a[b1]"]
    assert bench.data is not None and np.allclose(bench.data, STEADY)


def test_another_run_under_a_stored_runs_id_is_refused_naming_both_not_counted_as_stored(store: HistoryStore) -> None:
    document = _document("run-a")
    document["benchmarks"][0]["stats"]["median"] = float("nan")  # not measured: the same run all the same
    store.save_run(document, source="storage/m/0001_a.json")
    assert store.save_run(json.loads(json.dumps(document))) == ("run-a", False)  # the same run again: stored once
    edited = _document("run-a", scale=2.0)  # a copy edited by hand, another tool's run given the same id
    with pytest.raises(StoreError, match=r": cannot save run run-a from 'edited\.json': another run of that id is "
                                         r"stored \(from 'storage/m/0001_a\.json'\); give it its own perf_run\.run_id"):
        store.save_run(edited, source="edited.json")
    (run,) = store.runs()
    assert np.allclose(run.benchmarks["perf/test_x.py::test_a[b1]"].data, STEADY)  # the stored run is kept


def test_runs_come_back_in_time_order_whatever_offset_their_dates_carry(store: HistoryStore) -> None:
    for run_id, when in [("at-0500-utc", "2026-11-01T10:00:00+05:00"), ("at-0600-utc", "2026-11-01T06:00:00"),
                         ("at-0530-utc", "2026-11-01T05:30:00+00:00")]:  # fmt: skip
        store.save_run(_document(run_id, when=when))
    # as text, 05:30+00:00 < 06:00 < 10:00+05:00
    assert [run.run_id for run in store.runs()] == ["at-0500-utc", "at-0530-utc", "at-0600-utc"]


def test_a_run_dated_in_no_iso_8601_time_is_refused_naming_its_file_by_the_storage_and_the_store(
    store: HistoryStore, tmp_path: Path
) -> None:
    # the store orders runs by date, a storage by file number: a date it could not read put the run first in one
    # and last in the other, so the two judged different runs as the latest
    from perf.runs import HistoryError, load_run

    store.save_run(_document("run-a", when="2026-11-01T10:00:00+00:00"))  # as pytest-benchmark writes it
    path = tmp_path / "m" / "0002_c.json"
    path.parent.mkdir()
    path.write_text(json.dumps(_document("run-b", when="27/11/2026 10:00")))
    problem = re.escape(f"'{path}': not a usable saved run: 'datetime' is '27/11/2026 10:00', not an ISO 8601 time")
    with pytest.raises(HistoryError, match=problem):
        load_run(path)
    with pytest.raises(HistoryError, match=problem):
        store.save_run(json.loads(path.read_text()), source=str(path))
    assert [run.run_id for run in store.runs()] == ["run-a"]


def test_a_store_of_schema_1_has_its_saved_times_put_in_utc_when_opened(store: HistoryStore) -> None:
    for run_id, when in [("later", "2026-11-01T06:00:00"), ("earlier", "2026-11-01T10:00:00+05:00")]:
        store.save_run(_document(run_id, when=when))
    with store.engine.begin() as conn:  # as schema 1 stored them: the saved text, and no migration 2
        conn.execute(schema.runs.update().where(schema.runs.c.run_id == "earlier").values(
            saved_at="2026-11-01T10:00:00+05:00"))  # fmt: skip
        conn.execute(schema.schema_versions.delete().where(schema.schema_versions.c.version == 2))
    assert [run.run_id for run in store.runs()] == ["later", "earlier"]  # ordered as text
    reopened = open_store(store.engine.url.render_as_string(hide_password=False))
    try:
        assert [run.run_id for run in reopened.runs()] == ["earlier", "later"]
        with reopened.engine.begin() as conn:
            assert sorted(conn.execute(select(schema.runs.c.saved_at)).scalars()) == [
                "2026-11-01T05:00:00.000000", "2026-11-01T06:00:00.000000"]  # fmt: skip
    finally:
        reopened.close()


def test_text_with_a_nul_character_inside_the_saved_run_is_kept_on_both_databases(store: HistoryStore) -> None:
    document = _document("run-nul")
    document["benchmarks"][0]["extra_info"] = {"note": "a\x00b"}
    assert store.save_run(document) == ("run-nul", True)
    (run,) = store.runs()
    assert run.raw["benchmarks"][0]["extra_info"] == {"note": "a\x00b"}


def _with(document: dict, path: str, value: str) -> dict:
    """``document`` with the value at dotted ``path`` replaced."""
    *parents, key = path.split(".")
    inner = document
    for parent in parents:
        inner = inner.setdefault(parent, {})
    inner[key] = value
    return document


@pytest.mark.parametrize(("path", "value", "problem"), [
    ("commit_info.branch", "b" * 251, "is 251 characters long, longer than the store keeps (250)"),
    ("commit_info.id", "c" * 81, "is 81 characters long, longer than the store keeps (80)"),
    ("machine_info.node", "n" * 201, "is 201 characters long, longer than the store keeps (200)"),
    ("perf_run.run_id", "r" * 81, "is 81 characters long, longer than the store keeps (80)"),
    ("commit_info.branch", "ma\x00in", "holds a NUL character, which a store cannot keep"),
    ("machine_info.node", "\x00", "holds a NUL character, which a store cannot keep"),
])  # fmt: skip
def test_a_field_the_store_cannot_keep_is_refused_naming_it_on_both_databases(store: HistoryStore, path: str,
                                                                               value: str, problem: str) -> None:
    with pytest.raises(StoreError, match=re.escape(f"{path} {problem}")):
        store.save_run(_with(_document("run-x"), path, value), source="storage/m/0001_x.json")
    assert store.runs() == []  # nothing of it stored
    assert store.save_run(_document("run-y")) == ("run-y", True)  # the store still takes runs


def test_a_run_without_benchmarks_is_stored_and_comes_back_empty(store: HistoryStore) -> None:
    document = {**_document("run-empty"), "benchmarks": []}  # e.g. every benchmark deselected or skipped
    assert store.save_run(document) == ("run-empty", True)
    (run,) = store.runs()
    assert run.run_id == "run-empty" and run.benchmarks == {}


def test_a_statistic_not_measured_is_stored_and_comes_back_not_measured(store: HistoryStore) -> None:
    document = _document("run-nan")
    document["benchmarks"][0]["stats"].update(iqr=math.nan, data=[math.nan, *STEADY[1:]])  # read and reported
    document["benchmarks"][0]["extra_info"] = {"p99_ms": math.inf, "note": {"$json-constant": "NaN"}}
    assert store.save_run(document) == ("run-nan", True)  # PostgreSQL's JSON refused the NaN token: never stored
    (run,) = store.runs()
    bench = run.benchmarks["perf/test_x.py::test_a[b1]"]
    assert math.isnan(bench.stats["iqr"]) and bench.data is not None and math.isnan(bench.data[0])
    assert bench.extra_info == {"p99_ms": math.inf, "note": {"$json-constant": "NaN"}}  # as saved


def test_verdicts_and_the_noise_profile_are_stored_with_the_run_they_judged(store: HistoryStore) -> None:
    verdicts = {"baseline": {"run_id": "run-a"}, "current": {"run_id": "run-b"},
                "rows": [{"fullname": "perf/test_x.py::test_a[b1]", "verdict": "slower", "ratio": 1.3, "lo": 1.29,
                          "hi": 1.31, "note": ""}]}  # fmt: skip
    store.save_run(_document("run-a"))
    store.save_run(_document("run-b", 1.3), verdicts=verdicts, noise={"processes": 10})
    assert store.verdicts("run-a") == []
    (row,) = store.verdicts("run-b")
    assert row["verdict"] == "slower" and row["ratio"] == 1.3


def test_a_failed_write_leaves_no_part_of_the_run(store: HistoryStore) -> None:
    bad = {"rows": [{"fullname": "perf/test_x.py::test_a[b1]", "verdict": None}]}  # NOT NULL verdict
    with pytest.raises(StoreError, match="cannot save run run-a"):
        store.save_run(_document("run-a"), verdicts=bad)
    with store.engine.begin() as conn:
        assert store.runs() == [] and conn.execute(schema.benchmarks.select()).all() == []
    assert store.save_run(_document("run-a")) == ("run-a", True)  # and the run can be stored afterwards


def test_a_store_another_process_keeps_locked_is_one_line_saying_so_and_stores_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The store waits for another writer (SQLite's busy timeout: 30 s, or a sqlite:/// URL's ?timeout=, here 0)
    and then says who holds it, in one line, exit 2; the run is stored once the lock is gone."""
    import contextlib
    import sqlite3

    from perf.store.cli import main as history

    where = tmp_path / "h.sqlite"
    open_store(str(where)).close()
    (tmp_path / "storage" / "m").mkdir(parents=True)
    (tmp_path / "storage" / "m" / "0001_a.json").write_text(json.dumps(_document("run-a")))
    store = f"sqlite:///{where}?timeout=0"
    with contextlib.closing(sqlite3.connect(where, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")  # another process's write in progress
        assert history(["--store", store, "import", str(tmp_path / "storage")]) == 2
        other.execute("ROLLBACK")
    assert capsys.readouterr().err.splitlines() == [
        f"perf-history: error: store '{store}': cannot save run run-a: database is locked: another process kept it "
        "locked for the whole wait (a sqlite:/// URL's ?timeout=SECONDS, else 30 s); try again when it is done"]
    with open_store(store) as opened:
        assert opened.runs() == []
        assert opened.save_run(_document("run-a")) == ("run-a", True)


def test_history_is_one_machine_and_leaves_out_injected_runs(store: HistoryStore) -> None:
    store.save_run(_document("a", when="2026-11-01T00:00:00"))
    store.save_run(_document("b", 1.3, injected={"inject_delay_ms": 5.0}, when="2026-11-02T00:00:00"))
    store.save_run(_document("c", when="2026-11-03T00:00:00", node="runner-2"))
    key = machine_key(_document("a")["machine_info"])
    assert [r.run_id for r in store.runs(machine_key=key)] == ["a"]
    assert [r.run_id for r in store.runs(machine_key=key, include_injected=True)] == ["a", "b"]
    assert {k for k, _, _ in store.machines()} == {key, machine_key(_document("c", node="runner-2")["machine_info"])}


def test_a_run_without_an_id_gets_one_from_its_content() -> None:
    assert run_id_of(_document(None)) == run_id_of(_document(None)) != run_id_of(_document(None, 1.1))
    assert run_id_of(_document(None)).startswith("sha256:")


def test_a_store_of_a_newer_schema_is_refused(tmp_path: Path) -> None:
    where = str(tmp_path / "h.sqlite")
    with open_store(where) as first:
        with first.engine.begin() as conn:
            conn.execute(schema.schema_versions.insert().values(version=schema.LATEST + 1, applied_at="later"))
    with pytest.raises(StoreError, match=f"schema version {schema.LATEST + 1} is newer"):
        open_store(where)


@pytest.mark.parametrize("command", [["runs"], ["changes"], ["judge"], ["report"]])
def test_a_reading_command_given_another_sqlite_database_says_so_and_leaves_it_as_it_was(
        tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """An SQLite file that is no history store (an nsys export here) is not made one by a command that only
    reads: one line, exit 2, the file byte for byte as it was; a writer (import) still makes its tables there."""
    from perf.report_cli import main as report
    from perf.store.cli import main as history

    other = tmp_path / "capture.sqlite"
    shutil.copy(Path(__file__).parents[1] / "data" / "nsys" / "h100_e2e_torch_fp32.sqlite", other)
    before = other.read_bytes()
    code = (report(["--store", str(other), "--out", str(tmp_path / "out")]) if command == ["report"]
            else history(["--store", str(other), *command]))  # fmt: skip
    assert code == 2 and other.read_bytes() == before
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        f"error: store 'sqlite:///{other}': not a history store (no perf_schema table); store runs in it first "
        "with perf-history import or --perf-store")
    with open_store(str(other)) as store:  # a writer: the tables are made
        assert store.runs() == []


@pytest.mark.parametrize("where", ["mysql://host/db", "postgresql://nobody@/db?host=/nonexistent&port=1"])
def test_a_store_that_cannot_be_used_is_one_line_naming_it(where: str) -> None:
    with pytest.raises(StoreError) as info:
        open_store(where)
    message = str(info.value)
    assert "\n" not in message and message.startswith("store '")


@pytest.mark.parametrize("umask", [0o002, 0o022])
@pytest.mark.parametrize("form", ["path", "url"])
def test_a_new_sqlite_store_gets_the_mode_open_would_give(tmp_path: Path, umask: int, form: str) -> None:
    where = tmp_path / "new" / "history.sqlite"
    previous = os.umask(umask)
    try:
        open_store(str(where) if form == "path" else f"sqlite:///{where}?timeout=5").close()
        (tmp_path / "beside.txt").write_text("x")
    finally:
        os.umask(previous)
    assert where.stat().st_mode & 0o777 == (tmp_path / "beside.txt").stat().st_mode & 0o777 == 0o666 & ~umask
    where.chmod(0o600)
    with open_store(str(where)) as store:  # an existing store keeps its mode
        store.save_run(_document("r1"))
    assert where.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("where", ["sqlite:///", "sqlite://", "sqlite:///:memory:", ":memory:",
                                   "sqlite:///file:h?mode=memory&uri=true"])  # fmt: skip
def test_an_in_memory_sqlite_store_is_refused_where_every_way_of_giving_one_leads(where: str, tmp_path: Path) -> None:
    import json
    import sys

    from perf.options import parse_store

    with pytest.raises(StoreError, match="an in-memory SQLite database keeps no run"):
        open_store(where)  # $PERF_STORE and the perf_store ini setting reach the store unparsed
    with pytest.raises(argparse.ArgumentTypeError, match="an in-memory SQLite database loses them"):
        parse_store(where)
    storage = tmp_path / "storage" / "m"
    storage.mkdir(parents=True)
    (storage / "0001_run.json").write_text(json.dumps(_document("r1")))
    cli = [sys.executable, "-m", "perf.store.cli"]
    refused = subprocess.run([*cli, "--store", where, "import", str(tmp_path / "storage")], capture_output=True,
                             text=True, check=False)  # fmt: skip
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.splitlines() == [f"perf-history: error: argument --store: Could not parse value: {where!r}. "
                                           "Expected a store that keeps its runs: a path or sqlite:///path naming a "
                                           "file (an in-memory SQLite database loses them), postgresql://... or none."]
    env = {**os.environ, "PERF_STORE": where}
    from_env = subprocess.run([*cli, "import", str(tmp_path / "storage")], capture_output=True, text=True, env=env,
                              check=False)  # fmt: skip
    assert (from_env.returncode, from_env.stdout) == (2, "")
    assert from_env.stderr.splitlines() == [f"perf-history: error: $PERF_STORE: Could not parse value: {where!r}. "
                                            "Expected a store that keeps its runs: a path or sqlite:///path naming a "
                                            "file (an in-memory SQLite database loses them), postgresql://... or none."]


@pytest.mark.parametrize("where", ["history.sqlite", "sqlite:///history.sqlite", "sqlite:////tmp/h.sqlite",
                                   "postgresql://perf@db/history", "none", "NONE"])  # fmt: skip
def test_a_store_that_keeps_its_runs_is_still_accepted(where: str) -> None:
    from perf.options import parse_store

    assert parse_store(where) == ("none" if where.lower() == "none" else where)


# -- change points (perf.store.changepoints) -------------------------------------------------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from perf.store.changepoints import find_change_points, history_changes  # noqa: E402


#: A store of the latest schema whose tables were changed by hand: (SQL, what reading it says).
DAMAGED = [("DROP TABLE perf_runs", "no such table: perf_runs"),
           ("ALTER TABLE perf_runs DROP COLUMN source", "no such column: perf_runs.source"),
           ("UPDATE perf_runs SET document = '{'", "Expecting property name enclosed in double quotes"),
           ("UPDATE perf_runs SET document = '" + "[" * 100_000 + "'", "maximum recursion depth exceeded"),
           ("UPDATE perf_noise SET profile = 'nan]'", "Expecting value"),
           ("UPDATE perf_runs SET document = '[1]'",  # JSON, not a run: it named the file the run came from
            "run r0 is not a usable saved run: the top level is a list"),
           ("UPDATE perf_runs SET source = X'00ff'", None)]  # no source to name: named by its run id


@pytest.mark.parametrize("damage", DAMAGED, ids=[sql[:40] for sql, _ in DAMAGED])
@pytest.mark.parametrize("command", ["runs", "changes", "judge", "report"])
def test_a_store_whose_tables_were_changed_by_hand_is_one_line_naming_it(damage: tuple[str, str | None],
                                                                          command: str) -> None:
    """A missing table or column, a JSON column that is not JSON, a source that is no text: every reading command
    says so in one line naming the store (exit 2), never a traceback of SQLAlchemy's, json's or pathlib's."""
    import contextlib
    import io
    import sqlite3

    from perf.report_cli import main as report
    from perf.store.cli import main as history

    sql, problem = damage
    if "perf_noise" in sql and command == "runs":
        problem = None  # the list of runs reads no noise profile
    with tempfile.TemporaryDirectory() as tmp:
        where = str(Path(tmp) / "h.sqlite")
        with open_store(where) as store:
            for i in range(3):
                store.save_run(_document(f"r{i}", when=f"2026-11-0{i + 1}T00:00:00"), noise={"format": 1})
        with contextlib.closing(sqlite3.connect(where)) as conn, conn:
            conn.execute(sql)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = (report(["--store", where, "--out", str(Path(tmp) / "out")]) if command == "report"
                    else history(["--store", where, command]))  # fmt: skip
    lines = err.getvalue().splitlines()
    if problem is None:
        assert code == 0, lines
        return
    assert code == 2 and len([ln for ln in lines if "error" in ln]) == 1, lines
    assert lines[-1].startswith(f"perf-{'report' if command == 'report' else 'history'}: error: store '"), lines
    assert f": cannot read it: {problem}" in lines[-1], lines


@settings(max_examples=60, deadline=None)
@given(before=st.integers(2, 30), after=st.integers(2, 30), step=st.floats(0.05, 2.0), seed=st.integers(0, 2**31),
       level=st.floats(1e-5, 1.0))  # fmt: skip
def test_a_step_well_above_the_scatter_is_found_where_it_starts(before: int, after: int, step: float, seed: int,
                                                                level: float) -> None:  # fmt: skip
    noise = np.exp(0.002 * np.random.default_rng(seed).standard_normal(before + after))
    series = level * noise * np.r_[np.ones(before), np.full(after, 1 + step)]
    (change,) = find_change_points(list(series))
    assert change.index == before and change.points_after == after
    assert change.ratio == pytest.approx(1 + step, rel=0.01)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(3, 60), seed=st.integers(0, 2**31), scale=st.floats(1e-6, 1e3))
def test_scatter_within_the_noise_floor_has_no_change_point_at_any_scale(n: int, seed: int, scale: float) -> None:
    series = scale * np.exp(0.001 * np.random.default_rng(seed).standard_normal(n))
    assert find_change_points(list(series)) == []


def test_a_shift_smaller_than_the_minimum_effect_is_not_a_change_point() -> None:
    series = [1.0] * 10 + [1.015] * 10  # clear, but 1.5% < 2%
    assert find_change_points(series, noise_floor=0.0001) == []
    assert [c.index for c in find_change_points(series, min_effect=0.01, noise_floor=0.0001)] == [10]


def test_a_noise_profile_floor_keeps_a_noisy_short_history_free_of_false_change_points() -> None:
    noisy = [1.0, 1.06, 1.06]  # one process 6% off: within what this benchmark does between identical processes
    assert [c.index for c in find_change_points(noisy)] == [1]  # judged against the default 0.5% floor
    assert find_change_points(noisy, noise_floor=0.05) == []  # against its profiled 5% between-process scatter


def test_history_changes_name_the_run_and_commit_of_the_new_level(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "h.sqlite")) as store:
        for i, (scale, commit) in enumerate([(1.0, "a1"), (1.002, "a2"), (0.999, "a3"), (1.3, "slow1"), (1.301, "s2")]):
            store.save_run(_document(f"r{i}", scale, commit=commit, when=f"2026-11-0{i + 1}T00:00:00"))
        store.save_run(_document("x", 2.0, injected={"inject_delay_ms": 9.0}, when="2026-11-09T00:00:00"))
        (change,) = history_changes(store.runs(include_injected=True))
    assert (change.commit, change.run_id, change.change.points_after) == ("slow1", "r3", 2)
    assert change.change.ratio == pytest.approx(1.3, rel=0.01)


# -- the plugin and the command, on real pytest runs of the tiny benchmark -------------------------------------------
def test_saved_runs_go_into_the_store_with_their_verdicts_and_the_command_reads_them(tmp_path: Path) -> None:
    import json
    import sys

    from tiny_bench import child_env, write_project

    folder = write_project(tmp_path, ["perf.plugin", "perf.fixtures.reporting"])
    run = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "--perf-device=cpu",
           "--benchmark-storage=storage", "--benchmark-max-time=0.05", "--benchmark-min-rounds=20",
           "--benchmark-warmup=off", "--perf-reports-dir=reports"]  # fmt: skip
    env = child_env()

    def pytest_run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*run, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=120)

    first = pytest_run("--benchmark-autosave")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "history store: run " in first.stdout and "storage/history.sqlite" in first.stdout
    second = pytest_run("--benchmark-autosave", "--perf-compare")
    assert second.returncode == 0, second.stdout + second.stderr
    assert pytest_run("--perf-store=none", "--benchmark-autosave").returncode == 0  # saved, not stored
    bad = pytest_run("--perf-store=mysql://db", "--benchmark-autosave")
    assert bad.returncode == 4 and bad.stderr.strip().splitlines()[-1].startswith("ERROR: argument --perf-store")
    with open_store(str(folder / "storage" / "history.sqlite")) as store:
        runs = store.runs()
        assert len(runs) == 2
        current = json.loads((folder / "reports" / "perf-compare.json").read_text())["current"]["run_id"]
        assert runs[1].run_id == current and [r["verdict"] for r in store.verdicts(current)] != []
        saved = sorted((folder / "storage").glob("*/0*.json"))  # the files pytest-benchmark saved, 3 runs
        assert [Path(str(r.path)) for r in runs] == saved[:2]  # each stored with its own file
    cli = [sys.executable, "-m", "perf.store.cli", "--store", str(folder / "storage" / "history.sqlite")]
    listed = subprocess.run([*cli, "runs"], capture_output=True, text=True, env=env, check=False)
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == 2
    imported = subprocess.run([*cli, "import", str(folder / "storage")], capture_output=True, text=True, env=env,
                              check=False)  # fmt: skip
    assert imported.returncode == 0 and imported.stdout.startswith("1 run(s) stored, 2 already in ")  # the 'none' run
    changes = subprocess.run([*cli, "changes"], capture_output=True, text=True, env=env, check=False)
    assert changes.returncode == 0 and changes.stdout.splitlines()[0].startswith("| benchmark | changed at")
    missing = subprocess.run([*cli, "import", str(folder / "nowhere")], capture_output=True, text=True, env=env,
                             check=False)  # fmt: skip
    assert missing.returncode == 2 and len(missing.stderr.splitlines()) == 1 and "nowhere" in missing.stderr


def test_an_ini_store_path_is_taken_from_the_ini_folder_and_an_option_path_from_where_pytest_started(
    tmp_path: Path,
) -> None:
    import sys

    from tiny_bench import child_env, write_project

    folder = write_project(tmp_path, ["perf.plugin"])
    (folder / "pyproject.toml").write_text('[tool.pytest.ini_options]\nperf_store = "hist/h.sqlite"\n')
    (started := folder / "sub").mkdir()
    env = {k: v for k, v in child_env().items() if k != "PERF_STORE"}

    def pytest_run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
                               "--perf-device=cpu", "--benchmark-storage=storage", "--benchmark-max-time=0.02",
                               "--benchmark-min-rounds=5", "--benchmark-warmup=off", "--perf-reports-dir=reports",
                               "--benchmark-autosave", *args, "../test_tiny.py"], cwd=started, env=env,
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip

    from_ini = pytest_run()
    assert from_ini.returncode == 0, from_ini.stdout[-3000:] + from_ini.stderr[-3000:]
    assert f"stored in sqlite:///{folder / 'hist' / 'h.sqlite'}" in from_ini.stdout
    assert not (started / "hist").exists()
    from_option = pytest_run("--perf-store=opt/h.sqlite")
    assert from_option.returncode == 0, from_option.stdout[-3000:] + from_option.stderr[-3000:]
    assert f"stored in sqlite:///{started / 'opt' / 'h.sqlite'}" in from_option.stdout
    for where, runs in ((folder / "hist" / "h.sqlite", 1), (started / "opt" / "h.sqlite", 1)):
        with open_store(str(where)) as store:
            assert len(store.runs()) == runs, where


def test_import_stores_the_storages_noise_profile_whose_floors_changes_then_judge_with(tmp_path: Path) -> None:
    import json
    import sys

    from perf.gate.noise import compute_profile, save_profile
    from perf.runs import run_from_json

    storage = tmp_path / "storage"
    (storage / "runner-1").mkdir(parents=True)
    for i, scale in enumerate([1.0, 1.002, 1.06, 1.061]):  # a 6% step: a change point against the default floor
        document = _document(f"r{i}", scale, when=f"2026-11-0{i + 1}T00:00:00")
        (storage / "runner-1" / f"{i + 1:04d}_run.json").write_text(json.dumps(document))
    medians = np.exp(0.05 * np.random.default_rng(1).standard_normal(6))  # this runner: processes 5% apart
    processes = [run_from_json(_document(f"p{k}", m), f"{k + 1:04d}_p.json") for k, m in enumerate(medians)]
    fingerprint = _document("p")["machine_info"]["perf"]
    path = save_profile(storage, compute_profile(processes, fingerprint))

    def perf_history(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "perf.store.cli", "--store", str(where), *args],
                              capture_output=True, text=True, check=False, timeout=120)  # fmt: skip

    imported = perf_history(tmp_path / "h.sqlite", "import", str(storage))
    assert (imported.returncode, imported.stderr) == (0, ""), imported.stderr
    with open_store(str(tmp_path / "h.sqlite")) as store:
        stored = store.noise_profile_json(machine_key(_document("r0")["machine_info"]))
    assert stored is not None and json.loads(stored) == json.loads(path.read_text())
    changes = perf_history(tmp_path / "h.sqlite", "changes")  # within the 5% this runner's processes move
    assert changes.returncode == 0 and changes.stdout.splitlines()[-1].startswith("0 change point(s) in 1 benchmark")
    path.write_text("{")  # a bad profile: one line, the runs stored without it
    again = perf_history(tmp_path / "bad.sqlite", "import", str(storage))
    assert again.returncode == 0 and again.stdout.startswith("4 run(s) stored"), again.stderr
    (line,) = again.stderr.splitlines()  # once, not once per run
    assert line.startswith(f"perf-history: warning: ignored this runner's stored noise profile, '{path}': not a noise "
                           "profile (")
    assert line.endswith("the runs are stored without it; measure it again with --perf-noise=10")
    changes = perf_history(tmp_path / "bad.sqlite", "changes")  # the default floor: the step is a change point
    assert changes.returncode == 0 and changes.stdout.splitlines()[-1].startswith("1 change point(s) in 1 benchmark")


def test_the_report_reads_the_store_and_shows_the_change_point(tmp_path: Path) -> None:
    import sys

    pytest.importorskip("matplotlib")
    where = str(tmp_path / "h.sqlite")
    with open_store(where) as store:
        for i, (scale, commit) in enumerate([(1.0, "a1"), (1.002, "a2"), (0.999, "a3"), (1.3, "slow1"), (1.301, "s2")]):
            store.save_run(_document(f"r{i}", scale, commit=commit, when=f"2026-11-0{i + 1}T00:00:00"))
    result = subprocess.run([sys.executable, "-m", "perf.report_cli", "--store", where, "--out", str(tmp_path / "out")],
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "Change points in the history" in summary
    (row,) = [line for line in summary.splitlines() if line.startswith("| test_a[b1] | slow1")]
    assert "+29." in row or "+30." in row
    assert "change point: level +" in (tmp_path / "out" / "index.html").read_text()


def test_comparable_says_whether_a_saved_run_can_be_a_baseline_on_this_machine(tmp_path: Path) -> None:
    import json
    import sys

    from perf.measure.machine import machine_fingerprint

    document = _document("run-a")
    document["machine_info"]["perf"] = {**machine_fingerprint(), "device": "cpu"}
    (tmp_path / "same.json").write_text(json.dumps(document))
    document["machine_info"]["perf"]["driver_version"] = "1.0-before-the-update"
    (tmp_path / "updated.json").write_text(json.dumps(document))
    cli = [sys.executable, "-m", "perf.store.cli", "comparable", "--device", "cpu"]
    same = subprocess.run([*cli, str(tmp_path / "same.json")], capture_output=True, text=True, check=False)
    assert same.returncode == 0 and same.stdout == ""
    updated = subprocess.run([*cli, str(tmp_path / "updated.json")], capture_output=True, text=True, check=False)
    assert updated.returncode == 1 and updated.stdout.startswith("driver_version: saved '1.0-before-the-update'")
    missing = subprocess.run([*cli, str(tmp_path / "none.json")], capture_output=True, text=True, check=False)
    assert missing.returncode == 2 and "none.json" in missing.stderr and len(missing.stderr.splitlines()) == 1


@pytest.fixture
def read_only() -> Iterator[object]:
    """``read_only(path)``: makes a file unwritable for this process, root included (``chattr +i``, undone after the
    test; skipped where that is not allowed), else by its mode."""
    made: list[Path] = []

    def make(path: Path) -> None:
        if os.geteuid() == 0:
            if subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False).returncode != 0:
                pytest.skip("running as root and chattr +i is not allowed here: no file is unwritable to root")
            made.append(path)
        else:
            path.chmod(0o444)

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True, check=False)


def test_a_failed_store_write_is_one_summary_line_with_its_own_exit_status_and_the_run_is_saved(
    tmp_path: Path, read_only: object
) -> None:
    import json
    import sys

    from tiny_bench import child_env, write_project

    plugins = ["perf.plugin", "perf.fixtures.reporting"]
    folder = write_project(tmp_path, plugins)
    where = folder / "history.sqlite"
    open_store(str(where)).close()  # created and migrated: opening it at start-up only reads it
    read_only(where)
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-rA",
                             "--perf-device=cpu", "--benchmark-storage=storage", "--benchmark-max-time=0.02",
                             "--benchmark-min-rounds=5", "--benchmark-warmup=off", "--perf-reports-dir=reports",
                             f"--perf-store={where}", "--benchmark-autosave"], cwd=folder, env=child_env(),
                            capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert result.returncode == 6, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    (saved,) = (folder / "storage").glob("*/0001_*.json")
    assert json.loads(saved.read_text())["benchmarks"]  # nothing lost: the run is saved as JSON
    not_stored = [line for line in lines if "NOT STORED" in line]
    assert len(not_stored) == 1 and not_stored[0] == lines[-2], lines[-12:]  # after the short summary, above the end
    assert not_stored[0].startswith(f"NOT STORED: store 'sqlite:///{where}': cannot save run ")
    assert "readonly database" in not_stored[0]
    assert f"the run is saved in '{saved}': store it later with perf-history --store 'sqlite:///{where}' import " \
           f"'{folder / 'storage'}' (exit status 6)" in not_stored[0]
    assert re.match(r"=+ 1 passed, 1 not stored in ", lines[-1]), lines[-1]
    assert "Traceback" not in result.stdout + result.stderr


def test_a_postgresql_store_without_the_postgres_extra_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    import sys

    from tiny_bench import child_env, write_project

    folder = write_project(tmp_path, ["perf.plugin"])
    without_psycopg = "import sys; sys.modules['psycopg'] = None; import pytest; sys.exit(pytest.main(sys.argv[1:]))"
    result = subprocess.run([sys.executable, "-c", without_psycopg, "-p", "no:cacheprovider", "--perf-device=cpu",
                             "--benchmark-storage=storage", "--perf-store=postgresql://perf@/history?host=/nowhere",
                             "--benchmark-autosave"], cwd=folder, env=child_env(), capture_output=True, text=True,
                            timeout=120, check=False)  # fmt: skip
    assert result.returncode == 4, result.stdout[-2000:] + result.stderr[-2000:]
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("ERROR: --perf-store: store 'postgresql+psycopg://perf@/history?host=%2Fnowhere': "
                           "PostgreSQL needs psycopg 3, which is not installed here (")  # fmt: skip
    assert line.endswith("): pip install -e '.[postgres]'")


def test_changes_with_a_stored_noise_profile_it_cannot_use_warn_in_one_line_and_use_the_default_floor(
        tmp_path: Path) -> None:  # fmt: skip
    import sys

    where = tmp_path / "h.sqlite"
    with open_store(str(where)) as store:
        for i in range(4):
            store.save_run(_document(f"r{i}", when=f"2026-11-0{i + 1}T00:00:00"), noise={"format": 99})
    done = subprocess.run([sys.executable, "-m", "perf.store.cli", "--store", str(where), "changes"],
                          capture_output=True, text=True, check=False, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("perf-history: warning: ignored this runner's stored noise profile, the store's noise")
    assert line.endswith("change points use the default floor; measure it again with --perf-noise=10")
    assert "change point(s) in 1 benchmark(s) of 4 run(s)" in done.stdout


@pytest.mark.parametrize("env, named", [("None", "$PERF_STORE=none"), (" none ", "$PERF_STORE=none"),
                                        ("mysql://x/y", "$PERF_STORE: Could not parse value")])  # fmt: skip
def test_perf_history_reads_perf_store_as_the_suite_does_and_makes_no_store_of_an_off_value(
        tmp_path: Path, env: str, named: str) -> None:  # fmt: skip
    import sys

    done = subprocess.run([sys.executable, "-m", "perf.store.cli", "runs"], cwd=tmp_path, capture_output=True,
                          text=True, check=False, timeout=120, env={**os.environ, "PERF_STORE": env})  # fmt: skip
    (line,) = done.stderr.splitlines()
    assert done.returncode == 2 and line.startswith(f"perf-history: error: {named}"), done.stderr
    assert list(tmp_path.iterdir()) == []  # no SQLite file named after the value


def test_a_store_path_through_a_file_or_naming_a_folder_is_one_line(tmp_path: Path) -> None:
    import sys

    (tmp_path / "afile").write_text("")
    for where, problem in ((tmp_path / "afile" / "h.sqlite", "cannot make its folder"), (tmp_path, "is a folder")):
        done = subprocess.run([sys.executable, "-m", "perf.store.cli", "--store", str(where), "runs"],
                              capture_output=True, text=True, check=False, timeout=120)  # fmt: skip
        (line,) = done.stderr.splitlines()
        assert done.returncode == 2 and line.startswith("perf-history: error: store ") and problem in line, line


def test_a_store_path_that_is_not_utf8_is_named_in_its_messages(tmp_path: Path) -> None:
    import sys

    where = tmp_path / os.fsdecode(b"h\xff.sqlite")  # a name Linux allows and UTF-8 cannot spell
    done = subprocess.run([sys.executable, "-m", "perf.store.cli", "--store", str(where), "runs"],
                          capture_output=True, text=True, check=False, timeout=120)  # fmt: skip
    assert done.returncode == 2 and done.stderr.splitlines() == [
        f"perf-history: error: store 'sqlite:///{tmp_path}/h\\udcff.sqlite': no such file"], done.stderr
    assert list(tmp_path.iterdir()) == []


def test_comparable_reads_its_device_as_the_suite_does(tmp_path: Path) -> None:
    import json
    import sys

    saved = tmp_path / "0001_run.json"
    saved.write_text(json.dumps(_document("r0")))
    cli = [sys.executable, "-m", "perf.store.cli", "comparable", str(saved), "--device"]
    typo = subprocess.run([*cli, "cuda:x"], capture_output=True, text=True, check=False, timeout=120)
    assert typo.returncode == 2 and typo.stderr.splitlines() == [
        "perf-history: error: argument --device: Could not parse value: 'cuda:x'. Expected cpu, cuda or cuda:N."]
    upper = subprocess.run([*cli, "CUDA"], capture_output=True, text=True, check=False, timeout=120)
    assert "device: saved 'cuda'" not in upper.stdout and upper.stderr == ""  # CUDA is cuda, as the suite reads it


def test_a_store_that_cannot_open_is_named_where_it_was_given(tmp_path: Path) -> None:
    import sys

    from tiny_bench import child_env, write_project

    folder = write_project(tmp_path, ["perf.plugin"])
    (folder / "afile").write_text("")
    (folder / "pyproject.toml").write_text('[tool.pytest.ini_options]\nperf_store = "afile/h.sqlite"\n')
    env = {k: v for k, v in child_env().items() if k != "PERF_STORE"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--perf-device=cpu", "--benchmark-autosave", "test_tiny.py"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
    assert line.startswith(f"ERROR: perf_store (ini): store 'sqlite:///{folder / 'afile' / 'h.sqlite'}': cannot make "
                           "its folder"), line


def test_judging_a_storage_needs_no_store_even_when_perf_store_is_none(tmp_path: Path) -> None:
    import sys

    done = subprocess.run([sys.executable, "-m", "perf.store.cli", "judge", "--storage", str(tmp_path)],
                          capture_output=True, text=True, check=False, timeout=120,
                          env={**os.environ, "PERF_STORE": "None"})  # fmt: skip
    assert done.returncode == 2 and "no store to read" not in done.stderr and str(tmp_path) in done.stderr



@pytest.mark.parametrize("wanted", ["\u00b2", "\u2460", "1\u00b2"])
def test_judge_given_a_run_number_in_digits_int_cannot_read_is_one_line(wanted: str, tmp_path: Path) -> None:
    import json
    import sys

    folder = tmp_path / "Linux-CPython-3.12-64bit"
    folder.mkdir()
    (folder / "0001_a.json").write_text(json.dumps(_document("run-a")), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "perf.store.cli", "judge", "--storage", str(tmp_path), "--run",
                           wanted], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "no such saved run" in done.stderr

SAVER = """
import json, os, sys, time
from pathlib import Path

from perf.store.db import open_store

where, barrier, count, documents = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
(barrier / str(os.getpid())).touch()  # arrived: wait for the others, then open the store together
while len(list(barrier.iterdir())) < count:
    time.sleep(0.0005)
with open_store(where) as store:
    print(sum(store.save_run(document)[1] for document in documents))
"""


def _save_together(where: str, tmp_path: Path, documents: list[list[dict]]) -> list[subprocess.CompletedProcess]:
    """One process per list of ``documents``, released together, each opening the store at ``where`` and saving
    its documents."""
    import json
    import sys

    from tiny_bench import child_env

    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", SAVER, where, str(barrier), str(len(documents)), json.dumps(docs)],
                              env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for docs in documents]  # fmt: skip
    return [subprocess.CompletedProcess(p.args, p.wait(timeout=120), *p.communicate()) for p in procs]


def _new_store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store that does not exist yet: a new SQLite file, or a new database on the session's PostgreSQL server."""
    if kind == "sqlite":
        return str(tmp_path / "new" / "history.sqlite")
    from sqlalchemy import create_engine, text

    from perf.store.db import engine_url

    url, name = request.getfixturevalue("postgres_url"), f"new_{tmp_path.name.lower()}"[:60]
    engine = create_engine(engine_url(url), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return url.replace("@/postgres?", f"@/{name}?")


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_processes_opening_a_new_store_at_once_each_store_their_run(kind: str, request: pytest.FixtureRequest,
                                                                     tmp_path: Path) -> None:  # fmt: skip
    where = _new_store(kind, request, tmp_path)
    done = _save_together(where, tmp_path, [[_document(f"run-{i}")] for i in range(4)])
    assert [(r.returncode, r.stdout.strip(), r.stderr) for r in done] == [(0, "1", "")] * 4
    with open_store(where, create=False) as store:
        assert sorted(run.run_id for run in store.runs()) == [f"run-{i}" for i in range(4)]
    if kind == "sqlite":
        assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["history.sqlite"]  # no lock file left


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_processes_storing_the_same_runs_at_once_store_each_once_and_all_succeed(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    where = _new_store(kind, request, tmp_path)
    open_store(where).close()  # the store exists: only the runs race
    documents = [_document(f"run-{i}", when=f"2026-11-01T00:{i:02d}:00") for i in range(30)]
    done = _save_together(where, tmp_path, [documents] * 3)  # three imports of one storage, at once
    assert [(r.returncode, r.stderr) for r in done] == [(0, "")] * 3
    assert sum(int(r.stdout) for r in done) == 30  # each run stored by one of them, counted once
    with open_store(where, create=False) as store:
        assert [run.run_id for run in store.runs()] == [f"run-{i}" for i in range(30)]
