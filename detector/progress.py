"""Progress bars (tqdm) on the long steps: making a video, exporting ONNX, building an engine, warming up,
training, detecting the frames of a video.

A bar is drawn on stderr when stderr is a terminal, and never elsewhere (a log file, a pipe, pytest's capture),
unless the environment variable ``DETECTOR_PROGRESS`` says otherwise: ``0`` / ``off`` never, ``1`` / ``on``
always (a CI log, a test that reads the bars), unset or ``auto`` the terminal rule. ``detector --progress`` and
``--no-progress`` set it for one command. A disabled bar is still a working tqdm object (``update``, ``close``,
iteration, ``with``), so callers never test for it::

    for frame in progress(frames, total=n, desc="making clip.mp4", unit="frame"):
        ...
    with spinner("exporting ONNX"):        # no count: the elapsed time advances on its own
        export()
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tqdm import tqdm

log = logging.getLogger(__name__)

__all__ = ["ENV_VAR", "progress", "progress_enabled", "spinner"]

#: The environment variable that overrides the terminal rule: 0/off never, 1/on always, auto (or unset) the rule.
ENV_VAR = "DETECTOR_PROGRESS"
_ALWAYS = frozenset({"1", "on", "true", "yes", "always"})
_NEVER = frozenset({"0", "off", "false", "no", "never"})
_AUTO = frozenset({"", "auto"})
_warned: set[str] = set()


def _stderr_is_terminal() -> bool:
    stream = sys.stderr
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # a replaced stream without isatty, or a closed one
        return False


def progress_enabled() -> bool:
    """Whether bars are drawn now: ``DETECTOR_PROGRESS`` (0/off never, 1/on always), else whether stderr is a
    terminal. An unreadable value is logged once as a warning and the terminal rule applies."""
    setting = os.environ.get(ENV_VAR, "").strip().lower()
    if setting in _ALWAYS:
        return True
    if setting in _NEVER:
        return False
    if setting not in _AUTO and setting not in _warned:
        _warned.add(setting)
        log.warning("%s=%r is not understood (allowed: 0/off, 1/on, auto); progress bars follow the terminal",
                    ENV_VAR, setting)
    return _stderr_is_terminal()


def _layout() -> dict[str, Any]:
    """tqdm's size and redraw options for stderr: on a terminal the bar follows its size (80x24 where the terminal
    reports none, as a pseudo-terminal without a size does: tqdm would hide every bar) and redraws often; in a log
    every redraw is a new piece of text, so it redraws every 10 s."""
    if not _stderr_is_terminal():
        return {"mininterval": 10.0}
    try:
        size = os.get_terminal_size(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):
        size = os.terminal_size((0, 0))
    return {"mininterval": 0.2, **({"dynamic_ncols": True} if min(size) > 0 else {"ncols": 80, "nrows": 24})}


def _bar(iterable: Iterable[Any] | None, **options: Any) -> tqdm:
    from tqdm import tqdm

    return tqdm(iterable, file=sys.stderr, disable=not progress_enabled(), **_layout(), **options)


def progress(iterable: Iterable[Any] | None = None, *, total: int | None = None, desc: str, unit: str = "it",
             leave: bool = False) -> tqdm:
    """A tqdm bar on stderr, drawn when :func:`progress_enabled` says so (else a silent one that still counts).

    Args:
        iterable: iterate the bar for its items; ``None`` for a bar advanced with ``update(n)``.
        total: the number of items (``None``: ``len(iterable)`` where it has one, else a count without a bar).
        desc: what is going on, shown first ("making clip.mp4").
        unit: the name of one item ("frame", "step"); rates are shown in ``unit``/s.
        leave: keep the finished bar on the screen (default: erase it).

    Use it as an iterable, or as a context manager that closes it.
    """
    return _bar(iterable, total=total, desc=desc, unit=unit, leave=leave)


@contextlib.contextmanager
def spinner(desc: str, *, leave: bool = False, interval_s: float = 1.0) -> Iterator[tqdm]:
    """A bar without a count for a step whose length is unknown (an export, a compile, a build): ``desc`` and
    the elapsed time, redrawn every ``interval_s`` seconds by a thread until the block ends (where stderr is not
    a terminal, every 10 s). Set a detail with ``bar.set_postfix_str(...)``."""
    bar = _bar(None, total=None, desc=desc, leave=leave, bar_format="{desc}: {elapsed}{postfix}")
    stop = threading.Event()
    ticker = None
    if not bar.disable:
        every = interval_s if _stderr_is_terminal() else max(interval_s, 10.0)

        def tick() -> None:
            while not stop.wait(every):
                bar.refresh()

        ticker = threading.Thread(target=tick, name="progress-spinner", daemon=True)
        ticker.start()
    try:
        yield bar
    finally:
        stop.set()
        if ticker is not None:
            ticker.join()
        bar.close()
