"""The gate judged as CI uses it: simulated CI runs drawn from separate processes, identical and regressed.

``python -m perf.crossprocess DIR ...`` (or ``perf-history simulate``) judges runs saved by
``--perf-selftest-processes`` (`perf.roles.processes`): history, first pass and confirmation with the real gate's
code (`simulate_run`); docs/method.md, section 5, says how the runs are drawn and read.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perf.gate.compare import Baseline, GateSettings, Row, budget, judge_benchmark
from perf.gate.confirm import BASE, CANDIDATE, PAIRS_PER_LOOK, Process, judge_suspect, level_per_look, looks
from perf.gate.judge import FASTER, INCONCLUSIVE, MIN_REFERENCE, SLOWER
from perf.runs import SavedRun

IDENTICAL = "identical"
#: What the issue asks of the gate: red runs of unchanged code, inconclusive rows, detections.
TARGETS = {"red": 0.01, "inconclusive": 0.05, "detect_inference": 0.95, "detect_pipeline": 0.90}
DEFAULT_DRAWS = 25
DEFAULT_CONFIRM = 4


@dataclass
class SimulatedRun:
    """One simulated CI run: the candidate process, its kind, the rows as the gate ended them, whether it was
    red, how many processes the confirmation used, and the suspects the first pass had."""

    candidate: str
    kind: str
    rows: list[Row]
    red: bool
    suspects: int
    confirmation_processes: int
    history: int
    families: dict[str, str] = field(default_factory=dict)
    batches: dict[str, int | None] = field(default_factory=dict)


def _batch(run: SavedRun, fullname: str) -> int | None:
    value = run.benchmarks[fullname].extra_info.get("batch")
    return int(value) if isinstance(value, int) else None


def _slowed(regression: Any, bench: Any) -> bool:
    """Whether ``regression`` (`perf.gate.regressions.Regression`) slows benchmark ``bench``: its group, and a batch
    in the regression's range."""
    batch = bench.extra_info.get("batch")
    batch = int(batch) if isinstance(batch, int) else 1
    top = regression.max_batch
    return bench.group in regression.groups and batch >= regression.min_batch and (top is None or batch <= top)


#: Runs saved further apart than this (seconds) are taken as made on different machines (sessions): a simulated
#: confirmation pairs processes of one session where the pool allows, as CI runs a pair back to back on one runner.
SESSION_GAP_S = 240.0


def _session(run: SavedRun) -> float:
    return getattr(run, "_session", 0.0)


def _when(run: SavedRun) -> float | None:
    """When ``run`` was saved (POSIX seconds), or None when it has no readable date."""
    try:
        return dt.datetime.fromisoformat(run.datetime or "").timestamp()
    except ValueError:
        return None


def _mark_sessions(runs: Sequence[SavedRun]) -> None:
    """Number the machine sessions of ``runs`` by their save times (`SESSION_GAP_S`), on each run."""
    timed = sorted(runs, key=lambda r: r.datetime or "")
    session, last = 0, None
    for run in timed:
        when = _when(run)
        if when is None:  # no date saved: one session with the runs before it
            when = last or 0.0
        if last is not None and when - last > SESSION_GAP_S:
            session += 1
        last = when
        object.__setattr__(run, "_session", float(session))


def _take(labels: list[str], runs: Mapping[str, SavedRun], session: float, near: SavedRun | None = None) -> str | None:
    """Pop a label of ``session`` from ``labels`` if there is one, else any (None when empty); with ``near``, the
    one saved closest in time to it (CI runs a confirmation pair back to back: slow drifts of the runner cancel)."""
    same = [i for i in range(len(labels)) if _session(runs[labels[i]]) == session] or list(range(len(labels)))
    if not same:
        return None
    if near is None:
        return labels.pop(same[-1])
    at = _when(near) or 0.0
    return labels.pop(min(same, key=lambda i: abs((_when(runs[labels[i]]) or 0.0) - at)))


