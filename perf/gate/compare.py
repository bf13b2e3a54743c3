"""``--perf-compare``: one verdict per benchmark from the raw rounds of a saved run and of the current run.

Verdicts: "slower", "faster", "no change" (`perf.gate.stats.compare_samples`, the gate's one decision rule),
"unstable" (either sample fails the stability rule, or was recorded unstable by `perf.measure.stability`, or the
result is inconclusive: the medians moved beyond the minimum effect but the interval still reaches into the
no-change band, so neither "slower" nor "no change" would be true; the ratio and interval are still shown, but no
verdict is drawn from them) and "missing" (in one run only, or saved
without raw rounds). Written as ``<reports>/perf-compare.json`` (`perf.verdicts.VERDICT_FILE`) and ``.md``
(atomically); the JSON layout is described in `perf.verdicts`, which reads it back (`load_verdicts`).

*Noise profile.* With this runner's profile (`perf.gate.noise`, from ``--perf-noise``) every metric's interval also
holds the between-process spread identical code shows here, and a sample is unstable only when it is noisier
than the profile's own processes were (`perf.gate.noise.stability_limits`); a benchmark the profile does not cover is
judged within-process only, with the fixed stability limits, and its row says so.

*Metrics.* A benchmark may carry several series (`perf.runs.BenchmarkRecord.metrics`). The row's verdict
judges the primary one ("time") and:

* ``host`` (host latency with synchronisation) where the call is launch-bound (``extra_info["launch_bound"]``):
  the host, not the GPU, bounds it, so a change there is a change users see;
* ``stage:<name>`` of the sequential pipeline (marked ``judged``), as its *contribution*: the stage's change in
  seconds per frame over the baseline's whole frame time, interval included (so a stage that grew by 5% of the
  frame is "slower" even when other stages' noise hides it in the frame total). The row names the stages that
  moved. A pipelined loop's stages overlap, so its stage series are shown, not judged.

Any judged metric "slower" makes the row slower (each is judged on its own stable samples); otherwise an unstable
primary (or judged host) metric makes it unstable, and the row's note says which and why.
"""

from __future__ import annotations

import dataclasses
import json
import math
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from detector.fileio import atomic_write_text
from perf.gate.noise import stability_limits
from perf.gate.stats import (DEFAULT_CONFIDENCE, DEFAULT_MIN_EFFECT, FASTER, NO_CHANGE, SLOWER, BetweenNoise,
                             compare_samples, decide, inconclusive)  # fmt: skip
from perf.measure.stability import StabilityRule
from perf.runs import PRIMARY, BenchmarkRecord, SavedRun
from perf.verdicts import VERDICT_FILE

if TYPE_CHECKING:
    from perf.gate.noise import NoiseProfile

UNSTABLE, MISSING = "unstable", "missing"
VERDICTS = ("slower", "faster", "no change", UNSTABLE, MISSING)
FORMAT = 2
HOST, STAGE = "host", "stage:"


@dataclass(frozen=True)
class GateSettings:
    """How ``--perf-compare`` decides: minimum effect, confidence, stability rule, what fails the run, and the
    runner's noise profile (None: within-process intervals only)."""

    min_effect: float = DEFAULT_MIN_EFFECT
    confidence: float = DEFAULT_CONFIDENCE
    rule: StabilityRule = field(default_factory=StabilityRule)
    fail_unstable: bool = False
    noise: NoiseProfile | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"min_effect": self.min_effect, "confidence": self.confidence, "max_cv": self.rule.max_cv,
                "max_drift": self.rule.max_drift, "fail_unstable": self.fail_unstable,
                "noise_profile": None if self.noise is None else str(self.noise.path or "in memory"),
                "noise_processes": None if self.noise is None else self.noise.processes}  # fmt: skip

    def between(self, fullname: str, metric: str) -> BetweenNoise | None:
        return None if self.noise is None else self.noise.between(fullname, metric)


