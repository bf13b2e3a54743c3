"""The gate's one judge (`judge`, `judge_pairs`): slower, faster or unchanged between separate processes, what it
could see (`detectable`) and the run's error `Budget`. Per-process medians (seconds), log scale; docs/method.md, 4."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

SLOWER, FASTER, NO_CHANGE, INCONCLUSIVE = "slower", "faster", "no change", "inconclusive"
RUN_BUDGET = 0.01  #: Probability that a CI run of unchanged code fails (any judged metric "slower").
SUSPECT_RATE = 0.20  #: Run-wide rate of first-pass suspects on unchanged code, when suspects are confirmed.
CONFIRM_LEVEL = RUN_BUDGET / SUSPECT_RATE  #: One-sided level of a confirmation, per suspect metric.
DEFAULT_FLOOR = 0.02  #: Smallest change called slower or faster (Perfherder's 2%), as a fraction.
POWER = 0.90  #: The probability with which `Judgement.detectable` is caught.
MIN_REFERENCE = 3  #: Processes a reference needs (one is a point, not a distribution).
#: Two-sided level of the outlier test of a reference (generalized ESD, at most a quarter of its processes): how
#: often a reference of identical, normal processes loses one (a lucky or unlucky process is left out).
OUTLIER_LEVEL = 0.01
SD_FLOOR = 0.001  #: The smallest between-process standard deviation (log scale) a reference is credited with.
#: ``--perf-confirm`` and ``--perf-confirm-budget`` (s) by default: 4 looks of 2 pairs; a whole gate within 20 minutes
#: on the H100 (docs/method.md, section 8).
DEFAULT_PAIRS, DEFAULT_BUDGET_S = 8, 900.0
#: From this many pairs on, `judge_pairs` judges the trimmed mean of the pair differences (Yuen), trimming this
#: share at each end: one odd process neither decides nor vetoes (docs/method.md, section 4, item 4).
TRIM_PAIRS, TRIM = 6, 0.2


def confirm_level(looks: int = 1, level: float = CONFIRM_LEVEL) -> float:
    """One-sided level of each look of a confirmation of ``looks`` looks at most: ``level`` split evenly."""
    return level / max(1, looks)


@dataclass(frozen=True)
class Budget:
    """How a run spends `RUN_BUDGET`: judged ``metrics``, whether suspects are ``confirm``-ed, and ``flagged`` of
    the history's ``judged`` runs that had a suspect when judged against the others (`perf.gate.compare.budget`)."""

    metrics: int
    confirm: bool
    flagged: int = 0
    judged: int = 0

    @property
    def first_level(self) -> float:
        """One-sided level of each first-pass judgement of "slower"."""
        return (SUSPECT_RATE if self.confirm else RUN_BUDGET) / max(1, self.metrics)

    @property
    def faster_level(self) -> float:
        """One-sided level of each judgement of "faster" (never confirmed)."""
        return RUN_BUDGET / max(1, self.metrics)

    @property
    def confirm_level(self) -> float:
        """Per suspect: `RUN_BUDGET` over the larger of `SUSPECT_RATE` and the share of history runs flagged."""
        return RUN_BUDGET / max(SUSPECT_RATE, self.flagged / self.judged if self.judged else 0.0)

    def describe(self) -> str:
        head = f"a run of unchanged code fails with probability <= {RUN_BUDGET:.0%}: {self.metrics} judged metrics"
        if not self.confirm:
            return f"{head} at {self.first_level:.2g} each (no confirmation)"
        seen = (f" (the first pass flagged {self.flagged} of the history's {self.judged} runs, each judged "
                f"against the others)" if self.judged else "")  # fmt: skip
        return (f"{head} flag suspects at {SUSPECT_RATE:.0%} in all ({self.first_level:.2g} each), and fresh "
                f"processes must confirm a suspect at {self.confirm_level:.2g}{seen}")

    def to_dict(self) -> dict[str, Any]:
        return {"run_budget": RUN_BUDGET, "metrics": self.metrics, "confirm": self.confirm,
                "first_level": self.first_level, "confirm_level": self.confirm_level if self.confirm else None,
                "history_flagged": self.flagged, "history_judged": self.judged}


@dataclass(frozen=True)
class Reference:
    """One metric's per-process medians on this runner: ``logs`` (natural logs of the kept medians, seconds),
    ``dropped`` outliers, and the between-process ``sd`` (log scale) and its ``df``, unless overridden; ``within``:
    one process whose own rounds stand in for the spread (`within_reference`)."""

    logs: tuple[float, ...]
    dropped: int = 0
    sd_override: float | None = None
    df_override: float | None = None
    within: bool = False

    @property
    def n(self) -> int:
        return len(self.logs)

    @property
    def centre(self) -> float:
        return float(np.mean(self.logs))

    @property
    def median_s(self) -> float:
        """The reference's typical median, seconds: ``exp(centre)``."""
        return math.exp(self.centre)

    @property
    def sd(self) -> float:
        own = float(np.std(self.logs, ddof=1)) if self.n > 1 else 0.0
        return max(own if self.sd_override is None else self.sd_override, SD_FLOOR)

    @property
    def df(self) -> float:
        return self.df_override if self.df_override is not None else float(self.n - 1)


