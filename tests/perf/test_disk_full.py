"""A full disk under the perf cache stops ``pytest perf`` in one line naming the folder (perf.diskfull): on a real
1 MiB tmpfs (root only), and the line itself from the errors a real full disk raises."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from detector.errors import BackendError, VideoError
from perf.diskfull import full_disk_line

ROOT = Path(__file__).resolve().parents[2]


def _raised(error: BaseException, cause: BaseException) -> BaseException:
    """``error`` as raised ``from cause``."""
    try:
        raise error from cause
    except BaseException as e:  # noqa: BLE001 - the error is what the test looks at
        return e


def test_a_full_disk_error_is_one_line_naming_the_folder_of_the_option_it_writes(tmp_path: Path) -> None:
    cache, reports = tmp_path / "cache", tmp_path / "reports"
    folders = {"--perf-cache-dir": cache, "--perf-reports-dir": reports}
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(cache / "onnx" / ".m.x1.tmp.onnx"))
    export = _raised(BackendError(f"cannot write ONNX model '{cache / 'onnx' / 'm.onnx'}': No space left on device"),
                     full)  # fmt: skip
    assert full_disk_line(export, folders) == (
        f"--perf-cache-dir: the disk of '{cache}' is full: cannot write ONNX model '{cache / 'onnx' / 'm.onnx'}': No "
        "space left on device; free space there or choose another folder with --perf-cache-dir")
    short = VideoError(f"cannot write '{reports / 'clip.mp4'}': No space left on device; nothing saved")
    assert full_disk_line(short, folders).startswith(f"--perf-reports-dir: the disk of '{reports}' is full: ")
    assert full_disk_line(OSError(errno.ENOSPC, "No space left on device"), folders) == (
        "the disk is full: No space left on device; free space there and run again")
    assert full_disk_line(_raised(BackendError("export failed"), OSError(errno.EACCES, "denied")), folders) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a 1 MiB tmpfs needs root")
def test_a_full_cache_disk_stops_pytest_perf_in_one_line(tmp_path: Path) -> None:
    from reliability_detector import _full_disk

    with _full_disk(tmp_path, free_pages=0) as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
        result = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "perf"), "-p", "no:cacheprovider", "-p",
                                 "no:randomly", "--rootdir", str(ROOT), "--perf-device=cpu", "--perf-frames=2",
                                 f"--perf-cache-dir={cache}", f"--perf-reports-dir={tmp_path / 'reports'}", "-k",
                                 "test_inference_speed and torch-fp32-b1"], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert result.returncode == pytest.ExitCode.INTERRUPTED, result.stdout[-3000:] + result.stderr[-3000:]
    output = result.stdout + result.stderr
    (line,) = [line for line in output.splitlines() if "No space left on device" in line]
    assert f"--perf-cache-dir: the disk of '{cache}' is full: cannot write '{cache}" in line
    assert line.endswith("free space there or choose another folder with --perf-cache-dir !")
    assert "Traceback" not in output and "FAILED" not in output and len(output.splitlines()) < 30


def test_a_cache_folder_the_user_cannot_write_stops_pytest_perf_in_one_line(tmp_path: Path) -> None:
    """A perf cache holding files (so not probed at start-up) whose videos folder is read-only: building the
    synthetic video's lock is denied; one line naming the file, not a PermissionError traceback per test."""
    from bad_inputs import unprivileged_prefix

    if (prefix := unprivileged_prefix()) is None:
        pytest.skip("root, and no user namespace (unshare --user) to drop it")
    (cache := tmp_path / "cache").mkdir()
    (cache / "kept.txt").write_text("an entry")
    (videos := cache / "videos").mkdir(mode=0o555)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))}
    result = subprocess.run([*prefix, sys.executable, "-m", "pytest", str(ROOT / "perf"), "-p", "no:cacheprovider",
                             "-p", "no:randomly", "--rootdir", str(ROOT), "--perf-device=cpu", "--perf-frames=2",
                             f"--perf-cache-dir={cache}", f"--perf-reports-dir={tmp_path / 'reports'}", "-k",
                             "test_end_to_end and torch-fp32"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    videos.chmod(0o755)
    assert result.returncode == pytest.ExitCode.INTERRUPTED, result.stdout[-3000:] + result.stderr[-3000:]
    output = result.stdout + result.stderr
    (line,) = [line for line in output.splitlines() if "Permission denied" in line]
    assert f"--perf-cache-dir: cannot open '{videos}/" in line and ".lock': Permission denied" in line
    assert "Traceback" not in output and "FAILED" not in output and len(output.splitlines()) < 30


def test_a_denied_file_is_named_only_inside_the_suites_folders(tmp_path: Path) -> None:
    from perf.diskfull import denied_line

    folders = {"--perf-cache-dir": tmp_path / "cache"}
    inside = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "cache" / "videos" / "v.mp4.lock"))
    assert denied_line(_raised(VideoError("cannot make the video"), inside), folders) == (
        f"--perf-cache-dir: cannot open '{inside.filename}': Permission denied; give this user access there or "
        "choose another folder with --perf-cache-dir")
    assert denied_line(PermissionError(errno.EACCES, "Permission denied", "/etc/shadow"), folders) is None
    assert denied_line(OSError(errno.ENOSPC, "No space left on device", inside.filename), folders) is None
