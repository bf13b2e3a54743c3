"""Reliability of saved results across runs: two runs sharing one reports folder keep both reports, and a saved
run that is valid JSON of the wrong types is skipped with a warning by perf-report, or refused by its readers."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from perf.runs import HistoryError, load_run
from perf.report_cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFTEST = 'pytest_plugins = ["perf.plugin", "perf.fixtures.reporting"]\n'
TESTS = """
import os, time

import pytest

from perf.report import schema


@pytest.mark.parametrize("i", range(4))
def test_row(perf_report, i):
    time.sleep(0.5)  # long enough for the two runs to overlap
    perf_report.add(schema.INFERENCE, {"case": os.environ["RUN_TAG"], "batch": i})
"""


def _good_run(benches: int = 1) -> dict:
    return {"benchmarks": [{"name": f"test_{i}", "fullname": f"perf/t.py::test_{i}", "group": "inference",
                            "stats": {"median": 0.001, "iqr": 0.0001, "rounds": 3, "data": [0.001, 0.0011, 0.0009]}}
                           for i in range(benches)],
            "machine_info": {"node": "x"}, "commit_info": {"id": "abc1234"}, "datetime": "2026-01-01T00:00:00"}


def test_two_parallel_runs_sharing_a_reports_folder_keep_both_reports(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_rows.py").write_text(TESTS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | {"PYTHONPATH": str(ROOT)}
    procs = {tag: subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                                    "--perf-device=cpu", "--perf-reports-dir=reports"], cwd=tmp_path,
                                   env=env | {"RUN_TAG": tag}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
             for tag in ("a", "b")}  # fmt: skip
    outputs = {tag: proc.communicate(timeout=120) for tag, proc in procs.items()}
    reports = tmp_path / "reports"
    own = sorted(reports.glob("perf-report-*.json"))
    assert len(own) == 2, (sorted(p.name for p in reports.iterdir()), outputs)
    runs = {}
    for path in own:
        rows = json.loads(path.read_text())["tables"]["Inference"]
        tags = {row["case"] for row in rows}
        assert len(tags) == 1 and len(rows) == 4, rows  # one run's rows, all of them, no other run's
        runs[tags.pop()] = path
    assert set(runs) == {"a", "b"}
    for tag, (stdout, stderr) in outputs.items():
        assert procs[tag].returncode == 0, stdout + stderr
        assert "perf report" in stdout and f"saved: {runs[tag].with_suffix('.md')}" in stdout, stdout
    latest = json.loads((reports / "perf-report.json").read_text())
    assert latest in [json.loads(p.read_text()) for p in own]  # the last run to finish, whole
    assert not list(reports.glob("*gw*")) and not list(reports.glob("*.tmp*"))


NAMED = """
import os

from perf.report import schema


def test_named(benchmark, perf_measure, perf_report):
    benchmark.extra_info["video"] = os.fsdecode(b"clip\\xff.mp4")  # as perf/test_end_to_end.py records it
    perf_measure(benchmark, lambda: None)
    perf_report.add(schema.INFERENCE, {"case": "named", "batch": 1})  # a report, whose subject names the video