def reference(medians_s: Sequence[float]) -> Reference:
    """A `Reference` from per-process medians (seconds, > 0) less outliers; `ValueError` below `MIN_REFERENCE`."""
    x = np.log(np.asarray([m for m in medians_s if m is not None and m > 0 and math.isfinite(m)], dtype=float))
    if x.size < MIN_REFERENCE:
        raise ValueError(f"a reference needs >= {MIN_REFERENCE} processes, got {x.size}")
    out = outliers(x, x.size // 4)
    return Reference(tuple(float(v) for v in np.delete(x, out)), dropped=len(out))


def outliers(x: np.ndarray, most: int, level: float = OUTLIER_LEVEL) -> list[int]:
    """Indices of up to ``most`` outliers of ``x`` (log medians) by Rosner's generalized ESD test at two-sided
    ``level``: normal samples of any size lose one with probability ``level``. By hand: scipy has no ESD test."""
    from scipy.stats import t

    left, candidates, found = list(range(x.size)), [], 0
    for i in range(1, min(most, x.size - 2) + 1):
        rest = x[left]
        n, deviation = rest.size, np.abs(rest - rest.mean())
        j, q = int(np.argmax(deviation)), float(t.ppf(1 - level / (2 * n), n - 2))
        sd = max(float(np.std(rest, ddof=1)), SD_FLOOR)  # the spread a reference is credited with at least
        if deviation[j] / sd > (n - 1) * q / math.sqrt((n - 2 + q * q) * n):
            found = i
        candidates.append(left.pop(j))
    return candidates[:found]


@dataclass(frozen=True)
class Judgement:
    """One metric judged: ``ratio`` (candidate over reference, > 1 slower), its interval ``[lo, hi]``, the verdict,
    ``detectable`` (smallest slowdown caught with probability `POWER`), the ``floor`` and the candidate processes."""

    ratio: float
    lo: float
    hi: float
    verdict: str
    detectable: float
    floor: float
    n_candidate: int


def verdict_of(ratio: float, lo: float, hi: float, floor: float = DEFAULT_FLOOR) -> str:
    """"slower" when the interval lies above 1 and the ratio beyond ``1 + floor``, "faster" likewise below."""
    if lo > 1 and ratio > 1 + floor:
        return SLOWER
    if hi < 1 and ratio < 1 / (1 + floor):
        return FASTER
    return NO_CHANGE


def _quantile(level: float, df: float) -> float:
    from scipy.stats import t

    if not 0 < level < 0.5:
        raise ValueError(f"level {level!r}: expected a one-sided level between 0 and 0.5")
    return float(t.ppf(1 - level, df))  # df = inf: the normal quantile


def _exp(x: float) -> float:
    """``exp(x)``, at most ``exp(700)``: a ratio of absurd medians (a hand-edited file) is huge, not an overflow."""
    return math.exp(min(x, 700.0))


def _decide(d: float, se: float, df: float, level: float, floor: float, m: int,
            faster_level: float | None = None) -> Judgement:  # fmt: skip
    """Judge log difference ``d`` (error ``se`` on ``df``): interval low at ``level``, high at ``faster_level``."""
    from scipy.stats import norm

    if not floor >= 0:
        raise ValueError(f"floor {floor!r}: expected a fraction >= 0, e.g. 0.02")
    crit = _quantile(level, df)
    lo, hi = _exp(d - crit * se), _exp(d + _quantile(faster_level or level, df) * se)
    # "slower" needs both d > crit * se and d > log(1 + floor): power is reached beyond the larger of the two
    detectable = math.expm1(min(max(crit * se, math.log1p(floor)) + float(norm.ppf(POWER)) * se, 700.0))
    ratio = _exp(d)
    return Judgement(ratio, lo, hi, verdict_of(ratio, lo, hi, floor), detectable, floor, m)


def judge(ref: Reference, candidate_s: Sequence[float], level: float, floor: float = DEFAULT_FLOOR,
          faster_level: float | None = None) -> Judgement:  # fmt: skip
    """``candidate_s`` (per-process medians, seconds, one or more) against the reference ``ref`` at one-sided
    ``level`` ("slower") and ``faster_level`` ("faster", default ``level``)."""
    y = np.log(np.asarray(candidate_s, dtype=float))
    if y.size == 0 or not np.all(np.isfinite(y)):
        raise ValueError("candidate: expected one or more positive per-process medians")
    m, df, var = y.size, ref.df, ref.sd**2
    # pool the candidates' own scatter: a noisier candidate must not borrow the reference's calm
    if m > 1 and not ref.within:
        var = (ref.df * var + (m - 1) * float(np.var(y, ddof=1))) / (ref.df + m - 1)
        df = ref.df + m - 1
    se = math.sqrt(var) * math.sqrt(1 / ref.n + 1 / m)
    return _decide(float(y.mean()) - ref.centre, se, df, level, floor, m, faster_level)


def judge_pairs(base_s: Sequence[float], candidate_s: Sequence[float], level: float, floor: float = DEFAULT_FLOOR,
                prior: Reference | None = None, faster_level: float | None = None,
                robust: bool = True) -> Judgement:  # fmt: skip
    """K paired processes (``base_s[i]`` and ``candidate_s[i]`` back to back on one runner, medians in seconds)
    at one-sided ``level``. Below `TRIM_PAIRS` pairs: the mean log ratio, its spread pooled from the pairs and, when
    given, the ``prior`` reference's (``sqrt(2) * sd`` per difference); K >= 2 without a prior, K >= 1 with one;
    "slower" or "faster" also needs every pair to agree and, with ``robust``, the same verdict with any one pair left
    out. From `TRIM_PAIRS` pairs (with ``robust``): Yuen's trimmed mean of the differences on its own winsorized
    spread (docs/method.md, section 4, item 4)."""
    base, cand = np.log(np.asarray(base_s, dtype=float)), np.log(np.asarray(candidate_s, dtype=float))
    if base.size != cand.size or not (np.all(np.isfinite(base)) and np.all(np.isfinite(cand))):
        raise ValueError(f"pairs: expected as many positive base as candidate medians, got {base.size} and "
                         f"{cand.size}")  # fmt: skip
    k, diffs = base.size, cand - base
    if robust and k >= TRIM_PAIRS:
        from scipy.stats import mstats, trim_mean

        # Yuen's error of the pairs actually kept (h of k); mstats.trimmed_stde divides by the nominal 1 - 2 TRIM
        kept, winsorized = k - 2 * int(TRIM * k), np.asarray(mstats.winsorize(diffs, limits=(TRIM, TRIM)))
        se = max(math.sqrt((k - 1) * float(np.var(winsorized, ddof=1)) / (kept * (kept - 1))), SD_FLOOR / math.sqrt(k))
        return _decide(float(trim_mean(diffs, TRIM)), se, kept - 1, level, floor, k, faster_level)
    df, var = 0.0, 0.0
    if prior is not None and (k < 2 or not prior.within):  # a within-process prior only stands in for none
        df, var = prior.df, 2 * prior.sd**2
    if k > 1:
        var = (df * var + (k - 1) * float(np.var(diffs, ddof=1))) / (df + k - 1)
        df += k - 1
    if df < 1:
        raise ValueError(f"pairs: {k} pair(s) and no reference: need 2 pairs or a reference for a spread")
    se = max(math.sqrt(var), SD_FLOOR) / math.sqrt(k)
    result = _decide(float(diffs.mean()), se, df, level, floor, k, faster_level)
    if (result.verdict == SLOWER and np.any(diffs <= 0)) or (result.verdict == FASTER and np.any(diffs >= 0)):
        return replace(result, verdict=NO_CHANGE)  # the pairs disagree: one odd process must not decide
    if robust and result.verdict in (SLOWER, FASTER) and k >= 2:
        for i in range(k):  # leave each pair out in turn: the verdict must stand without it
            try:
                rest = judge_pairs(np.delete(base_s, i), np.delete(candidate_s, i), level, floor, prior,
                                   faster_level, robust=False)  # fmt: skip
            except ValueError:  # two pairs and no prior: one pair has no spread to judge by
                break
            if rest.verdict != result.verdict:
                return replace(result, verdict=NO_CHANGE)
    return result


def within_reference(rounds_s: np.ndarray, seed: int = 0) -> Reference:
    """A one-process reference from its rounds (seconds, in the order they ran): their median, and its block
    bootstrap error (``seed``) standing in for the spread, on the blocks' degrees of freedom (blocks - 1, >= 1)."""
    from perf.gate.stats import auto_block_length, log_median_se

    blocks = math.ceil(rounds_s.size / auto_block_length(rounds_s))
    return Reference((math.log(float(np.median(rounds_s))),), sd_override=log_median_se(rounds_s, seed=seed),
                     df_override=max(1.0, blocks - 1.0), within=True)  # fmt: skip
