"""`llmcli bench plot`: benchmark results drawn, as an SVG file or a quick chart on the terminal.

Serving runs (`bench -m ENDPOINT`): a latency metric's median and chosen percentiles against output
throughput, one point per case (concurrency or rate), each file's series overlaid; the SLO of that
metric as a horizontal line, and each file's goodput knee (the highest rate, or failing that the
highest throughput, whose cases met the goodput target) marked. Local runs (`bench`): tokens/s of
each test kind (pp, tg, pg) against the setting the run swept (depth, batch, ubatch, threads, ...).
No plotting library: the SVG is written by hand, the terminal chart is characters on a grid.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from llmcli.errors import UsageError

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
MARKS = "*o+x#@%&"
METRICS = ("ttft", "tpot", "itl", "e2el")
LOCAL_AXES = ("n_depth", "n_batch", "n_ubatch", "n_threads", "n_prompt", "n_gen", "n_gpu_layers")


@dataclass
class Series:
    label: str
    points: list[tuple[float, float]]


@dataclass
class Chart:
    title: str
    x_label: str
    y_label: str
    series: list[Series] = field(default_factory=list)
    lines: list[tuple[float, str]] = field(default_factory=list)  # horizontal: (y, label)
    marks: list[tuple[float, float, str]] = field(default_factory=list)  # (x, y, label)


def load(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A result file's records and its run's settings (none for JSON lines)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        try:
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError:
            raise UsageError(f"{path} is not a benchmark result (llmcli bench -o json or jsonl)") from None
        return [r for r in records if isinstance(r, dict)], {}
    if isinstance(doc, dict) and isinstance(doc.get("results"), list):
        return [r for r in doc["results"] if isinstance(r, dict)], doc.get("settings") or {}
    if isinstance(doc, list):
        return [r for r in doc if isinstance(r, dict)], {}
    raise UsageError(f"{path} is not a benchmark result (llmcli bench -o json or jsonl)")


def chart(files: list[tuple[str, list[dict[str, Any]], dict[str, Any]]], metric: str = "ttft") -> Chart:
    """The chart of these files: serving results if they hold any, else local ones."""
    if metric not in METRICS:
        raise UsageError(f"--metric must be one of {', '.join(METRICS)}, got {metric!r}")
    serving = [(name, [r for r in rows if r.get("scenario") == "serve"], s) for name, rows, s in files]
    if any(rows for _, rows, _ in serving):
        return _serving(serving, metric)
    local = [(name, [r for r in rows if "avg_ts" in r], s) for name, rows, s in files]
    if not any(rows for _, rows, _ in local):
        raise UsageError("no results to draw in these files")
    return _local(local)


def _serving(files, metric: str) -> Chart:
    out = Chart(f"{metric.upper()} against output throughput", "output tokens/s", f"{metric.upper()} ms")
    for name, rows, settings in files:
        if not rows:
            continue
        rows = sorted(rows, key=lambda r: (r.get("request_rate") or float("inf"), r.get("concurrency") or 0))
        kinds = ["median"] + [f"p{q:g}" for q in rows[0].get("percentiles") or (90, 99)]
        for kind in kinds:
            points = [(r["output_throughput"], r[f"{kind}_{metric}_ms"]) for r in rows
                      if r.get(f"{kind}_{metric}_ms") is not None]  # fmt: skip
            if points:
                out.series.append(Series(f"{name} {kind}", points))
        slo = next((r["slo_ms"][metric] for r in rows if (r.get("slo_ms") or {}).get(metric)), None)
        if slo is not None and all(line[0] != slo for line in out.lines):
            out.lines.append((slo, f"SLO {metric} {slo:g} ms"))
        target = (settings.get("sweep_rate") or {}).get("target_share", 0.9)
        good = [r for r in rows if r.get("goodput_share") is not None and r["goodput_share"] >= target]
        good = [r for r in good if not r.get("saturated") and r.get(f"median_{metric}_ms") is not None]
        if good:
            knee = max(good, key=lambda r: (r.get("request_rate") or 0, r["output_throughput"]))
            rate = knee.get("request_rate")
            label = f"{name}: knee at {rate:g} req/s" if rate else f"{name}: knee"
            out.marks.append((knee["output_throughput"], knee[f"median_{metric}_ms"], label))
    return out


def _local(files) -> Chart:
    every = [r for _, rows, _ in files for r in rows]
    axis = next((a for a in LOCAL_AXES if len({r.get(a) for r in every}) > 1), None)
    out = Chart("tokens/s", axis or "result", "tokens/s")
    for name, rows, _ in files:
        groups: dict[str, list[tuple[float, float]]] = {}
        for i, r in enumerate(rows):
            kind = (
                str(r.get("test", "")).split("@")[0].split()[0] if axis in ("n_prompt", "n_gen") else _kind(r)
            )
            x = float(r.get(axis) or 0) if axis else float(i)
            groups.setdefault(kind, []).append((x, float(r["avg_ts"])))
        for kind, points in groups.items():
            out.series.append(Series(f"{name} {kind}", sorted(points)))
    return out


def _kind(r: dict[str, Any]) -> str:
    p, n = r.get("n_prompt") or 0, r.get("n_gen") or 0
    return "pg" if p and n else "pp" if p else "tg" if n else str(r.get("test", "?"))


# -- drawing ------------------------------------------------------------------------------------


def _bounds(c: Chart) -> tuple[float, float, float, float]:
    xs = [x for s in c.series for x, _ in s.points]
    ys = [y for s in c.series for _, y in s.points] + [y for y, _ in c.lines]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(0.0, min(ys)), max(ys)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        y1 = y0 + 1
    return x0, x1 + (x1 - x0) * 0.05, y0, y1 * 1.08


def svg(c: Chart, width: int = 760, height: int = 460) -> str:
    """The chart as an SVG document."""
    left, right, top, bottom = 70, 220, 40, 55
    w, h = width - left - right, height - top - bottom
    x0, x1, y0, y1 = _bounds(c)

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * w

    def py(y: float) -> float:
        return top + h - (y - y0) / (y1 - y0) * h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="22" font-size="15">{escape(c.title)}</text>',
        f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#444"/>',
    ]
    for i in range(6):  # ticks
        xv, yv = x0 + (x1 - x0) * i / 5, y0 + (y1 - y0) * i / 5
        parts.append(f'<text x="{px(xv):.1f}" y="{top + h + 16}" text-anchor="middle">{_num(xv)}</text>')
        parts.append(f'<text x="{left - 6}" y="{py(yv) + 4:.1f}" text-anchor="end">{_num(yv)}</text>')
        parts.append(f'<line x1="{left}" x2="{left + w}" y1="{py(yv):.1f}" y2="{py(yv):.1f}" stroke="#eee"/>')
    parts.append(
        f'<text x="{left + w / 2}" y="{height - 12}" text-anchor="middle">{escape(c.x_label)}</text>'
    )
    parts.append(
        f'<text x="16" y="{top + h / 2}" text-anchor="middle" transform="rotate(-90 16 {top + h / 2})">'
        f"{escape(c.y_label)}</text>"
    )
    for y, label in c.lines:
        parts.append(f'<line class="slo" x1="{left}" x2="{left + w}" y1="{py(y):.1f}" y2="{py(y):.1f}" '
                     'stroke="#888" stroke-dasharray="6 4"/>')  # fmt: skip
        parts.append(
            f'<text x="{left + w - 4}" y="{py(y) - 4:.1f}" text-anchor="end" fill="#555">'
            f"{escape(label)}</text>"
        )
    for i, s in enumerate(c.series):
        colour = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s.points)
        parts.append(f'<polyline class="series" data-label="{escape(s.label)}" points="{path}" fill="none" '
                     f'stroke="{colour}" stroke-width="2"/>')  # fmt: skip
        for x, y in s.points:
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>')
        ly = top + 14 + 18 * i
        parts.append(f'<line x1="{left + w + 12}" x2="{left + w + 32}" y1="{ly - 4}" y2="{ly - 4}" '
                     f'stroke="{colour}" stroke-width="2"/>')  # fmt: skip
        parts.append(f'<text x="{left + w + 38}" y="{ly}">{escape(s.label)}</text>')
    for x, y, label in c.marks:
        parts.append(
            f'<circle class="knee" cx="{px(x):.1f}" cy="{py(y):.1f}" r="8" fill="none" stroke="black"/>'
        )
        parts.append(f'<text x="{px(x) + 10:.1f}" y="{py(y) + 18:.1f}">{escape(label)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def text(c: Chart, width: int = 72, height: int = 18) -> str:
    """The chart in characters: each series its own mark, SLO lines as dashes, a legend below."""
    x0, x1, y0, y1 = _bounds(c)
    grid = [[" "] * width for _ in range(height)]

    def cell(x: float, y: float) -> tuple[int, int]:
        col = round((x - x0) / (x1 - x0) * (width - 1))
        row = height - 1 - round((y - y0) / (y1 - y0) * (height - 1))
        return min(max(row, 0), height - 1), min(max(col, 0), width - 1)

    for y, _ in c.lines:
        row, _ = cell(x0, y)
        grid[row] = ["-"] * width
    for i, s in reversed(list(enumerate(c.series))):  # the first (a median) on top where they meet
        for x, y in s.points:
            row, col = cell(x, y)
            grid[row][col] = MARKS[i % len(MARKS)]
    for x, y, _ in c.marks:
        row, col = cell(x, y)
        if col + 1 < width:
            grid[row][col + 1] = "<"
    label_w = max(len(_num(y1)), len(_num(y0)))
    lines = [c.title]
    for r, cells in enumerate(grid):
        tick = _num(y1) if r == 0 else _num(y0) if r == height - 1 else ""
        lines.append(f"{tick:>{label_w}} |{''.join(cells)}")
    lines.append(" " * label_w + " +" + "-" * width)
    lo, hi = _num(x0), _num(x1)
    lines.append(" " * (label_w + 2) + lo + " " * max(1, width - len(lo) - len(hi)) + hi)
    lines.append(" " * (label_w + 2) + f"x: {c.x_label}; y: {c.y_label}")
    lines += [f"  {MARKS[i % len(MARKS)]} {s.label}" for i, s in enumerate(c.series)]
    lines += [f"  - {label}" for _, label in c.lines]
    lines += [f"  < {label}" for _, _, label in c.marks]
    return "\n".join(lines) + "\n"


def _num(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"
