"""The gate judged as CI uses it: simulated CI runs drawn from separate processes, identical and regressed.

``python -m perf.crossprocess DIR ...`` (or ``perf-history simulate``) judges the runs that
``--perf-selftest-processes`` saved (`perf.roles.processes`): history, first pass and confirmation with the real gate's
code (`simulate_run`); docs/method.md, section 5, says how the runs are drawn and read."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import itertools
import json
import math
import random
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from detector.argtypes import OneLineParser, value_parser
from detector.errors import escape_stdout
from detector.fileio import atomic_write_text, unwritable
from perf.gate.compare import Baseline, GateSettings, Row, budget, judge_benchmark
from perf.gate.confirm import BASE, CANDIDATE, Process, confirm_looks
from perf.gate.judge import DEFAULT_PAIRS, FASTER, INCONCLUSIVE, MIN_REFERENCE, SLOWER
from perf.gate.noise import compute_profile, family_rows
from perf.options import (MAX_DRAWS, parse_draws, parse_fraction, parse_pairs, parse_positive_int,
                          parse_regression)
from perf.report import schema
from perf.report.suite import PerfReport
from perf.runs import BenchmarkRecord, HistoryError, SavedRun, load_runs
from perf.validate import utc_time

IDENTICAL = "identical"
#: What the issue asks of the gate: red runs of unchanged code, inconclusive rows, detections.
TARGETS = {"red": 0.01, "inconclusive": 0.05, "detect_inference": 0.95, "detect_pipeline": 0.90}
DEFAULT_DRAWS = 25


@dataclass
class SimulatedRun:
    """One simulated CI run of a candidate process: its rows as the gate ended them, counts, family and batch by row."""

    candidate: str
    kind: str
    rows: list[Row]
    red: bool
    suspects: int
    confirmation_processes: int
    history: int
    families: dict[str, str] = field(default_factory=dict)
    batches: dict[str, int | None] = field(default_factory=dict)


def _batch(bench: BenchmarkRecord) -> int | None:
    value = bench.extra_info.get("batch")
    return int(value) if isinstance(value, int) else None


def _when(run: SavedRun) -> float:
    """When ``run`` was saved (POSIX seconds, its time read as the store reads it; 0 when it has no readable date)."""
    moment = utc_time(run.datetime)
    return 0.0 if moment is None else moment.replace(tzinfo=dt.timezone.utc).timestamp()


def _nearest(labels: list[str], runs: Mapping[str, SavedRun], at: float) -> SavedRun:
    """Pop from ``labels`` the run saved closest in time to ``at`` (POSIX seconds)."""
    return runs[labels.pop(min(range(len(labels)), key=lambda i: abs(_when(runs[labels[i]]) - at)))]


def simulate_run(candidate: str, kind: str, pool: Mapping[str, SavedRun], same_kind: Mapping[str, SavedRun],
                 settings: GateSettings, rng: random.Random, history: int, expected: Sequence[str],
                 regression: Any = None) -> SimulatedRun:  # fmt: skip
    """One simulated CI run of ``candidate`` (a label of ``same_kind``) against a history drawn from ``pool``
    (identical runs), as the gate runs it (docs/method.md, section 5); ``expected``: the selection's node ids (for the
    budget); ``regression`` (`perf.gate.regressions.Regression`): judge only the benchmarks it slows."""
    others = [label for label in pool if label != candidate]
    rng.shuffle(others)
    need = settings.confirm * (2 if kind == IDENTICAL else 1)
    # a pool too small for both gives the history its due first: the confirmation then has fewer pairs
    take = min(len(others), max(MIN_REFERENCE + 2, min(history, len(others) - need)))
    drawn, spare = others[:take], others[take:]
    base = Baseline([pool[label] for label in sorted(drawn, key=lambda l: pool[l].datetime or l)])
    plan = budget(base, settings, expected)
    run = same_kind[candidate]
    rows = [judge_benchmark(base, bench, plan, settings.min_effect) for bench in run.benchmarks.values()
            if regression is None or regression.slows(bench.group, _batch(bench) or 1)]  # fmt: skip
    suspects = sum(1 for row in rows if row.verdict == SLOWER and row.suspect)  # before the confirmation changes them
    cand_spare = [label for label in same_kind if label != candidate and label not in drawn]
    rng.shuffle(cand_spare)

    def draw_pairs(first: int, last: int, _pending: list[Row]) -> tuple[list[Process], float]:
        """Pairs ``first``..``last`` as CI runs them: right after the first pass, each pair back to back."""
        pairs: list[Process] = []
        for i in range(first, last + 1):
            if len(spare) < 2 if kind == IDENTICAL else not (cand_spare and spare):
                break  # the pool is spent: the confirmation has fewer pairs (its last look judges what it has)
            if kind == IDENTICAL:  # the two processes saved closest to the first pass, in ABBA order
                early, late = sorted((_nearest(spare, pool, _when(run)) for _ in range(2)), key=_when)
                base_run, cand = (early, late) if i % 2 else (late, early)
            else:
                cand = _nearest(cand_spare, same_kind, _when(run))
                base_run = _nearest(spare, pool, _when(cand))
            pairs += [Process(BASE, base_run), Process(CANDIDATE, cand)]
        return pairs, 0.0  # no seconds: the looks are sized as the gate sizes them, without a time budget

    processes, _ = confirm_looks(rows, base, settings, True, draw_pairs, plan.confirm_level)
    return SimulatedRun(candidate, kind, rows, any(row.verdict == SLOWER for row in rows), suspects, len(processes),
                        len(drawn), {row.fullname: run.benchmarks[row.fullname].family for row in rows},
                        {row.fullname: _batch(run.benchmarks[row.fullname]) for row in rows})


def simulate(identical: Mapping[str, SavedRun], regressed: Mapping[str, Mapping[str, SavedRun]],
             settings: GateSettings, *, history: int = 20, draws: int = DEFAULT_DRAWS) -> list[SimulatedRun]:
    """Simulated CI runs: ``draws`` per identical process and per regressed process (docs/method.md, section 5).
    ``regressed``: by its kind (``layer:5%``), whose slowed benchmarks alone are judged."""
    rng = random.Random(0)
    expected = sorted({name for run in identical.values() for name in run.benchmarks})
    regressions = {kind: parse_regression(kind) for kind in regressed}
    return [simulate_run(label, kind, identical, runs, settings, rng, history, expected, regressions.get(kind))
            for kind, runs in [(IDENTICAL, identical), *regressed.items()] for label in runs
            for _ in range(draws)]  # fmt: skip


def _rate(count: int, total: int) -> str:
    return f"{count}/{total} ({100 * count / total:.1f}%)" if total else "0/0"


def identical_rows(runs: Sequence[SimulatedRun]) -> list[dict[str, Any]]:
    """Per family, then "all": the verdicts of the simulated CI runs of identical code, against `TARGETS`."""
    chosen = [r for r in runs if r.kind == IDENTICAL]
    out = []
    for family in [*sorted({f for r in chosen for f in r.families.values()}), "all"]:
        rows = [row for r in chosen for row in r.rows if family == "all" or r.families[row.fullname] == family]
        counts = Counter(row.verdict for row in rows)
        detectable = [row.detectable for row in rows if row.detectable is not None]
        entry = {"family": family, "rows": len(rows), "slower": counts[SLOWER], "faster": counts[FASTER],
                 "inconclusive": _rate(counts[INCONCLUSIVE], len(rows)),
                 "median detectable %": 100 * statistics.median_high(detectable) if detectable else math.nan}
        if family == "all":
            red = sum(r.red for r in chosen)
            entry.update({"runs": len(chosen), "red runs": _rate(red, len(chosen)),
                          "runs with suspects": _rate(sum(r.suspects > 0 for r in chosen), len(chosen)),
                          "meets targets": "yes" if red <= TARGETS["red"] * len(chosen)
                          and counts[INCONCLUSIVE] <= TARGETS["inconclusive"] * len(rows) else "no"})  # fmt: skip
        out.append(entry)
    return out


def regression_rows(runs: Sequence[SimulatedRun]) -> list[dict[str, Any]]:
    """Per regression, family and batch: how often the simulated CI runs caught it, and the target to meet."""
    verdicts = [(r.kind, r.families[row.fullname], r.batches[row.fullname] or 0, row, r)
                for r in runs if r.kind != IDENTICAL for row in r.rows]  # fmt: skip
    out = []
    for kind, family, batch in sorted({v[:3] for v in verdicts}):
        chosen = [(row, r) for k, f, b, row, r in verdicts if (k, f, b) == (kind, family, batch)]
        detected = [row for row, _ in chosen if row.verdict == SLOWER]
        stage = None if kind.startswith("layer") else kind.partition(":")[0]
        named = [row for row in detected if stage is not None and f"stage {stage}" in row.moved]
        ratios = [row.ratio for row, _ in chosen if row.ratio is not None]
        target = TARGETS["detect_inference"] if family.startswith("inference") else TARGETS["detect_pipeline"]
        out.append({"regression": kind, "family": family, "batch": batch or "-", "runs": len(chosen),
                    "median ratio": statistics.median_high(ratios) if ratios else math.nan,
                    "slower": _rate(len(detected), len(chosen)),
                    "slower, stage named": _rate(len(named), len(chosen)) if stage is not None else "-",
                    "inconclusive": _rate(sum(row.verdict == INCONCLUSIVE for row, _ in chosen), len(chosen)),
                    "confirmation processes": sum(r.confirmation_processes for _, r in chosen),
                    "target": f">= {target:.0%}", "meets target": "yes" if len(
                        named if stage is not None else detected) >= target * len(chosen) else "no"})  # fmt: skip
    return out


def _check(text: str) -> str | None:
    """``text`` where pytest-benchmark's own parser reads it as ``--benchmark-compare-fail`` does, else None."""
    from pytest_benchmark.utils import parse_compare_fail

    try:
        return text if parse_compare_fail(text) is not None else None
    except argparse.ArgumentTypeError:
        return None


