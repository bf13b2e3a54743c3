"""Rows of the bad-input matrix (tests/bad_inputs.py) for saved data and the folders a perf run writes: each one
is refused at start-up by `perf.preflight` with one usage line (exit 4) naming the file or folder; and saved files
that are not regular files, for every reader of them (a FIFO would block it)."""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bad_inputs import Made, Row, Shared
from reliability_detector import _full_disk

FAST = ("-q", "-p", "no:cacheprovider", "--perf-device=cpu", "-k", "harness")  # one tiny test selected


def _pytest(folder: Path, *options: str) -> list[str]:
    return ["-m", "pytest", "perf", *FAST, f"--benchmark-storage={folder / 'storage'}", *options]


def _read_only_folder(prefix: str) -> Path:
    """An empty folder no one can write, root included (a read-only bind mount; chmod 555 when not root),
    outside the row's folder and undone when this process exits."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() != 0:
        folder.chmod(0o555)
        atexit.register(lambda: (folder.chmod(0o755), folder.rmdir()))
        return folder
    subprocess.run(["mount", "--bind", "-o", "ro", str(folder), str(folder)], check=True)
    subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)
    atexit.register(lambda: (subprocess.run(["umount", str(folder)], check=False), folder.rmdir()))
    return folder


def _saved_run(folder: Path, doc: Any, name: str = "0001_bad.json") -> Path:
    """``doc`` (JSON text as it is) saved as run ``name`` of this machine in ``folder/storage`` (where
    pytest-benchmark looks)."""
    from pytest_benchmark.utils import get_machine_id

    path = folder / "storage" / get_machine_id() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def _compare(option: str, doc: Any, *problem: str) -> Callable[[Path, Shared], Made]:
    def make(folder: Path, shared: Shared) -> Made:
        path = _saved_run(folder, doc)
        return _pytest(folder, option), [option, str(path), *problem]
    return make


def _newest_is_run_10000(folder: Path, shared: Shared) -> Made:
    """Run 9999 good, the newest, 10000 (pytest-benchmark's next name), not: the compare would load 10000."""
    _saved_run(folder, _ROUNDS | {"benchmarks": [{**_ROUNDS["benchmarks"][0], "stats": {"median": 0.001}}]},
               "9999_good.json")  # fmt: skip
    path = _saved_run(folder, _ROUNDS, "10000_bad.json")
    return _pytest(folder, "--perf-compare"), ["--perf-compare", str(path), "stats.data[1]"]


def _xdist_autosave(folder: Path, shared: Shared) -> Made:
    return _pytest(folder, "-n", "2", "--benchmark-autosave"), ["--benchmark-autosave", "pytest-xdist (-n)"]


def _not_a_file(where: str, command: Callable[[Path, Path], list[str]]) -> Callable[[Path, Shared], Made]:
    """``command(folder, path)`` with a good saved run in the storage and, at ``path``, a FIFO (``where``: "run",
    the newest saved run; "beside", a file beside the storage) or /dev/zero ("/dev/zero"): refused, never read."""
    def make(folder: Path, shared: Shared) -> Made:
        _saved_run(folder, _GOOD, "0001_good.json")
        path = {"run": folder / "storage" / "0002_pipe.json", "beside": folder / "pipe.json"}.get(where, Path(where))
        if where == "run":
            path = _saved_run(folder, "", path.name)
            path.unlink()
        if where != "/dev/zero":
            os.mkfifo(path)
        return command(folder, path), [f"'{path}'", "FIFO" if where != "/dev/zero" else "character device",
                                       "not a regular file"]
    return make


def _noise_profile(folder: Path, fifo: Path) -> list[str]:
    """``--perf-compare`` against the good run (of any machine and model), seeded by the profile ``fifo``."""
    return _pytest(folder, "--perf-compare", "--perf-allow-machine-mismatch", "--perf-allow-model-mismatch",
                   f"--perf-noise-profile={fifo}")


def _report(folder: Path, verdicts: Path | None) -> list[str]:
    return ["-m", "perf.report_cli", "--storage", str(folder / "storage"), "--out", str(folder / "out"),
            *(["--verdicts", str(verdicts)] if verdicts else [])]


def _report_of(doc: Any, problem: str = "stats.median is 1.7e+308, too large for a number"
               ) -> Callable[[Path, Shared], Made]:  # fmt: skip
    """perf-report of a storage holding only ``doc``: nothing to report, one line naming the run and the problem."""
    def make(folder: Path, shared: Shared) -> Made:
        path = _saved_run(folder, doc)
        return _report(folder, None), [f"'{path}'", problem]
    return make


def _missing_store(command: list[str]) -> Callable[[Path, Shared], Made]:
    """A reading command given a store that does not exist: refused, and no store (or folder of it) made."""
    def make(folder: Path, shared: Shared) -> Made:
        store = folder / "out" / "typo" / "history.sqlite"
        return ["-m", *command[:1], "--store", str(store), *command[1:], "--out", str(folder / "out")], [
            f"store 'sqlite:///{store}': no such file"]
    return make


def _store_loop(folder: Path, shared: Shared) -> Made:
    """perf-history import into a store path that is a symbolic link to itself."""
    _saved_run(folder, _GOOD)
    (store := folder / "loop.sqlite").symlink_to(store.name)
    return ["-m", "perf.store.cli", "--store", str(store), "import", str(folder / "storage")], [
        f"store 'sqlite:///{store}'", "unable to open"]


def _report_on_full_disk(folder: Path, shared: Shared) -> Made:
    _saved_run(folder, _GOOD)
    return _report(folder, None)[:-2] + ["--out", str(folder / "disk" / "report" / "html")], [
        f"cannot write to '{folder / 'disk' / 'report' / 'html'}'", "No space left on device"]


def _import_on_full_disk(folder: Path, shared: Shared) -> Made:
    _saved_run(folder, _GOOD)
    store = folder / "disk" / "history" / "h.sqlite"
    return ["-m", "perf.store.cli", "--store", str(store), "import", str(folder / "storage")], [
        f"store 'sqlite:///{store}'", "disk is full"]


def _only_the_filler(folder: Path) -> list[str]:
    left = sorted(p.name for p in (folder / "disk").iterdir() if p.name != "filler")
    return [f"left on the full disk: {left}"] if left else []


def _html_into_a_file(folder: Path, shared: Shared) -> Made:
    (blocker := folder / "notes.txt").write_text("notes")
    return _pytest(folder, f"--perf-html={blocker / 'html'}"), ["--perf-html", f"'{blocker}' is not a folder"]


def _read_only_reports(folder: Path, shared: Shared) -> Made:
    reports = _read_only_folder("ro-reports-")
    return _pytest(folder, f"--perf-reports-dir={reports}"), ["--perf-reports-dir", str(reports)]


def _read_only_empty_cache(folder: Path, shared: Shared) -> Made:
    cache = _read_only_folder("ro-cache-")
    return _pytest(folder, f"--perf-cache-dir={cache}"), ["--perf-cache-dir", str(cache)]


_ROUNDS = {"benchmarks": [{"name": "test_x", "fullname": "perf/t.py::test_x", "group": "inference",
                           "stats": {"median": 0.001, "data": [0.001, "fast", 0.002]}}],
           "machine_info": {"node": "x"}, "datetime": "2026-01-01T00:00:00"}  # fmt: skip
_GOOD = _ROUNDS | {"benchmarks": [{**_ROUNDS["benchmarks"][0], "stats": {  # all pytest-benchmark's loader reads
    **dict.fromkeys(("min", "max", "mean", "median", "q1", "q3", "ld15iqr", "hd15iqr", "total"), 0.001),
    **dict.fromkeys(("stddev", "iqr", "iqr_outliers", "stddev_outliers"), 0), "rounds": 1, "iterations": 1,
    "ops": 1000.0, "outliers": "0;0"}}]}

ROWS: tuple[Row, ...] = (
    Row("pytest-xdist-autosave", _xdist_autosave, in_repo=True),
    Row("pytest-perf-compare-non-numeric-rounds", _compare("--perf-compare", _ROUNDS, "stats.data[1]", "'fast'"),
        in_repo=True),
    Row("pytest-benchmark-compare-wrong-shape", _compare("--benchmark-compare", {"benchmarks": {"test_x": 1}},
                                                         "'benchmarks' is an object"), in_repo=True),
    Row("pytest-benchmark-compare-nested-too-deeply", _compare("--benchmark-compare", "[" * 100_000,
                                                               "not valid JSON: nested too deeply"), in_repo=True),
    Row("pytest-perf-compare-fingerprint-not-an-object",
        _compare("--perf-compare", _ROUNDS | {"machine_info": {"node": "x", "perf": "cuda"}},
                 "machine_info.perf is a string, expected an object"), in_repo=True),
    Row("pytest-perf-compare-newest-run-10000", _newest_is_run_10000, in_repo=True),
    Row("pytest-reports-dir-read-only", _read_only_reports, in_repo=True),
    Row("pytest-perf-compare-newest-run-fifo", _not_a_file("run", lambda f, p: _pytest(f, "--perf-compare")),
        in_repo=True, timeout_s=60),
    Row("pytest-noise-profile-fifo", _not_a_file("beside", _noise_profile), in_repo=True, timeout_s=60),
    Row("history-comparable-fifo", _not_a_file("run", lambda f, p: ["-m", "perf.store.cli", "comparable", str(p)]),
        timeout_s=30),
    Row("report-verdicts-dev-zero", _not_a_file("/dev/zero", _report), timeout_s=30),
    Row("report-saved-run-1.7e308-seconds", _report_of(_ROUNDS | {"benchmarks": [{**_ROUNDS["benchmarks"][0], "stats": {
        "median": 1.7e308, "data": [1.7e308, 1.5e308, 1e308]}}]})),  # drawn in ms: no float holds it
    Row("report-saved-run-negative-median", _report_of(_ROUNDS | {"benchmarks": [{**_ROUNDS["benchmarks"][0], "stats": {
        "median": -0.001}}]}, "stats.median is -0.001, negative: expected a time or a count >= 0")),
    Row("report-store-missing", _missing_store(["perf.report_cli"])),
    Row("history-judge-store-missing", _missing_store(["perf.store.cli", "judge"])),
    Row("history-store-symlink-loop", _store_loop),
    Row("disk-full-report-output", _report_on_full_disk, setup=_full_disk, check=_only_the_filler, needs_root=True),
    Row("disk-full-history-import", _import_on_full_disk, setup=_full_disk, check=_only_the_filler, needs_root=True),
    Row("pytest-html-dir-through-a-file", _html_into_a_file, in_repo=True),
    Row("pytest-cache-dir-read-only-empty", _read_only_empty_cache, in_repo=True),
)
