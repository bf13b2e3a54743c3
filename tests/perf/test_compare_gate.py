"""--perf-compare end to end: real pytest runs of a tiny benchmark on a virtual clock, saved, then compared with
and without an injected slowdown; plus the stability gate and the verdict files. The refusal of another machine's
run and the fingerprint a saved run records are tested in test_machine_info.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perf.runs import load_runs
from perf.verdicts import load_verdicts
from tiny_bench import child_env, write_project

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[2]

RUN = (
    "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:xdist", "--perf-device=cpu",
    "--benchmark-storage=storage", "--benchmark-max-time=0.1", "--benchmark-min-rounds=30", "--benchmark-warmup=off",
    "--perf-reports-dir=reports", "--perf-min-effect=10%",
)  # fmt: skip


@pytest.fixture(scope="module")
def _saved_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny benchmark and one saved baseline run (storage/<machine>/0001_*.json), made once per module."""
    folder = write_project(tmp_path_factory.mktemp("gate"), ["perf.plugin", "perf.fixtures.reporting"])
    result = _pytest(folder, "--benchmark-autosave")
    assert result.ret == 0, result.stdout.str()
    return folder


@pytest.fixture
def project(_saved_project: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A fresh copy of the saved project, as the pytester directory."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # pytest-benchmark would disable itself
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    shutil.copytree(_saved_project, pytester.path, dirs_exist_ok=True)
    return pytester


def _pytest(folder: Path, *args: str) -> pytest.RunResult:
    """pytest in a subprocess (torch cannot be imported twice in one process), in ``folder``."""
    env = child_env()
    proc = subprocess.run([sys.executable, "-m", "pytest", *RUN, *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    return pytest.RunResult(proc.returncode, proc.stdout.splitlines(), proc.stderr.splitlines(), 0.0)


def test_saved_run_keeps_raw_rounds_and_stability(project: pytest.Pytester) -> None:
    (run,) = load_runs(project.path / "storage")
    (bench,) = run.benchmarks.values()
    assert bench.data is not None and bench.data.size >= 30
    assert 0.0001 < bench.median_s < 0.02
    assert bench.stability is not None and bench.stability["verdict"] == "stable"


def test_injected_slowdown_fails_the_compare_and_says_slower(project: pytest.Pytester) -> None:
    result = _pytest(project.path, "--perf-compare", "--perf-inject-delay=2", "--perf-confirm=0")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*= perf-compare =*", "--perf-compare against main's history of 1 comparable run(s)*",
                                 "test_busy *ms *ms *[[]*, *[]] *+* 1 *slower  (history too short*",
                                 "perf-compare FAILED: 1 slower, 0 faster, 0 no change, 0 inconclusive, 0 missing;*"])
    verdicts = load_verdicts(project.path / "reports")
    assert verdicts is not None and verdicts["summary"]["failed"] is True
    (row,) = verdicts["rows"]
    assert row["verdict"] == "slower" and row["lo"] > 1.3 and row["lo"] <= row["ratio"] <= row["hi"]
    assert "| test_busy |" in (project.path / "reports" / "perf-compare.md").read_text()


def test_a_slower_benchmark_is_a_failed_test_with_one_line_in_the_summary_and_junit(project: pytest.Pytester) -> None:
    result = _pytest(project.path, "--perf-compare", "--perf-inject-delay=2", "--junitxml=junit.xml", "-rf",
                     "--perf-confirm=0")  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["perf-compare: slower: * ms -> * ms, ratio *[[]*, *[]] beyond +10.0% (against main's "
                                 "history of 1 comparable run(s) on this runner (0001 .. 0001, *",
                                 "FAILED test_tiny.py::test_busy - perf-compare: slower: *", "*1 failed*"])  # fmt: skip
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "def test_busy" not in output  # the reason, not the test's source
    import xml.etree.ElementTree as ET

    (case,) = ET.parse(project.path / "junit.xml").getroot().iter("testcase")
    (failure,) = case.findall("failure")
    assert failure.get("message", "").startswith("perf-compare: slower: ") and "(0001 .. 0001" in failure.get(
        "message", "")  # fmt: skip
    summary = (project.path / "reports" / "perf-compare.md").read_text()
    assert "**1 benchmark(s) slower** (each a failed test):" in summary and "* `test_busy`: " in summary