@dataclass
class MetricResult:
    """One metric of a benchmark compared: ratio of medians, interval, verdict, whether it was judged.

    For a stage, ``contribution`` is ``[lo, hi]`` of its change as a fraction of the baseline frame time, and
    the verdict is drawn from that."""

    metric: str
    label: str
    judged: bool
    verdict: str
    baseline_median_s: float
    current_median_s: float
    ratio: float
    lo: float
    hi: float
    between: float | None = None
    contribution: tuple[float, float] | None = None
    note: str = ""

    def describe(self) -> str:
        """``host latency (sync) 1.085 [1.051, 1.120] slower``, or for a stage ``stage preprocess +0.41 ms/frame
        (+5.2% of the frame [4.6%, 5.8%]) slower``."""
        if self.contribution is not None:
            delta_ms = (self.current_median_s - self.baseline_median_s) * 1e3
            lo, hi = self.contribution
            share = f"{100 * (lo + hi) / 2:+.1f}% of the frame [{100 * lo:+.1f}%, {100 * hi:+.1f}%]"
            return f"{self.label} {delta_ms:+.3g} ms/frame ({share}) {self.verdict}"
        return f"{self.label} {self.ratio:.3f} [{self.lo:.3f}, {self.hi:.3f}] {self.verdict}"


@dataclass
class Row:
    """One benchmark's line of the verdict table (times in seconds per call, frame or tick; ratio = current /
    baseline, of the primary metric). ``moved``: what changed, by metric or stage; ``noise``: the between-process
    part in the interval ("" when the profile has no entry); ``metrics``: every metric compared."""

    fullname: str
    name: str
    group: str | None
    verdict: str
    note: str = ""
    baseline_median_s: float | None = None
    current_median_s: float | None = None
    ratio: float | None = None
    lo: float | None = None
    hi: float | None = None
    n_baseline: int | None = None
    n_current: int | None = None
    moved: str = ""
    noise: str = ""
    metrics: list[MetricResult] = field(default_factory=list)
    #: For a slower row: the kernels whose time per call moved most (`perf.profile.kernels.kernel_changes`), and
    #: how much all the kernels of the two tables moved, microseconds per call (None: no tables to compare).
    why: list[dict[str, Any]] = field(default_factory=list)
    kernels_moved_us: float | None = None


def _seed(fullname: str, metric: str = PRIMARY) -> int:
    return zlib.crc32(fullname.encode() if metric == PRIMARY else f"{fullname}|{metric}".encode())


def _unstable_reason(bench: BenchmarkRecord, metric: str, rule: StabilityRule, profiled: bool = False) -> str:
    """Why a series cannot be compared ("" if it can): recorded as unstable (unless ``profiled``: then ``rule``,
    widened to this runner's normal noise, decides anew), or unstable by ``rule`` now."""
    recorded = bench.stability if metric == PRIMARY else None
    if not profiled and recorded is not None and recorded.get("verdict") == UNSTABLE:
        return str(recorded.get("reason") or "recorded unstable")
    data = bench.metrics().get(metric)
    return rule.assess(data).reason if data is not None else "no rounds"


def _label(baseline: BenchmarkRecord, current: BenchmarkRecord, metric: str) -> str:
    label = current.metric_info(metric).get("label") or baseline.metric_info(metric).get("label")
    if label:
        return str(label)
    return metric.replace(STAGE, "stage ") if metric.startswith(STAGE) else metric


def _launch_bound(*benches: BenchmarkRecord) -> bool:
    return any(bool(b.extra_info.get("launch_bound")) for b in benches)