"""


def test_a_run_on_a_video_named_not_utf8_is_saved_stored_and_compared(tmp_path: Path) -> None:
    video = tmp_path / os.fsdecode(b"clip\xff.mp4")  # a name Linux allows and UTF-8 cannot spell
    video.write_bytes((ROOT / "tests" / "data" / "video" / "h264-seed3-320x180-12f.mp4").read_bytes())
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_named.py").write_text(NAMED)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | {"PYTHONPATH": str(ROOT)}
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--perf-device=cpu",
           f"--perf-video={video}", "--perf-reports-dir=reports", "--benchmark-storage=storage",
           "--benchmark-max-time=0.02", "--benchmark-min-rounds=3", "--benchmark-warmup=off"]  # fmt: skip
    for extra in ("--benchmark-autosave", "--benchmark-compare"):  # saved (and stored), then read back
        done = subprocess.run([*run, extra], cwd=tmp_path, env=env, capture_output=True, text=True,
                              errors="surrogateescape", timeout=300, check=False)  # fmt: skip
        assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, done.stdout[-3000:] + done.stderr
    (saved,) = (tmp_path / "storage").glob("*/0001_*.json")
    assert load_run(saved).benchmarks  # a usable saved run: perf-history, perf-report and the gate read it
    assert "clip\\\\udcff.mp4" in saved.read_text()
    assert main(["--storage", str(tmp_path / "storage"), "--reports", str(tmp_path / "reports"),
                 "--out", str(tmp_path / "out")]) == 0  # the run's perf-report.json names the video too
    assert "clip\\udcff.mp4" in (tmp_path / "reports" / "perf-report.md").read_text()


def test_perf_report_skips_a_run_of_wrong_types_among_good_ones_with_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    machine = tmp_path / "storage" / "Linux-CPython-3.11-64bit"
    machine.mkdir(parents=True)
    for number in (1, 3):
        (machine / f"000{number}_good.json").write_text(json.dumps(_good_run(2)))
    bad = _good_run(2)
    bad["benchmarks"][1]["stats"]["data"] = [0.001, "slow"]
    (machine / "0002_bad.json").write_text(json.dumps(bad))
    assert main(["--storage", str(tmp_path / "storage"), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [f"perf-report: warning: skipped corrupt saved run: '{machine / '0002_bad.json'}': not a usable "
                   "saved run: benchmark 'perf/t.py::test_1': stats.data[1] is 'slow', not a number"]  # fmt: skip
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"summary.md", "index.html"}


@pytest.mark.parametrize("tables, problem", [
    ({"End-to-end stages (ms per frame)": [{"Model Type": "torch", "e2e FPS": "fast"}]}, "'e2e FPS' is 'fast'"),
    ({"Parity vs torch fp32": [{"candidate": "x", "ious": 0.9}]}, "'ious' is a number, expected a list"),
    ({"Parity vs torch fp32": [{"candidate": "x", "failures": "none"}]}, "'failures' is 'none', expected a list of"),
    ({"Inference": [{"case": "torch fp32", "median ms": "1.5"}]}, "table 'Inference' row 0: 'median ms' is '1.5'"),
    ({"Rows": {"a": 1}}, "table 'Rows' is an object"),
])  # fmt: skip
def test_perf_report_json_of_wrong_types_is_one_line_and_writes_nothing(
        tables: dict, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "reports").mkdir()
    report = tmp_path / "reports" / "perf-report.json"
    report.write_text(json.dumps({"tables": tables}))
    (tmp_path / "storage" / "m").mkdir(parents=True)
    (tmp_path / "storage" / "m" / "0001_good.json").write_text(json.dumps(_good_run()))
    assert main(["--storage", str(tmp_path / "storage"), "--reports", str(tmp_path / "reports"),
                 "--out", str(tmp_path / "out")]) == 2  # fmt: skip
    (line,) = capsys.readouterr().err.splitlines()
    assert str(report) in line and problem in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("doc, problem", [
    ([1, 2], "the top level is a list"),
    ({"benchmarks": [{"name": "x", "fullname": "x", "stats": {"median": "1"}}]}, "stats.median is '1'"),
    ({"benchmarks": [{"name": "x", "fullname": "x", "stats": {"median": 1, "data": [1, None]}}]}, "stats.data[1]"),
    ({"benchmarks": [], "machine_info": "linux"}, "'machine_info' is a string"),
])  # fmt: skip
def test_history_refuses_a_saved_run_of_the_wrong_shape_naming_the_file(doc: object, problem: str,
                                                                         tmp_path: Path) -> None:
    path = tmp_path / "0001_x.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(HistoryError) as e:
        load_run(path)
    assert str(path) in str(e.value) and problem in str(e.value)


def _set(path: str, value: object) -> Callable[[dict], None]:
    """Sets ``path`` (keys and indexes, dotted) of a saved run to ``value``."""
    def edit(doc: dict) -> None:
        *parents, last = [int(k) if k.isdigit() else k for k in path.split(".")]
        for key in parents:
            doc = doc[key]
        doc[last] = value
    return edit


#: Saved runs run_problem used to pass that crashed a reader later: each is one reason, naming what is wrong.
CRASHED_LATER = {
    "fingerprint-not-an-object": (_set("machine_info.perf", "cuda"),
                                  "machine_info.perf is a string, expected an object"),
    "subject-not-an-object": (_set("machine_info.perf_subject", ["yolov4-tiny"]),
                              "machine_info.perf_subject is a list, expected an object"),
    "subject-backends-not-a-list": (_set("machine_info.perf_subject", {"model": "m.cfg", "backends": 3}),
                                    "machine_info.perf_subject.backends is a number, expected a list"),
    "commit-an-int": (_set("commit_info.id", 1234567), "commit_info.id is a number, expected a string"),
    "commit-a-list": (_set("commit_info.id", ["abc"]), "commit_info.id is a list, expected a string"),
    "node-an-int": (_set("machine_info.node", 7), "machine_info.node is a number, expected a string"),
    "median-too-large-for-a-float": (_set("benchmarks.1.stats.median", 10**400),
                                     "benchmark 'perf/t.py::test_1': stats.median is an integer of about 10^400, "
                                     "too large for a number"),
    "median-infinite": (_set("benchmarks.1.stats.median", math.inf),
                        "benchmark 'perf/t.py::test_1': stats.median is inf, not a finite number"),
    "round-infinite": (_set("benchmarks.1.stats.data", [0.001, -math.inf]),
                       "benchmark 'perf/t.py::test_1': stats.data[1] is -inf, not a finite number"),
    "name-lone-surrogate": (_set("benchmarks.1.name", "test_\ud800"),
                            "benchmarks[1].name is not valid Unicode text (it holds \\ud800, a lone surrogate)"),
    "extra-info-lone-surrogate": (_set("benchmarks.1.extra_info", {"note": "\udfff"}),
                                  "benchmarks[1].extra_info.note is not valid Unicode text (it holds \\udfff, a "
                                  "lone surrogate)"),
}


@pytest.mark.parametrize("case", CRASHED_LATER)
def test_perf_report_skips_a_run_that_crashed_a_reader_later_with_one_warning(
        case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edit, problem = CRASHED_LATER[case]
    machine = tmp_path / "storage" / "m"
    machine.mkdir(parents=True)
    for number in (1, 2):
        (machine / f"000{number}_good.json").write_text(json.dumps(_good_run(2)))
    bad = _good_run(2)
    edit(bad)
    (machine / "0003_bad.json").write_text(json.dumps(bad))
    assert main(["--storage", str(tmp_path / "storage"), "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"perf-report: warning: skipped corrupt saved run: '{machine / '0003_bad.json'}': not a usable saved run: "
        f"{problem}"]
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"summary.md", "index.html"}
    (machine / "0001_good.json").unlink()
    (machine / "0002_good.json").unlink()
    assert main(["--storage", str(tmp_path / "storage"), "--out", str(tmp_path / "alone")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"perf-report: error: '{machine / '0003_bad.json'}': not a usable saved run: {problem}"]
    assert not (tmp_path / "alone").exists()


@pytest.mark.parametrize("case", ["commit-an-int", "median-infinite", "name-lone-surrogate"])
def test_perf_history_import_refuses_a_run_that_crashed_a_reader_later_and_stores_nothing(
        case: str, tmp_path: Path) -> None:
    edit, problem = CRASHED_LATER[case]
    machine = tmp_path / "storage" / "m"
    machine.mkdir(parents=True)
    (machine / "0001_good.json").write_text(json.dumps(_good_run(2)))
    bad = _good_run(2)
    edit(bad)
    (machine / "0002_bad.json").write_text(json.dumps(bad))
    store = tmp_path / "h.sqlite"
    result = subprocess.run([sys.executable, "-m", "perf.store.cli", "--store", str(store), "import",
                             str(tmp_path / "storage")], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 2 and result.stdout == "", result
    assert result.stderr.splitlines() == [
        f"perf-history: error: '{machine / '0002_bad.json'}': not a usable saved run: {problem}"]


def test_nan_stays_a_statistic_not_measured_and_the_run_is_reported(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    machine = tmp_path / "storage" / "m"
    machine.mkdir(parents=True)
    run = _good_run(2)
    run["benchmarks"][1]["stats"].update(median=math.nan, iqr=math.nan, data=[0.001, math.nan, 0.0011])
    (machine / "0001_nan.json").write_text(json.dumps(run))
    assert load_run(machine / "0001_nan.json").benchmarks["perf/t.py::test_1"].has_rounds
    assert main(["--storage", str(tmp_path / "storage"), "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().err == ""
    assert "| test_1 |" in (tmp_path / "out" / "summary.md").read_text()


def test_perf_report_json_cells_null_or_nan_are_shown_as_not_measured_and_left_out_of_the_figures(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "perf-report.json").write_text(json.dumps({"tables": {
        "End-to-end stages (ms per frame)": [{"Model Type": "torch fp32", "frames": 3, "read": 1.0, "infer": math.nan,
                                              "e2e FPS": None}],
        "Parity vs torch fp32": [{"candidate": "onnxruntime fp32", "verdict": "pass", "ious": [math.nan]},
                                 {"candidate": "onnxruntime fp16", "verdict": "pass",
                                  "ious": [0.97, math.nan, math.inf, 0.99]}]}}))  # fmt: skip
    (tmp_path / "storage" / "m").mkdir(parents=True)
    (tmp_path / "storage" / "m" / "0001_good.json").write_text(json.dumps(_good_run()))
    assert main(["--storage", str(tmp_path / "storage"), "--reports", str(tmp_path / "reports"),
                 "--out", str(tmp_path / "out")]) == 0  # fmt: skip
    assert capsys.readouterr().err == ""
    markdown = (tmp_path / "out" / "summary.md").read_text()
    assert "| torch fp32 | n/a | 1.00 ms | read (100%) |" in markdown  # FPS not measured; only read's time is known
    assert "| onnxruntime fp32 | pass |  |  | n/a |" in markdown  # no IoU measured: no min, no figure
    assert "| onnxruntime fp16 | pass |  |  | 0.9700 |" in markdown
    page = (tmp_path / "out" / "index.html").read_text()
    assert "<figcaption>onnxruntime fp16: IoU of each matched detection" in page  # of its 2 finite IoUs
    assert "onnxruntime fp32: IoU" not in page and "<h2>End-to-end stages</h2>" in page


#: nsys summaries that are JSON of another shape than perf.profile.nsys_summary writes: skipped, one warning each.
CAPTURES = {
    "a-list": ([1, 2], "the top level is a list, expected an object"),
    "a-string": ("capture", "the top level is a string, expected an object"),
    "idle-a-string": ({"idle_fraction": "0.5"}, "'idle_fraction' is a string, expected a number"),
    "critical-path-empty": ({"critical_path": {}}, "'critical_path.region' is null, expected an object with numbers "
                            "start_ns and end_ns"),
    "region-a-list": ({"region": [0, 5]}, "'region' is a list, expected an object with numbers start_ns and end_ns"),
    "nested-too-deeply": ("[" * 100_000, "not valid JSON: nested too deeply"),
    "path-time-past-a-float": ({"critical_path": {"region": {"start_ns": 0, "end_ns": 1}, "by_kind": {"host": 2**1023},
                                                  "source": "s", "segments": 1, "wait_totals": []}},
                               "integer division result too large for a float"),
}


def test_nsys_summaries_of_another_shape_are_each_skipped_with_one_warning(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    machine = tmp_path / "storage" / "m"
    machine.mkdir(parents=True)
    (machine / "0001_good.json").write_text(json.dumps(_good_run()))
    (tmp_path / "reports" / "nsys" / "good").mkdir(parents=True)
    (tmp_path / "reports" / "nsys" / "good" / "summary.json").write_text(json.dumps({"idle_fraction": 0.25}))
    (tmp_path / "reports" / "perf-report.json").write_text('{"tables": {}}')
    for name, (doc, _) in CAPTURES.items():
        (tmp_path / "reports" / "nsys" / name).mkdir()
        (tmp_path / "reports" / "nsys" / name / "summary.json").write_text(doc if name == "nested-too-deeply"
                                                                          else json.dumps(doc))
    assert main(["--storage", str(tmp_path / "storage"), "--reports", str(tmp_path / "reports"),
                 "--out", str(tmp_path / "out")]) == 0  # fmt: skip
    nsys = tmp_path / "reports" / "nsys"
    assert capsys.readouterr().err.splitlines() == [
        f"perf-report: warning: skipped unreadable nsys summary '{nsys / name / 'summary.json'}': {problem}"
        for name, (_, problem) in sorted(CAPTURES.items())]
    assert "| good |  | 25.0 % | no critical path |  |" in (tmp_path / "out" / "summary.md").read_text()
