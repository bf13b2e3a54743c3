"""The one table renderer (perf.tabletext): markdown with escaped cells and column alignment, aligned terminal
text, HTML with escaped and classed cells, and every table of the reports, the verdict files and the commands
rendered through it."""

from __future__ import annotations

import pytest

from perf.gate.compare import Row
from perf.gate.table import format_lines
from perf.gate.table import to_markdown as verdicts_markdown
from perf.report import schema
from perf.report.captures import CaptureRow, captures_markdown
from perf.report.html import Report, to_html
from perf.report.suite import PerfReport
from perf.report.tables import Table, to_markdown
from perf.store.changepoints import ChangePoint, HistoryChange
from perf.store.cli import changes_table
from perf.tabletext import html_table, markdown_cell, markdown_table, text_table

WRONG = "a|b\nc"  # a pipe would end the cell, a newline the table
ESCAPED = "a\\|b c"


def test_markdown_table_has_header_rule_and_rows_aligned_as_asked() -> None:
    lines = markdown_table(["name", "ms"], [["a", "1.5"], ["b", ""]], right={"ms"})
    assert lines == ["| name | ms |", "|---|---:|", "| a | 1.5 |", "| b |  |"]
    assert markdown_table(["name", "ms"], []) == ["| name | ms |", "|---|---|"]  # left unless named


def test_markdown_cells_and_headers_escape_pipes_and_newlines() -> None:
    assert markdown_cell(WRONG) == ESCAPED
    assert markdown_table([WRONG], [[WRONG]]) == [f"| {ESCAPED} |", "|---|", f"| {ESCAPED} |"]


def test_a_row_of_the_wrong_length_or_an_unknown_right_aligned_column_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"row \['a'\]: 1 cell\(s\) for 2 column\(s\) \['x', 'y'\]"):
        markdown_table(["x", "y"], [["a"]])
    with pytest.raises(ValueError, match=r"row \['a', 'b', 'c'\]: 3 cell\(s\) for 2 column\(s\)"):
        text_table(["x", "y"], [["a", "b", "c"]])
    with pytest.raises(ValueError, match=r"right-aligned column\(s\) \['ms'\] are not among the headers \['x'\]"):
        markdown_table(["x"], [], right=["ms"])
    with pytest.raises(ValueError, match=r"row \['a'\]: 1 cell\(s\) for 2 column\(s\)"):
        html_table(["x", "y"], [["a"]])
    with pytest.raises(ValueError, match=r"right-aligned column\(s\) \['ms'\] are not among the headers \['x'\]"):
        html_table(["x"], [], right=["ms"])


def test_text_table_pads_each_column_to_its_widest_cell_without_trailing_spaces() -> None:
    assert text_table(["benchmark", "ms"], [["a", "12.5"], ["long_name", ""]]) == [
        "benchmark  ms", "a          12.5", "long_name"]  # fmt: skip
    assert text_table(["x", "y"], []) == ["x  y"]


def test_html_table_escapes_every_cell_and_classes_it_by_what_it_holds() -> None:
    table = html_table(["name <x>", "ms", "note"], [["a & b", "1.5", "it's"], ["-2", "+4% (slower)", "faster"]],
                       prose={"note"})  # fmt: skip
    assert table == (
        "<table><tr><th>name &lt;x&gt;</th><th>ms</th><th>note</th></tr>"
        "<tr><td class='text'>a &amp; b</td><td>1.5</td><td class='prose'>it&#x27;s</td></tr>"
        "<tr><td>-2</td><td class='slower'>+4% (slower)</td><td class='faster prose'>faster</td></tr></table>")
    assert html_table(["x", "ms"], [["1", "a"]], right={"ms"}) == (
        "<table><tr><th>x</th><th>ms</th></tr><tr><td class='text'>1</td><td>a</td></tr></table>")  # as told


def test_every_html_table_escapes_its_cells() -> None:
    """perf-report's summary tables, the suite's tables (declared or of another version) and the captures."""
    suite = PerfReport({"Accuracy vs ground truth": [{"backend": "<b>"}], "Old <t>": [{"<c>": "<b>"}]})
    page = to_html(Report("", [Table(schema.SUMMARY_BENCHMARKS, [{"benchmark": "<b>"}])], suite=suite,
                          captures=[CaptureRow("<b>", 1.0, 0.5, None)]))  # fmt: skip
    assert page.count("<td class='text'>&lt;b&gt;</td>") == 4 and "<b>" not in page
    assert "<h3>Old &lt;t&gt;</h3><table><tr><th>&lt;c&gt;</th></tr>" in page


def test_every_markdown_table_escapes_its_cells() -> None:
    """The suite's report, perf-report's summary, its captures, the verdict file and ``perf-history changes``."""
    report = PerfReport()
    report.add(schema.ACCURACY, {"backend": WRONG, "mAP@0.5": 0.5})
    summary = to_markdown([Table(schema.SUMMARY_BENCHMARKS, [{"benchmark": WRONG, "median": "1 ms"}])], [])
    captures = captures_markdown([CaptureRow(WRONG, 1.0, 0.5, None)])
    verdicts = verdicts_markdown([Row("t::x", "x", None, "missing", WRONG)], "header")
    changes = changes_table([HistoryChange("t::x", WRONG, "m", None, "r", "abc", None, ChangePoint(1, 1e-3, 2e-3, 2.0,
                                                                                                   9.0, 3))])
    for markdown in (report.to_markdown(), summary, captures, verdicts, changes):
        assert f" {ESCAPED} |" in markdown and "a|b" not in markdown


def test_summary_tables_right_align_columns_with_a_unit_and_the_suite_report_keeps_them_left() -> None:
    summary = to_markdown([Table(schema.SUMMARY_BENCHMARKS, [{"benchmark": "x", "median": "1 ms"}])], [])
    assert "| benchmark | median | images/s | vs previous | verdict |\n|---|---:|---:|---:|---|" in summary
    report = PerfReport()
    report.add(schema.ACCURACY, {"backend": "torch", "mAP@0.5": 0.5})
    assert "| backend | mAP@0.5 | mAP@0.5:0.95 | per class AP@0.5 |\n|---|---|---|---|" in report.to_markdown()


def test_the_terminal_verdict_table_keeps_each_note_after_its_aligned_row() -> None:
    rows = [Row("t::a", "a", None, "missing", "not in the history", None, 2e-3),
            Row("t::long", "long", None, "missing", "", None, 1e-3)]  # fmt: skip
    header, first, second = format_lines(rows)
    assert header.startswith("benchmark  history") and first.startswith("a     ") and second.startswith("long  ")
    assert first.endswith("missing  (not in the history)") and second.endswith("missing")
