"""Refuse at start-up (`check_options` at configure, `check_selection` after collection), in one usage line (exit
4), a run that would lose its results or crash after measuring:

* saving or comparing under pytest-xdist (``-n``), where pytest-benchmark switches itself off and saves nothing;
* a saved run ``--perf-compare`` or ``--benchmark-compare`` will load that fails `perf.validate.run_problem`
  (checked before pytest-benchmark loads it, which would crash or silently compare with an older run);
* a folder the run must write that cannot be written: the reports, an empty or missing perf cache, the benchmark
  storage when saving (after collection, for the selected tests; an xdist controller, which does not collect,
  checks at configure as if every test ran).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perf.validate import run_problem

if TYPE_CHECKING:
    from perf.session import PerfOptions

SAVING = ("benchmark_autosave", "benchmark_save", "benchmark_json", "benchmark_compare", "perf_compare")
RUN_FILES = "[0-9][0-9][0-9][0-9]_"  # pytest-benchmark's glob of saved runs


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _option(config: pytest.Config, name: str) -> Any:
    return config.getoption(name, None)


def _xdist(config: pytest.Config) -> bool:
    """A pytest-xdist controller (the test pytest-benchmark uses to switch itself off)."""
    return _option(config, "dist") not in (None, "no")


def unwritable(folder: Path) -> str | None:
    """Why no file can be created in ``folder`` (a missing one: in its nearest existing parent), or None."""
    probe = folder
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        return f"'{probe}' is not a folder"
    try:
        fd, name = tempfile.mkstemp(prefix=".perf-probe-", dir=probe)
    except OSError as e:
        return e.strerror or str(e)
    os.close(fd)
    os.unlink(name)
    return None


def _storage_path(config: pytest.Config) -> Path | None:
    """The file storage of pytest-benchmark (relative to the current directory, as it reads it), or None."""
    value = _option(config, "benchmark_storage")
    if not value or ("://" in value and not value.startswith("file://")):
        return None
    return Path(value.removeprefix("file://")).expanduser().absolute()


def _compared_files(config: pytest.Config, wanted: Any) -> list[Path]:
    """The files pytest-benchmark's storage will load for a compare with ``wanted`` (True: the newest run)."""
    from pytest_benchmark.storage.file import FileStorage
    from pytest_benchmark.utils import get_machine_id

    path = _storage_path(config)
    if path is None or not path.is_dir():
        return []  # nothing to load: pytest-benchmark and the gate say so themselves
    storage = FileStorage(path, logger=None, default_machine_id=get_machine_id())
    return storage.query(RUN_FILES)[-1:] if wanted is True else storage.query(str(wanted))


def saved_run_problem(path: Path, *, complete: bool = False) -> str | None:
    """What makes the saved run at ``path`` unusable (unreadable, not JSON, `run_problem`), or None."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return f"cannot read it as JSON: {e}"
    return run_problem(doc, complete=complete)


def _check_compared_runs(config: pytest.Config) -> None:
    for name, complete in (("benchmark_compare", True), ("perf_compare", False)):
        wanted = _option(config, name)
        if wanted is None or wanted is False:
            continue
        for path in _compared_files(config, wanted):
            problem = saved_run_problem(path, complete=complete)
            if problem is not None:
                raise pytest.UsageError(f"{_flag(name)}: '{path}' is not a usable saved run: {problem}; repair or "
                                        "remove it, or compare with another run (NUM|ID)")  # fmt: skip


def _check_folders(config: pytest.Config, options: PerfOptions, *, reports: bool, cache: bool,
                   storage: bool) -> None:  # fmt: skip
    if reports:
        folder = options.reports_dir
        why = unwritable(folder)
        if why:
            raise pytest.UsageError(f"--perf-reports-dir: cannot write the reports to '{folder}': {why}; make it "
                                    "writable or choose another folder with --perf-reports-dir")  # fmt: skip
    if cache:
        folder = options.cache_dir
        empty = not folder.is_dir() or not any(folder.iterdir())
        why = unwritable(folder) if empty else None
        if why:
            raise pytest.UsageError(f"--perf-cache-dir: cannot create the perf cache in '{folder}': {why}; make it "
                                    "writable or choose another folder with --perf-cache-dir")  # fmt: skip
    folder = _storage_path(config) if storage else None
    why = unwritable(folder) if folder is not None else None
    if why:
        raise pytest.UsageError(f"--benchmark-storage: cannot save the run in '{folder}': {why}; make it writable or "
                                "choose another folder with --benchmark-storage")  # fmt: skip


def _saving(config: pytest.Config) -> bool:
    return bool(_option(config, "benchmark_save") or _option(config, "benchmark_autosave"))


def check_options(config: pytest.Config, options: PerfOptions) -> None:
    """At configure, before pytest-benchmark (trylast) loads a compared run or xdist starts workers."""
    if hasattr(config, "workerinput") or _option(config, "help") or _option(config, "version"):
        return
    if _xdist(config):
        given = [_flag(name) for name in SAVING if _option(config, name) not in (None, False, [])]
        if given:
            raise pytest.UsageError(f"{', '.join(given)} cannot be used with pytest-xdist (-n): pytest-benchmark "
                                    "switches itself off under xdist, so nothing would be saved or compared; run "
                                    "the benchmarks without -n")  # fmt: skip
        if not _option(config, "collectonly"):
            _check_folders(config, options, reports=True, cache=True, storage=False)
        return
    _check_compared_runs(config)


def check_selection(session: pytest.Session, options: PerfOptions) -> None:
    """After collection: check the folders the selected tests will write, before any of them runs."""
    config = session.config
    if hasattr(config, "workerinput") or _option(config, "collectonly"):
        return
    used = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    _check_folders(config, options, reports=bool(used & {"perf_report", "perf_reports_dir"}) or
                   options.compare is not None,
                   cache="perf_cache_dir" in used, storage=_saving(config) and "benchmark" in used)  # fmt: skip