def _pair(kind: str, first: SavedRun, spare: list[str], cand_spare: list[str], pool: Mapping[str, SavedRun],
          same_kind: Mapping[str, SavedRun]) -> tuple[SavedRun, SavedRun] | None:  # fmt: skip
    """(base, candidate) processes of one confirmation pair: the candidate's side from the session of ``first`` (the
    first pass's process) where the pool allows, the base from the candidate side's session where it allows (CI runs
    a pair back to back on one runner; a small pool cannot always); None when the pool is spent."""
    if kind == IDENTICAL:
        if len(spare) < 2:
            return None
        cand = pool[_take(spare, pool, _session(first))]  # type: ignore[index]
    else:
        if not cand_spare or not spare:
            return None
        cand = same_kind[_take(cand_spare, same_kind, _session(first))]  # type: ignore[index]
    return pool[_take(spare, pool, _session(cand), near=cand)], cand  # type: ignore[index]


def simulate_run(candidate: str, kind: str, pool: Mapping[str, SavedRun], same_kind: Mapping[str, SavedRun],
                 settings: GateSettings, rng: random.Random, history: int, expected: Sequence[str],
                 regression: Any = None) -> SimulatedRun:  # fmt: skip
    """One simulated CI run of ``candidate`` (a label of ``same_kind``) against a history drawn from ``pool``
    (identical runs): history, first pass, confirmation (docs/method.md, section 5). ``expected``: the full selection's node ids (for the budget);
    ``regression``: judge only the benchmarks it slows (`_slowed`)."""
    others = [label for label in pool if label != candidate]
    rng.shuffle(others)
    need = settings.confirm * (2 if kind == IDENTICAL else 1)
    take = min(len(others), max(MIN_REFERENCE + 2, min(history, len(others) - need)))  # a pool too small for both
    # gives the history its due first: the confirmation then has fewer pairs, as the run's row says
    drawn, spare = others[:take], others[take:]
    base = Baseline([pool[label] for label in sorted(drawn, key=lambda l: pool[l].datetime or l)], settings.noise)
    plan = budget(base, settings, expected)
    run = same_kind[candidate]
    rows = [judge_benchmark(base, bench, plan, settings.min_effect) for name, bench in run.benchmarks.items()
            if regression is None or _slowed(regression, bench)]  # fmt: skip
    suspects = [row for row in rows if row.verdict == SLOWER and row.suspect]
    cand_spare = [label for label in same_kind if label != candidate and label not in drawn]
    rng.shuffle(cand_spare)
    used = 0
    if suspects and settings.confirm > 0:
        total, level = looks(settings.confirm), level_per_look(settings.confirm)
        processes: list[Process] = []
        pending = list(suspects)
        for look in range(1, total + 1):
            for _ in range(PAIRS_PER_LOOK):
                pair = _pair(kind, run, spare, cand_spare, pool, same_kind)
                if pair is None:
                    break  # the pool is spent: the confirmation has fewer pairs
                processes += [Process(BASE, pair[0]), Process(CANDIDATE, pair[1])]
            pending = [row for row in pending if not judge_suspect(
                row, base, settings, processes, level, True, final=look == total)]
            if not pending:
                break
        used = len(processes)
    red = any(row.verdict == SLOWER for row in rows)
    return SimulatedRun(candidate, kind, rows, red, len(suspects), used, len(drawn),
                        {row.fullname: run.benchmarks[row.fullname].family for row in rows},
                        {row.fullname: _batch(run, row.fullname) for row in rows})


def simulate(identical: Mapping[str, SavedRun], regressed: Mapping[str, Mapping[str, SavedRun]],
             settings: GateSettings, *, history: int = 20, draws: int = DEFAULT_DRAWS, seed: int = 0,
             regressions: Mapping[str, Any] | None = None) -> list[SimulatedRun]:  # fmt: skip
    """Simulated CI runs: ``draws`` per identical process and per regressed process (docs/method.md, section 5).
    ``regressions``: kind -> `perf.gate.regressions.Regression`, whose slowed benchmarks alone are judged."""
    rng = random.Random(seed)
    expected = sorted({name for run in identical.values() for name in run.benchmarks})
    _mark_sessions([*identical.values(), *(run for runs in regressed.values() for run in runs.values())])
    out = []
    for label in identical:
        out += [simulate_run(label, IDENTICAL, identical, identical, settings, rng, history, expected)
                for _ in range(draws)]
    for kind, runs in regressed.items():
        only = None if regressions is None else regressions.get(kind)
        for label in runs:
            out += [simulate_run(label, kind, identical, runs, settings, rng, history, expected, only)
                    for _ in range(draws)]
    return out


def _rate(count: int, total: int) -> str:
    return f"{count}/{total} ({100 * count / total:.1f}%)" if total else "0/0"


