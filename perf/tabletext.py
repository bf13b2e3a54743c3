"""Every table the suite writes: `markdown_table` (the reports, the verdict files, the commands' output),
`text_table` (aligned columns for the terminal) and `html_table` (the HTML report). Cells come in as formatted
text; what a column means is the caller's (`perf.report.schema` for the declared tables)."""

from __future__ import annotations

import html
import re
from collections.abc import Collection, Iterable, Sequence

_NUMBER_LIKE = re.compile(r"[-+]?[\d.]")
#: Cell words the page colours (`html_table`): the gate's verdicts.
_COLOURED = ("slower", "faster")


def markdown_cell(text: str) -> str:
    """``text`` safe inside a markdown table cell (or a quoted line): ``|`` escaped, each newline a space."""
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]], right: Collection[str] = ()) -> list[str]:
    """The lines of a markdown table: ``headers``, the rule, one line per row (its cells in ``headers`` order),
    every cell through `markdown_cell`. ``right``: the headers of the columns aligned right (numbers), the rest left."""
    _check_right(right, headers)

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(map(markdown_cell, _checked(cells, headers))) + " |"

    return [line(headers), "|" + "|".join("---:" if h in right else "---" for h in headers) + "|", *map(line, rows)]


def text_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """The lines of a plain-text table for a terminal: ``headers`` then one line per row, each column padded to
    its widest cell, two spaces between columns, no trailing spaces."""
    table = [headers, *(_checked(row, headers) for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in table]


def html_table(headers: Sequence[str], rows: Iterable[Sequence[str]], right: Collection[str] | None = None,
               prose: Collection[str] = ()) -> str:
    """One HTML ``<table>``: a row of ``headers``, then one row per row of cells (in ``headers`` order), every
    header and cell escaped. A cell's CSS class says how it reads: in a ``prose`` column ``prose`` (wrapped);
    else ``text`` (aligned left) in a column not in ``right``, or, with ``right`` None, when the cell does not
    start like a number (the page aligns an unclassed cell right, a row's first cell left); a cell reading
    ``slower`` or ``faster``, alone or in closing parentheses (``+12% (slower)``), also that word (coloured)."""
    _check_right(right or (), headers)

    def td(header: str, text: str) -> str:
        word = text.split(" (")[-1].rstrip(")") if text.endswith(")") else text
        left = not _NUMBER_LIKE.match(text) if right is None else header not in right
        classes = [word] * (word in _COLOURED) + (["prose"] if header in prose else ["text"] if left else [])
        attr = f" class='{' '.join(classes)}'" if classes else ""
        return f"<td{attr}>{html.escape(text)}</td>"

    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(f"<tr>{''.join(map(td, headers, _checked(row, headers)))}</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _check_right(right: Collection[str], headers: Sequence[str]) -> None:
    if unknown := set(right) - set(headers):
        raise ValueError(f"right-aligned column(s) {sorted(unknown)!r} are not among the headers {list(headers)!r}")


def _checked(cells: Sequence[str], headers: Sequence[str]) -> Sequence[str]:
    if len(cells) != len(headers):
        raise ValueError(f"row {list(cells)!r}: {len(cells)} cell(s) for {len(headers)} column(s) {list(headers)!r}")
    return cells
