"""perf-report read at a glance: two real saved runs of a small benchmark file (batches b1, b8, b32; 30, 5 and
1 rounds; one 12.3 s benchmark) on the CPU, with the suite's harness and pipelined rows, through the real CLI.
Structure of both files (columns, line widths, order, units, one history figure, nothing GPU-only on a CPU run),
and -- where a headless Chromium is installed -- the page and the rendered markdown as a browser draws them."""

from __future__ import annotations

import base64
import html
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_bench import child_env

from perf.report import schema
from perf.report.plots import VIOLIN_MIN_ROUNDS, distribution_kind

#: Batches 1, 8 and 32 of two backends on a virtual clock; rounds vary a few % so boxes and violins have a width.
TINY_BENCH = '''
import itertools, os
import pytest
from perf.report import schema

SCALE = float(os.environ["TINY_SCALE"])
SECONDS = {1: 0.0021, 8: 0.0153, 32: 12.33}
ROUNDS = {1: 30, 8: 5, 32: 1}
JITTER = itertools.cycle([0.97, 1.0, 1.04, 0.99, 1.02, 1.01])


class VirtualClock:
    __name__ = "VirtualClock"

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += 1e-9
        return self.now


CLOCK = VirtualClock()


def advance(seconds):
    CLOCK.now += seconds * next(JITTER)


@pytest.mark.benchmark(group="inference", timer=CLOCK)
@pytest.mark.parametrize("batch", [1, 8, 32], ids=lambda b: f"b{b}")
@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
def test_infer(benchmark, backend, batch):
    benchmark.extra_info.update(backend=backend, variant=backend, precision="fp32", batch=batch)
    seconds = SECONDS[batch] * SCALE * (1.0 if backend == "torch" else 0.5)
    benchmark.pedantic(advance, args=(seconds,), rounds=ROUNDS[batch], iterations=1)


def test_suite_rows(perf_report):
    perf_report.add(schema.HARNESS, {"case": "torch fp32", "batch": 1, "suite median ms": 20.1,
                                     "bare loop ms/call": 26.6, "overhead": -0.2453})
    perf_report.add(schema.PIPELINED_RATIOS, {"case": "torch fp32 (cpu)", "frames": 12, "pipelined": "b1",
                                              "pipelined FPS": 14.6, "slowest stage": "infer b1",
                                              "slowest stage FPS": 15.2, "pipeline/slowest stage": 0.96,
                                              "meets 0.9": "yes", "pipeline/sequential": 0.45})
'''
#: Widest markdown table line (characters) that a GitHub page shows without scrolling.
MARKDOWN_WIDTH = 120
#: The CSS width (px) of a GitHub page's markdown body.
GITHUB_WIDTH = 1012
#: The tallest page (px, at 1280 px wide) this input may make: it was 7,800 px with a chart per benchmark.
PAGE_HEIGHT = 2600


