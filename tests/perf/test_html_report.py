"""The report CLI (perf.report_cli) on real saved runs: pytest-benchmark runs made in a subprocess, in a git
repository (so runs carry commits), plus the suite's own report written by the session (perf.roles.report)."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_bench import child_env

from detector.timing import STAGES
from perf.options import parse_threshold
from perf.report.changes import history
from perf.report.inputs import load_inputs
from perf.report.readable import duration, number
from perf.report_cli import main

REPO = Path(__file__).resolve().parents[2]

#: A tiny real benchmark file: two "inference" benchmarks and one "end-to-end" benchmark on a virtual clock that
#: moves TINY_DELAY_MS a call (a loaded 2-core machine cannot blur the 5x step between runs; the stage timer reads
#: real sleeps), and two parity candidates compared with perf.measure.parity on jittered detections.
TINY_BENCH = '''
import os, time
import numpy as np
import pytest
from detector.postprocess import Detections
from detector.timing import STAGES, StageTimer
from perf.measure.parity import TOLERANCES, compare_detections, compare_tensors, report_row
from perf.report import schema

DELAY_S = float(os.environ["TINY_DELAY_MS"]) / 1e3


class VirtualClock:
    __name__ = "VirtualClock"

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += 1e-9  # pytest-benchmark's precision probe needs a clock that moves
        return self.now


CLOCK = VirtualClock()


def advance(seconds):
    CLOCK.now += seconds


@pytest.mark.benchmark(group="inference", timer=CLOCK)
@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
def test_infer(benchmark, backend):
    benchmark.extra_info.update(backend=backend, variant=backend, precision="fp32", batch=2)
    benchmark.pedantic(advance, args=(DELAY_S,), rounds=7, iterations=1)


@pytest.mark.benchmark(group="end-to-end", timer=CLOCK)
def test_e2e(benchmark, perf_report):
    timer, frames = StageTimer(), 3
    def one_pass():
        for _ in range(frames):
            for i, stage in enumerate(STAGES):
                with timer.stage(stage):
                    time.sleep(DELAY_S * (i + 1) / 10)
                advance(DELAY_S * (i + 1) / 10)
    benchmark.pedantic(one_pass, rounds=2, iterations=1)
    per_frame = {k: v / (2 * frames) for k, v in timer.totals_ms().items()}
    fps = frames / benchmark.stats.stats.median
    benchmark.extra_info.update(backend="torch", variant="torch", precision="fp32", frames=frames, e2e_fps=fps,
                                stage_ms_per_frame=per_frame)
    perf_report.add(schema.STAGES_TABLE,
                    {"Model Type": "torch fp32", "frames": frames, **per_frame, "e2e FPS": fps})


@pytest.mark.parametrize("precision,jitter", [("fp32", 0.01), ("fp16", 4.0)])
def test_parity(precision, jitter, perf_report):
    rng = np.random.default_rng(0)
    ref, cand = [], []
    for _ in range(20):
        xy = rng.uniform(0, 300, (4, 2))
        boxes = np.concatenate([xy, xy + rng.uniform(20, 60, (4, 2))], axis=1)
        ref.append(Detections(boxes, np.full(4, 0.9), np.zeros(4)))
        cand.append(Detections(boxes + rng.normal(0, jitter, boxes.shape), np.full(4, 0.9), np.zeros(4)))
    parity = compare_detections(ref, cand)
    tensors = compare_tensors(np.zeros((1, 2, 6)), np.zeros((1, 2, 6)))
    failures = parity.failures(TOLERANCES[precision])
    perf_report.add(schema.PARITY,
                    report_row(f"onnxruntime {precision}", "onnxruntime", precision, failures, tensors, parity))
'''

BENCHMARKS = ("test_infer[torch]", "test_infer[onnxruntime]", "test_e2e")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args], cwd=repo, check=True,
                   capture_output=True)


def _bench_run(repo: Path, delay_ms: float, *extra: str) -> str:
    env = child_env(TINY_DELAY_MS=str(delay_ms), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "pytest_benchmark.plugin", "-p", "no:cacheprovider",
           "-p", "perf.plugin", "-p", "perf.fixtures.reporting", "--perf-device=cpu",
           "test_tiny.py", "--benchmark-autosave", "--benchmark-save-data", "--benchmark-storage=.benchmarks",
           "--perf-reports-dir=reports", *extra]
    result = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository with three saved runs: two at 2 ms on one commit, the third 5x slower on a new commit (and
    written as HTML by --perf-html=html; its pytest output in ``third-run.txt``)."""
    repo = tmp_path_factory.mktemp("bench")
    (repo / "pytest.ini").write_text("[pytest]\n")
    (repo / "test_tiny.py").write_text(TINY_BENCH)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    _bench_run(repo, 2.0)
    _bench_run(repo, 2.0)
    (repo / "pytest.ini").write_text("[pytest]\n# slower\n")
    _git(repo, "commit", "-q", "-am", "two")
    (repo / "third-run.txt").write_text(_bench_run(repo, 10.0, "--perf-html=html"))
    return repo