def compare_metric(baseline: BenchmarkRecord, current: BenchmarkRecord, metric: str, settings: GateSettings,
                   frame_s: float | None = None) -> MetricResult:  # fmt: skip
    """Compare one metric of a benchmark present in both runs (both must have the series). ``frame_s``: the
    baseline's frame time, for a stage's contribution."""
    base, cur = baseline.metrics()[metric], current.metrics()[metric]
    result = compare_samples(base, cur, min_effect=settings.min_effect, confidence=settings.confidence,
                             seed=_seed(current.fullname, metric),
                             between=settings.between(current.fullname, metric))  # fmt: skip
    judged = (metric == PRIMARY or (metric == HOST and _launch_bound(baseline, current))
              or (metric.startswith(STAGE) and bool(current.metric_info(metric).get("judged"))))
    out = MetricResult(metric, _label(baseline, current, metric), judged, result.verdict, float(np.median(base)),
                       float(np.median(cur)), result.ratio, result.lo, result.hi, result.between)  # fmt: skip
    entry = settings.noise.entry(current.fullname, metric) if settings.noise is not None else None
    max_cv, max_drift = stability_limits(entry, settings.rule.max_cv, settings.rule.max_drift)
    rule = dataclasses.replace(settings.rule, max_cv=max_cv, max_drift=max_drift)
    reasons = [f"{side}: {why}" for side, bench in (("baseline", baseline), ("current", current))
               if (why := _unstable_reason(bench, metric, rule, profiled=entry is not None))]  # fmt: skip
    if reasons:
        out.verdict, out.note = UNSTABLE, "; ".join(reasons)
    elif (result.verdict == NO_CHANGE and not metric.startswith(STAGE)
          and inconclusive(result.ratio, settings.min_effect)):
        out.verdict = UNSTABLE
        out.note = (f"inconclusive: the median moved {result.ratio:.3f}x but the {settings.confidence:.0%} interval "
                    f"[{result.lo:.3f}, {result.hi:.3f}] reaches into ±{settings.min_effect:.1%}: too noisy to "
                    "call it a change or no change")  # fmt: skip
    elif judged and metric.startswith(STAGE) and frame_s:
        share = out.baseline_median_s / frame_s
        out.contribution = ((result.lo - 1) * share, (result.hi - 1) * share)
        out.verdict = decide(1 + out.contribution[0], 1 + out.contribution[1], settings.min_effect)
    return out


def _row_verdict(primary: MetricResult, others: list[MetricResult]) -> str:
    """Slower when any judged metric is (each was judged on its own stable samples: a noisy host latency does not
    hide a GPU time that is decisively slower); else unstable when the primary or a judged host metric is."""
    judged = [m for m in others if m.judged]
    verdicts = [primary.verdict, *(m.verdict for m in judged)]
    if SLOWER in verdicts:
        return SLOWER
    if primary.verdict == UNSTABLE or any(m.verdict == UNSTABLE for m in judged if m.metric == HOST):
        return UNSTABLE
    return FASTER if FASTER in verdicts else NO_CHANGE


def _row_note(primary: MetricResult, others: list[MetricResult]) -> str:
    """Why a row is unstable or inconclusive: the primary's note, and each judged metric's that is unstable."""
    notes = [primary.note] if primary.note else []
    notes += [f"{m.label}: {m.note}" for m in others if m.judged and m.verdict == UNSTABLE and m.note]
    return "; ".join(notes)


def _moved(primary: MetricResult, others: list[MetricResult]) -> str:
    """What moved, largest first: judged metrics and stages judged slower or faster."""
    changed = [m for m in others if m.judged and m.verdict in (SLOWER, FASTER)]
    changed.sort(key=lambda m: -abs(m.current_median_s - m.baseline_median_s))
    parts = [m.describe() for m in changed]
    if primary.verdict in (SLOWER, FASTER) and any(m.metric == HOST for m in others):
        parts.insert(0, primary.describe())  # say which of GPU time and host latency moved
    return "; ".join(parts)