def test_a_suspect_is_confirmed_in_fresh_processes_before_the_run_fails(project: pytest.Pytester) -> None:
    result = _pytest(project.path, "--perf-compare", "--perf-inject-delay=2", "--perf-confirm=2", "-rf")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    assert "1 passed" in result.stdout.str()  # the first pass only flags a suspect: the test itself passes
    result.stdout.fnmatch_lines([
        "perf-compare confirmation: candidate-01 (candidate) * s, exit 0",
        "perf-compare confirmation: candidate-02 (candidate) * s, exit 0",
        "*suspects confirmed in at most 2 pair(s) of fresh processes within 900 s (* s of processes)",
        "perf-compare: slower: * confirmed by 2 fresh process(es): time *",
        "perf-compare FAILED: 1 slower, *"])  # fmt: skip
    children = list((project.path / "reports" / "confirm").glob("*/candidate-0*.log"))
    assert len(children) == 2 and all("--perf-inject-delay=2" in log.read_text() for log in children)
    verdicts = load_verdicts(project.path / "reports")
    assert verdicts is not None and verdicts["rows"][0]["confirmation"]["processes"] == 2


def test_a_confirmation_stops_at_its_time_budget_and_two_processes_confirm_nothing(project: pytest.Pytester) -> None:
    result = _pytest(project.path, "--perf-compare", "--perf-inject-delay=2", "--perf-confirm=8",
                     "--perf-confirm-budget=1", "-rf")  # fmt: skip
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()  # inconclusive: reported, not failed
    result.stdout.fnmatch_lines([
        "*suspects confirmed in at most 8 pair(s) of fresh processes within 1 s (* s of processes)",
        "test_busy *inconclusive*cannot rule out*"])  # fmt: skip
    assert len(list((project.path / "reports" / "confirm").glob("*/candidate-0*.log"))) == 2
    verdicts = load_verdicts(project.path / "reports")
    assert verdicts is not None and verdicts["rows"][0]["confirmation"]["processes"] == 2
    assert "after 2 fresh process(es)" in verdicts["rows"][0]["confirmation"]["text"]


def test_a_look_that_would_overrun_the_budget_runs_the_one_pair_that_fits_and_is_the_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    import perf.gate.processes
    from perf.gate.compare import GateSettings, Row
    from perf.gate.confirm import Sides, confirm_rows

    looks: list[list[str]] = []

    def processes_of_50_s(children, options, folder, tree, on_done=None):  # the processes, not the planning under test
        looks.append([child.label for child in children])
        return [perf.gate.processes.ChildResult(c.label, c.kind, 0, 50.0, None, folder / f"{c.label}.log")
                for c in children]

    monkeypatch.setattr(perf.gate.processes, "run_children", processes_of_50_s)
    row = Row("test_x.py::test_busy", "test_busy", None, "slower", suspect=["time"])
    spent = confirm_rows([row], None, GateSettings(confirm=8, confirm_budget_s=320.0),
                         Sides(tmp_path, tmp_path), tmp_path / "confirm", ())  # fmt: skip
    # 2 pairs took 200 s; 2 more would likely end at 400 s, after the budget; 1 more at 300 s, within it
    assert looks == [["base-01", "candidate-01", "candidate-02", "base-02"], ["base-03", "candidate-03"]]
    assert spent == 300.0 and row.verdict == "inconclusive"  # judged finally: these processes saved nothing