def _runs(repo: Path) -> list[Path]:
    return sorted((repo / ".benchmarks").glob("*/*.json"))


def _rows(markdown: str, name: str) -> list[list[str]]:
    """The cells of every markdown table row whose first cell is ``name``."""
    lines = [ln for ln in markdown.splitlines() if ln.startswith(f"| {name} |")]
    return [[c.strip() for c in ln.strip().strip("|").split(" | ")] for ln in lines]


def _row(markdown: str, name: str) -> list[str]:
    (row,) = _rows(markdown, name)
    return row


def _pngs(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)]


def test_cli_writes_summary_and_html_from_real_runs(saved: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = subprocess.run(
        [sys.executable, "-m", "perf.report_cli", "--storage", str(saved / ".benchmarks"), "--reports",
         str(saved / "reports"), "--out", str(out), "--change-threshold", "50%"],
        env=child_env(), capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(out / "summary.md"), str(out / "index.html")]
    markdown = (out / "summary.md").read_text()

    latest = json.loads(_runs(saved)[-1].read_text())
    for bench in latest["benchmarks"]:
        row = _rows(markdown, bench["name"])[0]
        assert row[1] == duration(bench["stats"]["median"])
        assert row[3].startswith("+") and row[3].endswith("%"), row  # 10 ms sleeps after 2 ms ones: no verdict word
    (e2e,) = [b for b in latest["benchmarks"] if b["group"] == "end-to-end"]
    stages = e2e["extra_info"]["stage_ms_per_frame"]
    slowest = max(STAGES, key=lambda s: stages[s])
    # 10 ms after 2 ms in the newest run alone: no change point until a second run is at the new level
    _, end_to_end = _rows(markdown, "test_e2e")
    assert "Change points in the history" not in markdown
    assert end_to_end == [
        "test_e2e", number(e2e["extra_info"]["e2e_fps"]), duration(sum(stages.values()) / 1e3),
        f"{slowest} ({stages[slowest] / sum(stages.values()):.0%})"]
    report = json.loads((saved / "reports" / "perf-report.json").read_text())["tables"]["Parity vs torch fp32"]
    assert [r["verdict"] for r in report] == ["pass", "FAIL"]
    for r in report:
        assert _row(markdown, r["candidate"])[1] == r["verdict"]
        assert _row(markdown, r["candidate"])[4] == number(min(r["ious"]), 4)

    # Figures: 2 latency groups + 1 stage breakdown + 1 history (a panel per benchmark) + 2 IoU histograms.
    from PIL import Image

    page = (out / "index.html").read_text()
    pngs = _pngs(page)
    assert len(pngs) == 6 and page.count("<figure class='history'>") == 1
    for data in pngs:
        image = Image.open(io.BytesIO(data))
        image.verify()
        assert image.format == "PNG" and image.size[0] >= 400 and image.size[1] >= 120
    assert "<li>onnxruntime, run 0003: moved, median +" in page


def test_perf_html_option_writes_the_report_at_session_end(saved: Path) -> None:
    output = (saved / "third-run.txt").read_text()
    assert f"perf html: wrote {saved / 'html' / 'summary.md'}" in output
    markdown = (saved / "html" / "summary.md").read_text()
    assert "3 saved run(s)" in markdown and len(_rows(markdown, "test_e2e")) == 2  # benchmark, stages
    assert len(_pngs((saved / "html" / "index.html").read_text())) == 6


def test_history_marks_the_slowed_run_and_the_commit_change(saved: Path) -> None:
    inputs = load_inputs(saved / ".benchmarks", None)
    for fullname in inputs.runs[-1].benchmarks:
        points = history(inputs, fullname, threshold=0.5)
        assert [p.mark for p in points] == [None, None, "moved"]
        assert points[2].change > 2.0 and points[2].reason.startswith("median +")
        assert [p.commit_changed for p in points] == [False, False, True]


def _verdict_file(path: Path, current: dict | None) -> Path:
    """A verdict file in the gate's layout calling test_infer[torch] faster; ``current`` as the gate writes it
    (None: an older file that does not name the run it judged)."""
    document = {"format": 2, "baseline": {"path": "base/0001_x.json", "number": 1, "commit": "0123456789ab"},
                "rows": [{"name": "test_infer[torch]", "fullname": "test_tiny.py::test_infer[torch]",
                          "verdict": "faster", "ratio": 0.8, "lo": 0.7, "hi": 0.9, "baseline_median_s": 0.01,
                          "current_median_s": 0.008}]}  # fmt: skip
    if current is not None:
        document["current"] = current
    path.write_text(json.dumps(document))
    return path


def test_compare_verdicts_mark_the_run_they_judged_and_no_other(saved: Path, tmp_path: Path) -> None:
    judged = json.loads(_runs(saved)[1].read_text())["perf_run"]["run_id"]
    verdicts = _verdict_file(tmp_path / "verdicts.json", {"run_id": judged, "injected": {}})
    out = tmp_path / "out"
    assert main(["--storage", str(saved / ".benchmarks"), "--out", str(out), "--verdicts", str(verdicts),
                 "--change-threshold", "1000%"]) == 0
    markdown = (out / "summary.md").read_text()
    assert "### Compare verdicts" in markdown
    assert "Verdicts of run 0002; baseline run 0001 (commit 0123456, file 0001_x.json)" in markdown
    assert "| test_infer[torch] | faster | 10.0 ms | 8.00 ms | 0.800x [0.700, 0.900] |" in markdown
    assert _rows(markdown, "test_infer[torch]")[0][3:] == ["+400%", ""]  # the newest run was not the judged one
    inputs = load_inputs(saved / ".benchmarks", None, verdicts=verdicts)
    points = history(inputs, "test_tiny.py::test_infer[torch]", threshold=10.0)
    assert [p.mark for p in points] == [None, "faster", None] and points[1].reason == "compare verdict: faster"


def test_a_verdict_file_that_names_no_run_is_tabled_with_its_baseline_and_marks_nothing(
    saved: Path, tmp_path: Path
) -> None:
    verdicts = _verdict_file(tmp_path / "verdicts.json", None)
    out = tmp_path / "out"
    assert main(["--storage", str(saved / ".benchmarks"), "--out", str(out), "--verdicts", str(verdicts),
                 "--change-threshold", "1000%"]) == 0
    markdown = (out / "summary.md").read_text()
    assert "Verdicts of a run the file does not name" in markdown
    assert "baseline run 0001 (commit 0123456, file 0001_x.json)" in markdown
    assert "| test_infer[torch] | faster |" in markdown
    assert _rows(markdown, "test_infer[torch]")[0][4] == ""
    inputs = load_inputs(saved / ".benchmarks", None, verdicts=verdicts)
    for fullname in inputs.runs[-1].benchmarks:
        assert all(p.mark is None for p in history(inputs, fullname, threshold=10.0))


def test_corrupt_run_among_good_ones_is_skipped_with_a_warning(saved: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    storage = tmp_path / "storage"
    shutil.copytree(saved / ".benchmarks", storage)
    corrupt = sorted(storage.glob("*/*.json"))[1]
    corrupt.write_text('{"benchmarks": [')
    out = tmp_path / "out"
    assert main(["--storage", str(storage), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"skipped corrupt saved run: '{corrupt}': cannot read a saved run: Expecting" in err
    markdown = (out / "summary.md").read_text()
    assert "2 saved run(s)" in markdown and str(corrupt) in markdown


def _bad_storage(tmp_path: Path, saved: Path, case: str) -> list[str]:
    storage = tmp_path / "storage"
    if case == "missing storage":
        return ["--storage", str(storage)]
    machine = storage / "Linux-CPython"
    machine.mkdir(parents=True)
    if case == "every run corrupt":
        (machine / "0001_x.json").write_text("not json")
        return ["--storage", str(storage)]
    if case == "not a saved run":
        (machine / "0001_x.json").write_text('{"tables": {}}')
        return ["--storage", str(storage)]
    shutil.copy(_runs(saved)[0], machine / "0001_x.json")
    reports = tmp_path / "reports"
    reports.mkdir()
    if case == "corrupt perf report":
        (reports / "perf-report.json").write_text('{"tables": {"Parity": [')
    elif case == "corrupt verdicts":
        (reports / "perf-compare.json").write_text('{"rows": []}')
    return ["--storage", str(storage), "--reports", str(reports)]


@pytest.mark.parametrize("case,message", [
    ("missing storage", "benchmark storage '{tmp}/storage': no such folder"),
    ("every run corrupt", "'{tmp}/storage/Linux-CPython/0001_x.json': cannot read a saved run: Expecting value"),
    ("not a saved run", "'{tmp}/storage/Linux-CPython/0001_x.json': not a usable saved run: 'benchmarks' is missing"),
    ("corrupt perf report", "'{tmp}/reports/perf-report.json': cannot read the suite's report: Expecting"),
    ("corrupt verdicts", "'{tmp}/reports/perf-compare.json': holds no compare verdicts"),
])  # fmt: skip
def test_bad_input_is_one_line_naming_the_file_and_writes_nothing(
    case: str, message: str, saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _bad_storage(tmp_path, saved, case)
    out = tmp_path / "out"
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("perf-report: error: " + message.format(tmp=tmp_path)) and "\n" not in err, err
    assert not out.exists()


def test_an_output_path_that_is_a_file_is_one_line_and_keeps_the_file(saved: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report"
    out.write_text("not a folder")
    assert main(["--storage", str(saved / ".benchmarks"), "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith(f"perf-report: error: cannot write to '{out}'")
    assert out.read_text() == "not a folder"


def test_missing_matplotlib_is_one_line_and_writes_nothing(saved: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what `import matplotlib` sees when it is not installed
    out = tmp_path / "out"
    assert main(["--storage", str(saved / ".benchmarks"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perf-report: error: the HTML report needs matplotlib") and err.count("\n") == 1
    assert not out.exists()


def test_help_lists_every_option_with_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert e.value.code == 0 and "Default: 10%." in text and "Default: .benchmarks." in text


def test_change_threshold_accepts_percent_or_fraction_and_rejects_the_rest() -> None:
    assert parse_threshold("10%") == pytest.approx(0.1) and parse_threshold("0.25") == 0.25
    for bad in ("abc", "0", "-5%", "inf"):
        with pytest.raises(Exception, match="Could not parse value"):
            parse_threshold(bad)


def test_an_output_that_cannot_be_written_whole_leaves_neither_page(saved: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report"
    (out / "index.html").mkdir(parents=True)  # summary.md can be written, index.html cannot
    assert main(["--storage", str(saved / ".benchmarks"), "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"perf-report: error: cannot write to '{out}': ")
    assert [p.name for p in out.iterdir()] == ["index.html"] and not any((out / "index.html").iterdir())


def _unreadable(folder: Path) -> list[str]:
    """The command prefix under which ``folder`` (made mode 000 here) cannot be read: none for a user; for root,
    which reads every folder, a user namespace (``unshare --user``: root without its power over files); skipped
    where neither works."""
    folder.chmod(0)
    for prefix in ([], ["unshare", "--user", "--"]) if os.geteuid() == 0 else ([],):
        probe = subprocess.run([*prefix, sys.executable, "-c", f"import os; os.listdir({str(folder)!r})"],
                               capture_output=True, check=False)  # fmt: skip
        if probe.returncode != 0:
            return prefix
    folder.chmod(0o755)
    pytest.skip("no way to make a folder unreadable here (root, and no user namespace)")


@pytest.mark.parametrize("which", ["storage", "machine folder", "reports"])
def test_an_input_folder_that_cannot_be_read_is_named_not_the_output(which: str, tmp_path: Path) -> None:
    storage, reports, out = tmp_path / "storage", tmp_path / "reports", tmp_path / "out"
    (storage / "m").mkdir(parents=True)
    reports.mkdir()
    (storage / "m" / "0001_x.json").write_text(json.dumps({
        "benchmarks": [{"name": "test_a", "fullname": "t.py::test_a", "stats": {"median": 0.001}}]}))
    folder = {"storage": storage, "machine folder": storage / "m", "reports": reports}[which]
    prefix = _unreadable(folder)
    try:
        result = subprocess.run([*prefix, sys.executable, "-m", "perf.report_cli", "--storage", str(storage),
                                 "--reports", str(reports), "--out", str(out)], env=child_env(), capture_output=True,
                                text=True, timeout=120, check=False)  # fmt: skip
    finally:
        folder.chmod(0o755)
    expected = {"storage": f"benchmark storage '{storage}': cannot read '{storage}': Permission denied",
                "machine folder": f"benchmark storage '{storage}': cannot read '{storage / 'm'}': Permission denied",
                "reports": f"cannot read '{reports / 'perf-report.json'}': Permission denied"}[which]
    assert result.returncode == 2 and result.stderr.splitlines() == [f"perf-report: error: {expected}"], result
    assert not out.exists()


def test_a_bad_option_value_is_one_usage_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--change-threshold", "abc"])
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "perf-report: error: argument --change-threshold: Could not parse value: 'abc'. Expected e.g. 10% or 0.1."]
