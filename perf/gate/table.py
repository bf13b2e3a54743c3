"""The gate's verdict table (rows of `perf.gate.compare`): aligned lines, markdown, the one line a failure says,
"why slower", the counts, and the verdict files ``perf-compare.json`` / ``.md`` that `perf.verdicts` reads back."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from detector.fileio import atomic_write_text
from perf.gate.compare import FORMAT, INCONCLUSIVE, SLOWER, VERDICTS, Baseline, GateSettings, Row
from perf.gate.judge import Budget
from perf.tabletext import markdown_table, text_table
from perf.verdicts import VERDICT_FILE, note_phrase

HEADINGS = ("benchmark", "history", "this run", "ratio [interval]", "detectable", "runs", "verdict")


def summary(rows: list[Row], settings: GateSettings) -> dict[str, Any]:
    """Counts per verdict and whether the gate fails ("slower", or "inconclusive" with ``fail_inconclusive``)."""
    counts = Counter(row.verdict for row in rows)
    failed = counts[SLOWER] > 0 or (settings.fail_inconclusive and counts[INCONCLUSIVE] > 0)
    return {**{verdict: counts[verdict] for verdict in VERDICTS}, "failed": failed}


def describe_failure(row: Row, settings: GateSettings, baseline: Baseline) -> str:
    """The one line a run fails a benchmark with: verdict, medians, ratio and interval, what moved, how it was
    confirmed, and the history it was judged against."""
    against = f"against {baseline.describe()}"
    if row.verdict == INCONCLUSIVE:
        return f"perf-compare: inconclusive (fails with --perf-fail-inconclusive): {row.note} ({against})"
    text = (f"perf-compare: slower: {_ms(row.baseline_median_s)} -> {_ms(row.current_median_s)}, "
            f"ratio {_ratio(row)} beyond +{settings.min_effect:.1%}")
    if row.why:
        from perf.profile.kernels import describe_changes

        text += f"; top kernel {describe_changes(row.why[:1])[0]}"
    if row.confirmation:
        text += f"; {row.confirmation.get('text', '')}"
    return text + (f"; {row.moved}" if row.moved else "") + f" ({against})"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.4g} ms"


def _ratio(row: Row) -> str:
    return "-" if row.ratio is None else f"{row.ratio:.3f} [{row.lo:.3f}, {row.hi:.3f}]"


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


def _cells(r: Row) -> tuple[str, ...]:
    """`HEADINGS`' cells of a row, then its note (`perf.verdicts.note_phrase`; the figures stay in the JSON)."""
    return (r.name, _ms(r.baseline_median_s), _ms(r.current_median_s), _ratio(r),
            "-" if r.detectable is None else f"+{100 * r.detectable:.1f}%",
            "-" if r.reference_runs is None else str(r.reference_runs), r.verdict,
            note_phrase({"moved": r.moved, "note": r.note}))  # fmt: skip


def format_lines(rows: list[Row]) -> list[str]:
    """One aligned text line per row (`HEADINGS`), then what moved and the note."""
    cells = [_cells(r) for r in rows]
    header, *lines = text_table(HEADINGS, [c[:-1] for c in cells])
    return [header, *(line + (f"  ({c[-1]})" if c[-1] else "") for line, c in zip(lines, cells))]


def to_markdown(rows: list[Row], header: str, subject: Mapping[str, str] | None = None) -> str:
    """The verdict table as markdown, under ``header`` (lines naming the history, the budget and the settings) and
    the run's ``subject`` (`perf.subject.describe_subject`: what was judged)."""
    from perf.subject import subject_markdown

    failed = [r for r in rows if r.verdict == SLOWER]
    lines = [header, ""] + ([subject_markdown(subject)] if subject else [])
    if failed:
        lines += [f"**{len(failed)} benchmark(s) slower** (each a failed test):", ""]
        for r in failed:
            lines.append(f"* `{r.name}`: {_ratio(r)}" + (f" -- {r.moved}" if r.moved else ""))
            lines += [f"  * {line}" for line in why_lines(r)]
        lines.append("")
    lines += markdown_table([*HEADINGS, "what moved / note"], [_cells(r) for r in rows])
    return "\n".join(lines) + "\n"


def verdict_document(rows: list[Row], baseline: Baseline, settings: GateSettings, *,
                     current: Mapping[str, Any] | None = None, budget: Budget | None = None,
                     subject: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """What ``perf-compare.json`` holds (`write_verdicts`): the baseline, the run judged, settings, budget, rows."""
    latest = baseline.latest
    return {"format": FORMAT, "subject": dict(subject or {}),
            "baseline": {"path": str(latest.path), "number": latest.number, "datetime": latest.datetime,
                         "commit": latest.commit, "run_id": latest.run_id, "history_runs": len(baseline.runs),
                         "history": [run.run_id or run.name for run in baseline.runs]},
            "current": dict(current or {}), "settings": {**settings.to_dict(), **baseline.noise_fields()},
            "budget": None if budget is None else budget.to_dict(), "summary": summary(rows, settings),
            "rows": [asdict(row) for row in rows]}  # fmt: skip


def write_verdicts(folder: Path, rows: list[Row], baseline: Baseline, settings: GateSettings, header: str,
                   run: str | None = None, current: Mapping[str, Any] | None = None, budget: Budget | None = None,
                   subject: Mapping[str, str] | None = None) -> tuple[Path, dict[str, Any]]:  # fmt: skip
    """Write ``perf-compare.json`` and ``.md`` into ``folder`` atomically, with ``run`` (this run's name) first as
    ``perf-compare-<run>.json`` / ``.md``; the plain names are the latest. Return the JSON path and the document.
    ``current``: the run judged (``{"run_id", "injected"}``); ``subject``: `perf.subject.describe_subject` of it."""
    document = verdict_document(rows, baseline, settings, current=current, budget=budget, subject=subject)
    text, markdown = json.dumps(document, indent=2) + "\n", to_markdown(rows, header, subject)
    for suffix in ([f"-{run}"] if run is not None else []) + [""]:
        path = atomic_write_text(folder / VERDICT_FILE.replace(".json", f"{suffix}.json"), text)
        atomic_write_text(folder / f"perf-compare{suffix}.md", markdown)
    return path, document