def identical_rows(runs: Sequence[SimulatedRun]) -> list[dict[str, Any]]:
    """Per family, then all: simulated CI runs of identical code, rows judged, false "slower" / "faster",
    inconclusive rows; for "all", the red runs and the runs that needed a confirmation."""
    chosen = [r for r in runs if r.kind == IDENTICAL]
    out = []
    families = sorted({f for r in chosen for f in r.families.values()})
    for family in [*families, "all"]:
        rows = [row for r in chosen for row in r.rows if family == "all" or r.families[row.fullname] == family]
        slower = sum(row.verdict == SLOWER for row in rows)
        faster = sum(row.verdict == FASTER for row in rows)
        inconclusive = sum(row.verdict == INCONCLUSIVE for row in rows)
        detectable = sorted(row.detectable for row in rows if row.detectable is not None)
        entry = {"family": family, "rows": len(rows), "slower": slower, "faster": faster,
                 "inconclusive": _rate(inconclusive, len(rows)),
                 "median detectable %": 100 * detectable[len(detectable) // 2] if detectable else math.nan}
        if family == "all":
            red = sum(r.red for r in chosen)
            entry.update({"runs": len(chosen), "red runs": _rate(red, len(chosen)),
                          "runs with suspects": _rate(sum(r.suspects > 0 for r in chosen), len(chosen)),
                          "meets targets": "yes" if red <= TARGETS["red"] * len(chosen)
                          and inconclusive <= TARGETS["inconclusive"] * len(rows) else "no"})  # fmt: skip
        out.append(entry)
    return out


def _stage_of(kind: str) -> str | None:
    name = kind.partition(":")[0]
    return None if name.startswith("layer") else name


def regression_rows(runs: Sequence[SimulatedRun]) -> list[dict[str, Any]]:
    """Per regression, family and batch: simulated CI runs, how often the row ended "slower" (for a stage
    regression, naming the stage), inconclusive, the median ratio, and the target each should meet."""
    verdicts = [(r.kind, r.families[row.fullname], r.batches[row.fullname] or 0, row, r)
                for r in runs if r.kind != IDENTICAL for row in r.rows]  # fmt: skip
    out = []
    for kind, family, batch in sorted({v[:3] for v in verdicts}):
        chosen = [(row, r) for k, f, b, row, r in verdicts if (k, f, b) == (kind, family, batch)]
        detected = [row for row, _ in chosen if row.verdict == SLOWER]
        stage = _stage_of(kind)
        named = [row for row in detected if stage is not None and f"stage {stage}" in row.moved]
        ratios = sorted(row.ratio for row, _ in chosen if row.ratio is not None)
        target = TARGETS["detect_inference"] if family.startswith("inference") else TARGETS["detect_pipeline"]
        counted = named if stage is not None else detected
        out.append({"regression": kind, "family": family, "batch": batch or "-", "runs": len(chosen),
                    "median ratio": ratios[len(ratios) // 2] if ratios else math.nan,
                    "slower": _rate(len(detected), len(chosen)),
                    "slower, stage named": _rate(len(named), len(chosen)) if stage is not None else "-",
                    "inconclusive": _rate(sum(row.verdict == INCONCLUSIVE for row, _ in chosen), len(chosen)),
                    "confirmation processes": sum(r.confirmation_processes for _, r in chosen),
                    "target": f">= {target:.0%}",
                    "meets target": "yes" if len(counted) >= target * len(chosen) else "no"})  # fmt: skip
    return out


def compare_fail_rows(identical: Mapping[str, SavedRun], check: str) -> dict[str, Any]:
    """pytest-benchmark's own ``--benchmark-compare-fail=<check>`` on every pair of identical runs (each way
    round: the check is one-sided), with pytest-benchmark's check objects on the saved stats."""
    from pytest_benchmark.utils import parse_compare_fail

    rule = parse_compare_fail(check)
    failing_pairs, pairs, failing = 0, 0, {}
    for (a, run_a), (b, run_b) in itertools.permutations(identical.items(), 2):
        pairs += 1
        failed = False
        for name, bench in run_b.benchmarks.items():
            base = run_a.benchmarks.get(name)
            if base is None or "median" not in bench.stats or "median" not in base.stats:
                continue
            if rule.fails(dict(bench.stats), dict(base.stats)):
                failed = True
                failing[bench.name] = failing.get(bench.name, 0) + 1
        failing_pairs += failed
    return {"check": check, "ordered pairs": pairs, "pairs passing": _rate(pairs - failing_pairs, pairs),
            "benchmarks that failed (pairs)": ", ".join(f"{n} ({c})" for n, c in sorted(failing.items())) or "none"}


def load_runs_dirs(folders: Sequence[str]) -> tuple[dict[str, SavedRun], dict[str, dict[str, SavedRun]]]:
    """The saved runs of ``--perf-runs-dir`` folders: identical ones by label, regressed ones (``extra_info
    ["injected"]``) by regression and label; labels prefixed with the folder's name when there are several.
    `perf.runs.HistoryError` when a folder has no ``storage`` folder or a run cannot be read."""
    from pathlib import Path

    from perf.runs import HistoryError, load_run, run_files

    identical: dict[str, SavedRun] = {}
    regressed: dict[str, dict[str, SavedRun]] = {}
    for folder in folders:
        prefix = f"{Path(folder).name}/" if len(folders) > 1 else ""
        storage = Path(folder) / "storage"
        if not storage.is_dir():
            raise HistoryError(f"'{folder}' has no storage folder: give a --perf-runs-dir folder of --perf-noise or "
                               "--perf-selftest-processes")
        for path in run_files(storage):
            run = load_run(path)
            label = prefix + path.stem.split("_", 1)[1]
            marks = {str((b.extra_info.get("injected") or {}).get("regression") or "") for b in run.benchmarks.values()}
            kind = next(iter(marks - {""}), "")
            if kind:
                regressed.setdefault(kind, {})[label] = run
            else:
                identical[label] = run
    return identical, regressed


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m perf.crossprocess DIR [DIR ...]``: judge the saved runs of ``--perf-runs-dir`` folders again
    (e.g. runs of one code made in several calls of a time-limited machine), printing the self-test's tables."""
    import argparse
    import json

    from perf.gate.noise import compute_profile, family_rows
    from perf.options import parse_count, parse_fraction, parse_positive_int, parse_regression
    from perf.report import schema
    from perf.report.suite import PerfReport
    from perf.runs import HistoryError

    parser = argparse.ArgumentParser(prog="python -m perf.crossprocess", description=main.__doc__, allow_abbrev=False)
    parser.add_argument("folders", nargs="+", metavar="DIR")
    parser.add_argument("--min-effect", type=parse_fraction, default=GateSettings().min_effect)
    parser.add_argument("--history", type=parse_positive_int, default=20,
                        help="identical processes drawn as main's history")
    parser.add_argument("--confirm", type=parse_count, default=DEFAULT_CONFIRM,
                        help="confirmation pairs at most (0: none)")
    parser.add_argument("--draws", type=parse_positive_int, default=DEFAULT_DRAWS, help="simulated runs per process")
    parser.add_argument("--compare-fail", default="median:5%")
    parser.add_argument("--json", metavar="FILE", help="also write every verdict here")
    args = parser.parse_args(argv)
    try:
        identical, regressed = load_runs_dirs(args.folders)
    except HistoryError as e:
        parser.error(str(e))
    if len(identical) < 3:
        parser.error(f"{', '.join(args.folders)}: {len(identical)} identical run(s); need >= 3 for leave-pair-out profiles")
    fingerprint = next(iter(identical.values())).fingerprint or {}
    settings = GateSettings(min_effect=args.min_effect, confirm=args.confirm)
    kinds = {kind: parse_regression(kind) for kind in regressed}
    verdicts = simulate(identical, regressed, settings, history=args.history, draws=args.draws, regressions=kinds)
    report = PerfReport()
    for row in family_rows(compute_profile(list(identical.values()), fingerprint)):
        report.add(schema.RERUN_FAMILY, row)
    for table, rows in ((schema.RERUN_IDENTICAL, identical_rows(verdicts)),
                        (schema.RERUN_REGRESSED, regression_rows(verdicts))):
        for row in rows:
            report.add(table, row)
    report.add(schema.RERUN_COMPARE_FAIL, compare_fail_rows(identical, args.compare_fail))
    print(f"{len(identical)} identical runs, {sum(len(r) for r in regressed.values())} regressed runs")
    print(report.to_markdown())
    if args.json:
        from pathlib import Path

        Path(args.json).write_text(json.dumps([dataclasses.asdict(v) for v in verdicts], indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
