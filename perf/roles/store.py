"""The history store of a session (`StoreRun`): every saved run also goes into the store (`perf.store.db`) with its
verdicts and noise profile; where, when and what a failure does: docs/architecture.md, "The session and its parts"."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ENV = "PERF_STORE"
#: The exit status of a run whose tests passed but whose saved run did not go into the store asked for (pytest's
#: own statuses are 0-5).
NOT_STORED = 6


def _where(given: str | None, storage: Any) -> tuple[str | None, bool]:
    """The store to write and whether it was asked for (an option, ini or environment) or is the default."""
    given = given or os.environ.get(ENV)
    if given:
        return (None, True) if str(given).strip().lower() == "none" else (str(given).strip(), True)
    folder = getattr(storage, "path", None)  # file storage only
    return (None, False) if folder is None else (str(Path(folder) / "history.sqlite"), False)


@dataclass
class StoreRun:
    """The store of one session: the open store (None: off), whether it was asked for, the document
    pytest-benchmark saves and its file, and the summary's lines."""

    store: Any = None
    asked: bool = False
    document: dict[str, Any] | None = None
    saved: Path | None = None  #: the file pytest-benchmark saves the document in (None: not file storage)
    line: tuple[str, bool] | None = None  #: (text, red)
    not_stored: str | None = None  #: `not_stored_line`, when the store could not take the run

    @classmethod
    def open(cls, config: pytest.Config, given: str | None) -> StoreRun | None:
        """The store of a saved run (``given``: --perf-store or the ini's), or None; a usage error for a store asked
        for that cannot be opened."""
        benchmarks = getattr(config, "_benchmarksession", None)
        saving = benchmarks is not None and not benchmarks.disabled and bool(benchmarks.save or benchmarks.autosave)
        if not saving or hasattr(config, "workerinput"):
            return None
        where, asked = _where(given, benchmarks.storage)
        if where is None:
            return None
        try:
            from perf.store.db import StoreError, open_store

            return cls(open_store(where), asked)
        except (StoreError, ImportError) as e:
            if asked:
                raise pytest.UsageError(f"--perf-store: {e}") from None
            return cls(line=(f"history store off: {e} (the run is saved in the benchmark storage)", True))

    def saving(self, benchmarks: Any, output_json: dict[str, Any]) -> None:
        """``pytest_benchmark_update_json``: the document pytest-benchmark saves (its last call's) and its file."""
        if self.store is None:
            return
        self.document = output_json
        storage, save = benchmarks.storage, benchmarks.save or benchmarks.autosave
        self.saved = storage.get(f"{storage._next_num}_{save}.json") if hasattr(storage, "_next_num") else None

    def finish(self, session: pytest.Session, verdicts: dict[str, Any] | None, noise: Any) -> None:
        """Store the saved run with the gate's verdict document and noise profile."""
        if self.store is None or self.document is None:
            return
        import json

        from perf.store.db import StoreError

        store, source = self.store, None if self.saved is None else str(self.saved)
        try:
            noise_json = None if noise is None else json.loads(noise.to_json())
            rid, _ = store.save_run(self.document, source=source, verdicts=verdicts, noise=noise_json)
            self.line = (f"history store: run {rid} stored in {store.shown}", False)
        except StoreError as e:
            status = self.asked and session.exitstatus == pytest.ExitCode.OK
            if status:
                session.exitstatus = NOT_STORED
            storage = getattr(session.config._benchmarksession.storage, "path", None)
            self.not_stored = not_stored_line(e, store.shown, source, storage, exit_status=status)
        finally:
            store.close()

    def write_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """The store's line just above the final line, which counts a run not stored as "1 not stored"."""
        if self.line is not None:
            line, failed = self.line
            terminalreporter.write_line(line, red=failed)
        if self.not_stored:
            terminalreporter.write_line(self.not_stored, red=True, bold=True)
            terminalreporter.stats.setdefault("not stored", []).append(self.not_stored)


def not_stored_line(error: Exception, shown: str, saved: str | None, storage: str | Path | None, *,
                    exit_status: bool) -> str:  # fmt: skip
    """The one line of a run the store could not take: the error, where the run is saved, the command that stores
    it later (``shown``: the store, password hidden), and with ``exit_status`` the exit status `NOT_STORED`."""

    where = f"'{saved}'" if saved else "the benchmark storage"
    folder = f" '{storage}'" if storage else ""
    status = f" (exit status {NOT_STORED})" if exit_status else ""
    return (f"NOT STORED: {error}; the run is saved in {where}: store it later with "
            f"perf-history --store '{shown}' import{folder}{status}")
