"""perf-report on runs marked as what they are: compare verdicts shown on the run they judged (by run id) and no
other, and runs made with test-only options (--perf-inject-delay, --perf-regression) bannered, drawn apart and
never the base of a change. Real saved-run and verdict files in a temporary storage, read by the real CLI."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pytest

from perf.report import plots
from perf.report.changes import history
from perf.report.inputs import load_inputs
from perf.report_cli import main

MACHINE = "Linux-CPython-3.11-64bit"
BENCH = "perf/test_inference_speed.py::test_inference_speed[torch-fp32-b8]"


def _run(median_s: float, *, run_id: str | None, injected: dict[str, Any] | None = None,
         old_style: bool = False) -> dict[str, Any]:  # fmt: skip
    """A saved run of one benchmark whose rounds sit around ``median_s``; ``injected`` in ``perf_run`` (or,
    ``old_style``, only in the benchmark's ``extra_info``, as runs saved before the run was marked)."""
    rounds = [median_s * f for f in (0.98, 0.99, 1.0, 1.01, 1.02)]
    extra: dict[str, Any] = {"backend": "torch", "variant": "torch", "batch": 8}
    machine: dict[str, Any] = {"perf": {"device": "cpu", "cpu_model": "Test CPU"}}
    marks: dict[str, Any] = {"run_id": run_id, "injected": {}}
    if injected:
        extra["injected"] = injected
        if not old_style:
            marks["injected"] = injected
    bench = {"name": "test_inference_speed[torch-fp32-b8]", "fullname": BENCH, "group": "inference",
             "params": {"batch": 8}, "extra_info": extra,
             "stats": {"median": median_s, "iqr": median_s * 0.02, "q1": median_s * 0.99, "q3": median_s * 1.01,
                       "min": rounds[0], "max": rounds[-1], "rounds": 5, "data": rounds}}  # fmt: skip
    return {"benchmarks": [bench], "machine_info": machine, "commit_info": {"id": "abc1234def", "dirty": False},
            "datetime": "2026-01-02T10:00:00", **({"perf_run": marks} if run_id is not None or not old_style else {})}


def _storage(tmp_path: Path, *runs: dict[str, Any]) -> Path:
    folder = tmp_path / "storage" / MACHINE
    folder.mkdir(parents=True)
    for i, run in enumerate(runs, start=1):
        (folder / f"{i:04d}_run.json").write_text(json.dumps(run))
    return tmp_path / "storage"


def _verdicts(tmp_path: Path, verdict: str, current: dict[str, Any] | None) -> Path:
    """``<tmp>/reports/perf-compare.json`` in the gate's format 2: one row; ``current`` None for an older file."""
    reports = tmp_path / "reports"
    reports.mkdir(exist_ok=True)
    document: dict[str, Any] = {
        "format": 2, "baseline": {"path": "/ci/.benchmarks/0001_run.json", "number": 1, "commit": "abc1234def",
                                  "run_id": "r1"},
        "rows": [{"fullname": BENCH, "name": "test_inference_speed[torch-fp32-b8]", "verdict": verdict,
                  "ratio": 1.3, "lo": 1.2, "hi": 1.4, "baseline_median_s": 0.1, "current_median_s": 0.13}]}  # fmt: skip
    if current is not None:
        document["current"] = current
    (reports / "perf-compare.json").write_text(json.dumps(document))
    return reports


def _report(storage: Path, out: Path, reports: Path | None = None) -> tuple[str, str]:
    """summary.md and index.html of ``storage`` (and ``reports``: else an empty folder, not the cwd's)."""
    if reports is None:
        reports = out.parent / "no-reports"
        reports.mkdir()
    assert main(["--storage", str(storage), "--out", str(out), "--reports", str(reports)]) == 0
    return (out / "summary.md").read_text(), (out / "index.html").read_text()


def _marks(storage: Path, reports: Path | None = None) -> list[str | None]:
    inputs = load_inputs(storage, reports)
    return [p.mark for p in history(inputs, BENCH, threshold=0.1)]


def test_verdicts_mark_the_run_they_judged_not_the_newest(tmp_path: Path) -> None:
    storage = _storage(tmp_path, _run(0.1, run_id="r1"), _run(0.13, run_id="r2"), _run(0.034, run_id="r3"))
    reports = _verdicts(tmp_path, "slower", {"run_id": "r2", "injected": {}})
    # The newest run fell 74%: it is marked as moved (no verdict judged it), never "slower" by run 0002's verdict.
    assert _marks(storage, reports) == [None, "slower", "moved"]
    markdown, page = _report(storage, tmp_path / "out", reports)
    assert "Verdicts of run 0002; baseline run 0001 (commit abc1234, file 0001_run.json)" in markdown
    row = next(ln for ln in markdown.splitlines() if ln.startswith("| test_inference_speed[torch-fp32-b8] | 34.0 ms"))
    assert row.endswith("| -73.8% |  |")  # no verdict on the newest run, and no word of the report's own
    assert "compare verdict: slower" in page and "run 0002: slower" in page


def test_a_verdict_file_without_a_run_id_is_tabled_and_attached_to_no_run(tmp_path: Path) -> None:
    storage = _storage(tmp_path, _run(0.1, run_id="r1"), _run(0.1, run_id="r2"))
    reports = _verdicts(tmp_path, "slower", None)
    assert _marks(storage, reports) == [None, None]
    markdown, _ = _report(storage, tmp_path / "out", reports)
    assert "Verdicts of a run the file does not name" in markdown and "baseline run 0001" in markdown
    assert "| test_inference_speed[torch-fp32-b8] | slower | 100 ms | 130 ms | 1.30x [1.20, 1.40] |" in markdown
    assert "| test_inference_speed[torch-fp32-b8] | 100 ms | 80.0 | 0.0% |  |" in markdown


def test_verdicts_of_a_run_not_in_the_storage_are_attached_to_no_run(tmp_path: Path) -> None:
    storage = _storage(tmp_path, _run(0.1, run_id="r1"), _run(0.1, run_id="r2"))
    reports = _verdicts(tmp_path, "faster", {"run_id": "elsewhere0000", "injected": {}})
    assert _marks(storage, reports) == [None, None]
    markdown, _ = _report(storage, tmp_path / "out", reports)
    assert "Verdicts of run id elsewhere000, which is not among these saved runs: attached to no run" in markdown


def test_runs_saved_before_run_ids_take_no_verdicts(tmp_path: Path) -> None:
    storage = _storage(tmp_path, _run(0.1, run_id=None), _run(0.1, run_id=None))
    reports = _verdicts(tmp_path, "slower", {"run_id": "r2", "injected": {}})
    assert _marks(storage, reports) == [None, None]


def test_an_injected_newest_run_is_bannered_in_markdown_and_html(tmp_path: Path) -> None:
    storage = _storage(tmp_path, _run(0.1, run_id="r1"), _run(0.12, run_id="r2", injected={"inject_delay_ms": 20.0}))
    markdown, page = _report(storage, tmp_path / "out")
    banner = ("Injected run: run 0002 was made with --perf-inject-delay=20.0 (ms), a test-only option. Its times "
              "are not the code's own")
    assert f"> **{banner}" in markdown
    assert f"<div class='injected'>{html.escape(banner)}" in page


def test_an_older_injected_run_is_named_with_its_option(tmp_path: Path) -> None:
    storage = _storage(tmp_path, _run(0.1, run_id="r1"),
                       _run(0.2, run_id=None, injected={"regression": "layer:5%"}, old_style=True),
                       _run(0.1, run_id="r3"))  # fmt: skip
    markdown, page = _report(storage, tmp_path / "out")
    line = "Run 0002 of the history was made with a test-only option, --perf-regression=layer:5%"
    assert line in markdown and html.escape(line) in page and "Injected run:" not in markdown


def test_an_injected_run_is_never_the_base_of_a_change(tmp_path: Path) -> None:
    storage = _storage(tmp_path, _run(0.1, run_id="r1"), _run(0.5, run_id="r2", injected={"inject_delay_ms": 400}),
                       _run(0.104, run_id="r3"))  # fmt: skip
    points = history(load_inputs(storage, None), BENCH, threshold=0.1)
    assert [p.injected for p in points] == [False, True, False]
    assert points[1].change == pytest.approx(4.0) and points[1].mark == "moved"
    assert points[1].reason == "injected (--perf-inject-delay=400 (ms)); median +400% vs 0001"
    assert points[2].change == pytest.approx(0.04) and points[2].mark is None  # against 0001, not the injected 0002
    markdown, _ = _report(storage, tmp_path / "out")
    assert "| test_inference_speed[torch-fp32-b8] | 104 ms | 76.9 | +4.0% |  |" in markdown


def test_injected_runs_are_drawn_apart_from_the_median_line(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    storage = _storage(tmp_path, _run(0.1, run_id="r1"), _run(0.5, run_id="r2", injected={"inject_delay_ms": 400}),
                       _run(0.1, run_id="r3"))  # fmt: skip
    points = history(load_inputs(storage, None), BENCH, threshold=0.1)
    ax = Figure().add_subplot()
    plots._history_panel(ax, points)
    line = next(ln for ln in ax.lines if ln.get_linestyle() == "-")
    crosses = next(ln for ln in ax.lines if ln.get_marker() == "X")
    assert list(line.get_xdata()) == [0, 2] and list(crosses.get_xdata()) == [1]
    assert ax.get_ylabel() == "ms" and list(crosses.get_ydata()) == pytest.approx([500.0])
