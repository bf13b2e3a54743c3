"""The history store of a session (`StoreRun`, owned by `perf.session.PerfSession`): every run pytest-benchmark
saves also goes into the store (`perf.store.db`), with the verdicts that judged it and the noise profile they used.

Where: ``--perf-store`` / ``perf_store``, else ``$PERF_STORE``, else ``.benchmarks/history.sqlite``; ``none`` turns
it off. Only a saved run, never from a pytest-xdist worker. The store is opened (created, migrated) when the session
starts, so a wrong address is a usage error (exit 4) before anything is measured, and written once at the end, in
one transaction, after the saved file and the verdicts. A store that cannot take the run is one ``NOT STORED``
line and, for a store given explicitly, exit `NOT_STORED` (6) of an otherwise green run (docs/options.md); the saved
file in ``.benchmarks/`` is never affected.
"""

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
    """The store of one session: the open store (None when off), whether it was asked for, the document
    pytest-benchmark saves and the file it saves it in, and the lines for the terminal summary."""

    store: Any = None
    asked: bool = False
    document: dict[str, Any] | None = None
    saved: Path | None = None  #: the file pytest-benchmark saves the document in (None: not file storage)
    line: tuple[str, bool] | None = None  #: (text, red)
    not_stored: str | None = None  #: `not_stored_line`, when the store could not take the run

    @classmethod
    def open(cls, config: pytest.Config, given: str | None) -> StoreRun | None:
        """The store of a run that is saved (``given``: --perf-store or the ini's; see the module docstring), or
        None; a store asked for that cannot be opened is a usage error."""
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
        """``pytest_benchmark_update_json``: the document pytest-benchmark saves (its last call is the save's) and
        the file it saves it in, as its `FileStorage.save` names it."""
        if self.store is None:
            return
        self.document = output_json
        storage, save = benchmarks.storage, benchmarks.save or benchmarks.autosave
        self.saved = storage.get(f"{storage._next_num}_{save}.json") if hasattr(storage, "_next_num") else None

    def finish(self, session: pytest.Session, verdicts: dict[str, Any] | None, noise: Any) -> None:
        """Store the saved run with its verdicts (the gate's document) and noise profile, after pytest-benchmark
        saved it and the gate wrote the verdicts."""
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
        """The store's line after the rest of the summary (the short test summary included), just above the final
        line, which counts a run the store could not take as "1 not stored"."""
        if self.line is not None:
            line, failed = self.line
            terminalreporter.write_line(line, red=failed)
        if self.not_stored:
            terminalreporter.write_line(self.not_stored, red=True, bold=True)
            terminalreporter.stats.setdefault("not stored", []).append(self.not_stored)


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
