"""Atomic writes, cross-process locks and content-keyed on-disk caches.

Nothing saved is ever lost: every file is written under a temporary name in its final folder and renamed
over the final name only once complete (``os.replace`` is atomic on POSIX), so a run killed mid-write leaves
the previous file intact. Cache entries are built by one process while others wait on a lock file, which
makes them safe for several pytest-xdist workers asking for the same entry at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it to ``final`` if the block succeeds.

    The temporary name keeps ``final``'s suffix (so tools that pick a format by extension, such as
    ``cv2.VideoWriter``, behave the same). On any exception the temporary file is removed and ``final``
    is left as it was.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.stem}.", suffix=f".tmp{final.suffix}", dir=final.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        if not tmp.exists():
            raise FileNotFoundError(f"{tmp}: the writer produced no file")
        os.replace(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (fsync before the rename); return the path."""
    path = Path(path)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically; return the path."""
    return atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``<path>.lock`` (blocks until free; released on exit or death)."""
    lock_path = Path(f"{os.fspath(path)}.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def content_key(*parts: Any) -> str:
    """A short sha256 hex key over ``parts`` (bytes hashed as is, anything else as sorted JSON)."""
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, (bytes, bytearray, memoryview)):
            digest.update(bytes(part))
        else:
            digest.update(json.dumps(part, sort_keys=True, default=str).encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()[:20]


def file_digest(path: str | os.PathLike[str]) -> str:
    """sha256 hex digest of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def cached_file(
    cache_dir: str | os.PathLike[str],
    name: str,
    build: Callable[[Path], None],
    *,
    valid: Callable[[Path], bool] | None = None,
) -> Path:
    """Return ``cache_dir/name``, building it once across processes.

    ``build(tmp)`` writes the entry to the temporary path ``tmp``; it is renamed into place only when
    ``build`` returns. Other processes asking for the same ``name`` meanwhile wait on the lock and then
    reuse the finished file. ``valid(path)``, if given, rejects an existing entry (it is rebuilt, with a
    warning), for example a file another version cannot read.
    """
    final = Path(cache_dir) / name
    if final.exists() and (valid is None or valid(final)):
        return final
    with file_lock(final):
        if final.exists():
            if valid is None or valid(final):
                return final
            log.warning("cache entry %s is unusable; rebuilding it", final)
        with atomic_path(final) as tmp:
            build(tmp)
    return final
