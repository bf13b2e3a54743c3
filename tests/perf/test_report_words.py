"""One number, one word per concept in the reports: the inference table says which loop each figure comes from,
the report shows the gate's verdict word for a benchmark and never one of its own, and the verdict table's note
is one short phrase whose figures stay in the verdict file. Real saved-run and verdict files, read by the real
``perf-report``; the gate's own rows written by its own writer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perf.gate.compare import Baseline, GateSettings, Row
from perf.gate.table import write_verdicts
from perf.report import plots, schema
from perf.report.changes import history
from perf.report.inputs import load_inputs
from perf.report.suite import PerfReport
from perf.report_cli import main
from perf.runs import run_from_json

MACHINE = "Linux-CPython-3.11-64bit"
BENCH = "perf/test_inference_speed.py::test_inference_speed[torch-fp32-b1]"
NAME = "test_inference_speed[torch-fp32-b1]"
MOVED = "host latency (sync) 1.085 [1.051, 1.120] slower"
NOTE = ("history too short (2 comparable run(s), no noise profile): judged against 0001 alone, within-process only; "
        "seed a history with --perf-noise=10; inconclusive: cannot rule out +31.2% after 4 pair(s) of fresh "
        "processes")  # fmt: skip


def _run(median_s: float, run_id: str) -> dict[str, Any]:
    rounds = list(median_s * (1 + 0.01 * np.linspace(-1, 1, 9)))
    bench = {"name": NAME, "fullname": BENCH, "group": "inference", "params": {}, "extra_info": {"batch": 1},
             "stats": {"median": median_s, "iqr": median_s * 0.01, "q1": median_s * 0.995, "q3": median_s * 1.005,
                       "min": rounds[0], "max": rounds[-1], "rounds": 9, "data": rounds}}  # fmt: skip
    return {"benchmarks": [bench], "machine_info": {"node": "n", "perf": {"device": "cpu", "cpu_model": "Test CPU"}},
            "datetime": "2026-11-01T10:00:00", "commit_info": {"id": "abc1234def", "dirty": False},
            "perf_run": {"run_id": run_id, "injected": {}}}  # fmt: skip


def _saved(tmp_path: Path) -> tuple[Path, Path]:
    """A storage of two runs, the second 26.1% slower, and the gate's verdict file that judged the second
    "inconclusive", written by the gate's writer."""
    folder = tmp_path / "storage" / MACHINE
    folder.mkdir(parents=True)
    documents = [_run(0.100, "r1"), _run(0.1261, "r2")]
    for i, document in enumerate(documents, start=1):
        (folder / f"{i:04d}_run.json").write_text(json.dumps(document))
    runs = [run_from_json(d, folder / f"{i:04d}_run.json") for i, d in enumerate(documents, start=1)]
    row = Row(BENCH, NAME, "inference", "inconclusive", NOTE, 0.100, 0.1261, 1.261, 0.9, 1.312, moved=MOVED)
    reports = tmp_path / "reports"
    reports.mkdir()
    write_verdicts(reports, [row], Baseline(runs[:1]), GateSettings(0.02), "perf-compare: test header",
                   current={"run_id": "r2", "injected": {}})  # fmt: skip
    return tmp_path / "storage", reports


def test_the_report_shows_the_gates_verdict_word_never_its_own(tmp_path: Path) -> None:
    storage, reports = _saved(tmp_path)
    points = history(load_inputs(storage, reports), BENCH)
    assert [p.mark for p in points] == [None, "inconclusive"]  # the gate's word, not "slower" from +26.1%
    out = tmp_path / "out"
    assert main(["--storage", str(storage), "--reports", str(reports), "--out", str(out)]) == 0
    summary, page = (out / "summary.md").read_text(), (out / "index.html").read_text()
    (row,) = [ln for ln in summary.splitlines() if ln.startswith(f"| {NAME} | 126 ms")]
    assert row.endswith("| +26.1% | inconclusive |"), row
    assert "(slower)" not in summary and "(slower)" not in page and "run 0002: inconclusive" in page
    ax = __import__("matplotlib.figure", fromlist=["Figure"]).Figure().add_subplot()
    plots._history_panel(ax, points)
    rings = [ln for ln in ax.lines if ln.get_marker() == "o" and ln.get_markerfacecolor() == "none"]
    assert [ln.get_markeredgecolor() for ln in rings] == [plots.MOVED]  # not the red of "slower"


