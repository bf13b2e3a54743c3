"""The report schema (perf.report.schema): every table and column declared once, refused when undeclared, and
rendered whole by the suite's markdown, perf-report's markdown and its HTML; what the writer saves, the reader
accepts."""

from __future__ import annotations

import ast
import html
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perf.report import schema
from perf.report.html import Report, to_html
from perf.report.inputs import load_tables
from perf.report.schema import NUMBER, NUMBERS, TEXTS, SchemaError, TableSpec
from perf.report.suite import PerfReport
from perf.report.tables import Table, to_markdown
from perf.validate import report_problem

ROOT = Path(__file__).resolve().parents[2]


def _value(column: schema.Column, i: int) -> Any:
    return {NUMBER: 1.5 + i, NUMBERS: [0.5, 0.75], TEXTS: ["a", "b"]}.get(column.kind, f"v{i}")


def _full_row(spec: TableSpec) -> dict[str, Any]:
    """A row with a value in every column, shown and kept (a family as two of its names)."""
    row: dict[str, Any] = {}
    for i, column in enumerate((*spec.columns, *spec.kept)):
        names = [column.name.replace("{}", x) for x in ("2%", "10%")] if column.family else [column.name]
        row.update((name, _value(column, i)) for name in names)
    return row


def _header(markdown: str, title: str) -> list[str]:
    lines = markdown.splitlines()
    start = lines.index(next(ln for ln in lines if ln.startswith("###") and ln.endswith(title)))
    header = next(ln for ln in lines[start + 1:] if ln.startswith("| "))
    return [cell.strip().replace("\\|", "|") for cell in header.strip().strip("|").split(" | ")]  # "max \|ratio-1\| %"


def test_a_row_for_a_table_the_schema_lacks_is_refused_naming_it() -> None:
    report = PerfReport()
    with pytest.raises(SchemaError, match=r"no report table 'Rows' in perf/report/schema.py: declare it there"):
        report.add("Rows", {"run": "a"})
    with pytest.raises(SchemaError, match="no report table 'Mine'"):
        report.add(TableSpec("MINE", "Mine", (schema.num("x"),)), {"x": 1})
    assert report.tables == {}


def test_a_video_name_that_is_not_utf8_is_written_into_both_reports(tmp_path: Path) -> None:
    video = os.fsdecode(b"clip\xff.mp4")  # --perf-video $'clip\xff.mp4': the run's subject names it
    json_path, md_path = PerfReport(subject={"video": video}).write(tmp_path)
    assert json.loads(json_path.read_text())["subject"]["video"] == video
    assert "- video: clip\\udcff.mp4" in md_path.read_text(encoding="utf-8")


def test_a_row_with_a_column_the_schema_lacks_is_refused_naming_the_column_and_the_declared_ones() -> None:
    report = PerfReport()
    with pytest.raises(SchemaError) as e:
        report.add(schema.INFERENCE, {"case": "torch fp32", "batch": 1, "median_ms": 1.5})
    assert "report table 'Inference' has no column 'median_ms'" in str(e.value)
    assert "'median ms'" in str(e.value) and "perf/report/schema.py" in str(e.value)
    assert report.tables == {}


def test_a_value_of_the_wrong_kind_is_refused_naming_the_column() -> None:
    with pytest.raises(SchemaError, match=r"table 'Inference': 'median ms' is '1.5', not a number"):
        PerfReport().add(schema.INFERENCE, {"case": "torch fp32", "median ms": "1.5"})
    with pytest.raises(SchemaError, match=r"'ious' is a number, expected a list of numbers"):
        PerfReport().add(schema.PARITY, {"candidate": "x", "ious": 0.9})


def test_a_table_is_named_by_its_schema_constant_or_its_title() -> None:
    report = PerfReport()
    report.add(schema.LAB, {"Model Type": "a"})
    report.add("End-to-end (the lab's table)", {"Model Type": "b"})
    assert report.tables == {schema.LAB.title: [{"Model Type": "a"}, {"Model Type": "b"}]}


@pytest.mark.parametrize("spec", schema.SUITE, ids=lambda s: s.key)
def test_the_suite_markdown_shows_every_column_the_schema_declares(spec: TableSpec) -> None:
    report = PerfReport()
    report.add(spec, _full_row(spec))
    report.add(spec, {})  # a row without values: blank cells, never fewer columns
    header = _header(report.to_markdown(), spec.title)
    fixed = [c.header or c.name for c in spec.columns if not c.family]  # a header says which loop, if given
    assert [h for h in header if h in fixed] == fixed
    family = [c for c in spec.columns if c.family]
    assert len(header) == len(fixed) + 2 * len(family)
    assert all(c.name not in header for c in spec.kept)


