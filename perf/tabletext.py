"""Every table the suite writes as text: `markdown_table` (the reports, the verdict files, the commands' output)
and `text_table` (aligned columns for the terminal). Cells come in as formatted text; what a column means is the
caller's (`perf.report.schema` for the declared tables)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence


def markdown_cell(text: str) -> str:
    """``text`` safe inside a markdown table cell (or a quoted line): ``|`` escaped, each newline a space."""
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]], right: Collection[str] = ()) -> list[str]:
    """The lines of a markdown table: ``headers``, the rule, one line per row (its cells in ``headers`` order),
    every cell through `markdown_cell`. ``right``: the headers of the columns aligned right (numbers), the rest left."""
    if unknown := set(right) - set(headers):
        raise ValueError(f"right-aligned column(s) {sorted(unknown)!r} are not among the headers {list(headers)!r}")

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(map(markdown_cell, _checked(cells, headers))) + " |"

    return [line(headers), "|" + "|".join("---:" if h in right else "---" for h in headers) + "|", *map(line, rows)]


def text_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """The lines of a plain-text table for a terminal: ``headers`` then one line per row, each column padded to
    its widest cell, two spaces between columns, no trailing spaces."""
    table = [headers, *(_checked(row, headers) for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in table]


def _checked(cells: Sequence[str], headers: Sequence[str]) -> Sequence[str]:
    if len(cells) != len(headers):
        raise ValueError(f"row {list(cells)!r}: {len(cells)} cell(s) for {len(headers)} column(s) {list(headers)!r}")
    return cells
