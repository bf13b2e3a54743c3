"""The gate's one judge: is a metric slower, faster or unchanged between separate processes, and what could it see.

Every verdict goes through `judge` or `judge_pairs` (``--perf-compare`` and its confirmation, ``perf-ab``, the
self-tests, ``perf-history judge``); the rule, `detectable` and the run's error `Budget` live here only. Figures are
per-process medians (seconds) on a log scale; docs/method.md, section 4.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from perf.measure.stability import robust_sd

SLOWER, FASTER, NO_CHANGE, INCONCLUSIVE = "slower", "faster", "no change", "inconclusive"
#: Probability that a CI run of unchanged code fails (any judged metric "slower"), all metrics together.
RUN_BUDGET = 0.01
#: Run-wide rate at which the first pass flags suspects on unchanged code, when suspects are confirmed.
SUSPECT_RATE = 0.20
#: One-sided level of a confirmation, per suspect metric: ``RUN_BUDGET / SUSPECT_RATE``.
CONFIRM_LEVEL = RUN_BUDGET / SUSPECT_RATE
#: Smallest change called slower or faster (Perfherder's 2%), as a fraction.
DEFAULT_FLOOR = 0.02
#: The probability with which `Judgement.detectable` is caught.
POWER = 0.90
#: A reference needs this many processes (one is a point, not a distribution).
MIN_REFERENCE = 3
#: A process whose log median lies further than this many robust standard deviations from the others' median is
#: left out of a reference (a lucky or unlucky process), at most a quarter of them.
OUTLIER_Z = 5.0
#: The smallest between-process standard deviation (log scale) a reference is credited with: 0.1%.
SD_FLOOR = 0.001
#: ``--perf-confirm`` and ``--perf-confirm-budget`` by default: 4 looks of 2 pairs (a third of the confirmation level
#: at 4, 6 and 8 pairs), and the seconds of processes that keep the whole gate within 20 minutes on the H100
#: (docs/method.md, section 8).
DEFAULT_PAIRS, DEFAULT_BUDGET_S = 8, 900.0
#: From this many pairs on, `judge_pairs` judges the trimmed mean of the pair differences (Yuen), trimming this
#: share at each end: one odd process among them neither decides nor vetoes (docs/method.md, section 4, item 4).
TRIM_PAIRS, TRIM = 6, 0.2


def confirm_level(looks: int = 1, level: float = CONFIRM_LEVEL) -> float:
    """One-sided level of each look of a confirmation of ``looks`` looks at most: ``level`` split evenly."""
    return level / max(1, looks)


@dataclass(frozen=True)
class Budget:
    """How a run spends `RUN_BUDGET`: ``metrics`` judged metrics, first-pass level each, confirmation level;
    ``flagged`` of the history's ``judged`` runs had a suspect when each was judged against the others
    (`perf.gate.compare.budget`): the confirmation is stricter where the first pass flags more than `SUSPECT_RATE`."""

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
        """One-sided level of each judgement of "faster": never confirmed, so always the whole budget's share."""
        return RUN_BUDGET / max(1, self.metrics)

    @property
    def confirm_level(self) -> float:
        """One-sided level of a confirmation per suspect: `RUN_BUDGET` over the larger of `SUSPECT_RATE` and the
        share of the history's runs the first pass flagged."""
        return RUN_BUDGET / max(SUSPECT_RATE, self.flagged / self.judged if self.judged else 0.0)

    def describe(self) -> str:
        head = f"a run of unchanged code fails with probability <= {RUN_BUDGET:.0%}: {self.metrics} judged metrics"
        if self.confirm:
            seen = (f" (the first pass flagged {self.flagged} of the history's {self.judged} runs, each judged "
                    f"against the others)" if self.judged else "")  # fmt: skip
            return (f"{head} flag suspects at {SUSPECT_RATE:.0%} in all ({self.first_level:.2g} each), and fresh "
                    f"processes must confirm a suspect at {self.confirm_level:.2g}{seen}")
        return f"{head} at {self.first_level:.2g} each (no confirmation)"

    def to_dict(self) -> dict[str, Any]:
        return {"run_budget": RUN_BUDGET, "metrics": self.metrics, "confirm": self.confirm,
                "first_level": self.first_level, "confirm_level": self.confirm_level if self.confirm else None,
                "history_flagged": self.flagged, "history_judged": self.judged}