def test_a_column_family_shows_each_name_its_rows_use_in_the_order_they_first_appear() -> None:
    report = PerfReport()
    report.add(schema.GATE_SELFTEST, {"injected": "none", "slower @ min effect 5%": "0/8", "unstable": 1})
    report.add(schema.GATE_SELFTEST, {"injected": "5%", "slower @ min effect 3%": "8/8"})
    assert _header(report.to_markdown(), "Gate self-test") == [
        "subject", "rounds", "injected", "measured ratio", "unstable", "slower @ min effect 5%",
        "slower @ min effect 3%"]  # fmt: skip
    with pytest.raises(SchemaError, match="has no column 'slower at 5%'"):
        report.add(schema.GATE_SELFTEST, {"slower at 5%": "0/8"})


@pytest.mark.parametrize("spec", schema.SUMMARY, ids=lambda s: s.key)
def test_perf_reports_html_shows_every_column_and_its_markdown_every_column_but_the_detail(spec: TableSpec) -> None:
    table = Table(spec, [{c.name: f"cell {i}" for i, c in enumerate(spec.columns)}, {}])
    names = [c.name for c in spec.columns]
    assert _header(to_markdown([table], []), spec.title) == [c.name for c in spec.columns if not c.detail]
    page = to_html(Report("", [table]))
    section = page[page.index(f"<h3>{html.escape(spec.title)}</h3>"):]
    head = re.search(r"<tr>((?:<th>.*?</th>)+)</tr>", section).group(1)  # type: ignore[union-attr]
    assert re.findall(r"<th>(.*?)</th>", head) == [html.escape(n) for n in names]
    assert all(re.search(f"<td[^>]*>cell {i}</td>", section) for i in range(len(names)))


@pytest.mark.parametrize("spec", schema.SUMMARY, ids=lambda s: s.key)
def test_perf_reports_markdown_tables_fit_a_github_page(spec: TableSpec) -> None:
    assert len(spec.names(detail=False)) <= schema.MARKDOWN_COLUMNS


def test_a_gpu_only_column_is_left_out_of_a_cpu_run_with_a_note_saying_why() -> None:
    report = PerfReport(device="cpu")
    report.add(schema.HARNESS, {"case": "torch fp32", "batch": 1, "suite median ms": 20.0, "overhead": -0.2453})
    report.add(schema.PIPELINED_RATIOS, {"case": "torch fp32 (cpu)", "pipeline/slowest stage": 0.95,
                                         "meets 0.9": "yes", "pipeline/sequential": 0.45})  # fmt: skip
    markdown = report.to_markdown()
    assert "overhead" not in _header(markdown, "Harness overhead") and "-0.2453" not in markdown
    assert "meets 0.9" not in _header(markdown, "Pipelined vs its slowest stage and the sequential loop")
    assert "| yes |" not in markdown
    assert f"> {schema.HARNESS.cpu_note}" in markdown and f"> {schema.PIPELINED_RATIOS.cpu_note}" in markdown
    on_gpu = PerfReport(tables=report.tables, device="cuda:0").to_markdown()
    assert "overhead" in _header(on_gpu, "Harness overhead") and "| -0.2453 |" in on_gpu
    assert schema.HARNESS.cpu_note not in on_gpu and f"> {schema.HARNESS.note}" in on_gpu


def test_a_gpu_only_table_of_a_cpu_run_is_its_title_and_why_in_the_markdown_and_the_page() -> None:
    report = PerfReport(device="cpu")
    report.add(schema.GPU_MEMORY, {"backend": "torch", "runners": 1, "why": "next backend"})
    markdown = report.to_markdown()
    assert f"### {schema.GPU_MEMORY.title}\n\n> {schema.GPU_MEMORY.cpu_note}" in markdown
    assert "| backend |" not in markdown
    page = to_html(Report("", [], suite=report))
    assert (f"<h3>{html.escape(schema.GPU_MEMORY.title)}</h3><p class='note'>"
            f"{html.escape(schema.GPU_MEMORY.cpu_note)}</p>\n</details>") in page and "<th>backend</th>" not in page


