"""A full disk, or a file its user may not open, under the suite's folders stops the run in one line (``pytest.exit``,
exit status 2), not one traceback per test that writes there."""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from pathlib import Path

import pytest

from detector.errors import DetectorError

NO_SPACE = os.strerror(errno.ENOSPC)  # "No space left on device"


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and the errors it was raised from or during, each once."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def full_disk_line(error: BaseException, folders: Mapping[str, Path]) -> str | None:
    """One line for an ``error`` caused by a full disk (``OSError`` ENOSPC anywhere in its chain, or a
    `detector.errors.DetectorError` saying `NO_SPACE`) naming what could not be written and the folder of
    ``folders`` (option -> folder, ``{"--perf-cache-dir": cache}``) it is in; None for any other error."""
    chain = _chain(error)
    full = [e for e in chain if (isinstance(e, OSError) and e.errno == errno.ENOSPC)
            or (isinstance(e, DetectorError) and NO_SPACE in str(e))]  # fmt: skip
    if not full:
        return None
    told = next((e for e in chain if isinstance(e, DetectorError)), None)  # the one line the package wrote
    filename = getattr(full[0], "filename", None)
    text = str(told) if told is not None else f"cannot write '{filename}': {NO_SPACE}" if filename else NO_SPACE
    places = " ".join([text, *(str(getattr(e, "filename", "") or "") for e in full)])
    for option, folder in folders.items():
        if str(folder) in places:
            return (f"{option}: the disk of '{folder}' is full: {text}; free space there or choose another "
                    f"folder with {option}")
    return f"the disk is full: {text}; free space there and run again"


def denied_line(error: BaseException, folders: Mapping[str, Path]) -> str | None:
    """One line for an ``error`` caused by a file in one of ``folders`` its user may not open (a ``PermissionError``
    in its chain: a read-only cache folder, another user's lock), naming the file and the option; else None."""
    denied = next((e for e in _chain(error) if isinstance(e, PermissionError) and e.filename), None)
    for option, folder in folders.items() if denied is not None else ():
        if str(folder) in str(denied.filename):
            return (f"{option}: cannot open '{denied.filename}': {denied.strerror}; give this user access there or "
                    f"choose another folder with {option}")
    return None


def stop_on_folder_error(folders: Mapping[str, Path], error: BaseException) -> None:
    """``pytest.exit`` with `full_disk_line` or `denied_line` when ``error`` (a test's failure) comes from one."""
    if (line := full_disk_line(error, folders) or denied_line(error, folders)) is not None:
        pytest.exit(line, returncode=pytest.ExitCode.INTERRUPTED)
