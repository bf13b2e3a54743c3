"""Reliability of saved results across runs: two runs sharing one reports folder keep both reports, and a saved
run that is valid JSON of the wrong types is skipped with a warning by perf-report, or refused by its readers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
