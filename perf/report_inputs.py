"""What the HTML and markdown reports read: saved pytest-benchmark runs, the suite's report, compare verdicts.

* Saved runs: pytest-benchmark's storage, ``<storage>/<machine_id>/NNNN_*.json`` (``--benchmark-autosave``;
  with ``--benchmark-save-data`` each benchmark's ``stats["data"]`` holds the time of every round, seconds).
  A corrupt or unreadable run among good ones is skipped with a warning naming the file.
* The suite's report: ``<reports>/perf-report.json`` (:mod:`perf.report.suite`): end-to-end stage times and parity
  rows (with the IoU of every matched pair, see :func:`perf.measure.parity.report_row`).
* Compare verdicts: an optional JSON file of per-benchmark verdicts (``slower`` / ``faster`` / ...), e.g. the
  one the statistical compare gate writes; read tolerantly (see :func:`load_verdicts`).

Bad input that leaves nothing to report raises :class:`ReportInputError` with one line naming the file.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from detector.errors import DetectorError
from perf.validate import report_problem, run_problem

#: Saved-run file names pytest-benchmark writes: ``0001_<commit>_<date>.json`` (any ``NNNN_*.json``).
RUN_NAME = re.compile(r"^(\d{4})_.*\.json$")
#: The suite's report file (see perf.fixtures.reporting) and the tables the reports read.
PERF_REPORT = "perf-report.json"
PARITY_TABLE = "Parity vs torch fp32"
STAGES_TABLE = "End-to-end stages (ms per frame)"


class ReportInputError(DetectorError):
    """A report input is missing or unreadable (one line naming the file)."""


@dataclass(frozen=True)
class Bench:
    """One benchmark of one saved run; times in seconds (pytest-benchmark's unit)."""

    name: str
    fullname: str
    group: str
    params: dict[str, Any]
    stats: dict[str, Any]
    extra_info: dict[str, Any]

    @property
    def data(self) -> list[float] | None:
        """Every round's time (s), when the run was saved with --benchmark-save-data."""
        data = self.stats.get("data")
        return [float(v) for v in data] if isinstance(data, list) and data else None

    def stat(self, key: str) -> float:
        """``stats[key]`` as a float (NaN when missing)."""
        value = self.stats.get(key)
        return float(value) if isinstance(value, (int, float)) else math.nan


@dataclass(frozen=True)
class SavedRun:
    """One ``NNNN_*.json`` file of pytest-benchmark's storage."""

    path: Path
    number: int
    machine_id: str
    when: datetime | None
    commit: str
    dirty: bool
    benchmarks: tuple[Bench, ...]

    @property
    def label(self) -> str:
        """``0003 (2025-01-02 10:00, abc1234)``."""
        when = self.when.strftime("%Y-%m-%d %H:%M") if self.when else "no date"
        return f"{self.number:04d} ({when}, {self.short_commit})"

    @property
    def short_commit(self) -> str:
        return (self.commit[:7] if self.commit not in ("", "unversioned") else self.commit or "?") + (
            "+dirty" if self.dirty else "")


@dataclass
class ReportInputs:
    """Everything one report is built from; ``warnings`` are one-line notes about skipped input."""

    runs: list[SavedRun] = field(default_factory=list)  # one machine's runs, oldest first
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)  # benchmark name or fullname -> entry
    warnings: list[str] = field(default_factory=list)
    storage: Path | None = None
    verdict_file: Path | None = None

    @property
    def latest(self) -> SavedRun | None:
        return self.runs[-1] if self.runs else None

    def verdict_for(self, bench: Bench) -> dict[str, Any] | None:
        return self.verdicts.get(bench.fullname) or self.verdicts.get(bench.name)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ReportInputError(f"cannot read '{path}': {e.strerror or e}") from e
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReportInputError(f"'{path}' is not valid JSON: {e}") from e


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def parse_run(path: Path) -> SavedRun:
    """Read one saved run; :class:`ReportInputError` naming ``path`` when it is not a pytest-benchmark run."""
    doc = _read_json(path)
    problem = run_problem(doc)
    if problem is not None:
        raise ReportInputError(f"'{path}' is not a pytest-benchmark saved run: {problem}")
    benches = [Bench(name=b["name"], fullname=b["fullname"], group=b.get("group") or "ungrouped",
                     params=dict(b.get("params") or {}), stats=b["stats"], extra_info=dict(b.get("extra_info") or {}))
               for b in doc["benchmarks"]]
    commit = doc.get("commit_info") or {}
    match = RUN_NAME.match(path.name)
    return SavedRun(path=path, number=int(match.group(1)) if match else 0, machine_id=path.parent.name,
                    when=_parse_time(doc.get("datetime")), commit=str(commit.get("id") or ""),
                    dirty=bool(commit.get("dirty")), benchmarks=tuple(benches))


def run_files(storage: Path) -> dict[str, list[Path]]:
    """``{machine_id: [saved run files, by number]}`` under a storage folder (or one machine's folder)."""
    if not storage.is_dir():
        problem = "not a folder" if storage.exists() else "no such folder"
        raise ReportInputError(f"benchmark storage '{storage}': {problem} (run pytest with --benchmark-autosave)")
    found: dict[str, list[Path]] = {}
    for folder in [storage, *sorted(p for p in storage.iterdir() if p.is_dir())]:
        files = sorted(p for p in folder.iterdir() if p.is_file() and RUN_NAME.match(p.name))
        if files:
            found[folder.name] = files
    return found