def test_a_run_of_unknown_device_shows_every_column_with_its_meaning() -> None:
    report = PerfReport()
    report.add(schema.HARNESS, {"case": "torch fp32", "overhead": 0.021})
    markdown = report.to_markdown()
    assert "overhead" in _header(markdown, "Harness overhead") and schema.HARNESS.note in markdown


def test_suite_cells_never_use_scientific_notation() -> None:
    report = PerfReport()
    report.add(schema.INFERENCE, {"case": "a", "median ms": 12330.4, "p99 ms": 0.0000123, "images/s": 1.5e5})
    assert "| a |  | 12,330 | 0.00001230 | 150,000 |" in report.to_markdown()


def test_a_summary_row_with_a_column_the_schema_lacks_is_refused() -> None:
    with pytest.raises(SchemaError, match="report table 'Compare verdicts' has no column 'ratio'"):
        Table(schema.SUMMARY_VERDICTS, [{"benchmark": "a", "ratio": "1.1"}])


def test_every_row_the_writer_saves_the_reader_reads_back(tmp_path: Path) -> None:
    report = PerfReport()
    for spec in schema.SUITE:
        report.add(spec, _full_row(spec))
    report.add(schema.PARITY, {"candidate": "x", "match rate": np.float32(0.5), "borderline": np.int64(3),
                               "ious": [0.9, 0.95], "failures": []})  # fmt: skip
    report.write(tmp_path)
    saved = json.loads((tmp_path / "perf-report.json").read_text())
    assert report_problem(saved, schema.find_suite_table) is None
    warnings: list[str] = []
    tables, device = load_tables(tmp_path, warnings)
    assert tables == report.tables and warnings == [] and device is None
    assert tables[schema.PARITY.title][-1]["match rate"] == 0.5 and tables[schema.PARITY.title][-1]["borderline"] == 3


def test_merging_worker_parts_refuses_an_undeclared_column() -> None:
    merged = PerfReport()
    merged.merge({schema.INFERENCE.title: [{"case": "a", "batch": 1}]})
    with pytest.raises(SchemaError, match="has no column 'pad'"):
        merged.merge({schema.INFERENCE.title: [{"case": "b", "pad": "x"}]})


def test_keys_are_unique_and_titles_unique_within_each_document() -> None:
    tables = (*schema.SUITE, *schema.SUMMARY)
    assert len({t.key for t in tables}) == len(tables)
    for document in (schema.SUITE, schema.SUMMARY):
        assert len({t.title for t in document}) == len(document)
    for spec in tables:
        names = [c.name for c in (*spec.columns, *spec.kept)]
        assert len(set(names)) == len(names), spec.title
        assert getattr(schema, spec.key) is spec


def _titles_added_in(path: Path) -> list[tuple[int, str]]:
    """String-literal titles passed to ``<x>.add(title, row)`` in a module."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add"
                and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str) and isinstance(node.args[1], (ast.Dict, ast.Call, ast.Name))):
            out.append((node.lineno, node.args[0].value))
    return out


def test_every_title_the_suite_adds_rows_to_is_declared() -> None:
    titles = {spec.title for spec in schema.SUITE}
    undeclared = [f"{path.relative_to(ROOT)}:{line}: {title!r}" for path in sorted((ROOT / "perf").rglob("*.py"))
                  for line, title in _titles_added_in(path) if title not in titles]  # fmt: skip
    assert undeclared == []


def test_the_suite_report_shows_a_table_in_its_declared_column_order_and_writes_json_and_markdown(
    tmp_path: Path,
) -> None:
    report = PerfReport()
    report.add("End-to-end (the lab's table)", {"End-to-end speed (FPS)": 71.43, "Model Type": "PyTorch",
                                                "Model Input Size": "416x416", "Inference Speed (FPS)": 182.6})
    md = report.to_markdown()
    assert "| Model Type | Model Input Size | Inference Speed (FPS) | End-to-end speed (FPS) |" in md
    assert "| PyTorch | 416x416 | 182.6 | 71.43 |" in md
    json_path, md_path = report.write(tmp_path)
    assert (json_path, md_path) == (tmp_path / "perf-report.json", tmp_path / "perf-report.md")
    assert md_path.read_text() == md + "\n"
    assert load_tables(tmp_path, [])[1] is None
    PerfReport(report.tables, device="cuda").write(tmp_path)
    assert load_tables(tmp_path, [])[1] == "cuda"
    merged = PerfReport()
    merged.merge(json.loads(json_path.read_text())["tables"])
    assert merged.tables == report.tables
