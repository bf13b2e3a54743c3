"""What ``perf-report`` reads: one machine's saved runs (or a history store's) and their change points, the
suite's ``perf-report.json``, the nsys summaries and the compare verdicts. Each loader appends its one-line
warnings to ``warnings``; bad input that leaves nothing to report is a `perf.runs.HistoryError`."""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perf.report.captures import load_captures
from perf.report.schema import TableSpec, find_suite_table
from perf.report.suite import REPORT_STEM
from perf.runs import BenchmarkRecord, HistoryError, SavedRun, load_runs, read_json, run_files
from perf.validate import report_problem
from perf.verdicts import Verdicts, load_verdicts

#: The suite's report file the reports read (the latest run's copy).
PERF_REPORT = f"{REPORT_STEM}.json"


@dataclass
class ReportInputs:
    """Everything one report is built from: ``runs`` oldest first, the suite report's ``tables`` by title,
    the ``changes`` of the runs' histories (`perf.store.changepoints.HistoryChange`) and the nsys ``captures``
    (`perf.report.captures.CaptureRow`)."""

    runs: list[SavedRun] = field(default_factory=list)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    verdicts: Verdicts | None = None
    warnings: list[str] = field(default_factory=list)
    report_device: str | None = None
    changes: list[Any] = field(default_factory=list)
    captures: list[Any] = field(default_factory=list)

    @property
    def latest(self) -> SavedRun | None:
        return self.runs[-1] if self.runs else None

    @property
    def device(self) -> str | None:
        """What the reported run measured on (``"cpu"``, ``"cuda"``; None: not known)."""
        return self.report_device or (self.latest.device if self.latest is not None else None)

    @property
    def subject(self) -> dict[str, str]:
        """What the newest run measured and where (`perf.subject.describe_subject`); {} without runs."""
        from perf.subject import describe_subject

        if (latest := self.latest) is None:
            return {}
        info = latest.machine_info
        return describe_subject(info.get("perf_subject"), latest.fingerprint, info.get("node") or latest.machine_id)

    def rows(self, table: TableSpec) -> list[dict[str, Any]]:
        """The suite report's rows of ``table`` (none when the report lacks it)."""
        return self.tables.get(table.title, [])

    @functools.cached_property
    def _change_starts(self) -> dict[tuple[int, str], Any]:
        """Each change point by (the index of the run its new level starts at, its benchmark)."""
        from perf.store.db import run_id_of

        ids = {run.run_id or run_id_of(run.raw): i for i, run in enumerate(self.runs)}
        return {(ids[c.run_id], c.fullname): c for c in self.changes if c.run_id in ids}

    def change_at(self, index: int, fullname: str) -> Any:
        """The change point of benchmark ``fullname`` whose new level starts at ``runs[index]``, or None."""
        return self._change_starts.get((index, fullname)) if self.changes else None

    def verdict_for(self, run: SavedRun, bench: BenchmarkRecord) -> dict[str, Any] | None:
        """The verdict entry of ``bench`` in ``run``: None unless the verdicts judged that very run."""
        if self.verdicts is None or not self.verdicts.judges(run):
            return None
        return self.verdicts.entry(bench.fullname, bench.name)


def load_machine_runs(storage: Path, machine_id: str | None, warnings: list[str]) -> tuple[list[SavedRun], Any]:
    """One machine's saved runs (default: the newest file's), oldest first, and its stored noise profile (or
    None); `HistoryError`: all corrupt, no folder."""
    from perf.gate.noise import DEFAULT_FLOOR_WITHOUT, runner_profile

    files = run_files(storage)
    if machine_id is None and files:
        machine_id = max(files, key=lambda path: path.lstat().st_mtime).parent.name
    others = Counter(path.parent.name for path in files if path.parent.name != machine_id)
    warnings += [f"runs of machine '{m}' ({n} files) are not in this report; choose it with --machine-id"
                 for m, n in sorted(others.items())]  # fmt: skip
    skipped: list[str] = []
    runs = load_runs(storage, machine_id, skipped=skipped)
    warnings += [f"skipped corrupt saved run: {e}" for e in skipped]
    if not runs:
        warnings.append(f"benchmark storage '{storage}' holds no saved runs")
        return runs, None
    return runs, runner_profile(warnings.append, storage=storage, fingerprint=runs[-1].fingerprint,
                                without=DEFAULT_FLOOR_WITHOUT)  # fmt: skip


