"""What ``perf-report`` reads: one machine's saved runs (`perf.runs.load_runs`; a corrupt run among good ones
is skipped with a warning) or a history store's (``--store``) with their change points, the suite's
``<reports>/perf-report.json`` (checked by `perf.validate.report_problem`), the Nsight Systems summaries
(`perf.report.captures`) and the compare verdicts (`perf.verdicts.load_verdicts`; `ReportInputs.verdict_for` gives
a verdict only in the run it judged). Bad input that leaves nothing to report raises `perf.runs.HistoryError`.
"""

from __future__ import annotations

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
    """Everything one report is built from; ``warnings`` are one-line notes about skipped input."""

    runs: list[SavedRun] = field(default_factory=list)  # one machine's runs, oldest first
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # the suite report's, by title
    verdicts: Verdicts | None = None
    warnings: list[str] = field(default_factory=list)
    storage: Path | None = None
    report_device: str | None = None  # the suite report's "device", when it says
    #: Change points of the runs' histories (`perf.store.changepoints.HistoryChange`), oldest first.
    changes: list[Any] = field(default_factory=list)
    #: The run's Nsight Systems captures (`perf.report.captures.CaptureRow`), from ``<reports>/nsys/*/summary.json``.
    captures: list[Any] = field(default_factory=list)
    _change_starts: dict[tuple[int, str], Any] | None = field(default=None, repr=False)

    @property
    def latest(self) -> SavedRun | None:
        return self.runs[-1] if self.runs else None

    @property
    def device(self) -> str | None:
        """What the reported run measured on (``"cpu"``, ``"cuda"``): the suite report's, else the newest saved
        run's; None when neither says."""
        return self.report_device or (self.latest.device if self.latest is not None else None)

    @property
    def subject(self) -> dict[str, str]:
        """What the newest run measured and where (`perf.subject.describe_subject`); {} without runs."""
        from perf.subject import describe_subject

        latest = self.latest
        if latest is None:
            return {}
        info = latest.machine_info
        return describe_subject(info.get("perf_subject"), latest.fingerprint, info.get("node") or latest.machine_id)

    @property
    def judged_run(self) -> SavedRun | None:
        """The run the compare verdicts judged, when it is one of :attr:`runs`; else None."""
        return next((run for run in self.runs if self.verdicts is not None and self.verdicts.judges(run)), None)

    def rows(self, table: TableSpec) -> list[dict[str, Any]]:
        """The suite report's rows of ``table`` (none when the report lacks it)."""
        return self.tables.get(table.title, [])

    def change_at(self, index: int, fullname: str) -> Any:
        """The change point (`perf.store.changepoints.HistoryChange`) of benchmark ``fullname`` whose new level
        starts at ``runs[index]``, or None."""
        if not self.changes:
            return None
        if self._change_starts is None:  # each run's id taken once (a run without one is hashed)
            from perf.store.db import run_id_of

            ids = {run.run_id or run_id_of(run.raw): i for i, run in enumerate(self.runs)}
            self._change_starts = {(ids[c.run_id], c.fullname): c for c in self.changes if c.run_id in ids}
        return self._change_starts.get((index, fullname))

    def verdict_for(self, run: SavedRun, bench: BenchmarkRecord) -> dict[str, Any] | None:
        """The compare verdict entry of ``bench`` in ``run``: None unless the verdicts judged that very run."""
        if self.verdicts is None or not self.verdicts.judges(run):
            return None
        return self.verdicts.entry(bench.fullname, bench.name)


def load_machine_runs(storage: Path, machine_id: str | None = None) -> tuple[list[SavedRun], list[str]]:
    """One machine's saved runs (default: the newest run file's), oldest first, and warnings (skipped corrupt
    files, other machines' runs); `HistoryError` when every file is corrupt, or ``storage`` is not a folder."""
    files = run_files(storage)
    if machine_id is None:
        if not files:
            return [], []
        machine_id = max(files, key=lambda path: path.stat().st_mtime).parent.name
    others = Counter(path.parent.name for path in files if path.parent.name != machine_id)
    warnings = [f"runs of machine '{m}' ({n} files) are not in this report; choose it with --machine-id"
                for m, n in sorted(others.items())]  # fmt: skip
    skipped: list[str] = []
    runs = load_runs(storage, machine_id, skipped=skipped)
    return runs, warnings + [f"skipped corrupt saved run: {e}" for e in skipped]


def load_tables(reports: Path) -> tuple[dict[str, list[dict[str, Any]]], str | None, list[str]]:
    """The tables of ``<reports>/perf-report.json`` by title, the device it says the run measured on (None when it
    does not) and warnings; a missing file is a warning, a corrupt one a `HistoryError`."""
    if not reports.is_dir():
        problem = "not a folder" if reports.exists() else "no such folder"
        raise HistoryError(f"reports folder '{reports}': {problem}")
    path = reports / PERF_REPORT
    if not path.exists():
        return {}, None, [f"no {PERF_REPORT} in '{reports}': no end-to-end stage table from the report, no parity"]
    doc = read_json(path, "the suite's report")
    problem = report_problem(doc, find_suite_table)
    if problem is not None:
        raise HistoryError(f"'{path}': not a usable perf report: {problem}")
    device = doc.get("device")
    return doc["tables"], device if isinstance(device, str) and device else None, []


