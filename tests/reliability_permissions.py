"""Rows of the bad-input matrix (tests/bad_inputs.py) for files and folders the user may not read or write (chmod
000, 555, a folder on the path without search permission), as a user meets them: every row is ``unprivileged``
(as root it runs under ``unshare --user``, where file modes bind). Each gives one line naming the file and the
OS's reason, never a traceback, a wrong reason, or a zero exit."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from bad_inputs import CFG, WEIGHTS, Made, Row, Shared, detect
from reliability_saved import _GOOD, _pytest, _saved_run

DENIED = "Permission denied"


def _locked(folder: Path, *files: Path) -> Path:
    """``folder/locked`` holding copies of ``files``, made mode 0o600: listable by name, never searched."""
    locked = folder / "locked"
    locked.mkdir()
    for file in files:
        shutil.copy(file, locked / file.name)
    locked.chmod(0o600)
    return locked


def _mode(path: Path, mode: int) -> Path:
    path.chmod(mode)
    return path


def _copy(source: Path, folder: Path, mode: int) -> Path:
    """A copy of ``source`` in ``folder`` with ``mode``."""
    return _mode(Path(shutil.copy(source, folder / source.name)), mode)


def _unreadable_input(option: str, source: Callable[[Shared], Path], *extra: str) -> Callable[[Path, Shared], Made]:
    """``detector detect <option> <a 000 copy of source>``: one line, the file, Permission denied."""
    def make(folder: Path, shared: Shared) -> Made:
        path = _copy(source(shared), folder, 0)
        return detect(folder, shared, *extra, option, str(path)), [f"'{path}': {DENIED}"]
    return make


def _json_behind_locked(folder: Path, shared: Shared) -> Made:
    path = _locked(folder) / "sub" / "r.json"
    return detect(folder, shared, "--json", str(path)), [f"'{path}' (--json): {DENIED}"]


def _out_read_only(folder: Path, shared: Shared) -> Made:
    (out := folder / "out").mkdir(mode=0o555)
    return detect(folder, shared), [f"'{out}'", DENIED]


def _cache_unreadable(folder: Path, shared: Shared) -> Made:
    """A perf cache holding an entry, which the run cannot list: refused at start-up, like an empty one it cannot
    write."""
    (cache := folder / "cache").mkdir()
    (cache / "videos").mkdir()
    return _pytest(folder, f"--perf-cache-dir={_mode(cache, 0)}"), ["--perf-cache-dir", f"'{cache}': {DENIED}"]


def _check_cache_unreadable(folder: Path, shared: Shared) -> Made:
    (onnx := folder / "cache" / "onnx").mkdir(parents=True)
    (onnx / "m.onnx").write_bytes(b"x")
    _mode(onnx, 0)
    return ["-m", "detector", "check-cache", "--cache-dir", str(folder / "cache")], [f"'{onnx}'", DENIED]


def _perf_video_behind_locked(folder: Path, shared: Shared) -> Made:
    video = _locked(folder, shared.video) / shared.video.name
    return _pytest(folder, f"--perf-video={video}"), [f"--perf-video: cannot open '{video}': {DENIED}"]


def _reports_behind_locked(folder: Path, shared: Shared) -> Made:
    reports = _locked(folder) / "reports"
    return _pytest(folder, f"--perf-reports-dir={reports}"), ["--perf-reports-dir", f"'{reports}': {DENIED}"]


def _compare_unreadable(option: str, which: str) -> Callable[[Path, Shared], Made]:
    """``option`` against a storage whose ``which`` ("storage" or "machine folder") cannot be listed: its runs
    would be missed without a word (pytest-benchmark's compare then passes, comparing nothing)."""
    def make(folder: Path, shared: Shared) -> Made:
        machine = _saved_run(folder, _GOOD, "0001_good.json").parent
        locked = _mode(machine if which == "machine folder" else machine.parent, 0)
        return _pytest(folder, option), [option, f"'{locked}': {DENIED}"]
    return make


def _autosave_into(mode: int) -> Callable[[Path, Shared], Made]:
    """A run pytest-benchmark would save in a machine folder of ``mode`` (it cannot write): refused before measuring
    (0o000: named as the storage, not as a compare, which was not asked for)."""
    def make(folder: Path, shared: Shared) -> Made:
        machine = _mode(_saved_run(folder, _GOOD, "0001_good.json").parent, mode)
        return _pytest(folder, "--benchmark-autosave", "--perf-store=none"), [
            f"--benchmark-storage: cannot save the run in '{machine}': {DENIED}"]
    return make


def _json_report_read_only(folder: Path, shared: Shared) -> Made:
    (read_only := folder / "read-only").mkdir(mode=0o555)
    out = read_only / "b.json"
    return _pytest(folder, f"--benchmark-json={out}"), ["--benchmark-json", f"'{out}': {DENIED}"]


def _runs_dir_behind_locked(folder: Path, shared: Shared) -> Made:
    runs = _locked(folder) / "runs"
    return _pytest(folder, "--perf-noise=2", f"--perf-runs-dir={runs}"), ["--perf-runs-dir", f"'{runs}': {DENIED}"]


def _store_behind_locked(command: Callable[[Path, Path], list[str]]) -> Callable[[Path, Shared], Made]:
    def make(folder: Path, shared: Shared) -> Made:
        store = _locked(folder) / "h.sqlite"
        return command(folder, store), [f"store 'sqlite:///{store}': {DENIED}"]
    return make


def _ab_out_behind_locked(folder: Path, shared: Shared) -> Made:
    out = _locked(folder) / "ab"
    return ["-m", "perf.abtest", "--base", "HEAD", "--out", str(out)], [f"--out: cannot write to '{out}': {DENIED}"]


def _row(row_id: str, make: Callable[[Path, Shared], Made], in_repo: bool = False) -> Row:
    return Row(row_id, make, in_repo=in_repo, unprivileged=True)


ROWS: tuple[Row, ...] = (
    _row("perm-video-unreadable", _unreadable_input("--video", lambda s: s.video)),
    _row("perm-cfg-unreadable", _unreadable_input("--cfg", lambda s: CFG, "--weights", str(WEIGHTS))),
    _row("perm-weights-unreadable", _unreadable_input("--weights", lambda s: WEIGHTS)),
    _row("perm-output-folder-read-only", _out_read_only),
    _row("perm-json-behind-unsearchable-folder", _json_behind_locked),
    _row("perm-pytest-reports-behind-unsearchable-folder", _reports_behind_locked, in_repo=True),
    _row("perm-pytest-cache-dir-unreadable", _cache_unreadable, in_repo=True),
    _row("perm-ab-out-behind-unsearchable-folder", _ab_out_behind_locked, in_repo=True),
    _row("perm-pytest-video-behind-unsearchable-folder", _perf_video_behind_locked, in_repo=True),
    _row("perm-pytest-store-behind-unsearchable-folder",
         _store_behind_locked(lambda f, store: _pytest(f, "--benchmark-autosave", f"--perf-store={store}")),
         in_repo=True),
    _row("perm-history-store-behind-unsearchable-folder",
         _store_behind_locked(lambda f, store: ["-m", "perf.store.cli", "--store", str(store), "runs"])),
    _row("perm-pytest-perf-compare-machine-folder-unreadable",
         _compare_unreadable("--perf-compare", "machine folder"), in_repo=True),
    _row("perm-pytest-benchmark-compare-storage-unreadable", _compare_unreadable("--benchmark-compare", "storage"),
         in_repo=True),
    _row("perm-pytest-autosave-machine-folder-read-only", _autosave_into(0o555), in_repo=True),
    _row("perm-pytest-autosave-machine-folder-unreadable", _autosave_into(0), in_repo=True),
    _row("perm-onnx-unreadable", _unreadable_input("--onnx", lambda s: CFG, "--backend", "onnxruntime")),
    _row("perm-check-cache-folder-unreadable", _check_cache_unreadable),
    _row("perm-pytest-benchmark-json-read-only-folder", _json_report_read_only, in_repo=True),
    _row("perm-pytest-runs-dir-behind-unsearchable-folder", _runs_dir_behind_locked, in_repo=True),
)
