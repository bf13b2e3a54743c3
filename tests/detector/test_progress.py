"""Progress bars: drawn on a terminal or when DETECTOR_PROGRESS / --progress asks, never in a log or a pipe."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from detector.cli import main
from detector.progress import ENV_VAR, progress, progress_enabled, spinner

REPO = Path(__file__).resolve().parents[2]
TQDM_LINE = re.compile(r"making clip\.mp4: +\d+%\|.*\| *\d+/4 \[")  # tqdm's "desc:  50%|###   | 2/4 [00:01<..."


@pytest.fixture
def terminal() -> Iterator[io.TextIOWrapper]:
    """A real terminal to write to: the far end of a pseudo-terminal."""
    leader, follower = os.openpty()
    with open(follower, "w", encoding="utf-8") as stream:
        yield stream
    os.close(leader)


def _stderr(monkeypatch: pytest.MonkeyPatch, stream: object, setting: str | None) -> None:
    """stderr is ``stream`` and ``DETECTOR_PROGRESS`` is ``setting`` (None: unset) for the rest of the test. Set in
    the test itself: pytest's capture puts its own stderr back between a fixture and the test."""
    monkeypatch.setattr(sys, "stderr", stream)
    if setting is None:
        monkeypatch.delenv(ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(ENV_VAR, setting)


@pytest.mark.parametrize(("setting", "drawn"), [
    (None, True), ("auto", True), ("", True), ("0", False), ("off", False), ("OFF", False), ("1", True), ("on", True),
])  # fmt: skip
def test_bars_are_drawn_on_a_terminal_unless_the_setting_says_never(
    terminal: io.TextIOWrapper, monkeypatch: pytest.MonkeyPatch, setting: str | None, drawn: bool
) -> None:
    _stderr(monkeypatch, terminal, setting)
    assert progress_enabled() is drawn


@pytest.mark.parametrize(("setting", "drawn"), [(None, False), ("auto", False), ("0", False), ("1", True),
                                                ("On", True)])
def test_bars_are_not_drawn_in_a_log_unless_the_setting_says_always(
    monkeypatch: pytest.MonkeyPatch, setting: str | None, drawn: bool
) -> None:
    _stderr(monkeypatch, io.StringIO(), setting)
    assert progress_enabled() is drawn


def test_a_bar_is_drawn_on_a_terminal_that_reports_no_size(monkeypatch: pytest.MonkeyPatch) -> None:
    leader, follower = os.openpty()  # a new pseudo-terminal has 0 rows and 0 columns until someone sets them
    try:
        with open(follower, "w", encoding="utf-8") as stream:
            assert tuple(os.get_terminal_size(stream.fileno())) == (0, 0)
            _stderr(monkeypatch, stream, None)
            for _ in progress(range(3), desc="rendering", unit="scene"):
                pass
            os.set_blocking(leader, False)  # nothing drawn must fail the test, not hang it
            try:
                drawn = os.read(leader, 65536).decode()
            except BlockingIOError:
                drawn = ""
    finally:
        os.close(leader)
    assert re.search(r"rendering: +0%\| +\| 0/3 \[", drawn), drawn


def test_an_unreadable_setting_is_warned_about_once_and_the_terminal_decides(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _stderr(monkeypatch, io.StringIO(), "sometimes")
    with caplog.at_level(logging.WARNING, logger="detector.progress"):
        assert progress_enabled() is False
        assert progress_enabled() is False
    warned = [r.getMessage() for r in caplog.records if "sometimes" in r.getMessage()]
    assert warned == [("DETECTOR_PROGRESS='sometimes' is not understood (allowed: 0/off, 1/on, auto); progress bars "
                       "follow the terminal")]


def test_a_silent_bar_still_iterates_updates_and_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    log = io.StringIO()
    _stderr(monkeypatch, log, None)
    assert list(progress(range(3), desc="counting")) == [0, 1, 2]
    with progress(total=5, desc="counting", unit="frame") as bar:
        bar.update(2)
        bar.total = 6
    with spinner("waiting"):
        pass
    assert bar.disable and log.getvalue() == ""


def test_an_asked_for_bar_draws_its_description_and_count_on_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(ENV_VAR, "1")
    for _ in progress(range(3), desc="making frames", unit="frame"):
        pass
    with spinner("exporting to ONNX") as bar:
        bar.set_postfix_str("opset 17")
    err = capsys.readouterr().err
    assert re.search(r"making frames: +0%\| +\| 0/3 \[", err), err
    assert re.search(r"exporting to ONNX: 00:0\d, opset 17", err), err


def test_the_progress_options_set_the_setting_for_one_command_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ENV_VAR, "auto")
    assert main(["--no-progress", "check-cache", "--cache-dir", str(tmp_path)]) == 0
    assert main(["check-cache", "--cache-dir", str(tmp_path), "--progress"]) == 0
    assert os.environ[ENV_VAR] == "auto"


def _make_video(folder: Path, before: tuple[str, ...], after: tuple[str, ...],
                setting: str | None) -> subprocess.CompletedProcess[str]:
    """A real ``detector make-video`` of 4 frames in a child process whose stderr is a pipe (not a terminal), with
    ``before`` and ``after`` the subcommand and ``DETECTOR_PROGRESS`` set to ``setting`` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    if setting is not None:
        env[ENV_VAR] = setting
    command = [sys.executable, "-m", "detector", *before, "make-video", "--out", str(folder / "clip.mp4"),
               "--width", "64", "--height", "64", "--frames", "4", *after]
    return subprocess.run(command, cwd=REPO, env=env, text=True, capture_output=True, timeout=120, check=False)


@pytest.mark.parametrize(("before", "after", "setting", "drawn"), [
    ((), (), None, False),                 # the default in a pipe: no bar
    ((), (), "1", True),                   # DETECTOR_PROGRESS=1: a CI log that wants bars
    (("--progress",), (), None, True),     # the option before the subcommand
    ((), ("--progress",), None, True),     # and after it
    (("--no-progress",), (), "1", False),  # the option wins over the environment
])  # fmt: skip
def test_make_video_draws_a_tqdm_bar_on_stderr_only_when_asked(
    tmp_path: Path, before: tuple[str, ...], after: tuple[str, ...], setting: str | None, drawn: bool
) -> None:
    result = _make_video(tmp_path, before, after, setting)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("wrote ")
    assert bool(TQDM_LINE.search(result.stderr)) is drawn, result.stderr
    if not drawn:
        assert result.stderr == ""
