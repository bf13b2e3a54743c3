"""Main's history as the gate's noise model: the saved runs a new run is judged against (`history_runs`,
`comparable`) and each metric's reference, restarted after a change point (`reference_for`); docs/method.md, 8."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from perf.gate.judge import DEFAULT_FLOOR, MIN_REFERENCE, Reference, reference
from perf.runs import PRIMARY, BenchmarkRecord, SavedRun

#: How many of the latest comparable runs make the history.
DEFAULT_LAST = 20


def record_median(bench: BenchmarkRecord | None, metric: str = PRIMARY) -> float | None:
    """The median (seconds, > 0) of ``metric`` of one benchmark record; None without such a series."""
    if bench is None:
        return None
    if metric == PRIMARY and not bench.has_rounds:  # pytest-benchmark's median (NaN: not measured)
        value = math.nan if bench.median_s is None else bench.median_s
    else:
        data = bench.metrics().get(metric)
        value = float(np.median(data)) if data is not None and data.size else math.nan
    return value if value > 0 and math.isfinite(value) else None


def history_runs(runs: Sequence[SavedRun], *, fingerprint: Mapping[str, Any] | None,
                 identity: Mapping[str, Any] | None, branch: str | None = None,
                 last: int = DEFAULT_LAST) -> list[SavedRun]:  # fmt: skip
    """The `last` runs (oldest first; 0: all) not injected, of ``branch`` (None: any; a run that recorded no branch
    or a detached ``HEAD`` counts as any) and `comparable` with ``fingerprint`` and ``identity``."""
    kept = [run for run in runs if not run.injected and comparable(run, fingerprint=fingerprint, identity=identity)
            and (branch is None or (run.raw.get("commit_info") or {}).get("branch") in (None, "", "HEAD", branch))]
    return kept[-last:] if last > 0 else kept


def comparable(run: SavedRun, *, fingerprint: Mapping[str, Any] | None, identity: Mapping[str, Any] | None) -> bool:
    """The one comparability rule: whether ``run`` measured on this machine (``fingerprint``; None: any) the same
    model and video (``identity``; None: any); a run that recorded no identity is taken as this model's."""
    from perf.measure.machine import fingerprint_differences
    from perf.subject import subject_differences

    if fingerprint is not None and fingerprint_differences(run.fingerprint, fingerprint):
        return False
    saved_subject = run.machine_info.get("perf_subject")
    return identity is None or not saved_subject or not subject_differences(saved_subject, identity)


def comparable_groups(runs: Sequence[SavedRun]) -> list[list[SavedRun]]:
    """``runs`` (oldest first) split into histories of runs `comparable` with the group's newest run that recorded
    an identity, each oldest first (a run may be in several): what ``perf-history changes`` reads."""
    heads: list[SavedRun] = []
    newest_first = [*reversed(runs)]
    for run in sorted(newest_first, key=lambda r: _identity(r) is None):  # the newest run of each subject heads
        if not any(comparable(run, fingerprint=head.fingerprint, identity=_identity(head)) and
                   comparable(head, fingerprint=run.fingerprint, identity=_identity(run)) for head in heads):
            heads.append(run)
    heads.sort(key=lambda head: -newest_first.index(head))  # the group of the oldest subject first
    return [[run for run in runs if comparable(run, fingerprint=head.fingerprint, identity=_identity(head))]
            for head in heads]  # fmt: skip


def _identity(run: SavedRun) -> Mapping[str, Any] | None:
    return run.machine_info.get("perf_subject") or None


@dataclass(frozen=True)
class HistoryReference:
    """A metric's reference, the change point it starts after ("commit <sha>" or "run <name>" of its first run;
    None without one), and how many noise-profile medians seeded it."""

    reference: Reference
    restarted_at: str | None = None
    seeded: int = 0


def reference_for(runs: Sequence[SavedRun], fullname: str, metric: str = PRIMARY,
                  seed_medians_s: Sequence[float] = (), *, min_effect: float = DEFAULT_FLOOR,
                  scatter: float = 0.0) -> HistoryReference | None:  # fmt: skip
    """The reference of one metric from ``runs`` (oldest first) and, while they are fewer than `MIN_REFERENCE`,
    the noise profile's per-process medians ``seed_medians_s``; None when there are still too few. The history
    restarts at its last change point (`perf.store.changepoints.history_change_points`: shifts of at least
    ``min_effect``, against the metric's profiled between-process ``scatter``)."""
    from perf.store.changepoints import history_change_points

    pairs = [(run, v) for run in runs if (v := record_median(run.benchmarks.get(fullname), metric)) is not None]
    values = [value for _, value in pairs]
    restarted, long_enough = None, len(values) >= 2 * MIN_REFERENCE
    if changes := (history_change_points(values, min_effect=min_effect, scatter=scatter) if long_enough else []):
        at, first = changes[-1].index, pairs[changes[-1].index][0]
        restarted = f"commit {first.commit[:12]}" if first.commit else f"run {first.name}"
        if len(values) - at < MIN_REFERENCE and at >= MIN_REFERENCE:  # a new level too short for its own spread
            spread = reference(values[:at])
            logs = tuple(math.log(v) for v in values[at:])
            return HistoryReference(Reference(logs, sd_override=spread.sd, df_override=spread.df), restarted)
        values = values[at:]
    seeded = list(seed_medians_s) if len(values) < MIN_REFERENCE else []
    if len(values) + len(seeded) < MIN_REFERENCE:
        return None
    return HistoryReference(reference([*seeded, *values]), restarted, len(seeded))
