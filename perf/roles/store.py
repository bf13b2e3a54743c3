"""The history store of a session (`StoreRun`): every saved run also goes into the store (`perf.store.db`)
with its verdicts and noise profile; where, when and what a failure does: docs/architecture.md ("store")."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

#: The exit status of a green run whose saved run did not go into the store asked for (pytest's own: 0-5).
NOT_STORED = 6


@dataclass
class StoreRun:
    """The store of one session: the open store (None: off), whether it was asked for, the document
    pytest-benchmark saves and its file, and the summary's lines."""

    store: Any = None
    asked: bool = False
    document: dict[str, Any] | None = None
    saved: Path | None = None  #: the file pytest-benchmark saves the document in (None: not file storage)
    line: tuple[str, bool] | None = None  #: (text, red)
    not_stored: str | None = None  #: the one line of a run the store could not take

    @classmethod
    def open(cls, config: pytest.Config, given: str | None) -> StoreRun | None:
        """The store of a saved run (``given``: --perf-store or the ini's, else ``$PERF_STORE``, else
        ``history.sqlite`` in file storage), or None; a usage error for a store asked for that cannot open."""
        benchmarks = getattr(config, "_benchmarksession", None)
        saving = benchmarks is not None and not benchmarks.disabled and bool(benchmarks.save or benchmarks.autosave)
        if not saving or hasattr(config, "workerinput"):
            return None
        where = str(given or os.environ.get("PERF_STORE") or "").strip()
        folder = getattr(benchmarks.storage, "path", None)  # file storage only
        if where.lower() == "none" or not (where or folder):
            return None
        try:
            from perf.store.db import StoreError, open_store

            return cls(open_store(where or str(Path(folder) / "history.sqlite")), bool(where))
        except (StoreError, ImportError) as e:
            if where:  # named where it was given
                named = ("--perf-store" if config.getoption("perf_store") else "perf_store (ini)" if given
                         else "$PERF_STORE")  # fmt: skip
                raise pytest.UsageError(f"{named}: {e}") from None
            return cls(line=(f"history store off: {e} (the run is saved in the benchmark storage)", True))

    def saving(self, output_json: dict[str, Any]) -> None:
        """``pytest_benchmark_update_json``: the document pytest-benchmark saves (its last call's); its file is
        `saved` once written (`save_under_lock`)."""
        if self.store is not None:
            self.document = output_json

    def finish(self, session: pytest.Session, verdicts: dict[str, Any] | None, noise: Any) -> None:
        """Store the saved run with the gate's verdict document and noise profile; a store that cannot take it
        is the ``NOT STORED`` line, and for a store asked for, exit status `NOT_STORED` of a green run."""
        if self.store is None or self.document is None:
            return
        from perf.store.db import StoreError

        store, source = self.store, None if self.saved is None else str(self.saved)
        try:
            noise_json = None if noise is None else json.loads(noise.to_json())
            rid, _ = store.save_run(self.document, source=source, verdicts=verdicts, noise=noise_json)
            self.line = (f"history store: run {rid} stored in {store.shown}", False)
        except StoreError as e:
            if status := self.asked and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = NOT_STORED
            storage = getattr(session.config._benchmarksession.storage, "path", None)
            where, folder = f"'{source}'" if source else "the benchmark storage", f" '{storage}'" if storage else ""
            code = f" (exit status {NOT_STORED})" if status else ""
            self.not_stored = (f"NOT STORED: {e}; the run is saved in {where}: store it later with "
                               f"perf-history --store '{store.shown}' import{folder}{code}")
        finally:
            store.close()

    def write_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """The store's line just above the final line, which counts a run not stored as "1 not stored"."""
        if self.line is not None:
            terminalreporter.write_line(self.line[0], red=self.line[1])
        if self.not_stored:
            terminalreporter.write_line(self.not_stored, red=True, bold=True)
            terminalreporter.stats.setdefault("not stored", []).append(self.not_stored)


def save_under_lock(session: pytest.Session, saved: Callable[[Path], None]) -> None:
    """Make pytest-benchmark's file storage save a run under the next free number, picked and written while holding
    a lock on the machine folder, the file renamed into place when complete; ``saved`` gets its path. Alone it
    picks the number unlocked and opens the name for writing: two runs saving at once took one number, and the
    second overwrote the first (or both kept one number under two names). ``--benchmark-json`` is replaced whole
    too (it was truncated, then written). An interrupted session (Ctrl-C, SIGTERM, a full disk) saves nothing: its
    part of a run would become the latest baseline."""
    benchmarks = getattr(session.config, "_benchmarksession", None)
    if benchmarks is None:
        return
    from pytest_benchmark.utils import safe_dumps

    from detector.fileio import atomic_write_bytes, file_lock

    storage, said = benchmarks.storage, []

    def data(output_json: dict[str, Any]) -> bytes | None:  # None: interrupted, said once
        if session.exitstatus != pytest.ExitCode.INTERRUPTED:
            return safe_dumps(output_json, ensure_ascii=True, indent=4).encode()
        if not said:  # once, though both the run and --benchmark-json were asked for
            said.append(True)
            benchmarks.logger.info("perf: the run was interrupted: it is not saved (nor stored, nor reported)",
                                   red=True)
        return None

    def save(output_json: dict[str, Any], name: str) -> None:
        if (text := data(output_json)) is not None:
            with file_lock(storage.get(".save")):
                path = atomic_write_bytes(storage.get(f"{storage._next_num}_{name}.json"), text)
            storage.logger.info(f"Saved benchmark data in: {path}")
            saved(path)

    def save_json(output_json: dict[str, Any]) -> None:
        if (text := data(output_json)) is not None:
            atomic_write_bytes(benchmarks.json, text)
            benchmarks.logger.info(f"Wrote benchmark data in: {benchmarks.json}", purple=True)

    benchmarks.save_json = save_json
    if hasattr(type(storage), "_next_num"):  # file storage (its property would list the folder now)
        storage.save = save