def test_a_suspect_of_the_base_commit_itself_is_confirmed_on_pairs_run_from_this_tree(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True)

    folder = write_project(tmp_path, ["perf.plugin", "perf.fixtures.reporting"])
    (folder / ".gitignore").write_text("storage/\nreports/\n__pycache__/\n")
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    assert _pytest(folder, "--benchmark-autosave").ret == 0  # main's history: this very commit
    result = _pytest(folder, "--perf-compare", "--perf-inject-delay=2", "--perf-confirm=2", "-rf")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines([
        "perf-compare confirmation: base-01 (base) * s, exit 0",
        "perf-compare confirmation: candidate-01 (candidate) * s, exit 0",
        "perf-compare: slower: * confirmed by 2 pair(s) of fresh processes: time *"])  # fmt: skip
    logs = {log.name: log.read_text() for log in (folder / "reports" / "confirm").glob("*/*-0*.log")}
    assert sorted(logs) == ["base-01.log", "base-02.log", "candidate-01.log", "candidate-02.log"]
    assert all(("--perf-inject-delay=2" in text) == name.startswith("candidate") for name, text in logs.items())


def test_benchmark_compare_fail_without_a_history_is_a_failed_test_and_says_it_cannot_be_trusted(
        project: pytest.Pytester) -> None:  # fmt: skip
    result = _pytest(project.path, "--benchmark-compare=0001", "--benchmark-compare-fail=median:5%",
                     "--perf-inject-delay=2", "-rf")  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "--benchmark-compare-fail against 0001_*.json: Field 'median' has failed PercentageRegressionCheck: *",
        "--benchmark-compare-fail: applied as pytest-benchmark has it, against one saved process; this runner's "
        "history has 1 comparable run(s), fewer than the 3 the gate needs *",
        "--benchmark-compare-fail: 1 benchmark(s) regressed; each is a failed test above",
        "FAILED test_tiny.py::test_busy - --benchmark-compare-fail against 0001_*", "*1 failed*"])  # fmt: skip
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "PerformanceRegression" not in output


def test_benchmark_compare_fail_is_not_applied_where_a_history_judges_instead(project: pytest.Pytester) -> None:
    for _ in range(2):  # a history of 3 runs
        assert _pytest(project.path, "--benchmark-autosave").ret == pytest.ExitCode.OK
    result = _pytest(project.path, "--benchmark-compare=0003", "--benchmark-compare-fail=median:5%",
                     "--perf-inject-delay=2", "--perf-confirm=0", "-rf")  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "--benchmark-compare-fail=median:5% not applied: it compares one saved process, and identical code moved up "
        "to *% between the 3 processes of this runner's history; it flagged 1 benchmark(s); the gate judged against "
        "that history instead: 1 slower, 0 faster, 0 no change, 0 inconclusive, 0 missing",
        "FAILED test_tiny.py::test_busy - perf-compare: slower: *"])  # fmt: skip
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "PerformanceRegression" not in output
    assert "--benchmark-compare-fail against" not in output
    same = _pytest(project.path, "--benchmark-compare=0003", "--benchmark-compare-fail=median:1%", "--perf-confirm=0")
    assert same.ret == pytest.ExitCode.OK, same.stdout.str()  # the gate's verdict, whatever its own check found
    same.stdout.fnmatch_lines(["--benchmark-compare-fail=median:1% not applied: *: 0 slower, *"])


def test_autosave_refuses_a_run_with_an_injected_slowdown(project: pytest.Pytester) -> None:
    result = _pytest(project.path, "--benchmark-autosave", "--perf-inject-delay=2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --benchmark-autosave refuses a run made with --perf-inject-delay=2.0 (ms):*"])
    assert len(load_runs(project.path / "storage")) == 1  # nothing saved


