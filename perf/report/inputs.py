"""What ``perf-report`` reads: saved runs and compare verdicts (`perf.runs`), and the suite's report.

* Saved runs: one machine's runs of pytest-benchmark's storage (`perf.runs.load_runs`); a corrupt or
  unreadable run among good ones is skipped with a warning naming the file.
* The suite's report: ``<reports>/perf-report.json`` (`perf.report.suite`), its tables declared in
  `perf.report.schema` and checked by `perf.validate.report_problem`: end-to-end stage times and parity rows
  (with the IoU of every matched pair, see `perf.measure.parity.report_row`).
* Compare verdicts: ``<reports>/perf-compare.json`` (what ``--perf-compare`` writes) or a given verdict file
  (`perf.runs.load_verdicts`).

Bad input that leaves nothing to report raises `perf.runs.HistoryError`, one line naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perf.report.schema import TableSpec
from perf.report.suite import REPORT_STEM
from perf.runs import BenchmarkRecord, HistoryError, SavedRun, Verdicts, load_runs, load_verdicts, read_json, run_files
from perf.validate import report_problem

#: The suite's report file the reports read (the latest run's copy).
PERF_REPORT = f"{REPORT_STEM}.json"


@dataclass
class ReportInputs:
    """Everything one report is built from; ``warnings`` are one-line notes about skipped input."""

    runs: list[SavedRun] = field(default_factory=list)  # one machine's runs, oldest first
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # the suite report's, by title
    verdicts: Verdicts | None = None
    warnings: list[str] = field(default_factory=list)
    storage: Path | None = None

    @property
    def latest(self) -> SavedRun | None:
        return self.runs[-1] if self.runs else None

    def rows(self, table: TableSpec) -> list[dict[str, Any]]:
        """The suite report's rows of ``table`` (none when the report lacks it)."""
        return self.tables.get(table.title, [])

    def verdict_for(self, bench: BenchmarkRecord) -> dict[str, Any] | None:
        """The compare verdict entry of ``bench``, or None."""
        return None if self.verdicts is None else self.verdicts.entry(bench.fullname, bench.name)


def _newest_machine(files: list[Path]) -> str:
    newest: dict[str, float] = {}
    for path in files:
        newest[path.parent.name] = max(newest.get(path.parent.name, 0.0), path.stat().st_mtime)
    return max(newest, key=lambda m: newest[m])


def load_machine_runs(storage: Path, machine_id: str | None = None) -> tuple[list[SavedRun], list[str]]:
    """One machine's saved runs, oldest first, and warnings (skipped files, other machines' runs).

    Without ``machine_id`` the machine of the newest run file is taken. Corrupt files are skipped with a
    warning; `HistoryError` when every file is corrupt, or ``storage`` is not a folder.
    """
    files = run_files(storage)
    if machine_id is None:
        if not files:
            return [], []
        machine_id = _newest_machine(files)
    others: dict[str, int] = {}
    for path in files:
        if path.parent.name != machine_id:
            others[path.parent.name] = others.get(path.parent.name, 0) + 1
    warnings = [f"runs of machine '{m}' ({n} files) are not in this report; choose it with --machine-id"
                for m, n in sorted(others.items())]  # fmt: skip
    skipped: list[str] = []
    runs = load_runs(storage, machine_id, skipped=skipped)
    return runs, warnings + [f"skipped corrupt saved run: {e}" for e in skipped]


def load_tables(reports: Path) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """The tables of ``<reports>/perf-report.json`` by title; a missing file is a warning, a corrupt one a
    `HistoryError`."""
    if not reports.is_dir():
        problem = "not a folder" if reports.exists() else "no such folder"
        raise HistoryError(f"reports folder '{reports}': {problem}")
    path = reports / PERF_REPORT
    if not path.exists():
        return {}, [f"no {PERF_REPORT} in '{reports}': no end-to-end stage table from the report, no parity"]
    doc = read_json(path, "the suite's report")
    problem = report_problem(doc)
    if problem is not None:
        raise HistoryError(f"'{path}': not a usable perf report: {problem}")
    return doc["tables"], []


def load_inputs(storage: Path | None, reports: Path | None, *, machine_id: str | None = None,
                verdicts: Path | None = None) -> ReportInputs:
    """Read everything a report needs; `HistoryError` when nothing is left to report.

    ``verdicts``: a verdict file; None takes ``perf-compare.json`` of ``reports`` when it is there."""
    inputs = ReportInputs(storage=storage)
    if storage is not None:
        inputs.runs, warnings = load_machine_runs(storage, machine_id)
        inputs.warnings += warnings
        if not inputs.runs:
            inputs.warnings.append(f"benchmark storage '{storage}' holds no saved runs")
    if reports is not None:
        inputs.tables, warnings = load_tables(reports)
        inputs.warnings += warnings
    if verdicts is not None:
        inputs.verdicts = load_verdicts(path=verdicts)
    elif reports is not None:
        inputs.verdicts = load_verdicts(reports)
    if not inputs.runs and not inputs.tables:
        where = " or ".join(f"'{p}'" for p in (storage, reports) if p is not None) or "no input given"
        raise HistoryError(f"nothing to report: no saved benchmark runs and no {PERF_REPORT} in {where}")
    return inputs
