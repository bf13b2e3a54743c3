"""perf-ab on a real git repository holding the tiny benchmark: a real code change in the working tree is judged
slower on the pair ratios, identical code is not; bad input is one line."""

from __future__ import annotations

import json
import os
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


def test_a_damaged_run_in_the_history_is_one_line_before_any_process(repo: Path) -> None:
    saved = repo / ".benchmarks" / "Linux-CPython-3.11-64bit" / "0001_main.json"
    saved.parent.mkdir(parents=True)
    saved.write_text('{"benchmarks": [')  # a save cut short: the history was dropped without a word after the pairs
    result = _ab(repo, "--pairs", "2")
    assert (result.returncode, result.stdout) == (2, ""), result.stdout + result.stderr
    assert result.stderr.splitlines() == [f"perf-ab: error: '{saved.relative_to(repo)}': cannot read a saved run: "
                                          "Expecting value: line 1 column 17 (char 16)"]
    assert not (repo / "ab" / "storage").exists() and not (repo / "ab" / "base-src").exists()


def test_an_out_folder_that_is_a_file_is_one_line_and_runs_nothing(repo: Path) -> None:
    (repo / "ab").write_text("notes")
    result = _ab(repo, "--pairs", "2")
    assert (result.returncode, result.stdout) == (2, ""), result.stdout + result.stderr
    assert result.stderr.splitlines() == [f"perf-ab: error: --out: cannot write to '{repo / 'ab'}': '{repo / 'ab'}' "
                                          "is not a folder; make it writable or choose another folder with --out"]
    assert (repo / "ab").read_text() == "notes"


def test_a_short_history_is_seeded_by_its_storages_noise_profile_and_a_bad_one_is_one_warning(repo: Path) -> None:
    from perf.gate.noise import NOISE_DIR, profile_key
    from perf.runs import load_runs

    saved = subprocess.run([sys.executable, "-m", "pytest", *TESTS, "--benchmark-autosave", "--perf-store=none"],
                           cwd=repo, env=child_env(), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert saved.returncode == 0, saved.stdout + saved.stderr
    (main,) = load_runs(repo / ".benchmarks")  # main's history here: one run, too short to know the noise alone
    path = repo / ".benchmarks" / NOISE_DIR / f"{profile_key(main.fingerprint)}.json"
    path.parent.mkdir()
    entry = {"processes": 3, "medians_s": [1e-3, 1.05e-3, 0.95e-3], "cv": 0.05, "max_ratio": 0.1, "total_sd": 0.05,
             "within_se": 0.002, "between_sd": 0.05}  # fmt: skip
    profile = {"format": 1, "key": "k", "fingerprint": main.fingerprint, "created": "2026-11-23", "runs": [],
               "entries": {"test_tiny.py::test_busy": {"time": entry}}}  # fmt: skip
    path.write_text(json.dumps(profile))
    seeded = _ab(repo, "--pairs", "2")
    assert seeded.returncode in (0, 1) and "warning" not in seeded.stderr, seeded.stdout + seeded.stderr
    assert "pooled with main's history of 1 comparable run(s)" in seeded.stdout
    assert "(no noise profile)" not in seeded.stdout
    path.write_text(json.dumps({**profile, "entries": {"test_tiny.py::test_busy": {"time": {**entry, "cv": "x"}}}}))
    bad = _ab(repo, "--pairs", "2")  # the pairs are saved: resumed, judged again (--history: .benchmarks, relative)
    assert bad.returncode in (0, 1) and "Traceback" not in bad.stderr, bad.stdout + bad.stderr
    assert "pooled with main's history of 1 comparable run(s)" in bad.stdout and "(no noise profile)" in bad.stdout
    assert [line for line in bad.stderr.splitlines() if "warning" in line] == [
        f"perf-ab: warning: ignored this runner's stored noise profile, '{path.relative_to(repo)}': entry "
        "'test_tiny.py::test_busy' metric 'time': cv is 'x', not a number: a history of fewer than 3 runs is judged "
        "without it; measure it again with --perf-noise=10"]


@pytest.mark.parametrize("case", ["no push destination", "dubious ownership"])
def test_a_failing_git_command_is_named_by_its_reason_not_the_hint_after_it(case: str, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A repository of another user (what a runner's account meets in a shared checkout): git's ``fatal:`` line,
    not its last, ``git config --global --add safe.directory ...``; a push with no remote: the same shape."""
    from perf.gate.processes import GitError, git

    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)  # no safe.directory of this machine's
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    if case == "dubious ownership":
        if os.geteuid() != 0:
            pytest.skip("needs root, to give the repository to another user")
        os.chown(tmp_path, 12345, 12345)
    with pytest.raises(GitError) as raised:
        git(tmp_path, "push" if case == "no push destination" else "status")
    why = {"no push destination": "fatal: No configured push destination.",
           "dubious ownership": f"fatal: detected dubious ownership in repository at '{tmp_path}'"}[case]
    assert str(raised.value) == f"git {'push' if case == 'no push destination' else 'status'}: {why}"


@pytest.mark.parametrize(("option", "value", "allowed"), [
    ("--pairs", "1", "a number of pairs from 2 to 1000"),  # no interval from one pair
    ("--pairs", "1000000000000", "a number of pairs from 2 to 1000"),  # its plan was built until memory ran out
    ("--confirm", "1000000000000", "a number of pairs from 0 to 1000"),
])  # fmt: skip
def test_a_number_of_pairs_no_plan_can_hold_is_one_usage_line_before_anything_runs(repo: Path, option: str,
                                                                                   value: str, allowed: str) -> None:
    result = _ab(repo, option, value)
    assert result.returncode == 2 and not (repo / "ab").exists()
    assert result.stderr.splitlines()[-1] == (f"perf-ab: error: argument {option}: Could not parse value: "
                                              f"{value!r}. Expected {allowed}.")