def test_a_run_saved_apart_is_marked_injected_and_never_taken_as_a_baseline(project: pytest.Pytester) -> None:
    result = _pytest(project.path, "--benchmark-save=slowed", "--perf-inject-delay=2")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["perf: INJECTED SLOWDOWN (--perf-inject-delay=2.0 (ms)): a test-only run*"])
    base, slowed = load_runs(project.path / "storage")
    assert slowed.raw["perf_run"]["injected"] == {"inject_delay_ms": 2.0} and base.raw["perf_run"]["injected"] == {}
    assert "perf_run" not in slowed.machine_info  # machine_info stays the same from run to run
    # The latest baseline skips the injected run; naming it is refused, by either compare.
    result = _pytest(project.path, "--perf-compare")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["--perf-compare against main's history of 1 comparable run(s) on this runner (0001 .. "
                                 "0001, *"])  # fmt: skip
    for option in ("--perf-compare=0002", "--benchmark-compare=0002"):
        result = _pytest(project.path, option)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, option
        result.stderr.fnmatch_lines([f"ERROR: {option.split('=')[0]}: the saved run in '*' (saved {slowed.datetime}) "
                                     "was made with --perf-inject-delay=2.0 (ms), a deliberate slowdown: it is not a "
                                     "baseline*"])  # fmt: skip


def test_verdicts_name_the_run_they_judged_and_its_baseline(project: pytest.Pytester) -> None:
    result = _pytest(project.path, "--perf-compare", "--benchmark-autosave")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    base, current = load_runs(project.path / "storage")
    import json

    document = json.loads((project.path / "reports" / "perf-compare.json").read_text())
    assert document["current"] == {"run_id": current.run_id, "injected": {}}
    assert document["baseline"]["run_id"] == base.run_id != current.run_id and current.run_id is not None
    # The run's own marks sit beside machine_info, which stays the same (pytest-benchmark warns when it differs).
    assert base.machine_info == current.machine_info
    assert "machine_info is different" not in result.stdout.str() + result.stderr.str()


def test_unmodified_code_passes_the_compare_with_no_change(project: pytest.Pytester) -> None:
    result = _pytest(project.path, "--perf-compare=0001")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["test_busy *ms *ms *[[]*, *[]] *no change*",
                                 "perf-compare passed: 0 slower, 0 faster, 1 no change, 0 inconclusive, 0 missing;*"])


def test_a_run_of_part_of_the_historys_benchmarks_says_the_first_pass_may_read_its_context(
        project: pytest.Pytester) -> None:
    """Measured on the H100: torch-compile fp16 b1 read 1.9-5% slower in a process of that benchmark alone than in
    one of the CI selection, so a ``-k`` run against a history of whole runs is told so (results.md, 2026-11-27)."""
    tiny = (project.path / "test_tiny.py").read_text()
    (project.path / "test_also.py").write_text(tiny.replace("def test_busy(", "def test_also("))
    assert _pytest(project.path, "--benchmark-autosave").ret == pytest.ExitCode.OK
    part = _pytest(project.path, "--perf-compare", "--perf-confirm=0", "-k", "test_busy")
    assert "this run measured 1 of the 2 benchmarks of the history's latest run" in part.stdout.str()
    whole = _pytest(project.path, "--perf-compare", "--perf-confirm=0")
    assert "benchmarks of the history's latest run" not in whole.stdout.str()


def test_an_unstable_sample_is_measured_again_and_recorded_then_judged_like_any_other(project: pytest.Pytester) -> None:
    # A CV limit of 0 that no real rounds meet: unstable after measuring twice (one re-measurement).
    unstable = ("--perf-compare", "--perf-max-cv=0", "--perf-max-remeasure=1", "--perf-confirm=0")
    result = _pytest(project.path, *unstable, "--benchmark-autosave")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["test_busy *no change*"])
    stability = load_runs(project.path / "storage")[1].benchmarks["test_tiny.py::test_busy"].stability
    assert stability is not None and stability["verdict"] == "unstable" and stability["measurements"] == 2
    assert len(stability["attempts"]) == 2


def test_compare_without_a_saved_run_is_a_usage_error(project: pytest.Pytester) -> None:
    result = _pytest(project.path, "--perf-compare=0042")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --perf-compare: no saved run matching '0042' in *"])


def test_compare_with_benchmarks_disabled_is_a_usage_error_not_a_silent_pass(project: pytest.Pytester) -> None:
    result = _pytest(project.path, "--perf-compare", "--benchmark-disable")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --perf-compare: benchmarks are disabled *nothing to compare*"])


