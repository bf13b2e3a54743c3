"""The HTML report's figures, each returned as PNG bytes (matplotlib, imported lazily, Agg canvas only).

Figures are built on ``matplotlib.figure.Figure`` without pyplot, so nothing touches a global backend or the
user's interactive session. Times on the axes are milliseconds.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from perf.report.changes import Point
    from perf.runs import BenchmarkRecord

#: Colours of the marks: slower, faster, commit change.
SLOWER, FASTER, COMMIT = "#d62728", "#2ca02c", "#7f7f7f"
_PALETTE = ("#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
DPI = 80


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def png(fig: Figure) -> bytes:
    """Render ``fig`` to PNG bytes (Agg)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def backend_of(bench: BenchmarkRecord) -> str:
    """The runner variant (or backend) a benchmark measured; "" when it did not say."""
    info = bench.extra_info
    return str(info.get("variant") or info.get("backend") or "")


def latency_distribution(benches: Sequence[BenchmarkRecord], title: str) -> bytes:
    """Horizontal violins of every round's time (ms) when the rounds were saved, else a box from the stats
    (min, q1, median, q3, max); one row per benchmark, coloured by backend."""
    backends = list(dict.fromkeys(backend_of(b) for b in benches))
    colour = {name: _PALETTE[i % len(_PALETTE)] for i, name in enumerate(backends)}
    fig = _figure(9, 1.2 + 0.38 * len(benches))
    ax = fig.add_subplot()
    lows = []
    for y, bench in enumerate(benches):
        c = colour[backend_of(bench)]
        if bench.has_rounds and len(bench.data) > 1 and bench.data.max() > bench.data.min():
            data = [float(v) * 1e3 for v in bench.data]
            parts = ax.violinplot([data], positions=[y], orientation="horizontal", showmedians=True, widths=0.8)
            for body in parts["bodies"]:
                body.set_facecolor(c)
                body.set_alpha(0.55)
            for key in ("cmedians", "cmins", "cmaxes", "cbars"):
                parts[key].set_color(c)
            lows.append(min(data))
        else:
            s = {k: bench.stat(k) * 1e3 for k in ("min", "q1", "median", "q3", "max")}
            ax.bxp([{"med": s["median"], "q1": s["q1"], "q3": s["q3"], "whislo": s["min"], "whishi": s["max"],
                     "fliers": []}], positions=[y], orientation="horizontal", widths=0.5, patch_artist=True,
                   boxprops={"facecolor": c, "alpha": 0.55}, medianprops={"color": "black"})
            lows.append(s["min"])
    ax.set_yticks(range(len(benches)), [b.name for b in benches], fontsize=8)
    ax.invert_yaxis()
    highs = [bench.stat("max") * 1e3 for bench in benches]
    positive = [v for v in lows if v > 0]
    if positive and max(highs) / min(positive) > 30:
        ax.set_xscale("log")
    ax.set_xlabel("time per call (ms)" + ("" if any(b.has_rounds for b in benches) else "; box from saved stats"))
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    handles = [ax.plot([], [], color=colour[n], lw=6, alpha=0.55)[0] for n in backends if n]
    if handles:
        ax.legend(handles, [n for n in backends if n], fontsize=8, loc="best")
    return png(fig)


