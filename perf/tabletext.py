"""Every table the suite writes: `markdown_table` (reports, verdict files, the commands' output), `text_table`
(aligned columns for the terminal) and `html_table` (the HTML report), from cells already formatted as text."""

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


def _checked(headers: Sequence[str], rows: Iterable[Sequence[str]], right: Collection[str] = ()) -> list[Sequence[str]]:
    """``rows`` as a list; `ValueError` naming a ``right`` column not among the headers, or a row of another length."""
    if unknown := set(right) - set(headers):
        raise ValueError(f"right-aligned column(s) {sorted(unknown)!r} are not among the headers "
                         f"{list(headers)!r}")  # fmt: skip
    rows = list(rows)
    for cells in rows:
        if len(cells) != len(headers):
            raise ValueError(f"row {list(cells)!r}: {len(cells)} cell(s) for {len(headers)} column(s) "
                             f"{list(headers)!r}")  # fmt: skip
    return rows


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]], right: Collection[str] = ()) -> list[str]:
    """The lines of a markdown table, each cell through `markdown_cell`; ``right``: the right-aligned headers."""
    head, *body = [f"| {' | '.join(map(markdown_cell, cells))} |"
                   for cells in (headers, *_checked(headers, rows, right))]  # fmt: skip
    return [head, "|" + "|".join("---:" if h in right else "---" for h in headers) + "|", *body]


def text_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """The lines of a plain-text table for a terminal: each column padded to its widest cell, no trailing spaces."""
    table = [headers, *_checked(headers, rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in table]


def html_table(headers: Sequence[str], rows: Iterable[Sequence[str]], right: Collection[str] | None = None,
               prose: Collection[str] = ()) -> str:  # fmt: skip
    """One HTML ``<table>``, every cell escaped and classed: ``prose`` in a ``prose`` column, else ``text``
    (left) in a column not in ``right`` (``right`` None: a cell not starting like a number); a cell reading
    ``slower`` / ``faster``, alone or in closing parentheses (``+12% (slower)``), also that word."""

    def td(header: str, text: str) -> str:
        word = text.split(" (")[-1].rstrip(")") if text.endswith(")") else text
        left = not _NUMBER_LIKE.match(text) if right is None else header not in right
        classes = [word] * (word in _COLOURED) + (["prose"] if header in prose else ["text"] if left else [])
        attr = f" class='{' '.join(classes)}'" if classes else ""
        return f"<td{attr}>{html.escape(text)}</td>"

    body = "".join(f"<tr>{''.join(map(td, headers, row))}</tr>" for row in _checked(headers, rows, right or ()))
    return f"<table><tr>{''.join(f'<th>{html.escape(h)}</th>' for h in headers)}</tr>{body}</table>"