def load_runs(storage: Path, machine_id: str | None = None) -> tuple[list[SavedRun], list[str]]:
    """One machine's saved runs, oldest first, and warnings (skipped files, other machines).

    Without ``machine_id`` the machine of the newest run file is taken. Corrupt files are skipped with a
    warning; :class:`ReportInputError` when every file is corrupt.
    """
    by_machine = run_files(storage)
    if machine_id is not None and machine_id not in by_machine:
        known = ", ".join(sorted(by_machine)) or "none"
        raise ReportInputError(f"benchmark storage '{storage}': no saved runs of machine '{machine_id}' "
                               f"(machines with runs: {known})")
    if not by_machine:
        return [], []
    if machine_id is None:
        machine_id = max(by_machine, key=lambda m: max(p.stat().st_mtime for p in by_machine[m]))
    warnings = [f"runs of machine '{m}' ({len(files)} files) are not in this report; choose it with --machine-id"
                for m, files in sorted(by_machine.items()) if m != machine_id]
    runs, errors = [], []
    for path in by_machine[machine_id]:
        try:
            runs.append(parse_run(path))
        except ReportInputError as e:
            errors.append(str(e))
    if errors and not runs:
        raise ReportInputError(errors[0] + (f" (and {len(errors) - 1} more corrupt runs)" if len(errors) > 1 else ""))
    warnings += [f"skipped corrupt saved run: {e}" for e in errors]
    runs.sort(key=lambda r: (r.number, r.when or datetime.min, r.path.name))
    return runs, warnings


def load_tables(reports: Path) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """The tables of ``<reports>/perf-report.json``; a missing file is a warning, a corrupt one an error."""
    if not reports.is_dir():
        problem = "not a folder" if reports.exists() else "no such folder"
        raise ReportInputError(f"reports folder '{reports}': {problem}")
    path = reports / PERF_REPORT
    if not path.exists():
        return {}, [f"no {PERF_REPORT} in '{reports}': no end-to-end stage table from the report, no parity"]
    doc = _read_json(path)
    problem = report_problem(doc)
    if problem is not None:
        raise ReportInputError(f"'{path}' is not a usable perf report: {problem}")
    return doc["tables"], []


def _verdict_entries(doc: Any) -> Iterable[dict[str, Any]]:
    if isinstance(doc, dict):
        for key in ("rows", "verdicts", "benchmarks", "results"):
            if isinstance(doc.get(key), list):
                return doc[key]
        if all(isinstance(v, dict) for v in doc.values()):  # {name: {...}}
            return [{"name": k, **v} for k, v in doc.items()]
        if all(isinstance(v, str) for v in doc.values()):  # {name: "slower"}
            return [{"name": k, "verdict": v} for k, v in doc.items()]
    return doc if isinstance(doc, list) else []


def load_verdicts(path: Path) -> dict[str, dict[str, Any]]:
    """Per-benchmark compare verdicts, keyed by every name an entry carries (name, fullname).

    Accepted shapes: a list of entries, ``{"rows" | "verdicts" | "benchmarks" | "results": [entries]}`` (the
    ``--perf-compare`` gate's ``perf-compare.json`` has ``rows`` with ``baseline_median_s``, ``current_median_s``,
    ``ratio``, ``lo``, ``hi``, ``note``),
    ``{name: entry}`` or ``{name: "slower"}``; an entry is a dict with ``name`` and/or ``fullname`` and
    ``verdict`` (or ``status``). :class:`ReportInputError` when the file is unreadable or holds no verdicts.
    """
    entries = [e for e in _verdict_entries(_read_json(path)) if isinstance(e, dict)]
    out: dict[str, dict[str, Any]] = {}
    for entry in entries:
        verdict = entry.get("verdict", entry.get("status"))
        if verdict is None:
            continue
        entry = {**entry, "verdict": str(verdict).lower()}
        for key in ("fullname", "name"):
            if entry.get(key):
                out[str(entry[key])] = entry
    if not out:
        raise ReportInputError(f"'{path}' holds no compare verdicts (entries with a name and a 'verdict')")
    return out


def load_inputs(storage: Path | None, reports: Path | None, *, machine_id: str | None = None,
                verdicts: Path | None = None) -> ReportInputs:
    """Read everything a report needs; :class:`ReportInputError` when nothing is left to report."""
    inputs = ReportInputs(storage=storage)
    if storage is not None:
        inputs.runs, warnings = load_runs(storage, machine_id)
        inputs.warnings += warnings
        if not inputs.runs:
            inputs.warnings.append(f"benchmark storage '{storage}' holds no saved runs")
    if reports is not None:
        inputs.tables, warnings = load_tables(reports)
        inputs.warnings += warnings
        if verdicts is None:
            from perf.gate.compare import VERDICT_FILE  # what --perf-compare writes

            found = reports / VERDICT_FILE
            verdicts = found if found.is_file() else None
    if verdicts is not None:
        inputs.verdicts = load_verdicts(verdicts)
        inputs.verdict_file = verdicts
    if not inputs.runs and not inputs.tables:
        where = " or ".join(f"'{p}'" for p in (storage, reports) if p is not None) or "no input given"
        raise ReportInputError(f"nothing to report: no saved benchmark runs and no {PERF_REPORT} in {where}")
    return inputs
