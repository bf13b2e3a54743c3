"""``--perf-compare``: one verdict per benchmark from the raw rounds of a saved run and of the current run.

Verdicts: "slower", "faster", "no change" (`perf.stats.compare_samples`), "unstable" (either sample fails the
stability rule, or was recorded unstable by `perf.stability`: the ratio and interval are still shown, but no
verdict is drawn from them) and "missing" (in one run only, or saved without raw rounds). Written as
``<reports>/perf-compare.json`` and ``.md`` (atomically); the JSON layout is described in `perf.history`.
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from detector.fileio import atomic_write_text
from perf.history import BenchmarkRecord, SavedRun
from perf.stability import StabilityRule
from perf.stats import DEFAULT_CONFIDENCE, DEFAULT_MIN_EFFECT, SLOWER, compare_samples

UNSTABLE, MISSING = "unstable", "missing"
VERDICTS = ("slower", "faster", "no change", UNSTABLE, MISSING)
VERDICT_FILE = "perf-compare.json"
FORMAT = 1


@dataclass(frozen=True)
class GateSettings:
    """How ``--perf-compare`` decides: minimum effect, confidence, stability rule, and what fails the run."""

    min_effect: float = DEFAULT_MIN_EFFECT
    confidence: float = DEFAULT_CONFIDENCE
    rule: StabilityRule = field(default_factory=StabilityRule)
    fail_unstable: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"min_effect": self.min_effect, "confidence": self.confidence, "max_cv": self.rule.max_cv,
                "max_drift": self.rule.max_drift, "fail_unstable": self.fail_unstable}  # fmt: skip


@dataclass
class Row:
    """One benchmark's line of the verdict table (times in seconds per call; ratio = current / baseline)."""

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


def _seed(fullname: str) -> int:
    return zlib.crc32(fullname.encode())


def _unstable_reason(bench: BenchmarkRecord, rule: StabilityRule) -> str:
    """Why a sample cannot be compared ("" if it can): recorded as unstable, or unstable by ``rule`` now."""
    recorded = bench.stability
    if recorded is not None and recorded.get("verdict") == UNSTABLE:
        return str(recorded.get("reason") or "recorded unstable")
    return rule.assess(bench.data).reason if bench.data is not None else "no rounds"


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
    result = compare_samples(baseline.data, current.data, min_effect=settings.min_effect,
                             confidence=settings.confidence, seed=_seed(current.fullname))  # fmt: skip
    row.ratio, row.lo, row.hi = result.ratio, result.lo, result.hi
    row.n_baseline, row.n_current = result.n_baseline, result.n_candidate
    reasons = [f"{side}: {why}" for side, bench in (("baseline", baseline), ("current", current))
               if (why := _unstable_reason(bench, settings.rule))]  # fmt: skip
    if reasons:
        row.verdict, row.note = UNSTABLE, "; ".join(reasons)
    else:
        row.verdict = result.verdict
    return row


def compare_runs(
    baseline: SavedRun, current: Mapping[str, BenchmarkRecord], settings: GateSettings,
    expected: Iterable[str] | None = None,
) -> list[Row]:
    """Rows for every current benchmark, then for baseline benchmarks this run should have measured.

    ``expected``: node ids collected in this session; a baseline benchmark outside it was deselected and gets
    no row. None: every baseline benchmark is expected.
    """
    rows = []
    for fullname, bench in current.items():
        if fullname in baseline.benchmarks:
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


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.4g} ms"


def _ratio(row: Row) -> str:
    if row.ratio is None:
        return "-"
    return f"{row.ratio:.3f} [{row.lo:.3f}, {row.hi:.3f}]"


def format_lines(rows: list[Row]) -> list[str]:
    """One aligned text line per row: name, baseline median, current median, ratio [lo, hi], verdict, note."""
    table = [("benchmark", "baseline", "current", "ratio [95% CI]", "verdict")]
    table += [(r.name, _ms(r.baseline_median_s), _ms(r.current_median_s), _ratio(r), r.verdict) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(5)]
    out = []
    for line, row in zip(table, [None, *rows]):
        text = "  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
        out.append(text + (f"  ({row.note})" if row is not None and row.note else ""))
    return out


def to_markdown(rows: list[Row], header: str) -> str:
    """The verdict table as markdown, under ``header`` (a line naming the baseline and the settings)."""
    lines = [header, "", "| benchmark | baseline | current | ratio [95% CI] | verdict | note |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r.name} | {_ms(r.baseline_median_s)} | {_ms(r.current_median_s)} | {_ratio(r)} | {r.verdict} | "
              f"{r.note} |" for r in rows]  # fmt: skip
    return "\n".join(lines) + "\n"


def write_verdicts(folder: Path, rows: list[Row], baseline: SavedRun, settings: GateSettings, header: str) -> Path:
    """Write ``perf-compare.json`` and ``perf-compare.md`` into ``folder`` atomically; return the JSON path."""
    document = {
        "format": FORMAT,
        "baseline": {"path": str(baseline.path), "number": baseline.number, "datetime": baseline.datetime,
                     "commit": baseline.commit},
        "settings": settings.to_dict(),
        "summary": summary(rows, settings),
        "rows": [asdict(row) for row in rows],
    }  # fmt: skip
    path = atomic_write_text(folder / VERDICT_FILE, json.dumps(document, indent=2) + "\n")
    atomic_write_text(folder / "perf-compare.md", to_markdown(rows, header))
    return path