def load_tables(reports: Path, warnings: list[str]) -> tuple[dict[str, list[dict[str, Any]]], str | None]:
    """The tables of ``<reports>/perf-report.json`` by title and the device it names (or None); a missing
    file is a warning, a corrupt one a `HistoryError`."""
    if not reports.is_dir():
        raise HistoryError(f"reports folder '{reports}': {'not a folder' if reports.exists() else 'no such folder'}")
    if not (path := reports / PERF_REPORT).exists():
        warnings.append(f"no {PERF_REPORT} in '{reports}': no end-to-end stage table from the report, no parity")
        return {}, None
    doc = read_json(path, "the suite's report")
    if (problem := report_problem(doc, find_suite_table)) is not None:
        raise HistoryError(f"'{path}': not a usable perf report: {problem}")
    device = doc.get("device")
    return doc["tables"], device if isinstance(device, str) and device else None


def load_store_runs(where: str, warnings: list[str]) -> tuple[list[SavedRun], Any]:
    """The runs of the history store ``where`` of its newest run's machine, oldest first, test-only runs
    included (drawn apart), and that machine's newest noise profile (or None)."""
    from perf.gate.noise import DEFAULT_FLOOR_WITHOUT, runner_profile
    from perf.store.db import machine_key, open_store

    with open_store(where, create=False) as store:
        if not (every := store.runs(include_injected=True)):
            warnings.append(f"history store '{store.shown}' holds no runs")
            return [], None
        key = machine_key(every[-1].machine_info)
        warnings += [f"history of machine {host or '?'} ({runs} runs) in the store is not in this report"
                     for other, host, runs in store.machines() if other != key]  # fmt: skip
        profile_json, shown = store.noise_profile_json(key), store.shown
    named = f"store '{shown}', machine {key}"
    profile = None if profile_json is None else runner_profile(warnings.append, stored=profile_json,
                                                               stored_in=named, without=DEFAULT_FLOOR_WITHOUT)
    return [run for run in every if machine_key(run.machine_info) == key], profile


def same_subject(runs: list[SavedRun], warnings: list[str]) -> list[SavedRun]:
    """The runs comparable with the newest (`perf.gate.history.comparable`); a warning names the others."""
    if not runs:
        return runs
    from perf.gate.history import comparable
    from perf.subject import subject_line

    identity = runs[-1].machine_info.get("perf_subject") or None
    kept = [run for run in runs if comparable(run, fingerprint=runs[-1].fingerprint, identity=identity)]
    if others := [run for run in runs if all(run is not k for k in kept)]:
        what = "; ".join(sorted({subject_line(run.machine_info.get("perf_subject")) for run in others}))
        warnings.append(f"{len(others)} saved run(s) of another model, video or machine are not in this "
                        f"report ({what}): this report is of {subject_line(identity)}")
    return kept


def find_changes(runs: list[SavedRun], warnings: list[str], profile: Any = None) -> list[Any]:
    """The change points of ``runs``' histories (floors from ``profile``); without ruptures none, and a warning."""
    try:
        import ruptures  # noqa: F401 - the change-point finder's library
    except ImportError:
        warnings.append("no change points: they need ruptures, a dependency of this package (pip install -e .)")
        return []
    from perf.gate.noise import floors_from_profile
    from perf.store.changepoints import history_changes

    return history_changes(runs, floors=floors_from_profile(profile))


def load_inputs(storage: Path | None, reports: Path | None, *, machine_id: str | None = None,
                verdicts: Path | None = None, store: str | None = None) -> ReportInputs:
    """Read everything a report needs: runs from ``store`` if given, else ``storage``; ``verdicts`` (None:
    ``perf-compare.json`` of ``reports`` when there)."""
    inputs = ReportInputs()
    warnings, profile = inputs.warnings, None
    if store is not None:
        inputs.runs, profile = load_store_runs(store, warnings)
    elif storage is not None:
        inputs.runs, profile = load_machine_runs(storage, machine_id, warnings)
    inputs.runs = same_subject(inputs.runs, warnings)
    if len(inputs.runs) >= 3:
        inputs.changes = find_changes(inputs.runs, warnings, profile)
    if reports is not None:
        inputs.tables, inputs.report_device = load_tables(reports, warnings)
        inputs.captures = load_captures(reports, warnings)
    if verdicts is not None or reports is not None:  # a verdict file given, else the reports' perf-compare.json
        inputs.verdicts = load_verdicts(reports or ".", path=verdicts)
    if not inputs.runs and not inputs.tables:
        where = " or ".join(f"'{p}'" for p in (store or storage, reports) if p is not None) or "no input given"
        raise HistoryError(f"nothing to report: no saved benchmark runs and no {PERF_REPORT} in {where}")
    return inputs
