"""Atomic writes, cross-process locks and content-keyed on-disk caches.

Nothing saved is ever lost: every file is written under a temporary name in its final folder and renamed
over the final name only once complete (``os.replace`` is atomic on POSIX), so a run killed mid-write leaves
the previous file intact. Cache entries are built by one process while others wait on a lock file, which
makes them safe for several pytest-xdist workers asking for the same entry at once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import logging
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def _umask() -> int:
    """The process umask (read from /proc where it can be, so that it is never changed, even for an instant)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_kind(st: os.stat_result) -> str | None:
    """What a non-regular file is ("a directory", "a FIFO (named pipe)", "a character device", ...); None for a
    regular file. Readers refuse the others before opening them: opening a FIFO blocks until someone writes to it,
    and a device such as /dev/zero never ends."""
    for test, kind in ((stat.S_ISREG, None), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(st.st_mode):
            return kind
    return "not a regular file"


def read_text(path: str | os.PathLike[str]) -> str:
    """The UTF-8 text of regular file ``path``; anything else (:func:`file_kind`) is an OSError saying what it is
    (``it is a FIFO (named pipe), not a regular file``): opened without blocking and refused before it is read,
    since a FIFO would block the read until someone wrote to it and /dev/zero would never end. A UTF-8 byte-order
    mark (what some Windows tools write first) is not part of the text."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:  # before open(): on a folder it would raise naming the descriptor ("Is a directory: 9")
        if (kind := file_kind(os.fstat(fd))) is not None:
            raise OSError(f"it is {kind}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    with open(fd, encoding="utf-8-sig") as fh:
        return fh.read()


def os_reason(error: OSError) -> str:
    """What a failed open or read says after ``'<path>': ``: "no such file", else the OS's words (``strerror``)."""
    return "no such file" if isinstance(error, FileNotFoundError) else str(error.strerror or error)


def unwritable(path: str | os.PathLike[str], *, folder: bool = False) -> str | None:
    """Why no file can be created at ``path`` (``folder``: in the folder ``path``; a missing folder counts as its
    nearest existing parent), checked before a long run whose output it is: ``path`` is a folder (a file was
    wanted), that parent is a file, or it takes no new file (the OS's reason); None when a file can be created."""
    path = Path(path)
    try:
        if not folder and path.is_dir():
            return "it is a folder"
        probe = next((p for p in (*([path] if folder else []), *path.parents) if p.exists()), Path("."))
        if not probe.is_dir():
            return f"'{probe}' is not a folder"
        fd, name = tempfile.mkstemp(prefix=".probe-", dir=probe)
    except OSError as e:  # a folder on the way that cannot be searched raises from is_dir / exists too
        return os_reason(e)
    os.close(fd)
    os.unlink(name)
    return None


def symlink_loop(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` cannot be followed because symbolic links on it loop (ELOOP): ``Path.resolve`` raises
    RuntimeError on such a path (before Python 3.13) and ``Path.is_file`` / ``is_dir`` answer False, as for a
    missing file, so a caller names the loop with this."""
    try:
        os.stat(path)
    except OSError as e:
        return e.errno == errno.ELOOP
    return False


def resolved(path: str | os.PathLike[str]) -> Path:
    """``path`` absolute with its symbolic links resolved, or only absolute when they loop (:func:`symlink_loop`:
    the caller's check of the path then names the loop, where ``Path.resolve`` would raise RuntimeError)."""
    return Path(os.path.abspath(path)) if symlink_loop(path) else Path(path).resolve()


def _named(error: OSError, tmp: Path, final: Path) -> OSError:
    """``error`` re-aimed at ``final`` when it concerns the temporary file (or names no file): a user never sees
    the temporary name, which is gone by the time the message is read."""
    if error.filename not in (None, str(tmp), tmp) or error.errno is None:
        return error
    return OSError(error.errno, error.strerror or os.strerror(error.errno), str(final))


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it to ``final`` if the block succeeds.

    The temporary name keeps ``final``'s suffix (so tools that pick a format by extension, such as
    ``cv2.VideoWriter``, behave the same); the file gets the mode ``open()`` would give ``final`` (0o666 less the
    umask). Before the rename the file is flushed to disk (``fsync``), so a late write error (a full disk) is seen
    here and not after the rename. On any exception the temporary file is removed, with the folders made for it
    when empty, and ``final`` is left as it was; an :class:`OSError` about the temporary file is raised naming
    ``final``.
    """
    final = Path(final)
    made = make_parents(final)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.stem}.", suffix=f".tmp{final.suffix}", dir=final.parent)
    tmp = Path(tmp_name)
    try:
        try:
            os.fchmod(fd, 0o666 & ~_umask())
        finally:
            os.close(fd)
        yield tmp
        if not tmp.exists():
            raise FileNotFoundError(errno.ENOENT, "the writer produced no file", str(final))
        fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
    except OSError as e:
        named = _named(e, tmp, final)
        if named is e:
            raise
        raise named from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if not final.exists():  # a failed write leaves no folder it made
            remove_empty(made)


def make_parents(path: Path) -> list[Path]:
    """Create the missing folders above ``path``; the ones made, deepest first (for `remove_empty` on failure)."""
    made = [folder for folder in (path.parent, *path.parent.parents) if not folder.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    return made


def remove_empty(folders: Iterable[Path]) -> None:
    """Remove each of ``folders``, in order, that is empty; the others stay."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


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
    """Write UTF-8 ``text`` to ``path`` atomically; return the path. A file name that is not UTF-8 in ``text``
    (``'clip\\udcff.mp4'``: os.fsdecode's lone surrogate) is written escaped, as stderr shows it."""
    return atomic_write_bytes(path, text.encode("utf-8", "backslashreplace"))


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``<path>.lock`` (blocks until free; released on exit or death).

    The lock file is removed by its holder before the lock is released, so caches hold no empty ``.lock`` files
    once no one is working in them. A waiter that gets the lock on a file its holder removed meanwhile (its
    inode is no longer the one at ``<path>.lock``) opens the path again: two processes never hold locks on two
    files of one name. The lock file is never followed through a symbolic link (``O_NOFOLLOW``): a link planted in
    a cache would otherwise make this create or truncate a file anywhere the user can write. Such a lock, or one
    that is not a regular file, raises :class:`~detector.errors.DetectorError` naming it. A lock left by a
    process that died is taken over (``flock`` locks die with their process) and removed when done.
    """
    lock_path = Path(f"{os.fspath(path)}.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = _open_lock(lock_path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            try:
                current = os.stat(lock_path, follow_symlinks=False)
            except FileNotFoundError:
                current = None
        except BaseException:
            os.close(fd)
            raise
        if current is not None and (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino):
            break
        os.close(fd)  # the holder before us removed the file we waited on: lock the one at the path now
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            lock_path.unlink()
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _open_lock(lock_path: Path) -> int:
    """Open (creating) the lock file, refusing a symbolic link or anything but a regular file."""
    from detector.errors import DetectorError

    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o666)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise DetectorError(f"refusing the lock file '{lock_path}': it is a symbolic link (to "
                            f"'{os.readlink(lock_path)}'); locks are never followed; delete the link") from e
    kind = file_kind(os.fstat(fd))
    if kind is not None:
        os.close(fd)
        raise DetectorError(f"refusing the lock file '{lock_path}': it is {kind}, not a regular file; delete it")
    return fd


def parse_json(text: str) -> Any:
    """``json.loads(text)``; what no parser takes is a ValueError of one line: a `json.JSONDecodeError` as it is,
    Python's own refusals (nesting too deep, a RecursionError; an integer of more than 4300 digits) as ``not valid
    JSON: <why>``. Every reader of a saved or given JSON file parses it here."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise ValueError("not valid JSON: nested too deeply") from None
    except ValueError as e:  # "Exceeds the limit (4300 digits) for integer string conversion: ...; use sys.set_..."
        raise ValueError(f"not valid JSON: {str(e).split(';')[0]}") from None


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
    """sha256 hex digest of a file's bytes, read in 1 MiB chunks; computed once per version of the file in a process
    (a version: its size, modification time and inode, which an atomic replacement changes)."""
    st = os.stat(path)
    return _digest(os.path.abspath(path), st.st_size, st.st_mtime_ns, st.st_ino)


@functools.lru_cache(maxsize=64)
def _digest(path: str, size: int, mtime_ns: int, inode: int) -> str:
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
            _build_named(build, tmp, final)
    return final


def _build_named(build: Callable[[Path], None], tmp: Path, final: Path) -> None:
    """``build(tmp)``, its user-facing errors naming ``final``: the temporary name is gone when the user reads it."""
    from detector.errors import DetectorError

    try:
        build(tmp)
    except DetectorError as e:
        message = e.args[0] if len(e.args) == 1 and isinstance(e.args[0], str) else None
        if message is None or str(tmp) not in message:
            raise
        raise type(e)(message.replace(str(tmp), str(final))) from e
