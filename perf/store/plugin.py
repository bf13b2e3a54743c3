"""pytest plugin of the history store: every run pytest-benchmark saves also goes into the store
(`perf.store.db`), with the verdicts that judged it and the noise profile they used.

* Where: ``--perf-store`` (or the ini setting ``perf_store``), else the ``PERF_STORE`` environment variable, else
  ``history.sqlite`` in pytest-benchmark's file storage (``.benchmarks/history.sqlite``); ``none`` turns it off.
* When: only a run that is saved (``--benchmark-autosave`` / ``--benchmark-save``), and never a pytest-xdist worker.
  The store is opened (created, migrated) when the session starts, so a wrong address is a usage error before
  anything is measured, and written once at the end, in one transaction, after the saved file and the verdicts.
* A store given explicitly that cannot be opened is a usage error (exit 4, one line). One that cannot be written at
  the end (PostgreSQL stopped mid-run, a read-only SQLite file) is one ``NOT STORED`` line after the short test
  summary, naming the store, the error, the saved file and the ``perf-history ... import`` command that stores it
  later; the final line counts it (``2 passed, 1 not stored``) and a run that was otherwise green exits with
  `NOT_STORED` (6). The default SQLite file failing is the same line without changing the exit status. The saved
  file in ``.benchmarks/`` is never affected: nothing saved is lost.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from perf.runs import run_marks

ENV = "PERF_STORE"
#: The exit status of a run whose tests passed but whose saved run did not go into the store asked for (pytest's
#: own statuses are 0-5).
NOT_STORED = 6


@dataclass
class StoreState:
    """What the store's hooks share in one session (``config.stash[STORE]``): the open store (None when off),
    whether it was asked for, the document pytest-benchmark saves, and the lines for the terminal summary."""

    store: Any = None
    asked: bool = False
    document: dict[str, Any] | None = None
    line: tuple[str, bool] | None = None  #: (text, red)
    not_stored: str | None = None  #: `not_stored_line`, when the store could not take the run


STORE = pytest.StashKey[StoreState]()


def _where(config: pytest.Config, session: Any) -> tuple[str | None, bool]:
    """The store to write and whether it was asked for (an option, ini or environment) or is the default."""
    given = config.getoption("perf_store") or config.getini("perf_store") or os.environ.get(ENV)
    if given:
        return (None, True) if str(given).strip().lower() == "none" else (str(given).strip(), True)
    folder = getattr(session.storage, "path", None)  # file storage only
    return (None, False) if folder is None else (str(Path(folder) / "history.sqlite"), False)


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    benchmarks = getattr(config, "_benchmarksession", None)
    saving = benchmarks is not None and not benchmarks.disabled and bool(benchmarks.save or benchmarks.autosave)
    if not saving or hasattr(config, "workerinput"):
        return
    where, asked = _where(config, benchmarks)
    if where is None:
        return
    try:
        from perf.store.db import StoreError, open_store

        store = open_store(where)
    except (StoreError, ImportError) as e:
        if asked:
            raise pytest.UsageError(f"--perf-store: {e}") from None
        config.stash[STORE] = StoreState(line=(f"history store off: {e} (the run is saved in the benchmark storage)",
                                               True))  # fmt: skip
        return
    config.stash[STORE] = StoreState(store, asked)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
    state = config.stash.get(STORE, None)
    if state is not None and state.store is not None:
        state.document = output_json  # the document pytest-benchmark saves (the last call is the save's)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Store the saved run with its verdicts and noise profile (after pytest-benchmark saved it and the gate
    wrote the verdicts)."""
    config = session.config
    state = config.stash.get(STORE, None)
    if state is None or state.store is None or state.document is None:
        return
    from perf.store.db import StoreError

    document = state.document
    store = state.store
    source = _saved_file(config, document)
    try:
        rid, _ = store.save_run(document, source=source, verdicts=_verdicts(config, document), noise=_noise(config))
        state.line = (f"history store: run {rid} stored in {store.shown}", False)
    except StoreError as e:
        status = state.asked and session.exitstatus == pytest.ExitCode.OK
        if status:
            session.exitstatus = NOT_STORED
        storage = getattr(config._benchmarksession.storage, "path", None)
        state.not_stored = not_stored_line(e, store.shown, source, storage, exit_status=status)
    finally:
        store.close()


def not_stored_line(error: Exception, shown: str, saved: str | None, storage: str | Path | None, *,
                    exit_status: bool) -> str:  # fmt: skip
    """The one line of a run the store could not take: the store's error, where the run is saved and the command
    that stores it later (``shown``: the store as `perf.store.db` names it, its password hidden); with
    ``exit_status``, that the run exits with `NOT_STORED` for it."""
    where = f"'{saved}'" if saved else "the benchmark storage"
    folder = f" '{storage}'" if storage else ""
    status = f" (exit status {NOT_STORED})" if exit_status else ""
    return (f"NOT STORED: {error}; the run is saved in {where}: store it later with "
            f"perf-history --store '{shown}' import{folder}{status}")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> Any:
    """The store's line after the rest of the summary (the short test summary included), just above the final
    line, which counts a run the store could not take as "1 not stored"."""
    result = yield
    state = config.stash.get(STORE, None)
    if state is not None and state.line is not None:
        line, failed = state.line
        terminalreporter.write_line(line, red=failed)
    if state is not None and state.not_stored:
        terminalreporter.write_line(state.not_stored, red=True, bold=True)
        terminalreporter.stats.setdefault("not stored", []).append(state.not_stored)
    return result


def _saved_file(config: pytest.Config, document: dict[str, Any]) -> str | None:
    """The file pytest-benchmark just saved the run in (the newest numbered file of this run's id), or None."""
    storage = getattr(config._benchmarksession, "storage", None)
    run_id = run_marks(document).get("run_id")
    files = sorted(storage.query("[0-9][0-9][0-9][0-9]_*")) if hasattr(storage, "query") else []
    for path in reversed(files[-5:]):
        try:
            saved = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if run_marks(saved).get("run_id") == run_id:
            return str(path)
    return None


def _verdicts(config: pytest.Config, document: dict[str, Any]) -> dict[str, Any] | None:
    """The --perf-compare verdicts of this run (the gate's file, when it names this run)."""
    from perf.gate.plugin import GATE

    state = config.stash.get(GATE, None)
    path = None if state is None else state.path
    if path is None:
        return None
    verdicts = json.loads(Path(path).read_text(encoding="utf-8"))
    run_id = run_marks(document).get("run_id")
    return verdicts if (verdicts.get("current") or {}).get("run_id") == run_id else None


def _noise(config: pytest.Config) -> dict[str, Any] | None:
    from perf.gate.plugin import GATE

    state = config.stash.get(GATE, None)
    profile = None if state is None else state.settings.noise
    return None if profile is None else json.loads(profile.to_json())