def _bench_run(project: Path, scale: float) -> None:
    env = child_env(TINY_SCALE=str(scale), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "pytest_benchmark.plugin", "-p", "no:cacheprovider",
           "-p", "perf.plugin", "-p", "perf.fixtures.reporting", "--perf-device=cpu", "test_tiny.py",
           "--benchmark-autosave", "--benchmark-save-data", "--benchmark-storage=.benchmarks",
           "--perf-reports-dir=reports"]  # fmt: skip
    result = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``perf-report``'s folder (summary.md, index.html) over two runs, the second 1.5x slower."""
    project = tmp_path_factory.mktemp("reading")
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "test_tiny.py").write_text(TINY_BENCH)
    _bench_run(project, 1.0)
    _bench_run(project, 1.5)
    out = project / "report"
    result = subprocess.run([sys.executable, "-m", "perf.report_cli", "--storage", str(project / ".benchmarks"),
                             "--reports", str(project / "reports"), "--out", str(out)],
                            env=child_env(), capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


def _tables(markdown: str) -> list[list[str]]:
    """The lines of each markdown table."""
    tables: list[list[str]] = []
    previous = ""
    for line in markdown.splitlines():
        if line.startswith("|"):
            if not previous.startswith("|"):
                tables.append([])
            tables[-1].append(line)
        previous = line
    return tables


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


def _text(page: str) -> str:
    """The page without its embedded images."""
    return re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", page)


def test_every_markdown_table_fits_a_github_page(report: Path) -> None:
    tables = _tables((report / "summary.md").read_text())
    assert len(tables) >= 1
    for lines in tables:
        assert len(_cells(lines[0])) <= schema.MARKDOWN_COLUMNS, lines[0]
        assert max(len(line) for line in lines) <= MARKDOWN_WIDTH, max(lines, key=len)


def test_batches_are_listed_in_numeric_order(report: Path) -> None:
    markdown = (report / "summary.md").read_text()
    names = [_cells(line)[0] for line in markdown.splitlines() if line.startswith("| test_infer[")]
    assert names == [f"test_infer[{backend}-b{b}]" for backend in ("onnxruntime", "torch") for b in (1, 8, 32)]
    page = (report / "index.html").read_text()
    rows = re.findall(r"<tr><td[^>]*>(test_infer\[[^<]+)</td>", page)
    assert rows == names


def test_no_number_is_written_in_scientific_notation_and_seconds_read_as_seconds(report: Path) -> None:
    markdown, page = (report / "summary.md").read_text(), _text((report / "index.html").read_text())
    for text in (markdown, page):
        text = re.sub(r"sha256[: ][0-9a-f]+", "sha256 <digest>", text)  # a digest's hex is no number
        assert not re.search(r"\d[eE][+-]?\d", text), re.search(r".{40}\d[eE][+-]?\d.{20}", text)
    row = next(_cells(ln) for ln in markdown.splitlines() if ln.startswith("| test_infer[torch-b32]"))
    assert re.fullmatch(r"1[89]\.\d s", row[1]) and re.fullmatch(r"1\.\d\d", row[2]), row  # 12.33 s x 1.5 (jittered)
    assert re.fullmatch(r"\+\d\d\.\d%", row[3]), row  # the move alone: a verdict word is the gate's


def test_the_history_is_one_figure_with_a_panel_per_benchmark(report: Path) -> None:
    from PIL import Image

    page = (report / "index.html").read_text()
    figures = re.findall(r"<figure class='history'><img [^>]*src='data:image/png;base64,([^']+)'", page)
    assert len(figures) == 1 and page.count("<h2>History</h2>") == 1
    width, height = Image.open(io.BytesIO(base64.b64decode(figures[0]))).size
    assert width <= 1100 and height <= 700  # six panels: two rows of three
    assert "6 benchmark(s) over 2 saved run(s)" in page


def test_a_cpu_run_shows_no_harness_overhead_and_no_gpu_target_but_says_why(report: Path) -> None:
    page = (report / "index.html").read_text()
    assert "<th>overhead</th>" not in page and "-0.2453" not in page
    assert "<th>meets 0.9</th>" not in page and "<th>pipeline/sequential</th>" in page
    for note in (schema.HARNESS.cpu_note, schema.PIPELINED_RATIOS.cpu_note):
        assert html.escape(note) in page
    assert "Run 0002" in page and "on cpu" in page


@pytest.mark.parametrize(("rounds", "kind"), [
    ([], "stats"), ([0.01], "dot"), ([0.01] * 7, "dot"), ([0.01, 0.012], "box"),
    ([0.01 + i * 1e-4 for i in range(VIOLIN_MIN_ROUNDS - 1)], "box"),
    ([0.01 + i * 1e-4 for i in range(VIOLIN_MIN_ROUNDS)], "violin"),
])  # fmt: skip
def test_few_rounds_are_drawn_as_dots_or_a_box_and_only_many_as_a_violin(rounds: list[float], kind: str) -> None:
    assert distribution_kind(rounds) == kind


def _chromium() -> str | None:
    return next((path for name in ("chromium", "chromium-browser", "google-chrome") if (path := shutil.which(name))),
                None)  # fmt: skip


def _screenshot(page: Path, png: Path, width: int, height: int) -> tuple[int, int]:
    """Draw ``page`` in headless Chromium at ``width`` px on a ``height`` px window; the lowest and the rightmost
    pixel that is not white (the content's extent)."""
    import numpy as np
    from PIL import Image

    browser = _chromium()
    assert browser is not None
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={png}", f"--window-size={width},{height}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)  # fmt: skip
    pixels = np.asarray(Image.open(png).convert("L")) < 245
    rows, columns = np.nonzero(pixels.any(axis=1))[0], np.nonzero(pixels.any(axis=0))[0]
    return int(rows.max()), int(columns.max())


def _markdown_page(markdown: str) -> str:
    """The summary's headings, paragraphs, quotes and tables as HTML in GitHub's markdown style (cells unwrapped,
    so a table too wide for the page shows as one)."""
    out = []
    for block in markdown.split("\n\n"):
        lines = block.strip().splitlines()
        if not lines:
            continue
        if lines[0].startswith("|"):
            head, body = _cells(lines[0]), [_cells(ln) for ln in lines[2:]]
            out.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in head) + "</tr>" + "".join(
                "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in body) + "</table>")
        elif lines[0].startswith("#"):
            level = len(lines[0]) - len(lines[0].lstrip("#"))
            out.append(f"<h{level}>{html.escape(lines[0].lstrip('# '))}</h{level}>")
        else:
            out.append(f"<p>{html.escape(' '.join(lines))}</p>")
    style = ("body{margin:0;padding:0 16px;font:14px/1.5 -apple-system,'Segoe UI',sans-serif}"
             "table{border-collapse:collapse}td,th{border:1px solid #d0d7de;padding:6px 13px;white-space:nowrap}")
    head = f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{style}</style></head>"
    return f"{head}<body>{''.join(out)}</body></html>"


@pytest.mark.skipif(_chromium() is None, reason="no headless Chromium (apt-get install chromium) to draw the pages")
def test_the_page_and_the_markdown_fit_a_screen_when_a_browser_draws_them(report: Path, tmp_path: Path) -> None:
    bottom, right = _screenshot(report / "index.html", tmp_path / "page.png", 1280, PAGE_HEIGHT + 1500)
    assert bottom < PAGE_HEIGHT and right < 1280 - 16  # bounded height, nothing past the window's right edge
    rendered = tmp_path / "summary.html"
    rendered.write_text(_markdown_page((report / "summary.md").read_text()))
    bottom, right = _screenshot(rendered, tmp_path / "summary.png", GITHUB_WIDTH, 3000)
    assert right < GITHUB_WIDTH - 16 and bottom < 2000


def test_without_ruptures_the_report_says_it_is_a_dependency_not_an_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from perf.report.inputs import find_changes

    monkeypatch.setitem(sys.modules, "ruptures", None)  # as in a broken install
    warning = "no change points: they need ruptures, a dependency of this package (pip install -e .)"
    warnings: list[str] = []
    assert find_changes([], warnings) == [] and warnings == [warning]