def stage_breakdown(rows: Sequence[tuple[str, dict[str, float], float, Any]], stages: Sequence[str]) -> bytes:
    """Stacked horizontal bars: milliseconds per frame of each pipeline stage, one bar per end-to-end case."""
    fig = _figure(9, 1.8 + 0.45 * len(rows))
    ax = fig.add_subplot()
    left = [0.0] * len(rows)
    for i, stage in enumerate(stages):
        widths = [row[1].get(stage, 0.0) for row in rows]
        ax.barh(range(len(rows)), widths, left=left, color=_PALETTE[i % len(_PALETTE)], label=stage)
        left = [a + b for a, b in zip(left, widths)]
    for y, (total, row) in enumerate(zip(left, rows)):
        fps = f", {row[2]:.1f} FPS" if not math.isnan(row[2]) else ""
        ax.annotate(f"{total:.1f} ms{fps}", (total, y), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [row[0] for row in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(left, default=1.0) * 1.25 or 1.0)
    ax.set_xlabel("ms per frame")
    fig.legend(fontsize=8, ncols=len(stages), loc="outside upper center")
    return png(fig)


def iou_histogram(label: str, ious: Sequence[float], mean_iou_min: float | None) -> bytes:
    """Histogram of the matched pairs' IoU with the reference, their mean and the pass criterion."""
    fig = _figure(6, 3)
    ax = fig.add_subplot()
    low = min(ious)
    ax.hist(ious, bins=50, range=(min(low, 0.99), 1.0), color=_PALETTE[0])
    ax.ticklabel_format(axis="x", useOffset=False)
    mean = sum(ious) / len(ious)
    ax.axvline(mean, color="black", ls="--", lw=1, label=f"mean {mean:.4f}")
    if mean_iou_min is not None and mean_iou_min >= min(low, 0.99):
        ax.axvline(mean_iou_min, color=SLOWER, lw=1, label=f"mean must be >= {mean_iou_min}")
    ax.set_yscale("log")
    ax.set_xlabel("IoU with the torch fp32 detection")
    ax.set_ylabel("matched pairs")
    ax.set_title(f"{label}: {len(ious)} matched pairs, min IoU {low:.4f}", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    return png(fig)


def history(name: str, points: Sequence[Point], threshold: float) -> bytes:
    """Median (ms) per saved run with the IQR band; marked changes as red/green points with their reason;
    commit changes as grey dashed lines labelled with the new commit."""
    fig = _figure(9, 3.2)
    ax = fig.add_subplot()
    x = [p.index for p in points]
    med = [p.median * 1e3 for p in points]
    ax.fill_between(x, [p.q1 * 1e3 for p in points], [p.q3 * 1e3 for p in points], color=_PALETTE[0], alpha=0.2,
                    label="IQR", step=None)
    ax.plot(x, med, "o-", color=_PALETTE[0], ms=4, label="median")
    top = max(p.q3 * 1e3 if p.q3 == p.q3 else p.median * 1e3 for p in points)
    for p in points:
        if p.commit_changed:
            ax.axvline(p.index - 0.5, color=COMMIT, ls="--", lw=1)
            ax.annotate(p.run.short_commit, (p.index - 0.5, top), fontsize=7, color=COMMIT, rotation=90,
                        ha="right", va="top")
        if p.mark is not None:
            colour = SLOWER if p.mark == "slower" else FASTER
            ax.plot([p.index], [p.median * 1e3], "o", ms=11, mfc="none", mec=colour, mew=2)
            ax.annotate(p.reason, (p.index, p.median * 1e3), xytext=(6, 8), textcoords="offset points",
                        fontsize=8, color=colour)
    marks = {p.mark for p in points} - {None}
    for mark in sorted(marks):
        ax.plot([], [], "o", ms=9, mfc="none", mec=SLOWER if mark == "slower" else FASTER, mew=2, label=mark)
    ax.set_xticks(x, [f"{p.run.number:04d}\n{p.run.when:%m-%d %H:%M}" if p.run.when else f"{p.run.number:04d}"
                      for p in points], fontsize=7)
    ax.set_xlim(min(x) - 0.7, max(x) + 1.2)
    ax.set_ylim(bottom=0, top=max(top, max(med)) * 1.25 or 1.0)
    ax.set_ylabel("ms per call")
    ax.set_title(f"{name} (marked: median moved > {threshold:.0%} vs previous run, or compare verdict)",
                 fontsize=9)
    ax.grid(alpha=0.3)
    fig.legend(fontsize=7, loc="outside right upper")
    return png(fig)
