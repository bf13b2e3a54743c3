"""perf-ab on a real git repository holding the tiny benchmark: a real code change in the working tree is judged
slower on the pair ratios, identical code is not; bad input is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_bench import child_env, write_project

pytest.importorskip("scipy")
TESTS = ["test_tiny.py", "-p", "no:cacheprovider", "-p", "no:xdist", "--perf-device=cpu", "--benchmark-max-time=0.05",
         "--benchmark-min-rounds=20", "--benchmark-warmup=off"]  # fmt: skip


def _git(folder: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=folder, check=True,
                   capture_output=True)  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with the tiny benchmark committed on main."""
    (tmp_path / "repo").mkdir()
    folder = write_project(tmp_path / "repo", ["perf.plugin", "perf.fixtures.reporting"])
    (folder / ".gitignore").write_text("ab/\n.benchmarks/\n.perf-cache/\nreports/\n")
    _git(folder, "init", "-q", "-b", "main")
    _git(folder, "add", ".")
    _git(folder, "commit", "-q", "-m", "base")
    return folder


def _ab(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perf.abtest", "--base", "main", "--out", str(repo / "ab"), *args,
                           "--", *TESTS], cwd=repo, env=child_env(), capture_output=True, text=True, timeout=300)


def test_a_real_slowdown_in_the_working_tree_is_slower_on_the_pair_ratios(repo: Path) -> None:
    bench = repo / "test_tiny.py"
    bench.write_text(bench.read_text().replace("+ delay_s", "+ delay_s + 3e-4"))  # 30% more work per call
    result = _ab(repo, "--pairs", "2")
    assert result.returncode == 1, result.stdout + result.stderr
    document = json.loads((repo / "ab" / "perf-ab.json").read_text())
    (row,) = document["rows"]
    assert row["verdict"] == "slower" and 1.2 < row["ratio"] < 1.4 and row["metrics"][0]["metric"] == "time"
    assert row["confirmation"]["paired"] is True and row["confirmation"]["processes"] == 2  # 2 more pairs agreed
    assert "perf-ab FAILED: 1 slower of 1" in result.stdout
    plan = json.loads((repo / "ab" / "plan.json").read_text())["children"]
    assert [c["label"] for c in plan] == ["base-01", "candidate-01", "candidate-02", "base-02"]  # ABBA
    assert all((repo / "ab" / f"{c['label']}.log").is_file() for c in plan)
    assert not (repo / "ab" / "base-src").exists()  # the worktree is removed


def test_identical_code_is_not_slower(repo: Path) -> None:
    result = _ab(repo, "--pairs", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    (row,) = json.loads((repo / "ab" / "perf-ab.json").read_text())["rows"]
    assert row["verdict"] == "no change" and 0.9 < row["ratio"] < 1.1 and row["detectable"] >= 0.02
    (saved,) = (repo / "ab" / "storage").glob("*/*_candidate-02.json")
    saved.write_text('{"benchmarks": [')  # a child's saved run cut short: resumed, it is one line, not a traceback
    again = _ab(repo, "--pairs", "3")
    errors = [line for line in again.stderr.splitlines() if "already saved" not in line]  # the resume's progress
    assert again.returncode == 2 and len(errors) == 1 and "Traceback" not in again.stderr, again.stderr
    assert errors[0].startswith(f"perf-ab: error: '{saved}': cannot read a saved run: "), again.stderr


def test_a_base_that_does_not_exist_is_one_line_and_runs_nothing(repo: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "perf.abtest", "--base", "nosuch", "--out", str(repo / "ab")],
                            cwd=repo, env=child_env(), capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 2 and result.stderr.startswith("perf-ab: error: --base nosuch: no such commit")
    assert len(result.stderr.splitlines()) == 1 and not (repo / "ab" / "storage").exists()


def test_an_out_folder_whose_plan_is_not_one_is_one_line_and_runs_nothing(repo: Path) -> None:
    plan = repo / "ab" / "plan.json"
    plan.parent.mkdir()
    plan.write_text('{"children": 3}')
    result = _ab(repo, "--pairs", "2")
    assert (result.returncode, result.stdout) == (2, ""), result.stdout + result.stderr
    assert result.stderr.splitlines() == [f"perf-ab: error: '{plan}' is not a plan (not the list of children a plan "
                                          "holds): delete it or give another folder"]
    assert sorted(p.name for p in plan.parent.iterdir()) == ["plan.json"]  # no worktree, no run
    assert plan.read_text() == '{"children": 3}'
