"""Ctrl-C (SIGINT) and SIGTERM to a real ``pytest --perf-compare`` while its confirmation runs a child in a git
worktree of the base commit: one line, exit status 2, the child stopped, the worktree removed and git's list of
worktrees clean. The child holds (waits on a file) until the parent is signalled: nothing depends on timing."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_bench import child_env, write_project

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

HOLD = '''

def pytest_sessionstart(session):
    import os, time
    if session.config.getoption("benchmark_save") and os.environ.get("HOLD_CHILD"):  # a child: hold until killed
        with open(os.environ["HOLD_CHILD"], "w") as out:
            out.write(str(os.getpid()))
        while True:
            time.sleep(1)
'''
RUN = ("-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist", "--perf-device=cpu",
       "--benchmark-storage=storage", "--benchmark-max-time=0.1", "--benchmark-min-rounds=30",
       "--benchmark-warmup=off", "--perf-reports-dir=reports", "--perf-min-effect=10%")  # fmt: skip


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=folder, check=True,
                          capture_output=True, text=True).stdout  # fmt: skip


def _project_with_a_base(folder: Path) -> Path:
    """The tiny benchmark in a git repository: a run saved at the base commit, then a new commit (another code)."""
    folder.mkdir()
    write_project(folder, ["perf.plugin", "perf.fixtures.reporting"])
    (folder / "conftest.py").write_text((folder / "conftest.py").read_text() + HOLD)
    (folder / ".gitignore").write_text("storage/\nreports/\n__pycache__/\n.processes\n")
    _git(folder, "init", "-q")
    _git(folder, "add", "-A")
    _git(folder, "commit", "-q", "-m", "base")
    saved = subprocess.run([sys.executable, "-m", "pytest", *RUN, "--benchmark-autosave"], cwd=folder,
                           env=child_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert saved.returncode == 0, saved.stdout[-2000:]
    (folder / "test_tiny.py").write_text((folder / "test_tiny.py").read_text() + "\n# the candidate\n")
    _git(folder, "commit", "-q", "-am", "candidate")
    return folder


def _signalled_once_held(command: list[str], folder: Path, sig: int) -> tuple[subprocess.CompletedProcess, int]:
    """Run ``command`` in ``folder``; once its child holds, send ``sig`` to it; its result and the child's pid."""
    held = folder.parent / "held"
    parent = subprocess.Popen(command, cwd=folder, env=child_env(HOLD_CHILD=str(held)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 300
    while not (held.exists() and held.read_text()):
        assert parent.poll() is None and time.monotonic() < deadline, parent.communicate()
        time.sleep(0.05)
    child = int(held.read_text())
    parent.send_signal(sig)
    out, err = parent.communicate(timeout=120)
    return subprocess.CompletedProcess(command, parent.returncode, out, err), child


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie not yet reaped by its new parent counts: it runs no more)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return True
    if state != "Z":
        os.kill(pid, signal.SIGKILL)  # an orphan left running: stop it, then fail
    return state == "Z"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_the_confirmation_stops_its_child_and_removes_the_base_worktree(tmp_path: Path,
                                                                                         sig: int) -> None:
    folder = _project_with_a_base(tmp_path / "repo")
    command = [sys.executable, "-m", "pytest", *RUN, "--perf-compare", "--perf-inject-delay=2", "--perf-confirm=2"]
    done, child = _signalled_once_held(command, folder, sig)
    assert _gone(child)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    how = "terminated (SIGTERM)" if sig == signal.SIGTERM else "interrupted (Ctrl-C)"
    assert done.stderr.strip().splitlines()[-1] == (f"Exit: perf: {how} while finishing the session; what it had "
                                                     "not written yet was not written")  # fmt: skip
    assert len(_git(folder, "worktree", "list").splitlines()) == 1  # the base's worktree is gone, from git too
    assert not list((folder / "reports" / "confirm").glob("*/base-src"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_perf_ab_stops_its_child_removes_its_worktree_and_the_same_command_resumes(tmp_path: Path,
                                                                                                sig: int) -> None:
    folder = tmp_path / "repo"
    folder.mkdir()
    write_project(folder, ["perf.plugin"])
    (folder / "conftest.py").write_text((folder / "conftest.py").read_text() + HOLD)
    (folder / ".gitignore").write_text("reports/\n__pycache__/\n.processes\n")
    _git(folder, "init", "-q", "-b", "main")
    _git(folder, "add", "-A")
    _git(folder, "commit", "-q", "-m", "base")
    _git(folder, "checkout", "-q", "-b", "feature")
    (folder / "test_tiny.py").write_text((folder / "test_tiny.py").read_text() + "\n# the candidate\n")
    _git(folder, "commit", "-q", "-am", "candidate")
    command = [sys.executable, "-m", "perf.abtest", "--base", "main", "--pairs", "2", "--confirm", "0", "--",
               "test_tiny.py", "--perf-device=cpu", "-p", "no:randomly"]  # fmt: skip
    done, child = _signalled_once_held(command, folder, sig)
    assert _gone(child)
    how, code = ("terminated (SIGTERM)", 143) if sig == signal.SIGTERM else ("interrupted (Ctrl-C)", 130)
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (code, (
        f"perf-ab: {how}; the processes that ended are kept in 'reports/ab': the same command resumes the plan"))
    assert "Traceback" not in done.stdout + done.stderr
    assert len(_git(folder, "worktree", "list").splitlines()) == 1 and not (folder / "reports/ab/base-src").exists()
    resumed = subprocess.run(command, cwd=folder, env=child_env(), capture_output=True, text=True, timeout=600)
    assert resumed.returncode in (0, 1) and "perf-ab " in resumed.stdout, resumed.stdout[-2000:] + resumed.stderr
    assert len(_git(folder, "worktree", "list").splitlines()) == 1


SECOND = '''


def test_second(benchmark, perf_report):
    import os, time
    from perf.report import schema
    perf_report.add(schema.INFERENCE, {"case": "second", "batch": 1})
    with open(os.environ["HOLD_TEST"], "w") as out:  # reached: the first benchmark is measured; hold here
        out.write(str(os.getpid()))
    while True:
        time.sleep(1)
'''


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_run_interrupted_while_measuring_saves_stores_and_reports_nothing(tmp_path: Path, sig: int) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    write_project(folder, ["perf.plugin", "perf.fixtures.reporting"])
    (folder / "test_tiny.py").write_text((folder / "test_tiny.py").read_text() + SECOND)
    held = tmp_path / "held"
    run = subprocess.Popen([sys.executable, "-m", "pytest", *RUN, "--benchmark-autosave"], cwd=folder,
                           env=child_env(HOLD_TEST=str(held)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)  # fmt: skip
    deadline = time.monotonic() + 300
    while not (held.exists() and held.read_text()):
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.05)
    run.send_signal(sig)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 2, out[-2000:] + err[-2000:]
    assert "perf: the run was interrupted: it is not saved (nor stored, nor reported)" in err.splitlines()
    assert not list((folder / "storage").glob("*/*.json"))  # half a run would have become the latest baseline
    from perf.store.db import open_store

    with open_store(str(folder / "storage" / "history.sqlite"), create=False) as store:
        assert store.runs(include_injected=True) == []
    assert not list((folder / "reports").glob("perf-report*"))


def _many_runs(storage: Path, count: int) -> None:
    """``count`` saved runs of one small document in ``storage``/m."""
    import json

    (storage / "m").mkdir(parents=True)
    document = {"benchmarks": [{"name": "test_a", "fullname": "t.py::test_a", "group": None, "extra_info": {},
                                "stats": {"median": 0.001, "data": [0.001, 0.0011, 0.0009]}}],
                "machine_info": {"node": "x"}, "commit_info": {"id": "c1"}, "datetime": "2026-01-01T00:00:00"}
    for i in range(1, count + 1):
        document["perf_run"] = {"run_id": f"run-{i}", "injected": {}}
        (storage / "m" / f"{i:04d}_x.json").write_text(json.dumps(document))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_perf_history_import_signalled_is_one_line_keeps_each_run_whole_and_imports_the_rest_again(
    tmp_path: Path, sig: int
) -> None:
    import sqlite3

    _many_runs(tmp_path / "storage", 1500)
    store = tmp_path / "history.sqlite"
    command = [sys.executable, "-m", "perf.store.cli", "--store", str(store), "import", str(tmp_path / "storage")]
    run = subprocess.Popen(command, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def stored() -> int:
        try:
            with sqlite3.connect(store, timeout=30) as db:
                return db.execute("SELECT count(*) FROM perf_runs").fetchone()[0]
        except sqlite3.OperationalError:  # not made yet
            return 0

    deadline = time.monotonic() + 300
    while stored() == 0:  # the import has begun storing: signal it in the middle
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.05)
    run.send_signal(sig)
    out, err = run.communicate(timeout=120)
    how, code = ("terminated (SIGTERM)", 143) if sig == signal.SIGTERM else ("interrupted (Ctrl-C)", 130)
    assert (run.returncode, err.splitlines()) == (code, [
        f"perf-history: {how}; what it had stored stays stored, each run whole"]), out[-500:] + err[-2000:]
    with sqlite3.connect(store) as db:
        kept = db.execute("SELECT count(*) FROM perf_runs").fetchone()[0]
        assert 0 < kept < 1500 and db.execute("SELECT count(*) FROM perf_benchmarks").fetchone()[0] == kept
    again = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and again.stdout.strip().endswith(f"{1500 - kept} run(s) stored, {kept} already "
                                                                   f"in sqlite:///{store}"), again  # fmt: skip


# An interrupt that lands where SQLAlchemy's pool checks a connection back in: the pool logs it ("Exception during
# reset or similar", with a traceback) and raises it again. CI's SIGINT once landed exactly there.
IN_POOL_RESET = """
import sys
from sqlalchemy import event
from sqlalchemy.pool import Pool
resets = 0
@event.listens_for(Pool, "reset")
def _interrupt(*_):
    global resets
    resets += 1
    if resets == 3:
        raise KeyboardInterrupt
from perf.store.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_perf_history_interrupted_inside_the_database_pool_is_still_one_line(tmp_path: Path) -> None:
    _many_runs(tmp_path / "storage", 5)
    store = tmp_path / "history.sqlite"
    run = subprocess.run([sys.executable, "-c", IN_POOL_RESET, "--store", str(store), "import",
                          str(tmp_path / "storage")], env=child_env(), capture_output=True, text=True, timeout=300)
    assert (run.returncode, run.stderr.splitlines()) == (130, [
        "perf-history: interrupted (Ctrl-C); what it had stored stays stored, each run whole"]), run.stderr[-2000:]


PADDED = '''

def test_padded(benchmark):
    benchmark.extra_info["pad"] = ["x" * 100] * 500_000  # a JSON report of 50 MB: its write takes a while
    benchmark.pedantic(sum, args=(range(100),), rounds=5, iterations=1)
'''


def test_benchmark_json_is_written_whole_into_a_new_folder_and_a_killed_write_keeps_the_previous_one(
    tmp_path: Path,
) -> None:
    import json

    from test_interrupted_writes import kill_in_write

    folder = tmp_path / "project"
    folder.mkdir()
    write_project(folder, ["perf.plugin"])
    (folder / "test_tiny.py").write_text((folder / "test_tiny.py").read_text() + PADDED)
    out = folder / "out" / "bench.json"  # in a folder not made yet: it was a traceback after every test had run
    args = ("-m", "pytest", *RUN, "--perf-store=none", f"--benchmark-json={out}")
    first = subprocess.run([sys.executable, *args], cwd=folder, env=child_env(), capture_output=True, text=True,
                           timeout=300)  # fmt: skip
    assert first.returncode == 0 and "Traceback" not in first.stdout + first.stderr, first.stdout[-2000:]
    before = out.read_bytes()
    kill_in_write("", out.parent, ".bench.*.tmp.json", cwd=folder, args=args)  # the new JSON half written
    assert out.read_bytes() == before and json.loads(before)["benchmarks"]  # the previous one whole
