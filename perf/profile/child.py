"""One child pytest run to the end, its output in a log file: the cross-process runs, ``perf-ab`` and the nsys
captures all start their children here (perf/gate imports perf/profile: the lowest part both reach).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: Variables of the parent's own pytest session that a child, a plain session of its own, must not see.
PARENT_SESSION_ENV = ("PYTEST_XDIST_", "PYTEST_CURRENT_TEST")


def child_command(args: Sequence[str]) -> list[str]:
    """``python -m pytest <args>`` under this interpreter."""
    return [sys.executable, "-m", "pytest", *args]


@dataclass(frozen=True)
class ChildRun:
    """How a child ended: its exit status, wall-clock seconds and the log of its stdout and stderr."""

    returncode: int
    seconds: float
    log_path: Path

    def output(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def run_pytest_child(command: Sequence[str], cwd: str | os.PathLike[str], env: Mapping[str, str],
                     log_path: str | os.PathLike[str], *, timeout_s: float | None = None,
                     echo_command: bool = False) -> ChildRun:  # fmt: skip
    """Run ``command`` (`child_command`, perhaps wrapped by a profiler) in ``cwd`` with ``env`` less
    `PARENT_SESSION_ENV`, unbuffered, its output to ``log_path`` (after ``$ <command>`` if ``echo_command``).
    `subprocess.TimeoutExpired` after ``timeout_s`` s (the child killed), `OSError` when it cannot start."""
    child_env = {key: value for key, value in env.items() if not key.startswith(PARENT_SESSION_ENV)}
    log.debug("child in %s: %s", cwd, " ".join(command))
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as out:
        if echo_command:
            print("$", *command, file=out, flush=True)
        code = subprocess.run(list(command), cwd=cwd, env={**child_env, "PYTHONUNBUFFERED": "1"}, stdout=out,
                              stderr=subprocess.STDOUT, timeout=timeout_s, check=False).returncode
    return ChildRun(code, time.perf_counter() - start, Path(log_path))