#: ``--compare-fail``: a check (``median:5%``, ``min:0.001``) as pytest-benchmark reads it, refused at parsing.
parse_check = value_parser(_check, bool,
                           "a check as --benchmark-compare-fail takes it, FIELD:PERCENT% or FIELD:SECONDS with FIELD "
                           "one of min, max, mean, median, stddev, iqr, e.g. median:5%")  # fmt: skip


def compare_fail_rows(identical: Mapping[str, SavedRun], check: str) -> dict[str, Any]:
    """pytest-benchmark's ``--benchmark-compare-fail=<check>`` on each ordered pair of identical runs (one-sided)."""
    from pytest_benchmark.utils import parse_compare_fail

    rule = parse_compare_fail(check)
    pairs = list(itertools.permutations(identical.values(), 2))
    failing: Counter[str] = Counter()
    failing_pairs = 0
    for run_a, run_b in pairs:
        failed = [bench.name for name, bench in run_b.benchmarks.items()
                  if (base := run_a.benchmarks.get(name)) is not None and rule.field in bench.stats
                  and rule.field in base.stats and rule.fails(dict(bench.stats), dict(base.stats))]  # fmt: skip
        failing.update(failed)
        failing_pairs += bool(failed)
    return {"check": check, "ordered pairs": len(pairs), "pairs passing": _rate(len(pairs) - failing_pairs, len(pairs)),
            "benchmarks that failed (pairs)": ", ".join(f"{n} ({c})" for n, c in sorted(failing.items())) or "none"}