def test_too_few_rounds_are_unstable_without_measuring_again(project: pytest.Pytester) -> None:
    result = _pytest(project.path, "--benchmark-min-rounds=3", "--benchmark-max-time=0.000001",
                     "--benchmark-autosave")  # fmt: skip
    assert result.ret == pytest.ExitCode.OK
    stability = load_runs(project.path / "storage")[-1].benchmarks["test_tiny.py::test_busy"].stability
    assert stability is not None and stability["verdict"] == "unstable" and stability["measurements"] == 1
    assert stability["reason"] == "only 3 rounds (need >= 5)"


def test_runs_numbered_10000_and_up_are_in_the_history_in_the_order_of_their_numbers(project: pytest.Pytester) -> None:
    (saved,) = (project.path / "storage").glob("*/0001_*.json")
    shutil.copy(saved, saved.with_name(saved.name.replace("0001_", "10000_")))  # what pytest-benchmark saves after 9999
    saved.rename(saved.with_name(saved.name.replace("0001_", "9999_")))
    result = _pytest(project.path, "--perf-compare", "--perf-confirm=0")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["--perf-compare against main's history of 2 comparable run(s) on this runner "
                                 "(9999 .. 10000, *"])


def _stored_profile(project: pytest.Pytester, **entry: object) -> Path:
    """This runner's noise profile in the storage, whose one entry has ``entry``'s fields."""
    from perf.gate.noise import NOISE_DIR, profile_key

    (run,) = load_runs(project.path / "storage")
    good = {"processes": 3, "medians_s": [1e-3, 1.01e-3, 0.99e-3], "cv": 0.01, "max_ratio": 0.02, "total_sd": 0.01,
            "within_se": 0.002, "between_sd": 0.0098}  # fmt: skip
    path = project.path / "storage" / NOISE_DIR / f"{profile_key(run.fingerprint)}.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"format": 1, "key": "k", "fingerprint": run.fingerprint, "created": "2026-11-23",
                                "runs": [], "entries": {"test_tiny.py::test_busy": {"time": {**good, **entry}}}}))
    return path


def test_a_bad_stored_noise_profile_is_a_warning_naming_it_and_the_compare_goes_on(project: pytest.Pytester) -> None:
    path = _stored_profile(project, medians_s=[0, 0, 0])
    result = _pytest(project.path, "--perf-compare", "--perf-confirm=0")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines([f"*NoiseProfileWarning: ignored this runner's stored noise profile, '{path}': entry "
                                 "'test_tiny.py::test_busy' metric 'time': medians_s holds 0, not a median in seconds*",
                                 "*test_busy *no change*"])  # fmt: skip
    assert "--perf-noise-profile" not in result.stdout.str() + result.stderr.str()


def test_a_bad_noise_profile_named_with_the_option_is_one_usage_line(project: pytest.Pytester) -> None:
    path = _stored_profile(project, between_sd="0.01")
    result = _pytest(project.path, "--perf-compare", f"--perf-noise-profile={path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.stderr.lines if line] == [
        f"ERROR: --perf-noise-profile: '{path}': entry 'test_tiny.py::test_busy' metric 'time': between_sd is '0.01', "
        "expected a number from 0 to 5"]


def test_the_noise_profile_the_gate_judged_with_is_named_in_the_verdicts_and_kept_in_the_store(
        project: pytest.Pytester) -> None:  # fmt: skip
    from perf.store.db import open_store

    path = _stored_profile(project)
    store = project.path / "history.sqlite"
    result = _pytest(project.path, "--perf-compare", "--perf-confirm=0", "--benchmark-autosave",
                     f"--perf-store={store}")  # fmt: skip
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    verdicts = load_verdicts(project.path / "reports")
    assert verdicts is not None
    assert (verdicts["settings"]["noise_profile"], verdicts["settings"]["noise_processes"]) == (str(path), 0)  # its "runs": []
    with open_store(str(store)) as history:
        stored = history.noise_profile_json()
    assert stored is not None and json.loads(stored)["entries"]["test_tiny.py::test_busy"]["time"]["processes"] == 3
