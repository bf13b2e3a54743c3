"""--perf-noise and --perf-selftest-processes for real: child pytest processes of a tiny benchmark on a virtual
clock (each process draws its own noise, as real processes do: the k-th process of a folder seed k), the profile
they leave, and --perf-compare using it; plus how the parent's options reach the children, and the commands that
simulate CI runs from such folders (python -m perf.crossprocess, perf-history simulate)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perf.crossprocess import DEFAULT_DRAWS
from perf.crossprocess import main as crossprocess_main
from perf.gate.noise import load_profile
from perf.gate.processes import forwarded_options
from tiny_bench import child_env, write_project

ROOT = Path(__file__).resolve().parents[2]
RUN = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:xdist", "-p", "no:randomly",
       "--perf-device=cpu", "--benchmark-storage=storage", "--benchmark-max-time=0.05",
       "--benchmark-min-rounds=30", "--benchmark-warmup=off", "--perf-reports-dir=reports")  # fmt: skip


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = child_env()
    return subprocess.run([sys.executable, "-m", "pytest", *RUN, *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> Path:
    # Each process's clock runs up to 3% off and calls vary by 1%: a spread only a cross-process view sees.
    return write_project(tmp_path, ["perf.plugin", "perf.fixtures.reporting"],
                         offset=0.03, spread=0.01)


def test_noise_runs_fresh_processes_and_saves_the_profile_the_compare_then_uses(project: Path) -> None:
    noise = _pytest(project, "--perf-noise=4", "--perf-runs-dir=runs")
    assert noise.returncode == 0, noise.stdout + noise.stderr
    for k in range(4):
        assert f"perf processes: {k + 1}/4 a0{k} (identical)" in noise.stdout
    assert "Noise between processes, per family" in noise.stdout and "noise profile saved:" in noise.stdout
    (profile_file,) = (project / "storage" / "noise").glob("*.json")
    profile = load_profile(profile_file)
    entry = profile.entries["test_tiny.py::test_busy"]["time"]
    assert entry.processes == 4 and 0.001 < entry.cv < 0.06  # the per-process offsets, seen
    assert not list((project / "storage").glob("*/0*.json"))  # the children saved into the runs folder only
    assert len(list((project / "runs" / "storage").glob("*/0*_a0*.json"))) == 4

    assert _pytest(project, "--benchmark-autosave").returncode == 0
    compare = _pytest(project, "--perf-compare", "--perf-confirm=0")
    assert compare.returncode == 0, compare.stdout
    assert "--perf-compare against main's history of 1 comparable run(s)" in compare.stdout
    row = next(line for line in compare.stdout.splitlines() if line.startswith("test_busy"))
    assert row.split()[-3:] == ["5", "no", "change"]  # the saved run and the profile's 4 processes

    plain = _pytest(project, "--perf-compare", "--perf-noise-profile=none", "--perf-confirm=0")
    assert "history of 1 comparable run(s)" in plain.stdout and "seed a history with --perf-noise=10" in plain.stdout
    assert "no change  (history too short)" in plain.stdout  # the row's note, its figures in the verdict file


def test_the_childrens_runs_stay_out_of_the_history_store_the_ini_names(project: Path) -> None:
    (project / "pytest.ini").write_text("[pytest]\nperf_store = history/h.sqlite\n")
    noise = _pytest(project, "--perf-noise=2", "--perf-runs-dir=runs")
    assert noise.returncode == 0, noise.stdout + noise.stderr
    assert len(list((project / "runs" / "storage").glob("*/0*_a0*.json"))) == 2
    assert not (project / "history").exists()  # the store the ini names holds no child's run: none was made


def test_a_saved_plan_resumes_and_a_different_one_is_refused(project: Path) -> None:
    first = _pytest(project, "--perf-noise=2", "--perf-runs-dir=runs")
    assert first.returncode == 0, first.stdout
    log_file = project / "runs" / "a01.log"
    log_file.write_text(re.sub(r"after [\d.]+ s$", "after 42.0 s", log_file.read_text(), flags=re.MULTILINE))
    again = _pytest(project, "--perf-noise=2", "--perf-runs-dir=runs")
    assert again.returncode == 0
    # Resumed, not run again: how each child ended comes from its log.
    assert "perf processes: 2/2 a01 (identical) 42 s, exit 0, saved" in again.stdout
    other = _pytest(project, "--perf-noise=3", "--perf-runs-dir=runs")
    assert other.returncode == pytest.ExitCode.USAGE_ERROR
    assert "holds another plan" in other.stderr


def test_a_self_test_whose_regressions_take_it_past_the_process_bound_is_refused_before_any_child(
        tmp_path: Path) -> None:  # fmt: skip
    """K = 1000 is allowed alone; its K / 5 processes per regression on top were planned and started."""
    runs = tmp_path / "runs"
    result = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "perf" / "test_inference_speed.py"), *RUN,
                             "--perf-backends=torch", "--perf-selftest-processes=1000",
                             "--perf-selftest-regressions=layer:5%,layer:6%", f"--perf-runs-dir={runs}"],
                            cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert result.stderr.strip() == ("ERROR: --perf-selftest-processes: the plan holds 1400 processes (K and K / 5 per "
                                     "regression), more than 1000; give a smaller K or fewer regressions")
    assert not runs.exists()


def test_a_regression_given_twice_is_planned_once() -> None:
    from perf.options import parse_regressions

    assert [str(r) for r in parse_regressions("layer:5%, layer:5.0%,preprocess:5%,layer:5%")] == [
        "layer:5%", "preprocess:5%"]  # fmt: skip


def test_a_resumed_childs_saved_run_that_is_no_longer_usable_is_one_line_naming_it(project: Path) -> None:
    first = _pytest(project, "--perf-noise=2", "--perf-runs-dir=runs")
    assert first.returncode == 0, first.stdout
    (saved,) = (project / "runs" / "storage").glob("*/0001_a00.json")
    saved.write_text('{"benchmarks": 3}')  # damaged since: the resumed call reads it, runs no child again
    again = _pytest(project, "--perf-noise=2", "--perf-runs-dir=runs")
    assert again.returncode == pytest.ExitCode.TESTS_FAILED and "INTERNALERROR" not in again.stdout + again.stderr
    assert (f"perf processes: '{saved}': not a usable saved run: 'benchmarks' is a number, expected a list; move it "
            "away to run a00 again") in again.stdout
    assert saved.read_text() == '{"benchmarks": 3}'  # kept as it was


def test_a_resumed_childs_run_of_another_machine_is_one_line_not_pooled_into_this_runners_profile(
        project: Path) -> None:
    first = _pytest(project, "--perf-noise=2", "--perf-runs-dir=runs")
    assert first.returncode == 0, first.stdout
    (profile,) = (project / "storage" / "noise").glob("*.json")
    before = profile.read_bytes()
    (saved,) = (project / "runs" / "storage").glob("*/0001_a00.json")
    document = json.loads(saved.read_text())
    document["machine_info"]["perf"]["gpu_name"] = "NVIDIA H200"  # a folder resumed on another card
    saved.write_text(json.dumps(document))
    again = _pytest(project, "--perf-noise=2", "--perf-runs-dir=runs")
    assert again.returncode == pytest.ExitCode.TESTS_FAILED and "INTERNALERROR" not in again.stdout + again.stderr
    assert (f"perf processes: '{saved}': measured on another machine (gpu_name: saved 'NVIDIA H200', this machine "
            "None); move it away to run a00 again") in again.stdout, again.stdout
    assert profile.read_bytes() == before  # this runner's profile keeps no process of another machine


@pytest.mark.parametrize(("content", "problem"), [
    ("{", "not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ('{"children": [{"label": "a01"}]}', "not the list of children a plan holds"),
    ('["a01"]', "not the list of children a plan holds"),
    ("[" * 100_000, "not JSON: nested too deeply"),
    (None, "it is a directory"),
])  # fmt: skip
def test_a_runs_folder_whose_plan_is_not_one_is_one_usage_line(
    project: Path, content: str | None, problem: str
) -> None:
    plan = project / "runs" / "plan.json"
    plan.parent.mkdir()
    if content is None:
        plan.mkdir()
    else:
        plan.write_text(content)
    result = _pytest(project, "--perf-noise=2", "--perf-runs-dir=runs")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert [line for line in result.stderr.splitlines() if line.strip()] == [
        f"ERROR: --perf-runs-dir: '{plan}' is not a plan ({problem}): delete it or give another folder"]
    assert "INTERNALERROR" not in result.stdout and sorted(p.name for p in plan.parent.iterdir()) == ["plan.json"]
    assert content is None or plan.read_text() == content  # kept as it was


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["1.2.3", "...", "9" * 400, "1e5", ""]), st.sampled_from(["0", "-" + "9" * 5000, "1.5"]))
def test_a_resumed_childs_log_footer_that_is_no_exit_and_seconds_reads_as_no_footer(
        tmp_path: Path, seconds: str, code: str) -> None:
    """A saved child's log ending in a footer of other figures ("after 1.2.3 s", 400 digits of seconds, an exit
    status of 5000 digits) is a log without one (exit 0, 0 s), never a ValueError or infinite seconds."""
    from perf.gate.processes import Child, run_children

    folder = tmp_path / "runs"
    (folder / "storage" / "m").mkdir(parents=True, exist_ok=True)
    (folder / "storage" / "m" / "0001_a01.json").write_text("{}")  # saved by an earlier call: not run again
    (folder / "a01.log").write_text(f"...\n# perf child: exit {code} after {seconds} s\n")
    (result,) = run_children([Child("a01", "identical", ("t.py::t",))], [], folder, tmp_path)
    assert (result.returncode, result.seconds) == (0, 0.0)
    (folder / "a01.log").write_text("...\n# perf child: exit 3 after 12.5 s\n")  # the footer the suite writes
    (result,) = run_children([Child("a01", "identical", ("t.py::t",))], [], folder, tmp_path)
    assert (result.returncode, result.seconds) == (3, 12.5)


def test_a_time_budget_stops_starting_children_and_says_how_to_go_on(project: Path) -> None:
    result = _pytest(project, "--perf-noise=6", "--perf-runs-dir=runs", "--perf-processes-budget=0.001")
    assert result.returncode == pytest.ExitCode.TESTS_FAILED  # fewer than 2 runs: no profile
    assert "of 6 planned processes ran within --perf-processes-budget; resume with --perf-runs-dir=" in result.stdout


def test_selftest_across_processes_simulates_ci_runs_and_runs_pytest_benchmarks_own_compare(project: Path) -> None:
    result = _pytest(project, "--perf-selftest-processes=3", "--perf-runs-dir=runs")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Cross-process self-test: simulated CI runs of identical code" in result.stdout
    summary = json.loads((project / "reports" / "selftest-processes.json").read_text())
    (everything,) = [row for row in summary["identical"] if row["family"] == "all"]
    assert everything["runs"] == 3 * DEFAULT_DRAWS and everything["red runs"].startswith("0/")
    assert summary["compare_fail"]["check"] == "median:5%"
    assert summary["compare_fail"]["consecutive processes run with it"].endswith("/2 passed")
    log = (project / "runs" / "a01.log").read_text()
    assert "--benchmark-compare=0001" in log.splitlines()[0] and "--benchmark-compare-fail=median:5%" in log


def test_cross_process_options_refuse_xdist_and_compare(project: Path) -> None:
    result = _pytest(project, "--perf-noise=2", "--perf-compare")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR and "drop --perf-compare" in result.stderr
    bad = _pytest(project, "--perf-noise=1")
    assert bad.returncode == pytest.ExitCode.USAGE_ERROR and "number of processes from 2 to 1000" in bad.stderr


def test_children_get_the_parents_options_but_not_its_paths_saving_or_comparing() -> None:
    args = ["perf", "-m", "ci", "--perf-noise=10", "--benchmark-autosave", "--perf-compare", "0003",
            "--benchmark-storage", "s", "--perf-device=cuda", "-k", "graph", "--perf-runs-dir", "r",
            "--benchmark-compare-fail=median:5%", "--perf-min-effect=5%"]  # fmt: skip
    kept = forwarded_options(args, ["perf"], {"--perf-compare": "0003"})
    assert kept == ["-m", "ci", "--perf-device=cuda", "-k", "graph", "--perf-min-effect=5%"]


@pytest.mark.parametrize(("option", "value", "expected"), [
    ("--history", "0", "Expected a positive integer."),
    ("--confirm", "-1", "Expected a number of pairs from 0 to 1000."),
    ("--min-effect", "150%", "Expected a fraction >= 0 and < 1 (100%), e.g. 2% or 0.02."),
    ("--compare-fail", "abc", "Expected a check as --benchmark-compare-fail takes it, FIELD:PERCENT% or FIELD:SECONDS "
                              "with FIELD one of min, max, mean, median, stddev, iqr, e.g. median:5%."),
    ("--compare-fail", "median:5 %", "Expected a check as --benchmark-compare-fail takes it"),
])  # fmt: skip
def test_crossprocess_reads_its_numbers_with_the_suites_parsers(
    option: str, value: str, expected: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exit_:
        crossprocess_main([str(tmp_path), option, value])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()  # one line, no usage block
    assert line.startswith(f"python -m perf.crossprocess: error: argument {option}: Could not parse value: "
                           f"{value!r}. {expected}")  # fmt: skip


def _runs_folder(folder: Path, count: int = 4) -> Path:
    """A --perf-runs-dir folder of ``count`` identical saved runs (a01, a02, ...) of one benchmark."""
    storage = folder / "storage" / "machine"
    storage.mkdir(parents=True)
    fingerprint = {"device": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3", "driver_version": "580", "cuda_version": "13"}
    for k in range(1, count + 1):
        data = [1e-3 * (1 + 0.002 * x) for x in np.random.default_rng(k).standard_normal(40)]
        bench = {"fullname": "perf/t.py::a", "name": "a", "group": "inference", "extra_info": {},
                 "stats": {"median": float(np.median(data)), "min": min(data), "data": data}}  # fmt: skip
        document = {"benchmarks": [bench], "datetime": f"2026-11-01T00:0{k}:00", "commit_info": {"id": "c1"},
                    "machine_info": {"perf": fingerprint}, "perf_run": {"run_id": f"r{k}", "injected": {}}}  # fmt: skip
        (storage / f"{k:04d}_a{k:02d}.json").write_text(json.dumps(document))
    return folder


COMMANDS = {"python -m perf.crossprocess": ["-m", "perf.crossprocess"],
            "perf-history": ["-m", "perf.store.cli", "simulate"]}  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("bad", ["check", "draws", "json-folder", "json-missing-folder", "json-under-a-file"])
def test_simulated_ci_runs_refuse_bad_arguments_in_one_line_before_simulating(
    tmp_path: Path, command: str, bad: str
) -> None:
    runs = _runs_folder(tmp_path / "runs")
    (tmp_path / "a-file").write_text("kept\n")
    args, expected = {
        "check": (["--compare-fail", "abc"], "argument --compare-fail: Could not parse value: 'abc'. Expected a check "
                  "as --benchmark-compare-fail takes it"),
        "draws": (["--draws", "1000000000000"], "argument --draws: Could not parse value: '1000000000000'. Expected "
                  "a number of draws from 1 to 1000."),  # drawn until memory ran out
        "json-folder": (["--json", str(runs)], f"--json '{runs}' is a folder: give a file in it"),
        "json-missing-folder": (["--json", str(tmp_path / "nope" / "v.json")],
                                f"--json '{tmp_path / 'nope' / 'v.json'}': '{tmp_path / 'nope'}': no such folder"),
        "json-under-a-file": (["--json", str(tmp_path / "a-file" / "v.json")],
                              f"--json '{tmp_path / 'a-file' / 'v.json'}': '{tmp_path / 'a-file'}': not a folder"),
    }[bad]  # fmt: skip
    result = subprocess.run([sys.executable, *COMMANDS[command], str(runs), "--draws", "1", *args], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert (result.returncode, result.stdout) == (2, ""), result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"{command}: error: {expected}"), line
    assert (tmp_path / "a-file").read_text() == "kept\n" and not (tmp_path / "nope").exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_simulated_ci_runs_write_their_json_whole_with_the_mode_open_would_give(tmp_path: Path, command: str) -> None:
    runs, out = _runs_folder(tmp_path / "runs"), tmp_path / "verdicts.json"
    result = subprocess.run(["sh", "-c", 'umask 002 && exec "$@"', "sh", sys.executable, *COMMANDS[command], str(runs),
                             "--draws", "1", "--history", "3", "--compare-fail", "min:0.001", "--json", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("4 identical runs, 0 regressed runs") and "| min:0.001 | 12 |" in result.stdout
    assert [run["kind"] for run in json.loads(out.read_text())] == ["identical"] * 4
    assert out.stat().st_mode & 0o777 == 0o664  # umask 002, as open() would
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs", "verdicts.json"]  # no temporary file left


def test_the_runs_folders_are_sorted_by_each_runs_own_mark_whatever_its_benchmarks_hold(tmp_path: Path) -> None:
    from perf.crossprocess import load_runs_dirs

    runs = _runs_folder(tmp_path / "runs")
    files = sorted((runs / "storage" / "machine").iterdir())
    for path, injected, extra in [(files[0], {"regression": "layer:5%"}, {}),
                                  (files[1], {}, {"injected": "not a mapping"})]:  # fmt: skip
        document = json.loads(path.read_text())
        document["perf_run"]["injected"] = injected
        document["benchmarks"][0]["extra_info"] = extra
        path.write_text(json.dumps(document))
    identical, regressed = load_runs_dirs([str(runs)])
    assert sorted(identical) == ["a02", "a03", "a04"] and list(regressed) == ["layer:5%"]
    assert list(regressed["layer:5%"]) == ["a01"]


@pytest.mark.parametrize("mark", ["x", 5, True, "layer:500%"])
def test_a_run_marked_with_a_regression_no_option_makes_is_one_error_naming_it(tmp_path: Path, mark: object) -> None:
    from perf.crossprocess import load_runs_dirs
    from perf.runs import HistoryError

    runs = _runs_folder(tmp_path / "runs")
    path = sorted((runs / "storage" / "machine").iterdir())[1]
    document = json.loads(path.read_text())
    document["perf_run"]["injected"] = {"regression": mark}
    path.write_text(json.dumps(document))
    with pytest.raises(HistoryError) as e:  # once argparse's ArgumentTypeError, a traceback of perf-history simulate
        load_runs_dirs([str(runs)])
    assert str(e.value).startswith(f"'{path}': injected regression: Could not parse value: '{mark}'. Expected "
                                   "KIND:PERCENT"), str(e.value)


def test_the_simulator_reads_a_saved_time_as_the_store_does_whatever_the_machine_s_time_zone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from perf.crossprocess import _when
    from perf.runs import SavedRun

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        naive, aware = (SavedRun(Path(f"{i}.json"), i, when, None, {}, {})
                        for i, when in ((1, "2026-01-01T10:00:00"), (2, "2026-01-01T10:30:00+00:00")))
        assert _when(aware) - _when(naive) == 1800  # a time without an offset is UTC, as pytest-benchmark writes it
    finally:
        monkeypatch.undo()
        time.tzset()