def load_runs_dirs(folders: Sequence[str]) -> tuple[dict[str, SavedRun], dict[str, dict[str, SavedRun]]]:
    """The saved runs of ``--perf-runs-dir`` folders: identical ones by label, regressed ones (``injected``) by
    regression and label (prefixed with the folder's name when there are several); else `perf.runs.HistoryError`."""
    identical: dict[str, SavedRun] = {}
    regressed: dict[str, dict[str, SavedRun]] = {}
    for folder in folders:
        storage = Path(folder) / "storage"
        if not storage.is_dir():
            raise HistoryError(f"'{folder}' has no storage folder: give a --perf-runs-dir folder of --perf-noise or "
                               "--perf-selftest-processes")
        for run in load_runs(storage):
            label = (f"{Path(folder).name}/" if len(folders) > 1 else "") + run.path.stem.split("_", 1)[1]
            kind = str(run.injected.get("regression") or "")  # the run's own mark (`perf.runs.injected_of`)
            try:  # simulate judges what the regression slows: one no option makes is said here, naming the file
                if kind:
                    parse_regression(kind)
            except argparse.ArgumentTypeError as e:
                raise HistoryError(f"'{run.path}': injected regression: {e}") from e
            (regressed.setdefault(kind, {}) if kind else identical)[label] = run
    return identical, regressed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m perf.crossprocess`` and ``perf-history simulate``."""
    parser.add_argument("folders", nargs="+", metavar="DIR")
    parser.add_argument("--min-effect", type=parse_fraction, default=GateSettings().min_effect)
    parser.add_argument("--history", type=parse_positive_int, default=20,
                        help="identical processes drawn as main's history")
    parser.add_argument("--confirm", type=parse_pairs, default=DEFAULT_PAIRS,
                        help="confirmation pairs at most (0: none)")
    parser.add_argument("--draws", type=parse_draws, default=DEFAULT_DRAWS,
                        help=f"simulated runs per process (at most {MAX_DRAWS})")
    parser.add_argument("--compare-fail", type=parse_check, default="median:5%",
                        help="pytest-benchmark's --benchmark-compare-fail check run on every pair of identical runs "
                             "(default median:5%%)")  # fmt: skip
    parser.add_argument("--json", metavar="FILE", help="also write every verdict here (its folder must exist)")


class _Parser(OneLineParser):
    """`OneLineParser` naming the whole command, ``python -m perf.crossprocess: error: ...`` (its name has spaces)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def json_problem(path: str | None) -> str | None:
    """Why ``--json`` cannot be written (a folder, a missing or unwritable folder), checked before the simulation;
    None when it can (or is not given: ``--json ''`` writes nothing, as before)."""
    if not path:
        return None
    file = Path(path)
    if file.is_dir():
        return f"--json '{path}' is a folder: give a file in it"
    if not file.parent.is_dir():
        return f"--json '{path}': '{file.parent}': {'not a folder' if file.parent.exists() else 'no such folder'}"
    why = unwritable(file.parent, folder=True)
    return None if why is None else f"--json '{path}': cannot write in '{file.parent}': {why}"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m perf.crossprocess DIR [DIR ...]``: judge the saved runs of ``--perf-runs-dir`` folders again
    (e.g. runs of one code made in several calls of a time-limited machine), printing the self-test's tables."""
    parser = _Parser(prog="python -m perf.crossprocess", description=main.__doc__, allow_abbrev=False)
    add_arguments(parser)
    args = parser.parse_args(argv)
    escape_stdout()
    try:
        return simulate_command(args)
    except HistoryError as e:
        parser.error(str(e))


