"""Charts drawn by plotting libraries: an image file by matplotlib (PNG, SVG or PDF by the file's
suffix, the Agg backend), the terminal by plotext. `render.charts` chose what to draw; this module
hands it to the libraries and writes the file. Both come with the optional `plot` extra
(`pip install 'llmcli[plot]'`) and are imported only when a chart is drawn."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path
from typing import Any

from llmcli.errors import LlmcliError, UsageError
from llmcli.render.charts import Chart, Panel

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
EXTRA = "pip install 'llmcli[plot]'"
MARKERS = "ox+*#@%&"  # the terminal's, one per series, for a terminal without colour


def check_format(path: Path) -> str:
    """The image format of `path`, from its suffix; a usage error for any other."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UsageError(f"{path}: the image format comes from the file's suffix: .png, .svg or .pdf")
    return fmt


def _missing(package: str) -> LlmcliError:
    return LlmcliError(f"drawing charts needs {package}, which is not installed", hint=EXTRA)


# -- image files: matplotlib --------------------------------------------------------------------


def figure(chart: Chart) -> Any:
    """The chart as a matplotlib Figure (on the Agg canvas; pyplot's global state is not used)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise _missing("matplotlib") from None

    n = len(chart.panels)
    fig = Figure(figsize=(8 if n == 1 else 6 * n, 4.8), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(chart.title, fontsize="medium")
    for ax, panel in zip(fig.subplots(1, n, squeeze=False)[0], chart.panels, strict=True):
        _axes(ax, panel)
    return fig


def _axes(ax: Any, p: Panel) -> None:
    from matplotlib.ticker import NullLocator

    for s in p.series:
        if s.spread is not None:
            below = [y - low for y, (low, _) in zip(s.ys, s.spread, strict=True)]
            above = [high - y for y, (_, high) in zip(s.ys, s.spread, strict=True)]
            drawn = ax.errorbar(s.xs, s.ys, yerr=[below, above], marker="o", capsize=4, label=s.label)
            drawn.lines[0].set_gid(f"series:{s.label}")  # the SVG names each series' line
        else:
            ax.plot(s.xs, s.ys, marker="o", label=s.label, gid=f"series:{s.label}")
    for y, label in p.lines:
        ax.axhline(y, linestyle="--", color="0.45", label=label, gid="slo")
    for x, y, label in p.marks:
        ax.plot([x], [y], linestyle="none", marker="o", markersize=16, markerfacecolor="none",
                markeredgecolor="black", label=label, gid="knee")  # fmt: skip
    if p.x_log2:
        ax.set_xscale("log", base=2)
    if p.x_ticks is not None:
        ax.set_xticks(p.x_ticks, p.x_tick_labels or [f"{v:g}" for v in p.x_ticks])
        ax.xaxis.set_minor_locator(NullLocator())
    ax.set_ylim(bottom=0)
    if p.title:
        ax.set_title(p.title, fontsize="medium")
    ax.set_xlabel(p.x_label)
    ax.set_ylabel(p.y_label)
    ax.grid(True, alpha=0.3)
    if p.series or p.lines or p.marks:
        ax.legend(fontsize="small")


def save(chart: Chart, path: Path) -> None:
    """Write the chart to `path` in the format its suffix names, atomically; a new file gets the
    permissions the user's umask gives (as any program's output does), an existing one keeps its own."""
    from llmcli import atomic

    fmt = check_format(path)
    fig = figure(chart)
    from matplotlib import rc_context

    buf = io.BytesIO()
    # text as text in SVG (searchable, small); no creation date, so the same results give the same file
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "llmcli"}):
        fig.savefig(buf, format=fmt, metadata={"Date": None} if fmt in ("svg", "pdf") else None)
    mode = None if path.exists() else 0o666 & ~_umask()
    atomic.write_atomic(path, buf.getvalue(), mode=mode, lock=False)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# -- the terminal: plotext ----------------------------------------------------------------------


def terminal(chart: Chart, colour: bool = False, width: int | None = None, height: int | None = None) -> str:
    """The chart drawn in characters by plotext below its title: the terminal's width (at most 120
    columns), in colour where asked, else each series with its own marker."""
    try:
        import plotext as plt
    except ImportError:
        raise _missing("plotext") from None
    size = shutil.get_terminal_size((100, 30))
    width = width or min(size.columns, 120)
    height = height or max(16, min(size.lines - 3, 28))
    plt.main().clear_figure()  # plotext keeps one figure per process: start afresh
    plt.subplots(1, len(chart.panels))
    plt.plotsize(width, height)
    for i, panel in enumerate(chart.panels, 1):
        plt.subplot(1, i)
        _panel(plt, panel, colour)
    out = plt.build() if colour else plt.uncolorize(plt.build())
    plt.main().clear_figure()
    return f"{chart.title}\n{out.rstrip()}\n"


def _panel(plt: Any, p: Panel, colour: bool) -> None:
    plt.theme("pro" if colour else "clear")
    for s in p.series:  # error bars first, beneath the points
        for x, (low, high) in zip(s.xs, s.spread or [], strict=False):
            if high > low:
                plt.plot([x, x], [low, high], marker="│", color="gray")
    for i, s in enumerate(p.series):
        plt.plot(s.xs, s.ys, marker="hd" if colour else MARKERS[i % len(MARKERS)], label=s.label)
    xs = [x for s in p.series for x in s.xs] or [0.0]
    for y, label in p.lines:
        plt.horizontal_line(y)
        plt.text(label, max(xs), y, alignment="right")
    for x, y, label in p.marks:
        plt.scatter([x], [y], marker="<", label=label)
    if p.x_log2:
        plt.xscale("log")
    if p.x_ticks is not None:
        plt.xticks(p.x_ticks, p.x_tick_labels or [f"{v:g}" for v in p.x_ticks])
    else:
        ticks = _round_ticks(min(xs), max(xs))
        plt.xticks(ticks, [f"{v:g}" for v in ticks])
        plt.xlim(ticks[0], ticks[-1])
    top = max([y for s in p.series for y in s.ys + [h for _, h in s.spread or []]] + [y for y, _ in p.lines])
    ticks = _round_ticks(0.0, top)
    plt.yticks(ticks, [f"{v:g}" for v in ticks])
    plt.ylim(ticks[0], ticks[-1])
    if p.title:
        plt.title(p.title)
    plt.xlabel(p.x_label)
    plt.ylabel(p.y_label)


def _round_ticks(low: float, high: float) -> list[float]:
    """Round ticks covering low to high, chosen by matplotlib's own tick locator."""
    try:
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        raise _missing("matplotlib") from None
    if high <= low:
        high = low + 1
    return [float(v) for v in MaxNLocator(nbins=5).tick_values(low, high)]