def load_store_runs(where: str) -> tuple[list[SavedRun], Any, list[str]]:
    """The runs of the history store ``where`` (`perf.store.db`) of the machine of its newest run, oldest first,
    test-only runs included (the report draws them apart), that machine's newest noise profile (or None), and
    warnings naming the other machines' histories."""
    from perf.gate.noise import NoiseProfile
    from perf.store.db import machine_key, open_store

    with open_store(where) as store:
        every = store.runs(include_injected=True)
        if not every:
            return [], None, [f"history store '{store.shown}' holds no runs"]
        key = machine_key(every[-1].machine_info)
        others = [m for m in store.machines() if m[0] != key]
        profile_json = store.noise_profile_json(key)
    warnings = [f"history of machine {host or '?'} ({runs} runs) in the store is not in this report"
                for _, host, runs in others]  # fmt: skip
    profile = None if profile_json is None else NoiseProfile.from_json(profile_json)
    return [run for run in every if machine_key(run.machine_info) == key], profile, warnings


def storage_profile(storage: Path, runs: list[SavedRun]) -> Any:
    """This machine's noise profile in the benchmark storage (``<storage>/noise/``), or None (also when it is
    unreadable: change points then use the default floor)."""
    from perf.gate.noise import NoiseProfileError, find_profile

    fingerprint = runs[-1].fingerprint if runs else None
    if not isinstance(fingerprint, dict):
        return None
    try:
        return find_profile(storage, fingerprint)
    except NoiseProfileError:
        return None


def same_subject(runs: list[SavedRun]) -> tuple[list[SavedRun], list[str]]:
    """The runs comparable with the newest (same machine, model and video: `perf.gate.history.comparable`, the
    gate's one rule), oldest first, and a warning naming the others: a report never draws, marks or change-points
    one model's runs with another's."""
    if not runs:
        return runs, []
    from perf.gate.history import comparable
    from perf.subject import subject_line

    newest = runs[-1]
    identity = newest.machine_info.get("perf_subject") or None
    kept = [run for run in runs if comparable(run, fingerprint=newest.fingerprint, identity=identity)]
    others = [run for run in runs if all(run is not k for k in kept)]
    if not others:
        return runs, []
    what = "; ".join(sorted({subject_line(run.machine_info.get("perf_subject")) for run in others}))
    return kept, [(f"{len(others)} saved run(s) of another model, video or machine are not in this report ({what}): "
                   f"this report is of {subject_line(identity)}")]


def find_changes(runs: list[SavedRun], profile: Any = None) -> tuple[list[Any], list[str]]:
    """The change points of ``runs``' histories (`perf.store.changepoints`; each benchmark's floor from
    ``profile`` where it has one), and a warning when ruptures is missing (no change points then)."""
    try:
        import ruptures  # noqa: F401 - the change-point finder's library
    except ImportError:
        return [], ["no change points: they need ruptures, a dependency of this package (pip install -e .)"]
    from perf.gate.noise import floors_from_profile
    from perf.store.changepoints import history_changes, points_from_runs

    return history_changes(points_from_runs(runs), floors=floors_from_profile(profile)), []


def load_inputs(storage: Path | None, reports: Path | None, *, machine_id: str | None = None,
                verdicts: Path | None = None, store: str | None = None) -> ReportInputs:
    """Read everything a report needs; `HistoryError` when nothing is left to report.

    ``verdicts``: a verdict file; None takes ``perf-compare.json`` of ``reports`` when it is there. ``store``: read
    the runs from this history store (`perf.store.db`) instead of the storage folder."""
    inputs = ReportInputs(storage=storage)
    profile = None
    if store is not None:
        inputs.runs, profile, warnings = load_store_runs(store)
        inputs.warnings += warnings
    elif storage is not None:
        inputs.runs, warnings = load_machine_runs(storage, machine_id)
        inputs.warnings += warnings
        if not inputs.runs:
            inputs.warnings.append(f"benchmark storage '{storage}' holds no saved runs")
        profile = storage_profile(storage, inputs.runs)
    inputs.runs, warnings = same_subject(inputs.runs)
    inputs.warnings += warnings
    if len(inputs.runs) >= 3:
        inputs.changes, warnings = find_changes(inputs.runs, profile)
        inputs.warnings += warnings
    if reports is not None:
        inputs.tables, inputs.report_device, warnings = load_tables(reports)
        inputs.warnings += warnings
        inputs.captures, warnings = load_captures(reports)
        inputs.warnings += warnings
    if verdicts is not None:
        inputs.verdicts = load_verdicts(path=verdicts)
    elif reports is not None:
        inputs.verdicts = load_verdicts(reports)
    if not inputs.runs and not inputs.tables:
        where = " or ".join(f"'{p}'" for p in (store or storage, reports) if p is not None) or "no input given"
        raise HistoryError(f"nothing to report: no saved benchmark runs and no {PERF_REPORT} in {where}")
    return inputs
