"""The stability gate at measurement time: a benchmark whose rounds are too noisy or drift is measured again.

`measure_stable` runs ``benchmark(fn, *args, **kwargs)`` as usual, then judges the rounds with
`perf.gate.stats.assess_stability`. While they are unstable (and not merely too few, which another measurement of
as many rounds would not change) it measures again, up to ``max_remeasure`` more times,
with the same timer, iterations and number of rounds as pytest-benchmark chose (`time_rounds` is
pytest-benchmark's own round loop), and the new rounds replace the old ones in the benchmark's statistics (so
the saved run, the table and ``--perf-compare`` see the last measurement). The outcome goes into
``extra_info["stability"]``::

    {"verdict": "stable" | "unstable", "reason": "robust CV 14.2% > 10.0%" | "", "cv": 0.142, "drift": 0.03,
     "rounds": 18, "measurements": 3, "attempts": [{"cv": ..., "drift": ..., "median_s": ..., "reason": ...}]}

``attempts`` keeps the summary of every measurement, the discarded ones included.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perf.gate.stats import DEFAULT_MAX_CV, DEFAULT_MAX_DRIFT, MIN_ROUNDS, Stability, assess_stability

log = logging.getLogger(__name__)
DEFAULT_MAX_REMEASURE = 2


@dataclass(frozen=True)
class StabilityRule:
    """Thresholds of the stability gate (fractions) and how many extra measurements an unstable benchmark gets."""

    max_cv: float = DEFAULT_MAX_CV
    max_drift: float = DEFAULT_MAX_DRIFT
    max_remeasure: int = DEFAULT_MAX_REMEASURE

    def assess(self, data: Any) -> Stability:
        return assess_stability(data, max_cv=self.max_cv, max_drift=self.max_drift)


def time_rounds(
    fn: Callable[[], Any], timer: Callable[[], float], rounds: int, iterations: int = 1, *, disable_gc: bool = False
) -> list[float]:
    """Seconds per call of ``fn`` in each of ``rounds`` rounds of ``iterations`` calls, read from ``timer``
    around each round (pytest-benchmark's round loop, so the numbers mean the same thing)."""
    out = []
    gc_was_enabled = gc.isenabled()
    if disable_gc:
        gc.disable()
    try:
        for _ in range(rounds):
            start = timer()
            for _ in range(iterations):
                fn()
            out.append((timer() - start) / iterations)
    finally:
        if disable_gc and gc_was_enabled:
            gc.enable()
    return out


def summary(stability: Stability) -> dict[str, Any]:
    return {"cv": stability.cv, "drift": stability.drift, "median_s": stability.median, "rounds": stability.n,
            "reason": stability.reason}  # fmt: skip


def replace_rounds(metadata: Any, data: list[float]) -> None:
    """Put ``data`` (seconds per call) in place of a pytest-benchmark ``Metadata``'s rounds."""
    from pytest_benchmark.stats import Stats

    stats = Stats()
    for value in data:
        stats.update(value)
    metadata.stats = stats


def measure_stable(benchmark: Any, fn: Callable[..., Any], *args: Any, rule: StabilityRule, **kwargs: Any) -> Any:
    """``benchmark(fn, *args, **kwargs)``, re-measured while unstable (see the module docstring).

    Returns what ``benchmark`` returned. With benchmarks disabled (``--benchmark-disable``) it only calls
    through.
    """
    result = benchmark(fn, *args, **kwargs)
    metadata = benchmark.stats
    if metadata is None or not metadata.stats.data:
        return result
    stability = rule.assess(metadata.stats.data)
    attempts = [summary(stability)]
    options = metadata.options
    rounds, iterations = len(metadata.stats.data), metadata.iterations
    # Too few rounds (e.g. --benchmark-max-time=0.1 on a slow call) stay too few: measuring again cannot help.
    while not stability.stable and len(attempts) <= rule.max_remeasure and rounds >= MIN_ROUNDS:
        log.info("%s unstable (%s): measuring again (%d/%d)", benchmark.name, stability.reason, len(attempts),
                 rule.max_remeasure)  # fmt: skip
        data = time_rounds(lambda: fn(*args, **kwargs), options["timer"], rounds, iterations,
                           disable_gc=bool(options.get("disable_gc")))  # fmt: skip
        replace_rounds(metadata, data)
        stability = rule.assess(data)
        attempts.append(summary(stability))
    benchmark.extra_info["stability"] = stability_record(stability, attempts)
    return result


def stability_record(stability: Stability, attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """``extra_info["stability"]`` for the last measurement's ``stability`` after ``attempts`` (one per
    measurement, `summary` of each; see the module docstring)."""
    return {"verdict": "stable" if stability.stable else "unstable", "reason": stability.reason,
            "cv": stability.cv, "drift": stability.drift, "rounds": stability.n, "measurements": len(attempts),
            "attempts": attempts}  # fmt: skip
