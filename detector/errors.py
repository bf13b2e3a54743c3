"""User-facing errors of the detector package.

Every error a user can cause (a bad file, a bad option, a missing backend) derives from
:class:`DetectorError`. Its message is one line that names the offending file or value and the problem;
the CLI prints it and exits with status 2, without a traceback.
"""

from __future__ import annotations

import io
import logging
import re
import signal
import sys
import threading
from collections.abc import Callable

# Characters that break a line or a terminal (C0, DEL, C1 and the Unicode line/paragraph separators, every one
# str.splitlines splits on), and the lone surrogates of a name that is not UTF-8 (os.fsdecode(b'\xff') is '\udcff',
# which no UTF-8 file can hold): a file name may hold any of them.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def one_line(text: str) -> str:
    """``text`` with every control character escaped as Python writes it (``\\n``, ``\\x1b``): one printable line."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class Terminated(KeyboardInterrupt):
    """SIGTERM (what ``timeout``, a CI cancel and ``docker stop`` send), raised where the program is, like Ctrl-C:
    every ``with`` block and ``finally`` on the way out runs, so temporary files are removed."""


def _on_sigterm(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
    raise Terminated


def catch_sigterm() -> Callable[[], None]:
    """From now on SIGTERM raises `Terminated` (on the main thread; elsewhere nothing changes); returns what puts
    the previous handler back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    return lambda: signal.signal(signal.SIGTERM, previous)


def _not_an_interrupt(record: logging.LogRecord) -> bool:
    """False for a record that carries Ctrl-C or SIGTERM: SQLAlchemy's pool logs an interrupt that lands in its
    connection check-in ("Exception during reset or similar", with a traceback) before raising it again, and the
    command says it once, in its own line (`interrupted`)."""
    kind = record.exc_info[0] if record.exc_info else None
    return kind is None or not issubclass(kind, KeyboardInterrupt)


def log_to_stderr(level: int, formatter: logging.Formatter) -> None:
    """A command's logging: records of ``level`` and above to stderr through ``formatter``, an interrupt never."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter)
    handler.addFilter(_not_an_interrupt)
    logging.basicConfig(level=level, handlers=[handler])


def escape_stdout() -> None:
    """Standard output escapes what it cannot encode (a name that is not UTF-8, ``'\\udcff'``) as standard error
    does: where its encoding is strict (a UTF-8 locale other than C, ``PYTHONIOENCODING=utf-8``) a command's
    ``wrote <path>`` line raised UnicodeEncodeError after its work was done."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")


def interrupted(program: str, error: KeyboardInterrupt, then: str = "") -> int:
    """Say in one line on stderr that ``program`` was interrupted (Ctrl-C) or terminated (SIGTERM: `Terminated`),
    then ``then``; its exit status, 128 + the signal (130, 143)."""
    terminated = isinstance(error, Terminated)
    print(f"{program}: {'terminated (SIGTERM)' if terminated else 'interrupted (Ctrl-C)'}{then}", file=sys.stderr)
    return 143 if terminated else 130


class DetectorError(Exception):
    """Base class of every user-facing error; ``str(err)`` is one actionable line (control characters in the
    names it quotes are escaped, so a file name holding a newline cannot split it)."""

    def __str__(self) -> str:
        return one_line(super().__str__())


class CfgError(DetectorError):
    """A Darknet ``.cfg`` file is missing or malformed (message names file and line)."""


class WeightsError(DetectorError):
    """A Darknet ``.weights`` file is missing, truncated, too long or has a bad header (names file, offset)."""


class VideoError(DetectorError):
    """A video cannot be opened, read or written (message names the file)."""


class BackendError(DetectorError):
    """An unknown backend or precision name, or a backend that failed to run."""


class BackendUnavailable(BackendError):
    """A known backend that cannot run here (package not installed, no CUDA device); suites skip on it."""


class ModelFileError(DetectorError):
    """An ONNX model or a serialized engine is missing, corrupt or does not match (message names the file)."""
