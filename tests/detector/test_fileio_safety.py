"""detector.fileio against a hostile or failing file system: outputs get open()'s mode (the umask applies), a lock
is never followed through a symbolic link, and a write error names the final file, never the temporary one."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from detector.errors import DetectorError
from detector.fileio import atomic_path, atomic_write_text, file_lock


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_write_gets_the_mode_open_would_give(tmp_path: Path, umask: int) -> None:
    previous = os.umask(umask)
    try:
        written = atomic_write_text(tmp_path / "a.txt", "x")
        with open(tmp_path / "b.txt", "w"):
            pass
    finally:
        os.umask(previous)
    assert written.stat().st_mode & 0o777 == (tmp_path / "b.txt").stat().st_mode & 0o777 == 0o666 & ~umask


def test_lock_symlink_is_refused_and_nothing_is_created_outside(tmp_path: Path) -> None:
    target = tmp_path / "outside" / "victim"
    target.parent.mkdir()
    (tmp_path / "entry.lock").symlink_to(target)
    with pytest.raises(DetectorError, match="symbolic link"), file_lock(tmp_path / "entry"):
        pass
    assert not target.exists()


def test_write_error_names_the_final_file_and_removes_the_temporary(tmp_path: Path) -> None:
    final = tmp_path / "result.json"
    with pytest.raises(OSError) as info, atomic_path(final) as tmp:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))
    assert info.value.filename == str(final) and info.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []


def test_control_characters_in_a_message_are_escaped() -> None:
    assert str(DetectorError("cannot open 'a\nb\x1b.mp4'")) == "cannot open 'a\\nb\\x1b.mp4'"


def _count_under_lock(folder: str, times: int) -> None:
    counter = Path(folder) / "counter"
    for _ in range(times):
        with file_lock(counter):
            value = int(counter.read_text()) if counter.exists() else 0
            counter.write_text(str(value + 1))


def test_locks_exclude_each_other_across_processes_and_leave_no_lock_file(tmp_path: Path) -> None:
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_count_under_lock, args=(str(tmp_path), 100)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    assert (tmp_path / "counter").read_text() == "400"  # no increment lost: one holder at a time
    assert sorted(p.name for p in tmp_path.iterdir()) == ["counter"]
