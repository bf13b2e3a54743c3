"""Saved state under concurrent writers: runs of the suite saving into one benchmark storage at the same moment
each keep their own file, under their own number. The processes are real pytest runs of a tiny benchmark project;
they are held at a barrier (files in a folder) just before pytest-benchmark saves, and released together. A storage
that already holds two runs of one number (saved before that, or merged from two runners) is never compared
against one of them picked silently."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_bench import child_env, write_project

BARRIER = '''
import os, time
from pathlib import Path


def pytest_benchmark_update_json(config, benchmarks, output_json):
    folder, count = Path(os.environ["BARRIER"]), int(os.environ["BARRIER_COUNT"])
    (folder / str(os.getpid())).touch()  # arrived: wait for the others, then save together
    while len(list(folder.iterdir())) < count:
        time.sleep(0.0005)
'''


def _released_together(project: Path, count: int, *options: str) -> list[subprocess.CompletedProcess[str]]:
    """``count`` pytest runs of ``project`` with ``options``, each held just before its save until all arrive."""
    barrier = project / "barrier"
    barrier.mkdir()
    env = child_env(BARRIER=str(barrier), BARRIER_COUNT=str(count))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
               f"--benchmark-storage=file://{project / '.benchmarks'}", *options]
    procs = [subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(count)]  # fmt: skip
    return [subprocess.CompletedProcess(p.args, p.wait(timeout=300), p.stdout.read() if p.stdout else "", "")
            for p in procs]  # fmt: skip


@pytest.mark.parametrize("save", ["--benchmark-autosave", "--benchmark-save=nightly"])
def test_runs_saving_at_the_same_moment_each_keep_their_own_file_and_number(tmp_path: Path, save: str) -> None:
    project = write_project(tmp_path, ["perf.plugin"])
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "conftest.py").write_text((project / "conftest.py").read_text() + BARRIER)
    done = _released_together(project, 3, save, "--perf-store=none")
    assert all(r.returncode == 0 for r in done), [r.stdout[-1500:] for r in done]
    files = sorted((project / ".benchmarks").glob("*/[0-9][0-9][0-9][0-9]_*.json"))
    assert [f.name[:4] for f in files] == ["0001", "0002", "0003"], [f.name for f in files]
    run_ids = {json.loads(f.read_text())["perf_run"]["run_id"] for f in files}
    assert len(run_ids) == 3  # three runs, none overwritten by another
    assert not [p.name for p in files[0].parent.iterdir() if p.name.startswith(".")]  # no lock or temporary left


def _one_saved_run(tmp_path: Path) -> tuple[Path, list[str], Path]:
    """A project with the suite's plugin, the pytest command line that compares in it, and its one saved run."""
    project = write_project(tmp_path, ["perf.plugin"])
    (project / "pytest.ini").write_text("[pytest]\n")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
               "--perf-device=cpu", "--benchmark-storage=storage", "--perf-store=none"]  # fmt: skip
    saved = subprocess.run([*command, "--benchmark-autosave"], cwd=project, env=child_env(), capture_output=True,
                           text=True, timeout=300)  # fmt: skip
    assert saved.returncode == 0, saved.stdout[-2000:]
    (first,) = (project / "storage").glob("*/0001_*.json")
    return project, command, first


def test_perf_compare_of_a_number_two_saved_runs_share_is_refused_naming_both(tmp_path: Path) -> None:
    project, command, first = _one_saved_run(tmp_path)
    document = json.loads(first.read_text())
    document["perf_run"]["run_id"] = "another"
    other = first.with_name("0001_other.json")  # another run under the same number
    other.write_text(json.dumps(document))
    refused = subprocess.run([*command, "--perf-compare=0001", "--perf-confirm=0"], cwd=project, env=child_env(),
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert refused.returncode == pytest.ExitCode.USAGE_ERROR, refused.stdout[-2000:] + refused.stderr[-2000:]
    a, b = sorted([first, other])  # in the order of their names
    assert refused.stderr.strip().splitlines() == [
        f"ERROR: --perf-compare=0001: 2 saved runs in '{first.parent}' have the number 0001 ({a.name}, {b.name}); "
        f"name one by its file name: --perf-compare={b.stem}"]
    named = subprocess.run([*command, f"--perf-compare={first.stem}", "--perf-confirm=0"], cwd=project,
                           env=child_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert named.returncode == 0, named.stdout[-2000:] + named.stderr[-2000:]


def test_a_folder_named_like_the_latest_saved_run_is_named_by_perf_compare_as_a_folder(tmp_path: Path) -> None:
    project, command, first = _one_saved_run(tmp_path)
    folder = first.with_name("0002_x.json")
    folder.mkdir()
    refused = subprocess.run([*command, "--perf-compare", "--perf-confirm=0"], cwd=project, env=child_env(),
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert refused.returncode == pytest.ExitCode.USAGE_ERROR, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert refused.stderr.strip().splitlines() == [
        f"ERROR: --perf-compare: '{folder}' is not a usable saved run: cannot read it as JSON: it is a directory, not "
        "a regular file; repair or remove it, or compare with another run (NUM|ID)"]


def test_a_storage_a_run_does_not_save_in_is_not_listed_so_a_name_too_long_is_no_internal_error(
        tmp_path: Path) -> None:  # fmt: skip
    """Where the run saves is looked up only when it saves: the storage's next number (a listing of the folder) was
    read at session start, so a storage named past the file system's 255 bytes ended every run in an INTERNALERROR."""
    project = write_project(tmp_path, ["perf.plugin"])
    (project / "pytest.ini").write_text("[pytest]\n")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
               "--perf-device=cpu", f"--benchmark-storage={'s' * 300}", "--perf-store=none"]  # fmt: skip
    plain = subprocess.run(command, cwd=project, env=child_env(), capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0 and "INTERNALERROR" not in plain.stdout + plain.stderr, plain.stdout[-2000:]
    saving = subprocess.run([*command, "--benchmark-autosave"], cwd=project, env=child_env(), capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert saving.returncode == pytest.ExitCode.USAGE_ERROR
    assert saving.stderr.startswith(f"ERROR: --benchmark-storage: cannot save the run in '{project / ('s' * 300)}")
