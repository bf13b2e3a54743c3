"""The gate judged as CI uses it: verdicts on pairs of separate processes, identical and regressed.

``pytest perf --perf-selftest-processes=K`` (`perf.gate.crossprocess_plugin`) runs K processes of identical code and K / 5 of
each injected regression (`perf.gate.regressions`: a real extra layer, a slower pipeline stage), interleaved, then
judges pairs of them with `perf.gate.compare.compare_benchmark` -- the one decision rule ``--perf-compare`` uses:

* every pair of identical processes (A/A): "slower" or "faster" is a false verdict, "unstable" a benchmark the
  gate could not judge;
* every identical process against every regressed one (A/B): "slower" on a benchmark the regression slows is a
  detection; for the video pipeline the verdict must also name the slowed stage.

Each pair is judged with a noise profile made from the *other* identical processes (leave the pair out), so
no pair is judged with a profile that already saw it -- as in CI, where the profile comes from earlier runs.
pytest-benchmark's own ``--benchmark-compare-fail`` check is applied to every A/A pair with its own code
(`pytest_benchmark.utils.parse_compare_fail`), beside the consecutive pairs the children ran for real.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perf.gate.compare import UNSTABLE, GateSettings, compare_benchmark
from perf.gate.noise import NoiseProfile, RunSummaries, compute_profile, summarize_run
from perf.gate.stats import FASTER, SLOWER
from perf.runs import SavedRun

IDENTICAL = "identical"
#: What the issue asks of the gate across processes (fractions of comparisons).
TARGETS = {"false": 0.01, "unstable": 0.05, "detect_inference": 0.95, "detect_pipeline": 0.90}


@dataclass(frozen=True)
class PairVerdict:
    """One benchmark judged on one pair of processes."""

    kind: str  # "identical" or the regression of the candidate, e.g. "layer:5%"
    baseline: str
    candidate: str
    fullname: str
    family: str
    batch: int | None
    verdict: str
    ratio: float | None
    moved: str


class _Profiles:
    """Noise profiles of the identical runs without some of them, computed once each."""

    def __init__(self, runs: Mapping[str, SavedRun], fingerprint: Mapping[str, Any]) -> None:
        self.runs, self.fingerprint = runs, fingerprint
        self.summaries: dict[str, RunSummaries] = {label: summarize_run(run) for label, run in runs.items()}
        self.cache: dict[frozenset[str], NoiseProfile | None] = {}

    def without(self, *labels: str) -> NoiseProfile | None:
        key = frozenset(labels)
        if key not in self.cache:
            kept = [label for label in self.runs if label not in key]
            self.cache[key] = None if len(kept) < 2 else compute_profile(
                [self.runs[k] for k in kept], self.fingerprint, [self.summaries[k] for k in kept])  # fmt: skip
        return self.cache[key]


def _judge(kind: str, base_label: str, base: SavedRun, cand_label: str, cand: SavedRun, settings: GateSettings,
           only_groups: Sequence[str] | None = None) -> list[PairVerdict]:  # fmt: skip
    out = []
    for fullname, bench in cand.benchmarks.items():
        if fullname not in base.benchmarks or (only_groups is not None and bench.group not in only_groups):
            continue
        row = compare_benchmark(base.benchmarks[fullname], bench, settings)
        batch = bench.extra_info.get("batch")
        out.append(PairVerdict(kind, base_label, cand_label, fullname, bench.family,
                               int(batch) if isinstance(batch, int) else None, row.verdict, row.ratio, row.moved))
    return out


def judge_pairs(identical: Mapping[str, SavedRun], regressed: Mapping[str, Mapping[str, SavedRun]],
                settings: GateSettings, fingerprint: Mapping[str, Any],
                groups: Mapping[str, Sequence[str]] | None = None) -> list[PairVerdict]:  # fmt: skip
    """Verdicts on every A/A pair and every A/B pair (see the module docstring). ``regressed``: regression ->
    label -> run; ``groups``: regression -> the benchmark groups it slows (others are not judged)."""
    profiles = _Profiles(identical, fingerprint)
    out: list[PairVerdict] = []
    for (a, run_a), (b, run_b) in itertools.combinations(identical.items(), 2):
        judged = dataclasses.replace(settings, noise=profiles.without(a, b))
        out += _judge(IDENTICAL, a, run_a, b, run_b, judged)
    for kind, runs in regressed.items():
        for (a, run_a), (b, run_b) in itertools.product(identical.items(), runs.items()):
            judged = dataclasses.replace(settings, noise=profiles.without(a))
            out += _judge(kind, a, run_a, b, run_b, judged, None if groups is None else groups.get(kind))
    return out


def _rate(count: int, total: int) -> str:
    return f"{count}/{total} ({100 * count / total:.1f}%)" if total else "0/0"


def identical_rows(verdicts: Sequence[PairVerdict]) -> list[dict[str, Any]]:
    """Per family, then all: comparisons of identical processes, false verdicts and unstable ones."""
    rows = []
    by_family = sorted({v.family for v in verdicts if v.kind == IDENTICAL})
    for family in [*by_family, "all"]:
        chosen = [v for v in verdicts if v.kind == IDENTICAL and (family == "all" or v.family == family)]
        false = sum(v.verdict in (SLOWER, FASTER) for v in chosen)
        unstable = sum(v.verdict == UNSTABLE for v in chosen)
        rows.append({"family": family, "comparisons": len(chosen),
                     "slower": sum(v.verdict == SLOWER for v in chosen),
                     "faster": sum(v.verdict == FASTER for v in chosen), "false verdicts": _rate(false, len(chosen)),
                     "unstable": _rate(unstable, len(chosen)),
                     "meets targets": _meets(false, unstable, len(chosen))})  # fmt: skip
    return rows


def _meets(false: int, unstable: int, total: int) -> str:
    if not total:
        return "-"
    ok = false <= TARGETS["false"] * total and unstable <= TARGETS["unstable"] * total
    return "yes" if ok else "no"


def _stage_of(kind: str) -> str | None:
    name = kind.partition(":")[0]
    return None if name == "layer" else name


def regression_rows(verdicts: Sequence[PairVerdict]) -> list[dict[str, Any]]:
    """Per regression, family and batch: comparisons, detected ("slower"), and for a stage regression how often
    the verdict named the stage; with the target each should meet."""
    rows = []
    keys = sorted({(v.kind, v.family, v.batch or 0) for v in verdicts if v.kind != IDENTICAL})
    for kind, family, batch in keys:
        chosen = [v for v in verdicts if (v.kind, v.family, v.batch or 0) == (kind, family, batch)]
        detected = [v for v in chosen if v.verdict == SLOWER]
        stage = _stage_of(kind)
        named = [v for v in detected if stage is not None and f"stage {stage}" in v.moved]
        ratios = sorted(v.ratio for v in chosen if v.ratio is not None)
        target = TARGETS["detect_inference"] if family.startswith("inference") else TARGETS["detect_pipeline"]
        counted = named if stage is not None else detected
        applies = (family.startswith("inference") and batch >= 8) or (stage is not None and family == "end-to-end")
        rows.append({"regression": kind, "family": family, "batch": batch or "-", "comparisons": len(chosen),
                     "median ratio": ratios[len(ratios) // 2] if ratios else math.nan,
                     "slower": _rate(len(detected), len(chosen)),
                     "slower, stage named": _rate(len(named), len(chosen)) if stage is not None else "-",
                     "target": f">= {target:.0%}" if applies else "-",
                     "meets target": ("yes" if len(counted) >= target * len(chosen) else "no") if applies else "-"})  # fmt: skip
    return rows


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
    """The saved runs of one or more ``--perf-runs-dir`` folders: identical ones by label, regressed ones by
    regression and label (told apart by ``extra_info["injected"]``, which every benchmark of such a run has).
    Labels are prefixed with their folder's name when several folders are given. `perf.runs.HistoryError` when
    a folder has no ``storage`` folder or a run cannot be read."""
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
    from perf.options import parse_regression
    from perf.report import schema
    from perf.report.suite import PerfReport
    from perf.runs import HistoryError

    parser = argparse.ArgumentParser(prog="python -m perf.crossprocess", description=main.__doc__, allow_abbrev=False)
    parser.add_argument("folders", nargs="+", metavar="DIR")
    parser.add_argument("--min-effect", type=float, default=GateSettings().min_effect)
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
    settings = GateSettings(min_effect=args.min_effect)
    groups = {kind: parse_regression(kind).groups for kind in regressed}
    verdicts = judge_pairs(identical, regressed, settings, fingerprint, groups)
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

        Path(args.json).write_text(json.dumps([dataclasses.asdict(v) for v in verdicts], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