@dataclass(frozen=True)
class Reference:
    """One metric's per-process medians on this runner: ``logs`` (natural logs of the kept medians, seconds),
    ``dropped`` outliers, and the between-process ``sd`` (log scale) and its ``df``, unless overridden."""

    logs: tuple[float, ...]
    dropped: int = 0
    sd_override: float | None = None
    df_override: float | None = None

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
        if self.sd_override is not None:
            return max(self.sd_override, SD_FLOOR)
        return max(float(np.std(self.logs, ddof=1)) if self.n > 1 else 0.0, SD_FLOOR)

    @property
    def df(self) -> float:
        return self.df_override if self.df_override is not None else float(self.n - 1)


def reference(medians_s: Sequence[float]) -> Reference:
    """A `Reference` from per-process medians (seconds, > 0), leaving out outliers (`OUTLIER_Z`). `ValueError`
    with fewer than `MIN_REFERENCE` positive values."""
    x = np.log(np.asarray([m for m in medians_s if m is not None and m > 0 and math.isfinite(m)], dtype=float))
    if x.size < MIN_REFERENCE:
        raise ValueError(f"a reference needs >= {MIN_REFERENCE} processes, got {x.size}")
    centre = float(np.median(x))
    scale = max(robust_sd(x), SD_FLOOR)
    distance = np.abs(x - centre) / scale
    order = np.argsort(-distance)
    out = [int(i) for i in order[: x.size // 4] if distance[i] > OUTLIER_Z]
    kept = np.delete(x, out)
    return Reference(tuple(float(v) for v in kept), dropped=len(out))


@dataclass(frozen=True)
class Judgement:
    """One metric judged: ``ratio`` (candidate over reference, > 1 slower), its interval ``[lo, hi]`` at one-sided
    ``level`` each side, the ``verdict``, ``detectable`` (smallest slowdown, as a fraction, caught with probability
    `POWER`), and the counts and spread it rests on (``sd``, log scale)."""

    ratio: float
    lo: float
    hi: float
    verdict: str
    detectable: float
    level: float
    floor: float
    n_reference: int
    n_candidate: int
    sd: float


def verdict_of(ratio: float, lo: float, hi: float, floor: float = DEFAULT_FLOOR) -> str:
    """The rule on a ratio and its interval: "slower" when the interval lies above 1 and the ratio beyond
    ``1 + floor``, "faster" likewise below, else "no change"."""
    if lo > 1 and ratio > 1 + floor:
        return SLOWER
    if hi < 1 and ratio < 1 / (1 + floor):
        return FASTER
    return NO_CHANGE


def _quantile(level: float, df: float) -> float:
    from scipy.stats import norm, t

    if not 0 < level < 0.5:
        raise ValueError(f"level {level!r}: expected a one-sided level between 0 and 0.5")
    return float(t.ppf(1 - level, df)) if math.isfinite(df) else float(norm.ppf(1 - level))


def _decide(d: float, se: float, df: float, level: float, floor: float, n_ref: int, m: int, sd: float,
            faster_level: float | None = None) -> Judgement:  # fmt: skip
    """The judgement of a log difference ``d`` with standard error ``se`` on ``df`` degrees of freedom: the interval's
    low end at ``level``, its high end at ``faster_level`` (default ``level``)."""
    from scipy.stats import norm

    if not floor >= 0:
        raise ValueError(f"floor {floor!r}: expected a fraction >= 0, e.g. 0.02")
    crit = _quantile(level, df)
    lo, hi = math.exp(d - crit * se), math.exp(d + _quantile(faster_level or level, df) * se)
    ratio = math.exp(d)
    verdict = verdict_of(ratio, lo, hi, floor)
    detectable = max(floor, math.expm1((crit + float(norm.ppf(POWER))) * se))
    return Judgement(ratio, lo, hi, verdict, detectable, level, floor, n_ref, m, sd)


def judge(ref: Reference, candidate_s: Sequence[float], level: float, floor: float = DEFAULT_FLOOR,
          faster_level: float | None = None) -> Judgement:  # fmt: skip
    """``candidate_s`` (per-process medians, seconds, one or more) against the reference ``ref`` at one-sided
    ``level`` ("slower") and ``faster_level`` ("faster", default ``level``; see the module docstring)."""
    y = np.log(np.asarray(candidate_s, dtype=float))
    if y.size == 0 or not np.all(np.isfinite(y)):
        raise ValueError("candidate: expected one or more positive per-process medians")
    m, df, var = y.size, ref.df, ref.sd**2
    if m > 1 and math.isfinite(df):  # pool the candidates' own scatter: a noisier candidate must not borrow the reference's calm
        var = (ref.df * var + (m - 1) * float(np.var(y, ddof=1))) / (ref.df + m - 1)
        df = ref.df + m - 1
    sd = math.sqrt(var)
    se = sd * math.sqrt(1 / ref.n + 1 / m)
    return _decide(float(y.mean()) - ref.centre, se, df, level, floor, ref.n, m, sd, faster_level)


def judge_pairs(base_s: Sequence[float], candidate_s: Sequence[float], level: float, floor: float = DEFAULT_FLOOR,
                prior: Reference | None = None, faster_level: float | None = None, robust: bool = True) -> Judgement:  # fmt: skip
    """K paired processes (``base_s[i]`` and ``candidate_s[i]`` back to back on one runner, medians in seconds)
    at one-sided ``level``. Below `TRIM_PAIRS` pairs: the mean log ratio, its spread pooled from the pairs and, when
    given, the ``prior`` reference's (``sqrt(2) * sd`` per difference); K >= 2 without a prior, K >= 1 with one;
    "slower" or "faster" also needs every pair to agree and, with ``robust``, the same verdict with any one pair left
    out. From `TRIM_PAIRS` pairs (with ``robust``): Yuen's trimmed mean of the differences on its own winsorized
    spread, which an odd pair can neither carry nor veto (docs/method.md, section 4, item 4)."""
    base, cand = np.log(np.asarray(base_s, dtype=float)), np.log(np.asarray(candidate_s, dtype=float))
    if base.size != cand.size or not (np.all(np.isfinite(base)) and np.all(np.isfinite(cand))):
        raise ValueError(f"pairs: expected as many positive base as candidate medians, got {base.size} and "
                         f"{cand.size}")  # fmt: skip
    k = base.size
    diffs = cand - base
    if robust and k >= TRIM_PAIRS:
        from scipy.stats import mstats, trim_mean

        kept = k - 2 * int(TRIM * k)
        se = max(float(mstats.trimmed_stde(diffs, limits=(TRIM, TRIM))), SD_FLOOR / math.sqrt(k))
        return _decide(float(trim_mean(diffs, TRIM)), se, kept - 1, level, floor, prior.n if prior else 0, k,
                       se * math.sqrt(k), faster_level)  # fmt: skip
    df, var = 0.0, 0.0
    if prior is not None and (k < 2 or math.isfinite(prior.df)):  # a within-process prior only stands in for none
        df, var = prior.df, 2 * prior.sd**2
    if k > 1:
        var = (df * var + (k - 1) * float(np.var(diffs, ddof=1))) / (df + k - 1)
        df += k - 1
    if df < 1:
        raise ValueError(f"pairs: {k} pair(s) and no reference: need 2 pairs or a reference for a spread")
    sd = max(math.sqrt(var), SD_FLOOR)
    result = _decide(float(diffs.mean()), sd / math.sqrt(k), df, level, floor, prior.n if prior else 0, k, sd,
                     faster_level)
    if (result.verdict == SLOWER and np.any(diffs <= 0)) or (result.verdict == FASTER and np.any(diffs >= 0)):
        return replace(result, verdict=NO_CHANGE)  # the pairs disagree: one odd process must not decide
    if robust and result.verdict in (SLOWER, FASTER) and k >= 2:
        for i in range(k):  # leave each pair out in turn: the verdict must stand without it
            try:
                rest = judge_pairs(np.delete(base_s, i), np.delete(candidate_s, i), level, floor, prior,
                                   faster_level, robust=False)  # fmt: skip
            except ValueError:  # two pairs and no prior: one pair has no spread to judge by (df = 1 guards it)
                break
            if rest.verdict != result.verdict:
                return replace(result, verdict=NO_CHANGE)
    return result


def within_reference(median_s: float, log_se: float) -> Reference:
    """A one-process reference for when no history exists: its median, credited with its own within-process
    standard error (``log_se``) as the between-process spread, on infinite degrees of freedom (the weakest kind)."""
    return Reference((math.log(median_s),), sd_override=log_se, df_override=math.inf)
