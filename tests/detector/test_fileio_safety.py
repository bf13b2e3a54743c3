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
