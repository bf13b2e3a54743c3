"""The suite's own report: tables that tests add rows to (declared in `perf.report.schema`), printed in
pytest's terminal summary and saved atomically as ``<reports>/perf-report.json`` and ``perf-report.md``; each
pytest-xdist worker writes ``perf-report-<worker>.json`` and the controller merges them. ``device`` (saved as
``"device"``) drops GPU-only tables and columns from a CPU run; ``subject`` (`perf.subject.describe_subject`) names
what was measured.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from detector.fileio import atomic_write_text
from perf.report import schema
from perf.report.readable import number
from perf.report.schema import SchemaError, TableSpec
from perf.validate import row_problem

#: The report's file name without suffix: ``perf-report.json`` and ``perf-report.md`` (the latest run's copy).
REPORT_STEM = "perf-report"


def speedup_rows(inference_rows: Sequence[dict[str, Any]], reference: str = "torch fp32") -> list[dict[str, Any]]:
    """Each "Inference" row's median against the ``reference`` case's at the same batch size, from the same run:
    ``speed-up`` = reference median / case median (2.0 = twice as fast). Rows without a reference are left out."""
    ref = {r["batch"]: r["median ms"] for r in inference_rows if r.get("case") == reference and r.get("median ms")}
    return [{"case": r["case"], "batch": r["batch"], "median ms": r["median ms"], f"{reference} median ms": ref[r["batch"]],
             "speed-up": ref[r["batch"]] / r["median ms"]}
            for r in inference_rows if r.get("case") != reference and r.get("batch") in ref and r.get("median ms")]


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python number it holds (what the JSON and the checks expect); anything else as is."""
    return value.item() if isinstance(value, np.generic) else value


def cell(value: Any) -> str:
    """A suite report's cell as text: numbers with 4 significant digits, never in scientific notation."""
    return number(value, 4) if isinstance(value, float) else "" if value is None else str(value)


@dataclass
class PerfReport:
    """Tables of rows (dicts keyed by column name) by title; JSON- and markdown-renderable. Every table and
    column is one of `perf.report.schema`'s. ``device``: what the run measured on (``"cpu"``, ``"cuda"``,
    ``"cuda:1"``; None when not known: everything is shown, with each table's note)."""

    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    device: str | None = None
    #: What the run measured and where (`perf.subject.describe_subject`: model, input size, classes, video,
    #: backends, device, machine), shown first; {} when not known.
    subject: dict[str, str] = field(default_factory=dict)

    def add(self, table: TableSpec | str, row: Mapping[str, Any]) -> None:
        """Append ``row`` to ``table`` (a `perf.report.schema` table or its title); `perf.report.schema.SchemaError`
        for an undeclared table or column, or a value not of its column's kind (numpy scalars count as numbers)."""
        spec = schema.suite_table(table)
        spec.check(row)
        clean = {key: _plain(value) for key, value in row.items()}
        problem = row_problem(spec, clean)
        if problem is not None:
            raise SchemaError(f"{problem} (see perf/report/schema.py)")
        self.tables.setdefault(spec.title, []).append(clean)

    def merge(self, other: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        """Append every row of ``other`` (a :meth:`to_json` dict's ``tables``), checked as :meth:`add` does."""
        for name, rows in other.items():
            for row in rows:
                self.add(name, row)

    def to_json(self) -> dict[str, Any]:
        return {**({"subject": self.subject} if self.subject else {}), "tables": self.tables,
                **({"device": self.device} if self.device else {})}

    def shown(self) -> Iterator[tuple[TableSpec, list[str], list[str], list[list[str]]]]:
        """Each table with rows, in insertion order, as :attr:`device` shows it: its schema (`schema.shown_table`),
        notes, the columns it shows (`perf.report.schema.TableSpec.names`: none for a GPU-only table of a CPU
        run) and their cells as text (`cell`)."""
        for title, rows in self.tables.items():
            if rows:
                spec = schema.shown_table(title, rows)
                columns = spec.names(rows, device=self.device)
                yield spec, spec.notes(self.device), columns, [[cell(row.get(c)) for c in columns] for row in rows]

    def to_markdown(self) -> str:
        """Every table as :meth:`shown`: its title, its notes (a quoted paragraph each), then a markdown table when
        it shows columns. The subject comes first (`perf.subject.subject_markdown`)."""
        from perf.subject import subject_markdown

        parts = [subject_markdown(self.subject)] if self.subject else []
        for spec, notes, columns, cells in self.shown():
            parts.append(f"### {spec.title}\n")
            parts += ["\n>\n".join(f"> {note}" for note in notes), ""] if notes else []
            parts += [*spec.markdown(columns, cells), ""] if columns else []
        return "\n".join(parts)

    def add_speedups(self) -> None:
        """(Re)make `perf.report.schema.SPEEDUP` from the "Inference" table: every case against eager torch fp32,
        same batch (call once every row is in)."""
        rows = speedup_rows(self.tables.get(schema.INFERENCE.title, []))
        if rows:
            self.tables.pop(schema.SPEEDUP.title, None)
            for row in rows:
                self.add(schema.SPEEDUP, row)

    def write(self, folder: str | os.PathLike[str], stem: str = REPORT_STEM) -> list[Path]:
        """Write ``<stem>.json`` and ``<stem>.md`` into ``folder`` atomically; return the paths."""
        folder = Path(folder)
        json_path = atomic_write_text(folder / f"{stem}.json", json.dumps(self.to_json(), indent=2, default=str) + "\n")
        md_path = atomic_write_text(folder / f"{stem}.md", self.to_markdown() + "\n")
        return [json_path, md_path]