def compare_benchmark(baseline: BenchmarkRecord, current: BenchmarkRecord, settings: GateSettings) -> Row:
    """The verdict row for one benchmark present in both runs."""
    row = Row(current.fullname, current.name, current.group, MISSING,
              baseline_median_s=baseline.median_s, current_median_s=current.median_s)  # fmt: skip
    if baseline.data is None or not baseline.data.size:
        row.note = "the baseline has no raw rounds (saved without --benchmark-save-data)"
        return row
    if current.data is None or not current.data.size:
        row.note = "no rounds in this run"
        return row
    primary = compare_metric(baseline, current, PRIMARY, settings)
    frame_s = primary.baseline_median_s
    shared = [m for m in current.metrics() if m != PRIMARY and m in baseline.metrics()]
    others = [compare_metric(baseline, current, m, settings, frame_s) for m in shared]
    row.ratio, row.lo, row.hi = primary.ratio, primary.lo, primary.hi
    row.n_baseline, row.n_current = len(baseline.data), len(current.data)
    row.metrics = [primary, *others]
    row.verdict = _row_verdict(primary, others)
    row.note = _row_note(primary, others)
    row.moved = _moved(primary, others)
    row.noise = "" if primary.between is None else f"±{100 * math.expm1(primary.between):.1f}%"
    if row.verdict == SLOWER:
        from perf.profile.kernels import kernel_changes, total_change_us

        tables = baseline.extra_info.get("kernels"), current.extra_info.get("kernels")
        row.why, row.kernels_moved_us = kernel_changes(*tables), total_change_us(*tables)
    return row


def compare_runs(
    baseline: SavedRun, current: Mapping[str, BenchmarkRecord], settings: GateSettings,
    expected: Iterable[str] | None = None, judged: Mapping[str, Row] | None = None,
) -> list[Row]:
    """Rows for every current benchmark, then for baseline benchmarks this run should have measured.

    ``expected``: node ids collected in this session; a baseline benchmark outside it was deselected and gets
    no row. None: every baseline benchmark is expected. ``judged``: rows already drawn (as each test ended),
    kept as they are rather than bootstrapped again.
    """
    rows = []
    for fullname, bench in current.items():
        if judged is not None and fullname in judged:
            rows.append(judged[fullname])
        elif fullname in baseline.benchmarks:
            rows.append(compare_benchmark(baseline.benchmarks[fullname], bench, settings))
        else:
            rows.append(Row(fullname, bench.name, bench.group, MISSING, "not in the baseline",
                            current_median_s=bench.median_s))  # fmt: skip
    wanted = None if expected is None else set(expected)
    for fullname, bench in baseline.benchmarks.items():
        if fullname not in current and (wanted is None or fullname in wanted):
            rows.append(Row(fullname, bench.name, bench.group, MISSING, "not measured in this run (skipped or failed)",
                            baseline_median_s=bench.median_s))  # fmt: skip
    return rows


def summary(rows: list[Row], settings: GateSettings) -> dict[str, Any]:
    """Counts per verdict and whether the gate fails ("slower", or "unstable" with ``fail_unstable``)."""
    counts = Counter(row.verdict for row in rows)
    failed = counts[SLOWER] > 0 or (settings.fail_unstable and counts[UNSTABLE] > 0)
    return {**{verdict: counts[verdict] for verdict in VERDICTS}, "failed": failed}


def describe_failure(row: Row, settings: GateSettings, baseline: SavedRun) -> str:
    """The one line a test fails with: verdict, medians, ratio and interval against the threshold, what moved,
    and the baseline it was judged against."""
    against = f"baseline {baseline.path.name}, commit {str(baseline.commit or 'unknown')[:12]}"
    if row.verdict == UNSTABLE:
        return f"perf-compare: unstable (fails with --perf-fail-unstable): {row.note or row.moved} ({against})"
    beyond = f" beyond +{settings.min_effect:.1%}" if row.metrics and row.metrics[0].verdict == SLOWER else ""
    text = (f"perf-compare: slower: {_ms(row.baseline_median_s)} -> {_ms(row.current_median_s)}, "
            f"ratio {_ratio(row)}{beyond}")
    if row.why:
        from perf.profile.kernels import describe_changes

        text += f"; top kernel {describe_changes(row.why[:1])[0]}"
    return text + (f"; {row.moved}" if row.moved else "") + f" ({against})"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.4g} ms"


def _ratio(row: Row) -> str:
    if row.ratio is None:
        return "-"
    return f"{row.ratio:.3f} [{row.lo:.3f}, {row.hi:.3f}]"


