"""The suite's own report: tables tests add rows to, printed in the terminal summary and saved atomically as
``<reports>/perf-report.json`` and ``.md``."""

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
from perf.report.schema import SchemaError, TableSpec
from perf.validate import row_problem

#: The report's file name without suffix: ``perf-report.json`` and ``perf-report.md`` (the latest run's copy).
REPORT_STEM = "perf-report"


def speedup_rows(rows: Sequence[dict[str, Any]], reference: str = "torch fp32") -> list[dict[str, Any]]:
    """Each "Inference" row with a ``reference`` row at its batch: ``speed-up`` = reference median / its median."""
    ref = {r["batch"]: r["median ms"] for r in rows if r.get("case") == reference and r.get("median ms")}
    return [{"case": r["case"], "batch": r["batch"], "median ms": r["median ms"],
             f"{reference} median ms": ref[r["batch"]], "speed-up": ref[r["batch"]] / r["median ms"]}
            for r in rows if r.get("case") != reference and r.get("batch") in ref and r.get("median ms")]


@dataclass
class PerfReport:
    """Rows (dicts keyed by column name) by table title; ``device``: what the run measured on (``"cpu"``,
    ``"cuda"``; None: not known); ``subject``: `perf.subject.describe_subject`, shown first."""

    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    device: str | None = None
    subject: dict[str, str] = field(default_factory=dict)

    def add(self, table: TableSpec | str, row: Mapping[str, Any]) -> None:
        """Append ``row`` to ``table`` (a `perf.report.schema` table or its title); `SchemaError` for an
        undeclared table or column, or a value not of its column's kind (numpy scalars are numbers)."""
        spec = schema.suite_table(table)
        spec.check(row)
        clean = {key: value.item() if isinstance(value, np.generic) else value for key, value in row.items()}
        if (problem := row_problem(spec, clean)) is not None:
            raise SchemaError(f"{problem} (see perf/report/schema.py)")
        self.tables.setdefault(spec.title, []).append(clean)

    def merge(self, other: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        """Append every row of ``other`` (a saved report's ``tables``), checked as :meth:`add` does."""
        for name, rows in other.items():
            for row in rows:
                self.add(name, row)

    def to_json(self) -> dict[str, Any]:
        """What ``perf-report.json`` holds: the subject and device when known, and the tables."""
        return {**({"subject": self.subject} if self.subject else {}), "tables": self.tables,
                **({"device": self.device} if self.device else {})}

    def shown(self) -> Iterator[tuple[TableSpec, list[dict[str, Any]]]]:
        """Each table with rows, and its schema (one this version does not declare: its rows' keys as text columns)."""
        for title, rows in self.tables.items():
            if rows:
                yield schema.find_suite_table(title) or TableSpec(title, title, tuple(
                    schema.text(str(key)) for key in dict.fromkeys(k for row in rows for k in row))), rows

    def to_markdown(self) -> str:
        """The subject, then every table as :meth:`shown`: title, notes (quoted) and markdown table."""
        from perf.subject import subject_markdown

        parts = [subject_markdown(self.subject)] if self.subject else []
        for spec, rows in self.shown():
            notes = spec.notes(self.device)
            parts.append(f"### {spec.title}\n")
            parts += ["\n>\n".join(f"> {note}" for note in notes), ""] if notes else []
            parts += [*table, ""] if (table := spec.markdown(rows, device=self.device)) else []
        return "\n".join(parts)

    def add_speedups(self) -> None:
        """(Re)make `perf.report.schema.SPEEDUP` from the "Inference" rows (call once every row is in)."""
        if rows := speedup_rows(self.tables.get(schema.INFERENCE.title, [])):
            self.tables.pop(schema.SPEEDUP.title, None)
            self.merge({schema.SPEEDUP.title: rows})

    def write(self, folder: str | os.PathLike[str], stem: str = REPORT_STEM) -> list[Path]:
        """Write ``<stem>.json`` and ``<stem>.md`` into ``folder`` atomically; return the paths."""
        text = json.dumps(self.to_json(), indent=2, default=str) + "\n"
        return [atomic_write_text(Path(folder, f"{stem}.json"), text),
                atomic_write_text(Path(folder, f"{stem}.md"), self.to_markdown() + "\n")]