def test_the_verdict_note_is_one_short_phrase_and_its_figures_stay_in_the_json(tmp_path: Path) -> None:
    storage, reports = _saved(tmp_path)
    phrase = "moved: host latency (sync) slower; history too short; cannot rule out +31.2%"
    markdown = (reports / "perf-compare.md").read_text()
    assert markdown.splitlines()[-1].endswith(f"| inconclusive | {phrase} |")
    (saved,) = json.loads((reports / "perf-compare.json").read_text())["rows"]
    assert saved["note"] == NOTE and saved["moved"] == MOVED  # every figure kept
    out = tmp_path / "out"
    assert main(["--storage", str(storage), "--reports", str(reports), "--out", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert f"<td class='prose'>{phrase}</td>" in page and "within-process only" not in page


@pytest.mark.parametrize("field", ["baseline_median_s", "current_median_s", "ratio", "lo", "hi"])
def test_a_boolean_where_a_verdict_figure_goes_is_not_shown_as_a_figure(tmp_path: Path, field: str) -> None:
    """``true`` in a verdict file's median or ratio is no figure: the cell is blank, never "1.00 s" or "True"."""
    storage, reports = _saved(tmp_path)
    document = json.loads((reports / "perf-compare.json").read_text())
    document["rows"][0][field] = True
    (reports / "perf-compare.json").write_text(json.dumps(document))
    out = tmp_path / "out"
    assert main(["--storage", str(storage), "--reports", str(reports), "--out", str(out)]) == 0
    (row,) = [ln for ln in (out / "summary.md").read_text().splitlines() if ln.startswith(f"| {NAME} | inconclusive")]
    assert "True" not in row and "1.00 s" not in row and "1.00x" not in row, row
    shown = {"baseline_median_s": "| 100 ms |", "current_median_s": "| 126 ms |", "ratio": "1.26x"}
    assert all(cell not in row for key, cell in shown.items() if key == field), row


def test_the_inference_table_says_which_loop_each_figure_comes_from() -> None:
    report = PerfReport(device="cuda")
    report.add(schema.INFERENCE, {"case": "torch-compile fp16", "batch": 1, "median ms": 0.201, "compute ms": 0.653,
                                  "h2d ms": 0.1, "d2h ms": 0.05, "enqueue ms": 0.02})  # fmt: skip
    markdown = report.to_markdown()
    header = next(ln for ln in markdown.splitlines() if ln.startswith("| case |"))
    assert "| median ms |" in header and "| compute ms (host I/O loop) |" in header
    assert "| h2d ms (host I/O loop) |" in header and "| d2h ms (host I/O loop) |" in header
    assert "its compute is not a part of the median and may exceed it" in markdown
    assert report.to_json()["tables"]["Inference"][0]["compute ms"] == pytest.approx(0.653)  # the key stays


def test_an_inconclusive_rows_note_does_not_repeat_its_verdict() -> None:
    from perf.verdicts import note_phrase

    entry = {"verdict": "inconclusive", "note": "inconclusive: cannot rule out +21.3% after 4 fresh process(es)"}
    assert note_phrase(entry) == "cannot rule out +21.3%"


def test_a_suspect_left_under_the_floor_keeps_its_bound_in_the_note_column() -> None:
    from perf.verdicts import note_phrase

    note = "not confirmed by 4 pair(s) of fresh processes: under the floor, at most +6.2% of the frame (stage:write)"
    assert note_phrase({"verdict": "no change", "note": note}) == (
        "not confirmed by 4 pair(s) of fresh processes; at most +6.2% of the frame")


@pytest.mark.parametrize("value, shown", [(float("inf"), "inf"), (float("-inf"), "-inf"), (float("nan"), "n/a")])
def test_an_infinite_or_missing_figure_keeps_its_sign_in_every_word(value: float, shown: str) -> None:
    from perf.report.readable import change, duration, number

    assert number(value) == duration(value) == change(value) == shown


@pytest.mark.parametrize("key, column", [("images_per_s", "images/s"), ("p99_ms", "p99")])  # e2e_fps: refused
def test_a_boolean_saved_where_a_figure_goes_is_not_measured_rather_than_one(key: str, column: str) -> None:
    from perf.report.inputs import ReportInputs
    from perf.report.tables import benchmark_table

    document = _run(0.100, "r1")
    bench = document["benchmarks"][0]
    del bench["stats"]["data"], bench["extra_info"]["batch"]  # no rounds, no batch: only the saved figure is left
    bench["extra_info"][key] = True
    table = benchmark_table(ReportInputs(runs=[run_from_json(document, "run.json")]))
    assert table is not None and table.rows[0][column] == "n/a"


@settings(max_examples=40, deadline=None)
@given(st.permutations([0.001, 0.002, 0.003, 0.004, 0.005, float("nan")]))
def test_a_round_not_measured_leaves_the_p99_of_the_rounds_measured_whatever_their_order(rounds: list[float]) -> None:
    from perf.report.inputs import ReportInputs
    from perf.report.tables import benchmark_table

    document = _run(0.003, "r1")
    document["benchmarks"][0]["stats"]["data"] = rounds  # NaN in a sort: once 1.97 ms, or n/a, by the order
    table = benchmark_table(ReportInputs(runs=[run_from_json(document, "run.json")]))
    assert table is not None and table.rows[0]["p99"] == "4.96 ms"


def test_names_and_labels_holding_dollars_are_drawn_as_saved_not_parsed_as_math(tmp_path: Path) -> None:
    folder = tmp_path / "storage" / MACHINE
    folder.mkdir(parents=True)
    for i in (1, 2, 3):
        document = _run(0.1, f"r{i}")
        bench = document["benchmarks"][0]
        bench.update(name="test_$\\foo{$x", fullname="perf/t.py::test_$\\foo{$x", group="$\\undefined$")
        bench["extra_info"] |= {"variant": "$^^$", "samples": {"label": "$\\bad$", "unit": "s $\\x$"},
                                "stage_ms_per_frame": {"$\\q$": 1.0}}  # fmt: skip
        (folder / f"{i:04d}_run.json").write_text(json.dumps(document))
    out = tmp_path / "out"  # once matplotlib's mathtext ValueError ("Unknown symbol: \foo"): a traceback
    assert main(["--storage", str(tmp_path / "storage"), "--out", str(out)]) == 0
    assert "test_$\\foo{$x" in (out / "summary.md").read_text()