def simulate_command(args: argparse.Namespace) -> int:
    """Both commands once their arguments (`add_arguments`) are parsed; `perf.runs.HistoryError` for bad input,
    before anything is printed or written (perf-history simulate says it in its own line)."""
    if problem := json_problem(args.json):
        raise HistoryError(problem)
    identical, regressed = load_runs_dirs(args.folders)
    if len(identical) < 3:
        raise HistoryError(f"{', '.join(args.folders)}: {len(identical)} identical run(s); need >= 3 for "
                           "leave-pair-out profiles")  # fmt: skip
    fingerprint = next(iter(identical.values())).fingerprint or {}
    verdicts = simulate(identical, regressed, GateSettings(min_effect=args.min_effect, confirm=args.confirm),
                        history=args.history, draws=args.draws)
    report = PerfReport()
    for table, rows in ((schema.RERUN_FAMILY, family_rows(compute_profile(list(identical.values()), fingerprint))),
                        (schema.RERUN_IDENTICAL, identical_rows(verdicts)),
                        (schema.RERUN_REGRESSED, regression_rows(verdicts)),
                        (schema.RERUN_COMPARE_FAIL, [compare_fail_rows(identical, args.compare_fail)])):
        for row in rows:
            report.add(table, row)
    if args.json:  # written before the tables are printed: a late failure (a full disk) prints nothing as done
        text = json.dumps([dataclasses.asdict(v) for v in verdicts], indent=2, default=str) + "\n"
        try:
            atomic_write_text(args.json, text)
        except OSError as e:
            raise HistoryError(f"--json '{args.json}': cannot write it: {e.strerror or e}") from e
    print(f"{len(identical)} identical runs, {sum(len(r) for r in regressed.values())} regressed runs")
    print(report.to_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
