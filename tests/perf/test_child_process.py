"""The one runner of a child pytest (`perf.profile.child.run_pytest_child`), on real child processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perf.profile.child import child_command, run_pytest_child


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "test_env.py").write_text(
        "import os, sys\n"
        "def test_env():\n"
        "    print('out line'); print('err line', file=sys.stderr)\n"
        "    assert 'PYTEST_XDIST_WORKER' not in os.environ and os.environ['PYTHONUNBUFFERED'] == '1'\n"
        "    assert os.environ['KEPT'] == 'yes'\n"
    )  # fmt: skip
    return root


def test_child_logs_its_command_and_output_and_sees_a_plain_session_env(tmp_path: Path) -> None:
    root = _project(tmp_path)
    env = {**os.environ, "PYTEST_XDIST_WORKER": "gw1", "PYTEST_CURRENT_TEST": "x", "KEPT": "yes"}
    command = child_command(["test_env.py", "-p", "no:cacheprovider", "-p", "no:randomly", "-s"])
    run = run_pytest_child(command, root, env, tmp_path / "child.log", echo_command=True)
    text = run.output()
    assert run.returncode == 0 and run.seconds > 0, text
    assert text.startswith("$ " + " ".join(command) + "\n") and command[:3] == [sys.executable, "-m", "pytest"]
    assert "out line" in text and "err line" in text and "1 passed" in text


def test_failing_child_returns_its_exit_status_without_raising(tmp_path: Path) -> None:
    root = _project(tmp_path)
    run = run_pytest_child(child_command(["test_env.py", "-p", "no:cacheprovider"]), root, dict(os.environ),
                           tmp_path / "child.log")  # fmt: skip
    assert run.returncode == 1 and "KEPT" in run.output() and not run.output().startswith("$ ")


def test_child_past_its_timeout_is_killed_with_its_output_so_far_in_the_log(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(30)"]
    with pytest.raises(subprocess.TimeoutExpired):
        run_pytest_child(command, tmp_path, dict(os.environ), tmp_path / "child.log", timeout_s=2)
    assert "started" in (tmp_path / "child.log").read_text()