def _noise(row: Row) -> str:
    if row.ratio is None:
        return "-"
    return row.noise or "n/a"


def _note(row: Row) -> str:
    return "; ".join(part for part in (row.moved, row.note) if part)


def why_lines(row: Row) -> list[str]:
    """"Why slower" of a row: the kernels that moved most (time per call, torch.profiler), one per line."""
    if not row.why:
        return []
    from perf.profile.kernels import describe_changes

    lines = describe_changes(row.why)
    if row.kernels_moved_us is not None and row.baseline_median_s and row.current_median_s:
        change_ms = (row.current_median_s - row.baseline_median_s) * 1e3
        lines.insert(0, f"the kernels moved {row.kernels_moved_us / 1e3:+.3g} ms of the {change_ms:+.3g} ms per call "
                        "(what they do not explain is outside them: the host, a wait, a sleep)")
    return lines


def format_lines(rows: list[Row]) -> list[str]:
    """One aligned text line per row: name, baseline median, current median, ratio [lo, hi], the between-process
    part of the interval, verdict, then what moved and the note."""
    table = [("benchmark", "baseline", "current", "ratio [95% CI]", "between", "verdict")]
    table += [(r.name, _ms(r.baseline_median_s), _ms(r.current_median_s), _ratio(r), _noise(r), r.verdict)
              for r in rows]  # fmt: skip
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    out = []
    for line, row in zip(table, [None, *rows]):
        text = "  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
        out.append(text + (f"  ({_note(row)})" if row is not None and _note(row) else ""))
    return out


def to_markdown(rows: list[Row], header: str) -> str:
    """The verdict table as markdown, under ``header`` (a line naming the baseline and the settings)."""
    failed = [r for r in rows if r.verdict == SLOWER]
    lines = [header, ""]
    if failed:
        lines += [f"**{len(failed)} benchmark(s) slower** (each a failed test):", ""]
        for r in failed:
            lines.append(f"* `{r.name}`: {_ratio(r)}" + (f" -- {r.moved}" if r.moved else ""))
            lines += [f"  * {line}" for line in why_lines(r)]
        lines.append("")
    lines += ["| benchmark | baseline | current | ratio [95% CI] | between | verdict | what moved / note |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.name} | {_ms(r.baseline_median_s)} | {_ms(r.current_median_s)} | {_ratio(r)} | {_noise(r)} | "
              f"{r.verdict} | {_note(r)} |" for r in rows]  # fmt: skip
    return "\n".join(lines) + "\n"


def write_verdicts(folder: Path, rows: list[Row], baseline: SavedRun, settings: GateSettings, header: str,
                   run: str | None = None, current: Mapping[str, Any] | None = None) -> Path:  # fmt: skip
    """Write ``perf-compare.json`` and ``perf-compare.md`` into ``folder`` atomically; return the JSON path. With
    ``run`` (this run's name, as its report's) they are first written as ``perf-compare-<run>.json`` / ``.md``, the
    run's own, so runs sharing the folder never overwrite each other's verdicts; the plain names are the latest.
    ``current``: the run judged (``{"run_id", "injected"}``, as its saved run's ``machine_info`` has them), so that
    a report attaches the verdicts to that run only."""
    document = {
        "format": FORMAT,
        "baseline": {"path": str(baseline.path), "number": baseline.number, "datetime": baseline.datetime,
                     "commit": baseline.commit, "run_id": baseline.run_id},
        "current": dict(current or {}),
        "settings": settings.to_dict(),
        "summary": summary(rows, settings),
        "rows": [asdict(row) for row in rows],
    }  # fmt: skip
    text, markdown = json.dumps(document, indent=2) + "\n", to_markdown(rows, header)
    if run is not None:
        atomic_write_text(folder / VERDICT_FILE.replace(".json", f"-{run}.json"), text)
        atomic_write_text(folder / f"perf-compare-{run}.md", markdown)
    path = atomic_write_text(folder / VERDICT_FILE, text)
    atomic_write_text(folder / "perf-compare.md", markdown)
    return path
