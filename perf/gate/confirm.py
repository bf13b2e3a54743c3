"""Confirm before failing: a first pass's suspects measured again in fresh processes, base and this tree alternating
(ABBA), `PAIRS_PER_LOOK` pairs a look, judged on those alone (`confirm_looks`); docs/method.md, sections 4 and 8."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from perf.gate.compare import STAGE, Baseline, GateSettings, Row, reference_of, stage_share
from perf.gate.history import record_median
from perf.gate.judge import (CONFIRM_LEVEL, INCONCLUSIVE, NO_CHANGE, SLOWER, Judgement, confirm_level, judge,
                             judge_pairs)  # fmt: skip
from perf.gate.processes import Child
from perf.runs import PRIMARY, SavedRun, load_run

PAIRS_PER_LOOK = 2  #: Pairs of fresh processes per look.
#: A suspect is confirmed on at least this many pairs (candidate processes, unpaired), or at the last look of a
#: smaller ``--perf-confirm``: two pairs confirmed unchanged code too often (docs/method.md, section 4, item 6).
MIN_CONFIRM = 3
BASE, CANDIDATE = "base", "candidate"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sides:
    """Where the two sides' code is (``base_tree`` None: candidate only), the base's cache folder, and the test-only
    options only the candidate gets (those that change its code: a self-test's injected slowdown)."""

    candidate_tree: Path
    base_tree: Path | None
    base_cache: Path | None = None
    candidate_options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Process:
    """One confirmation process: its side (`BASE` or `CANDIDATE`) and its saved run."""

    kind: str
    run: SavedRun


def abba_children(sides: Sides, first: int, last: int, nodeids: tuple[str, ...] = ()) -> list[Child]:
    """The children of pairs ``first``..``last`` in ABBA order: base first in odd pairs, candidate first in even
    ones; the candidate alone where ``sides`` has no base tree. ``nodeids``: what they run (none: the whole run)."""
    base_options = (f"--perf-cache-dir={sides.base_cache}",) if sides.base_cache else ()
    children: list[Child] = []
    for i in range(first, last + 1):
        candidate = Child(f"{CANDIDATE}-{i:02d}", CANDIDATE, nodeids, sides.candidate_options)
        base = Child(f"{BASE}-{i:02d}", BASE, nodeids, base_options, str(sides.base_tree)) if sides.base_tree else None
        children += [c for c in ((base, candidate) if i % 2 else (candidate, base)) if c is not None]
    return children


def level_per_look(pairs: int, level: float = CONFIRM_LEVEL) -> float:
    """The one-sided level of each look that may confirm: ``level`` split evenly over the looks (of at most ``pairs``
    pairs) that hold `MIN_CONFIRM` pairs, and the last; an earlier look can only clear a suspect, spending none."""
    total = max(1, math.ceil(pairs / PAIRS_PER_LOOK))
    confirming = sum(min(look * PAIRS_PER_LOOK, pairs) >= MIN_CONFIRM or look == total for look in range(1, total + 1))
    return confirm_level(confirming, level)


def next_look_pairs(done: int, planned: int, spent_s: float, last_look_s: float, last_look_pairs: int,
                    budget_s: float | None) -> int:
    """Pairs the next look runs after ``done`` of at most ``planned``: `PAIRS_PER_LOOK` (fewer at the end), or as many
    as would likely end within ``budget_s`` seconds of processes (by the last look's seconds a pair); 0: stop."""
    want = min(PAIRS_PER_LOOK, planned - done)
    if want <= 0 or budget_s is None or last_look_pairs <= 0 or last_look_s <= 0:
        return max(want, 0)
    return max(0, min(want, math.floor((budget_s - spent_s) * last_look_pairs / last_look_s)))


def _medians(processes: Sequence[Process], kind: str, fullname: str, metric: str) -> list[float]:
    found = (record_median(p.run.benchmarks.get(fullname), metric) for p in processes if p.kind == kind)
    return [value for value in found if value is not None]


def judge_suspect(row: Row, baseline: Baseline | None, settings: GateSettings, results: Sequence[Process], level: float,
                  paired: bool, final: bool, early: bool = False) -> bool:  # fmt: skip
    """Judge ``row``'s suspects on the confirmation processes so far; update the row and return True once decided
    (confirmed, cleared, or ``final``). ``early``: the time budget ended the looks, so below `MIN_CONFIRM`
    processes confirm nothing."""
    outcomes: list[tuple[str, Judgement | None]] = []
    unjudged = "the confirmation processes saved no result (see their logs)"
    medians = {m.metric: m.baseline_median_s for m in row.metrics}
    for metric in row.suspect:
        cand = _medians(results, CANDIDATE, row.fullname, metric)
        base = _medians(results, BASE, row.fullname, metric) if paired else []
        prior = reference_of(baseline, row.fullname, metric, settings.min_effect)[0] if baseline is not None else None
        floor = stage_share(metric, medians.get(metric), medians.get(PRIMARY), settings.min_effect)[1]
        result = None
        if cand and paired and len(base) == len(cand):
            try:
                result = judge_pairs(base, cand, level, floor, prior)
            except ValueError as e:  # one pair and no history: no spread yet
                unjudged = str(e)
        elif cand and not paired and prior is not None:
            result = judge(prior, cand, level, floor)
        if result is not None and result.verdict == SLOWER and len(cand) < MIN_CONFIRM and (early or not final):
            result = replace(result, verdict=NO_CHANGE)  # too few processes to confirm yet: look again
        outcomes.append((metric, result))
    judged = [(metric, r) for metric, r in outcomes if r is not None]
    processes = max((r.n_candidate for _, r in judged), default=0)
    how = f"{processes} pair(s) of fresh processes" if paired else f"{processes} fresh process(es)"
    if confirmed := [(metric, r) for metric, r in judged if r.verdict == SLOWER]:
        metric, r = confirmed[0]
        row.verdict = SLOWER
        row.confirmation = {"processes": processes, "paired": paired, "metric": metric, "ratio": r.ratio, "lo": r.lo,
                            "hi": r.hi, "text": f"confirmed by {how}: {metric} {r.ratio:.3f} [{r.lo:.3f}, {r.hi:.3f}]"}
        return True
    if judged and len(judged) == len(outcomes) and all(r.hi < 1 + r.floor for _, r in judged):
        worst = max((r for _, r in judged), key=lambda r: r.hi)
        row.verdict = NO_CHANGE
        row.confirmation = {"processes": processes, "paired": paired, "ratio": worst.ratio, "lo": worst.lo,
                            "hi": worst.hi, "text": f"first-pass suspect cleared by {how}"}
    elif final:
        # A stage's judgement is on the stage's own ratio, its floor the frame's over its share: back to the frame.
        bound, metric = max(((r.hi - 1) * (settings.min_effect / r.floor if r.floor else 1.0), metric)
                            for metric, r in judged) if judged else (math.nan, "")  # fmt: skip
        of = f" of the frame ({metric})" if metric.startswith(STAGE) else ""
        # Inconclusive only where the estimate leans slower (above the floor); under it, no change within the bound.
        leaning = not judged or len(judged) < len(outcomes) or any(r.ratio >= 1 + r.floor for _, r in judged)
        row.verdict = INCONCLUSIVE if leaning else NO_CHANGE
        row.confirmation = {"processes": processes, "paired": paired, "text": (
            f"inconclusive: {unjudged}" if not judged else
            f"inconclusive: cannot rule out +{100 * bound:.1f}%{of} after {how}" if leaning else
            f"not confirmed by {how}: under the floor, at most +{100 * bound:.1f}%{of}")}  # fmt: skip
    else:
        return False
    row.note = "; ".join(p for p in (row.note, row.confirmation["text"]) if p)
    return True


def confirm_looks(rows: Sequence[Row], baseline: Baseline | None, settings: GateSettings, paired: bool,
                  run_pairs: Callable[[int, int, list[Row]], tuple[list[Process], float]],
                  level: float = CONFIRM_LEVEL) -> tuple[list[Process], float]:  # fmt: skip
    """Confirm every suspect row in place at one-sided ``level`` (`perf.gate.judge.Budget.confirm_level`) in looks of
    `PAIRS_PER_LOOK` pairs within ``settings.confirm_budget_s`` (`next_look_pairs`); the last look run judges finally.
    ``run_pairs(first, last, pending)`` gives pairs ``first``..``last`` of the pending rows' benchmarks and the seconds
    they took: fresh processes (`confirm_rows`) or saved ones (the simulated CI runs, 0 s); return all, and seconds."""
    pending = [row for row in rows if row.verdict == SLOWER and row.suspect]
    results: list[Process] = []
    if not pending or settings.confirm <= 0:
        return results, 0.0
    budget, level = settings.confirm_budget_s, level_per_look(settings.confirm, level)
    spent, done, pairs, shrunk = 0.0, 0, min(PAIRS_PER_LOOK, settings.confirm), False
    while True:
        ran, took = run_pairs(done + 1, done + pairs, pending)
        results += ran
        spent, done = spent + took, done + pairs
        following = 0 if shrunk else next_look_pairs(done, settings.confirm, spent, took, pairs, budget)
        if early := (following == 0 and done < settings.confirm):
            log.warning("confirmation: %.0f s spent; the next look would likely end after --perf-confirm-budget "
                        "(%.0f s): judged on %d pair(s)", spent, budget, done)
        pending = [row for row in pending if not judge_suspect(
            row, baseline, settings, results, level, paired, final=following == 0, early=early)]
        if not pending or following == 0:
            return results, spent
        shrunk, pairs = following < min(PAIRS_PER_LOOK, settings.confirm - done), following
        if shrunk:
            log.warning("confirmation: %.0f s spent; the last look runs %d pair(s) within --perf-confirm-budget "
                        "(%.0f s)", spent, pairs, budget)


def confirm_rows(rows: Sequence[Row], baseline: Baseline | None, settings: GateSettings, sides: Sides, folder: Path,
                 options: Sequence[str], on_done: Callable[..., None] | None = None,
                 level: float = CONFIRM_LEVEL) -> float:  # fmt: skip
    """`confirm_looks` on fresh processes of ``sides`` in ABBA order (`abba_children`), run with ``options`` and
    logged in ``folder``; return the seconds the processes took."""
    from perf.gate.processes import run_children

    def run_pairs(first: int, last: int, pending: list[Row]) -> tuple[list[Process], float]:
        folder.mkdir(parents=True, exist_ok=True)
        children = abba_children(sides, first, last, tuple(sorted({row.fullname for row in pending})))
        ran = run_children(children, options, folder, sides.candidate_tree, on_done=on_done)
        return [Process(r.kind, load_run(r.run)) for r in ran if r.run is not None], sum(r.seconds for r in ran)

    return confirm_looks(rows, baseline, settings, sides.base_tree is not None, run_pairs, level)[1]
