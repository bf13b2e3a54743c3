"""The HTML report's figures as PNG bytes (docs/method.md, section 9): matplotlib, imported lazily, on its own
``Figure`` and Agg canvas, never pyplot, so nothing touches a global backend or the user's session."""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec

from detector.timing import STAGES
from perf.report.readable import duration, number, tick_text, time_unit

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from perf.report.changes import Point
    from perf.runs import BenchmarkRecord

#: Colours of the marks: the gate's slower and faster, any other mark (a move no verdict judged, another
#: verdict), a change point of the history, commit change, injected run.
SLOWER, FASTER, MOVED, LEVEL, COMMIT, INJECTED = "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#7f7f7f", "#8c8c8c"
_PALETTE = ("#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
DPI = 100
#: Figure width (inches): the page's width at `DPI`.
WIDTH = 10.5
#: Rounds from which a distribution is drawn as a violin (fewer: a box and every round as a dot).
VIOLIN_MIN_ROUNDS = 20
#: Panels per row of the history figure, by how many panels there are at most: (panels, columns).
HISTORY_COLUMNS = ((4, 2), (18, 3), (10**9, 4))
_CROSS = {"ls": "none", "marker": "X", "ms": 8, "color": INJECTED, "mec": "black", "mew": 0.5}
P = ParamSpec("P")
_FONT = {"font.size": 10, "axes.titlesize": 10, "axes.labelsize": 10, "xtick.labelsize": 9, "ytick.labelsize": 9,
         "legend.fontsize": 9, "text.parse_math": False}  # names drawn as saved: "$\\foo$" is no math to parse


def _png(draw: Callable[P, Figure]) -> Callable[P, bytes]:
    """``draw``'s figure as PNG bytes (Agg), with the report's font sizes and plain text (`_FONT`), matplotlib's
    settings kept."""

    @functools.wraps(draw)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> bytes:
        from matplotlib import rc_context

        with rc_context(_FONT):
            buffer = io.BytesIO()
            draw(*args, **kwargs).savefig(buffer, format="png")  # on an Agg canvas: the format's own
        return buffer.getvalue()

    return wrapper


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _plain_ticks(axis: Any) -> None:
    """Tick labels as plain numbers (``20``, ``1,000``), on linear and log axes alike."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_formatter(FuncFormatter(tick_text))
    if axis.get_scale() == "log":
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_minor_formatter(NullFormatter())


def short_name(bench: BenchmarkRecord) -> str:
    """``torch-fp32-b8`` of ``test_inference_speed[torch-fp32-b8]``; the whole name when it has no parameters."""
    name = bench.name
    return name[name.index("[") + 1 : -1] if "[" in name and name.endswith("]") else name


def distribution_kind(data: Sequence[float]) -> str:
    """How rounds are drawn: ``"violin"`` from `VIOLIN_MIN_ROUNDS` rounds with a spread, ``"box"`` (and
    every round as a dot) from 2, ``"dot"`` for one or all alike, ``"stats"`` (saved statistics) for none."""
    if not len(data):
        return "stats"
    if len(data) == 1 or max(data) == min(data):
        return "dot"
    return "violin" if len(data) >= VIOLIN_MIN_ROUNDS else "box"


@_png
def latency_distribution(benches: Sequence[BenchmarkRecord], title: str) -> Figure:
    """Every round's time, a row per benchmark, coloured by backend, as `distribution_kind` says; log beyond 30x."""
    backends = [str(b.extra_info.get("variant") or b.extra_info.get("backend") or "") for b in benches]
    colour = {name: _PALETTE[i % len(_PALETTE)] for i, name in enumerate(dict.fromkeys(backends))}
    unit, scale = time_unit(min((b.stat("median") for b in benches if b.stat("median") > 0), default=1e-3))
    fig = _figure(WIDTH, 1.3 + 0.42 * len(benches))
    ax = fig.add_subplot()
    spans, labels = [], []
    for y, (bench, backend) in enumerate(zip(benches, backends)):
        c = colour[backend]
        data = [float(v) / scale for v in bench.data if math.isfinite(v)] if bench.has_rounds else []
        box = {"patch_artist": True, "boxprops": {"facecolor": c, "alpha": 0.35}, "medianprops": {"color": "black"}}
        if (kind := distribution_kind(data)) == "violin":
            parts = ax.violinplot([data], positions=[y], orientation="horizontal", showmedians=True,
                                  showextrema=False, widths=0.8)  # fmt: skip
            for body in parts["bodies"]:
                body.set(facecolor=c, alpha=0.5)
            parts["cmedians"].set_color("black")
        elif kind == "stats":  # the box from the saved statistics
            s = {k: bench.stat(k) / scale for k in ("min", "q1", "median", "q3", "max")}
            ax.bxp([{"med": s["median"], "q1": s["q1"], "q3": s["q3"], "whislo": s["min"], "whishi": s["max"],
                     "fliers": []}], positions=[y], orientation="horizontal", widths=0.5, **box)  # fmt: skip
            data = [s["min"], s["max"]]
        else:
            if kind == "box":
                ax.boxplot([data], positions=[y], orientation="horizontal", whis=(0, 100), widths=0.55,
                           showfliers=False, **box)  # fmt: skip
            n = len(data)
            offsets = [0.0] if n == 1 else [0.18 * (i / (n - 1) - 0.5) for i in range(n)]
            ax.scatter(data, [y + o for o in offsets], s=14 if kind == "box" else 40, color=c, zorder=3,
                       edgecolors="black", linewidths=0.4)  # fmt: skip
        spans.append((min(data), max(data)))
        rounds = len(bench.data) if bench.has_rounds else int(r) if (r := bench.stat("rounds")) > 0 else 0
        labels.append(f"{short_name(bench)} · {rounds} round{'s' if rounds != 1 else ''}")
    ax.set_yticks(range(len(benches)), labels)
    ax.set_ylim(len(benches) - 0.5, -0.5)
    if (positive := [low for low, _ in spans if low > 0]) and max(high for _, high in spans) / min(positive) > 30:
        ax.set_xscale("log")
    _plain_ticks(ax.xaxis)
    if benches:  # "frame time (ms per frame)" from the samples' label and unit, else "time per call (ms)"
        info = benches[0].metric_info("time")
        per = str(info.get("unit") or "s")
        unit = f"{info.get('label') or 'time per call'} ({unit}{per[1:] if per.startswith('s ') else ''})"
        unit += "" if any(b.has_rounds for b in benches) else "; boxes from saved statistics"
    ax.set_xlabel(unit)
    ax.set_title(title, loc="left")
    ax.grid(axis="x", alpha=0.3)
    named = [n for n in colour if n]
    handles = [ax.plot([], [], color=colour[n], lw=6, alpha=0.5)[0] for n in named]
    if len(handles) > 1:  # above the axes: inside, it would hide rounds
        fig.legend(handles, named, loc="outside upper right", ncols=len(handles), frameon=False)
    return fig


@_png
def stage_breakdown(rows: Sequence[tuple[str, dict[str, float], float, Any]]) -> Figure:
    """Stacked horizontal bars: ms per frame of each pipeline stage (`STAGES`), one bar per end-to-end case."""
    fig = _figure(WIDTH, 1.6 + 0.5 * len(rows))
    ax = fig.add_subplot()
    left = [0.0] * len(rows)
    for i, stage in enumerate(STAGES):
        widths = [row[1].get(stage, 0.0) for row in rows]
        ax.barh(range(len(rows)), widths, left=left, color=_PALETTE[i % len(_PALETTE)], label=stage)
        left = [a + b for a, b in zip(left, widths)]
    for y, (total, row) in enumerate(zip(left, rows)):
        fps = f", {number(row[2])} FPS" if not math.isnan(row[2]) else ""
        ax.annotate(f"{duration(total / 1e3)}{fps}", (total, y), xytext=(4, 0), textcoords="offset points", va="center")
    ax.set_yticks(range(len(rows)), [row[0] for row in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, max(left, default=1.0) * 1.3 or 1.0)
    _plain_ticks(ax.xaxis)
    ax.set_xlabel("ms per frame")
    fig.legend(ncols=len(STAGES), loc="outside upper center")
    return fig


@_png
def iou_histogram(label: str, ious: Sequence[float], mean_iou_min: float | None) -> Figure:
    """Histogram of the matched pairs' IoU with the reference, their mean and the pass criterion."""
    fig = _figure(WIDTH / 2, 3)
    ax = fig.add_subplot()
    low = min(ious)
    ax.hist(ious, bins=50, range=(min(low, 0.99), 1.0), color=_PALETTE[0])
    ax.ticklabel_format(axis="x", useOffset=False)
    mean = sum(ious) / len(ious)
    ax.axvline(mean, color="black", ls="--", lw=1, label=f"mean {mean:.4f}")
    if mean_iou_min is not None and mean_iou_min >= min(low, 0.99):
        ax.axvline(mean_iou_min, color=SLOWER, lw=1, label=f"mean must be >= {mean_iou_min}")
    ax.set_yscale("log")
    _plain_ticks(ax.yaxis)
    ax.set_xlabel("IoU with the torch fp32 detection")
    ax.set_ylabel("matched pairs")
    ax.set_title(f"{label}: {len(ious)} pairs, min IoU {low:.4f}", loc="left")
    ax.legend(loc="upper left")
    return fig


def _history_panel(ax: Axes, points: Sequence[Point]) -> None:
    """One benchmark's medians (in the unit that fits them) with the IQR band over its normal runs; marked
    points ringed, change points squared, injected runs as grey crosses, commit changes as dashed lines."""
    unit, scale = time_unit(min((p.median for p in points if p.median > 0), default=1e-3))
    if normal := [p for p in points if not p.injected]:
        x = [p.index for p in normal]
        q1, q3 = ([p.bench.stat(q) / scale for p in normal] for q in ("q1", "q3"))
        ax.fill_between(x, q1, q3, color=_PALETTE[0], alpha=0.2, lw=0)
        ax.plot(x, [p.median / scale for p in normal], "o-", color=_PALETTE[0], ms=4)
    if injected := [p for p in points if p.injected]:
        ax.plot([p.index for p in injected], [p.median / scale for p in injected], **_CROSS)
    for p in points:
        if p.commit_changed:
            ax.axvline(p.index - 0.5, color=COMMIT, ls="--", lw=1)
        if p.mark is not None:  # the gate's verdict (red: slower, green: faster), or a move no verdict judged
            colour = {"slower": SLOWER, "faster": FASTER}.get(p.mark, MOVED)
            ax.plot([p.index], [p.median / scale], "o", ms=11, mfc="none", mec=colour, mew=2, ls="none")
        if p.level is not None:
            ax.plot([p.index], [p.median / scale], "s", ms=13, mfc="none", mec=LEVEL, mew=1.5, ls="none")
    top = max((v for p in points for v in (p.median, p.bench.stat("q3")) if math.isfinite(v)), default=0.0) / scale
    ax.set_ylim(0, top * 1.2 or 1.0)  # a median or quartile not measured (NaN) is no point and sets no limit
    ax.set_ylabel(unit)
    _plain_ticks(ax.yaxis)
    ax.grid(alpha=0.3)


@_png
def history_grid(panels: Sequence[tuple[str, Sequence[Point]]], run_labels: Sequence[str], threshold: float) -> Figure:
    """The history of every benchmark: a panel per ``(title, points)``, 2 to 4 a row (`HISTORY_COLUMNS`),
    sharing the x axis (``run_labels[i]`` names run ``i``); ``threshold``: named in the legend."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    columns = min(next(c for most, c in HISTORY_COLUMNS if len(panels) <= most), len(panels)) or 1
    rows = math.ceil(len(panels) / columns)
    fig = _figure(WIDTH, 0.7 + 1.9 * rows)
    last = len(run_labels) - 1
    for i, ax in enumerate(fig.subplots(rows, columns, sharex=True, squeeze=False).flat):
        if i < len(panels):
            _history_panel(ax, panels[i][1])
            ax.set_title(panels[i][0], loc="left", fontsize=10 if columns < 4 else 9)
        else:
            ax.set_visible(False)
        ax.set_xlim(-0.5, last + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=min(len(run_labels), 12 // columns + 2), integer=True))
        ax.xaxis.set_major_formatter(FuncFormatter(
            lambda v, _pos: run_labels[int(v)] if v == int(v) and 0 <= v <= last else ""))  # fmt: skip
        ax.tick_params(axis="x", labelbottom=True)
    ring = {"ls": "none", "marker": "o", "ms": 10, "mfc": "none", "mew": 2}
    handles = [Line2D([], [], color=_PALETTE[0], marker="o", ms=4, label="median (band: IQR)"),
               *(Line2D([], [], mec=colour, label=label, **ring) for colour, label in (
                   (SLOWER, "gate: slower"), (FASTER, "gate: faster"),
                   (MOVED, f"moved > {threshold:.0%} (no verdict) or another verdict"))),
               Line2D([], [], ls="none", marker="s", ms=10, mfc="none", mec=LEVEL, mew=1.5, label="change point"),
               Line2D([], [], label="injected run (not a base)", **_CROSS),
               Line2D([], [], color=COMMIT, ls="--", lw=1, label="commit changed")]  # fmt: skip
    fig.legend(handles=handles, ncols=4, loc="outside upper center", frameon=False)
    fig.supxlabel("saved run (number)")
    return fig
