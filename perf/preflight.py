"""Refuse at start-up, in one usage line (exit 4), a run that would lose its results or crash after measuring:
saving or comparing under xdist (``-n``), a bad compared run, an unwritable folder (docs/architecture.md, "The
session and its parts")."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from detector.fileio import parse_json, read_text, unwritable
from perf.runs import RUN_GLOB, HistoryError, run_files, run_number, saved_run_files
from perf.validate import run_problem

if TYPE_CHECKING:
    from perf.session import PerfOptions

SAVING = ("benchmark_autosave", "benchmark_save", "benchmark_json", "benchmark_compare", "perf_compare")


def _option(config: pytest.Config, name: str) -> Any:
    return config.getoption(name, None)


def _storage_path(config: pytest.Config) -> Path | None:
    """The file storage of pytest-benchmark (relative to the current directory, as it reads it), or None."""
    value = _option(config, "benchmark_storage")
    if not value or ("://" in value and not value.startswith("file://")):
        return None
    return Path(value.removeprefix("file://")).expanduser().absolute()


def _check_compared_runs(config: pytest.Config) -> None:
    """Each saved run ``--benchmark-compare`` / ``--perf-compare`` will load (True: the newest) is usable, and each
    folder of the storage can be listed (one that cannot hides its runs: the compare would pass on none)."""
    from pytest_benchmark.storage.file import FileStorage
    from pytest_benchmark.utils import get_machine_id

    asked = [(name, complete, wanted) for name, complete in (("perf_compare", False), ("benchmark_compare", True))
             if (wanted := _option(config, name)) not in (None, False, [])]  # []: pytest-benchmark's default
    if (path := _storage_path(config)) is None or not asked:
        return
    try:
        run_files(path)
    except HistoryError as e:
        if isinstance(e.__cause__, OSError):  # a folder it cannot list; a missing storage is said by the compares
            raise pytest.UsageError(f"--{asked[0][0].replace('_', '-')}: {e}") from None
        return
    for name, complete, wanted in asked:
        storage = FileStorage(path, logger=None, default_machine_id=get_machine_id())
        runs = saved_run_files(storage.query(RUN_GLOB))[-1:] if wanted is True else storage.query(str(wanted))
        named = saved_run_files(runs) if name == "perf_compare" and wanted is not True else []
        if len(same := [run for run in named if run_number(run) == run_number(named[-1])]) > 1:  # which one is meant?
            raise pytest.UsageError(f"--perf-compare={wanted}: {len(same)} saved runs in '{same[-1].parent}' have the "
                                    f"number {same[-1].name[:4]} ({', '.join(run.name for run in same)}); name one by "
                                    f"its file name: --perf-compare={same[-1].stem}")  # fmt: skip
        for run in runs:
            try:
                problem = run_problem(parse_json(read_text(run)), complete=complete)
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                problem = f"cannot read it as JSON: {e}"
            except ValueError as e:  # what Python's own parser refuses: "not valid JSON: nested too deeply", ...
                problem = str(e)
            if problem is not None:
                raise pytest.UsageError(f"--{name.replace('_', '-')}: '{run}' is not a usable saved run: {problem}; "
                                        "repair or remove it, or compare with another run (NUM|ID)")


def _check_folders(config: pytest.Config, options: PerfOptions, *, reports: bool, cache: bool, storage: bool) -> None:
    """Each folder the run will write can be written: reports, an empty or missing cache, storage, HTML, child runs."""
    from pytest_benchmark.utils import get_machine_id

    cache_dir, saved = options.cache_dir, _storage_path(config) if storage else None
    with contextlib.suppress(OSError):  # a cache holding files is not made here; one that cannot be listed is probed
        cache = cache and not any(cache_dir.iterdir())
    for option, what, folder in (("--perf-reports-dir", "write the reports to", reports and options.reports_dir),
                                 ("--perf-cache-dir", "create the perf cache in", cache and cache_dir),
                                 ("--benchmark-storage", "save the run in", saved and saved / get_machine_id()),
                                 ("--perf-html", "write the HTML report to",
                                  options.html and config.invocation_params.dir / options.html),
                                 ("--perf-runs-dir", "write the child processes' runs to",
                                  options.runs_dir and config.invocation_params.dir / options.runs_dir)):
        if folder and (why := unwritable(folder, folder=True)):
            raise pytest.UsageError(f"{option}: cannot {what} '{folder}': {why}; make it writable or choose "
                                    f"another folder with {option}")


def check_options(config: pytest.Config, options: PerfOptions) -> None:
    """At configure, before pytest-benchmark (trylast) loads a compared run or xdist starts workers: the compared runs
    and a saving run's storage; an xdist controller, which does not collect, checks the folders as if every test ran."""
    if hasattr(config, "workerinput") or _option(config, "help") or _option(config, "version"):
        return
    if _option(config, "dist") in (None, "no"):
        _check_compared_runs(config)
        saving = _option(config, "benchmark_save") or _option(config, "benchmark_autosave")
        _check_folders(config, options, reports=False, cache=False,  # before pytest-benchmark warns it saved nothing
                       storage=bool(saving) and not _option(config, "collectonly"))
        if (out := _option(config, "benchmark_json")) and (why := unwritable(out)):
            raise pytest.UsageError(f"--benchmark-json: cannot write the JSON report to '{out}': {why}; make it "
                                    "writable or choose another path with --benchmark-json")
        return
    if given := [f"--{name.replace('_', '-')}" for name in SAVING if _option(config, name) not in (None, False, [])]:
        raise pytest.UsageError(f"{', '.join(given)} cannot be used with pytest-xdist (-n): pytest-benchmark "
                                "switches itself off under xdist, so nothing would be saved or compared; run "
                                "the benchmarks without -n")  # fmt: skip
    if not _option(config, "collectonly"):
        _check_folders(config, options, reports=True, cache=True, storage=False)


def check_selection(session: pytest.Session, options: PerfOptions) -> None:
    """After collection: check the folders the selected tests will write, before any of them runs."""
    config = session.config
    if hasattr(config, "workerinput") or _option(config, "collectonly"):
        return
    used = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    _check_folders(config, options, reports=bool(used & {"perf_report", "perf_reports_dir"}) or
                   options.compare is not None, cache="perf_cache_dir" in used, storage=False)  # fmt: skip
