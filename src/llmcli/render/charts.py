"""What `llmcli bench plot` and `llmcli logs stats --plot` draw: the series, axes, labels and title
of a chart, chosen from benchmark result files or the log's speed figures. Drawing them is
`render.plot`'s job (matplotlib for files, plotext on the terminal); nothing here draws.

Serving runs (`bench -m ENDPOINT`): a latency metric's median and chosen percentiles against output
throughput, one point per case (concurrency or rate), each file's series overlaid; the SLO of that
metric as a horizontal line, and each file's goodput knee (the highest rate, or failing that the
highest throughput, whose cases met the goodput target) marked. Batch runs (`--scenario batch`):
aggregate and per-sequence decode speed against N. Local runs (`bench`): one line per
test kind (pp, tg, pg) against the setting the run swept (depth, batch, threads, ...), or against
the test's size when only the sizes were swept (`-p 16,32,64,128 -n 16`), the standard deviation
over the repetitions as error bars, the model and the machine in the title.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmcli.errors import UsageError

METRICS = ("ttft", "tpot", "itl", "e2el")
# The settings a local run sweeps besides the test sizes, in the order they are tried as the x axis.
CONTEXT_AXES = ("n_depth", "n_batch", "n_ubatch", "n_threads", "n_gpu_layers", "type_k", "type_v",
                "flash_attn", "n_ctx", "spec_draft_n_max")  # fmt: skip
AXIS_LABELS = {"n_depth": "tokens already in the context (-d)", "n_batch": "batch size (-b)",
               "n_ubatch": "micro-batch size (-ub)", "n_threads": "threads (-t)",
               "n_gpu_layers": "GPU layers (-ngl)", "type_k": "K cache type (-ctk)",
               "type_v": "V cache type (-ctv)", "flash_attn": "flash attention (-fa)",
               "n_ctx": "context size", "spec_draft_n_max": "draft tokens at most"}  # fmt: skip
SIZE_LABELS = {"pp": "prompt tokens (pp)", "tg": "generated tokens (tg)",
               "pg": "prompt + generated tokens (pg)"}  # fmt: skip


@dataclass
class Series:
    label: str
    xs: list[float]
    ys: list[float]
    spread: list[tuple[float, float]] | None = None  # each point's error bar: (low, high)


@dataclass
class Panel:
    """One set of axes."""

    title: str
    x_label: str
    y_label: str
    series: list[Series] = field(default_factory=list)
    lines: list[tuple[float, str]] = field(default_factory=list)  # horizontal: (y, label)
    marks: list[tuple[float, float, str]] = field(default_factory=list)  # (x, y, label)
    x_ticks: list[float] | None = None  # None: the plotting library's own
    x_tick_labels: list[str] | None = None
    x_log2: bool = False


@dataclass
class Chart:
    title: str
    panels: list[Panel]


def load(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """A result file's records, its run's settings and its environment (for JSON lines, whatever the
    first record carries)."""
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
        records = [r for r in records if isinstance(r, dict)]
        return records, {}, dict(records[0]) if records else {}
    if isinstance(doc, dict) and isinstance(doc.get("results"), list):
        records = [r for r in doc["results"] if isinstance(r, dict)]
        return records, doc.get("settings") or {}, doc.get("environment") or {}
    if isinstance(doc, list):  # llama-bench's own -o json: the environment is on every record
        records = [r for r in doc if isinstance(r, dict)]
        return records, {}, dict(records[0]) if records else {}
    raise UsageError(f"{path} is not a benchmark result (llmcli bench -o json or jsonl)")


def bench_chart(files: list[tuple[str, list[dict], dict, dict]], metric: str = "ttft") -> Chart:
    """The chart of these files (name, records, settings, environment): one panel per kind of run
    they hold (serving, --scenario batch, the other local runs), each drawn as it would be alone,
    so every file given is drawn."""
    if metric not in METRICS:
        raise UsageError(f"--metric must be one of {', '.join(METRICS)}, got {metric!r}")

    def only(keep) -> list[tuple[str, list[dict], dict, dict]]:
        picked = [(name, [r for r in rows if keep(r)], s, e) for name, rows, s, e in files]
        return [f for f in picked if f[1]]

    serving = only(lambda r: r.get("scenario") == "serve")
    local = only(lambda r: r.get("scenario") != "serve" and _number(r.get("avg_ts")))
    batches = [(n, [r for r in rows if r.get("scenario") == "batch"], s, e) for n, rows, s, e in local]
    others = [(n, [r for r in rows if r.get("scenario") != "batch"], s, e) for n, rows, s, e in local]
    batches, others = [f for f in batches if f[1]], [f for f in others if f[1]]
    order = [name for name, _, _, _ in files]  # the panels in the order of the files given
    parts = [
        (serving, "serving", lambda: _serving(serving, metric)),
        (batches, "batch", lambda: _batch(batches)),
        (others, "local", lambda: _local(others)),
    ]
    parts.sort(key=lambda part: min((order.index(f[0]) for f in part[0]), default=len(order)))
    charts = [(kind, draw()) for held, kind, draw in parts if held]
    if not charts:
        raise UsageError("no results to draw in these files")
    drawn = {name for name, _, _, _ in serving + local}
    if missing := [name for name, _, _, _ in files if name not in drawn]:
        raise UsageError(f"no results to draw in {missing[0]}")
    if len(charts) == 1:
        return charts[0][1]
    panels = []
    for kind, chart in charts:  # a panel each, titled with its kind of run
        for panel in chart.panels:
            panel.title = KIND_TITLES[kind]
            panels.append(panel)
    return Chart(_join(chart.title for _, chart in charts), panels)


KIND_TITLES = {"serving": "serving", "batch": "batch (--scenario batch)", "local": "local"}


# -- serving runs -------------------------------------------------------------------------------


def _serving(files, metric: str) -> Chart:
    name = metric.upper()
    panel = Panel(f"{name} against output throughput", "output throughput (tokens/s)", f"{name} (ms)")
    for file, rows, settings, _ in files:
        prefix = f"{file} " if len(files) > 1 else ""
        rows = sorted(rows, key=lambda r: (r.get("request_rate") or math.inf, r.get("concurrency") or 0))
        for kind in ["median"] + [f"p{q:g}" for q in rows[0].get("percentiles") or (90, 99)]:
            points = [(r["output_throughput"], r[f"{kind}_{metric}_ms"]) for r in rows
                      if r.get(f"{kind}_{metric}_ms") is not None]  # fmt: skip
            if points:
                panel.series.append(Series(prefix + kind, [x for x, _ in points], [y for _, y in points]))
        slo = next((r["slo_ms"][metric] for r in rows if (r.get("slo_ms") or {}).get(metric)), None)
        if slo is not None and all(line[0] != slo for line in panel.lines):
            panel.lines.append((slo, f"SLO {metric} {slo:g} ms"))
        target = (settings.get("sweep_rate") or {}).get("target_share", 0.9)
        good = [r for r in rows if r.get("goodput_share") is not None and r["goodput_share"] >= target]
        good = [r for r in good if not r.get("saturated") and r.get(f"median_{metric}_ms") is not None]
        if good:
            knee = max(good, key=lambda r: (r.get("request_rate") or 0, r["output_throughput"]))
            rate = knee.get("request_rate")
            label = f"knee at {rate:g} req/s" if rate else "knee"
            panel.marks.append((knee["output_throughput"], knee[f"median_{metric}_ms"], prefix + label))
    every = [r for _, rows, _, _ in files for r in rows]
    where = _join(r.get("server") or r.get("endpoint") for r in every)
    return Chart(f"{_models(every)} on {where}" if where else _models(every), [panel])


# -- local runs ---------------------------------------------------------------------------------


def _kind(r: dict[str, Any]) -> str:
    """The line a record belongs to: pp, tg, pg (llama-bench's tests), a chat cache mode, a
    speculative proposer."""
    if r.get("scenario") == "chat":
        return f"chat ({r.get('cache')})"
    if r.get("scenario") == "spec":
        return f"spec {r.get('spec_type')}"
    p, n = r.get("n_prompt") or 0, r.get("n_gen") or 0
    return "pg" if p and n else "pp" if p else "tg" if n else str(r.get("test", "?"))


def _size(r: dict[str, Any]) -> float:
    """The test's own size, the x of a run that swept only sizes."""
    if r.get("scenario") == "chat":
        return float(r.get("turn") or 0)
    p, n = r.get("n_prompt") or 0, r.get("n_gen") or 0
    return float(p + n)  # pp: the prompt, tg: the answer, pg: both


def _test(r: dict[str, Any]) -> str:
    """The test without its depth: pp512, tg128."""
    return str(r.get("test") or _kind(r)).split("@")[0].strip()


def _local(files) -> Chart:
    every = [r for _, rows, _, _ in files for r in rows]
    several_models = len({_model(r) for r in every}) > 1

    def group(r: dict[str, Any]) -> tuple:
        return (_model(r) if several_models else "", _kind(r))

    axis = next((a for a in CONTEXT_AXES if _varies(files, a, group)), None)
    by_test = axis is not None and _varies(files, "test", group, key=_test)
    reps = {r.get("repetitions") for r in every if r.get("repetitions")}
    spread = any(_number(r.get("stddev_ts")) for r in every)
    y_label = "tokens/s" + (f" (mean ± sd of {_join(map(str, sorted(reps)), ', ')} runs)" if spread else "")
    if axis is None:
        kinds = dict.fromkeys(_kind(r) for r in every)
        x_label = "turn" if all(r.get("scenario") == "chat" for r in every) else ", ".join(
            SIZE_LABELS.get(k, k) for k in kinds if k in SIZE_LABELS) or "tokens"  # fmt: skip
    else:
        x_label = AXIS_LABELS.get(axis, axis)
    panel = Panel("", x_label, y_label)
    xs_seen: list[Any] = []
    for file, rows, _, _ in files:
        lines: dict[str, list[dict]] = {}
        for r in rows:
            name = _test(r) if by_test else _kind(r)
            parts = [file if len(files) > 1 else "", _model(r) if several_models else "", name]
            lines.setdefault(" ".join(p for p in parts if p), []).append(r)
        for label, members in lines.items():
            points: list[tuple[Any, dict]] = [(r.get(axis) if axis else _size(r), r) for r in members]
            if all(_number(x) for x, _ in points):
                points.sort(key=lambda p: p[0])
            xs_seen += [x for x, _ in points]
            ys = [float(r["avg_ts"]) for _, r in points]
            sd = [float(r.get("stddev_ts") or 0) for _, r in points]
            bars = [(y - s, y + s) for y, s in zip(ys, sd, strict=True)] if spread else None
            panel.series.append(Series(label, [x for x, _ in points], ys, bars))
    _ticks(panel, xs_seen)
    machines = _join(_machine(env or rows[0]) for _, rows, _, env in files)
    threads = {r.get("n_threads") for r in every}
    if machines and len(threads) == 1 and axis != "n_threads" and _number(t := threads.pop()):
        machines += f", {t} thread{'s' if t != 1 else ''}"
    return Chart(f"{_models(every)} on {machines}" if machines else _models(every), [panel])


def _batch(files) -> Chart:
    """--scenario batch: aggregate and per-sequence decode speed against N, one line each (per
    file, model and sizes), the spread of the repetitions as error bars."""
    every = [r for _, rows, _, _ in files for r in rows]
    several_models = len({_model(r) for r in every}) > 1
    sizes = len({(r.get("n_prompt"), r.get("n_gen")) for r in every}) > 1
    reps = sorted({r.get("repetitions") for r in every if r.get("repetitions")})
    y_label = f"decode tokens/s (mean ± sd of {_join(map(str, reps), ', ')} runs)"
    panel = Panel("", "sequences decoded together (N)", y_label)
    xs_seen: list[Any] = []
    for file, rows, _, _ in files:
        lines: dict[str, list[dict]] = {}
        for r in rows:
            size = f"pp{r.get('n_prompt')} tg{r.get('n_gen')}" if sizes else ""
            parts = [file if len(files) > 1 else "", _model(r) if several_models else "", size]
            lines.setdefault(" ".join(p for p in parts if p), []).append(r)
        for prefix, members in lines.items():
            members.sort(key=lambda r: r["n_parallel"])
            xs = [float(r["n_parallel"]) for r in members]
            xs_seen += xs
            for kind, label in (("", "aggregate"), ("seq_", "per sequence")):
                ys = [float(r.get(f"avg_{kind}ts") or 0) for r in members]
                sd = [float(r.get(f"stddev_{kind}ts") or 0) for r in members]
                bars = [(y - d, y + d) for y, d in zip(ys, sd, strict=True)]
                panel.series.append(Series(f"{prefix} {label}".strip(), xs, ys, bars))
    _ticks(panel, xs_seen)
    machines = _join(_machine(env or rows[0]) for _, rows, _, env in files)
    threads = {r.get("n_threads") for r in every}
    if machines and len(threads) == 1 and _number(t := threads.pop()):
        machines += f", {t} thread{'s' if t != 1 else ''}"
    return Chart(f"{_models(every)} on {machines}" if machines else _models(every), [panel])


def _varies(files, axis: str, group, key=None) -> bool:
    """Whether `axis` takes more than one value among the records of one line of one file."""
    for _, rows, _, _ in files:
        seen: dict[tuple, set] = {}
        for r in rows:
            seen.setdefault(group(r), set()).add(key(r) if key else r.get(axis))
        if any(len(values) > 1 for values in seen.values()):
            return True
    return False


def _ticks(panel: Panel, xs: list[Any]) -> None:
    """Ticks at the swept values: numbers in place (on a log2 axis where they double, as sizes and
    batches do), anything else (a cache type, flash attention on/off) as categories."""
    values = list(dict.fromkeys(xs))
    if not all(_number(v) for v in values):
        position = {v: float(i) for i, v in enumerate(values)}
        for s in panel.series:
            s.xs = [position[x] for x in s.xs]
        panel.x_ticks, panel.x_tick_labels = list(position.values()), [str(v) for v in values]
        return
    numbers = sorted(float(v) for v in values)
    for s in panel.series:
        s.xs = [float(x) for x in s.xs]
    if len(numbers) > 12:
        return  # the library's own round ticks
    panel.x_ticks, panel.x_tick_labels = numbers, [f"{v:g}" for v in numbers]
    panel.x_log2 = len(numbers) >= 3 and numbers[0] > 0 and numbers[-1] / numbers[0] >= 8


# -- the log's speeds (logs stats --plot) -------------------------------------------------------


def speeds_chart(groups: list[dict[str, Any]], title: str = "Speed by prompt length") -> Chart:
    """`logs stats`' figures: per model, the median prefill and decode speed of each prompt-length
    bucket, the quartiles (p25-p75) as error bars; one panel each."""
    buckets = list(dict.fromkeys(g["prompt_tokens"] for g in groups))
    order = {b: float(i) for i, b in enumerate(buckets)}
    panels = []
    for key, name in (("prefill_tokens_per_s", "prefill"), ("decode_tokens_per_s", "decode")):
        panel = Panel(name, "prompt tokens", "tokens/s (median, p25-p75)", x_ticks=list(order.values()),
                      x_tick_labels=buckets)  # fmt: skip
        for model in dict.fromkeys(g["model"] for g in groups):
            figures = [(order[g["prompt_tokens"]], g[key]) for g in groups if g["model"] == model and g[key]]
            if figures:
                panel.series.append(Series(model, [x for x, _ in figures], [s["median"] for _, s in figures],
                                           [(s["p25"], s["p75"]) for _, s in figures]))  # fmt: skip
        panels.append(panel)
    return Chart(title, panels)


# -- names --------------------------------------------------------------------------------------


def _model(r: dict[str, Any]) -> str:
    """The model's file (or served) name: what tells two models apart."""
    name = str(r.get("model_filename") or r.get("model_type") or r.get("model") or "model")
    return name.removesuffix(".gguf")


def _models(records: list[dict[str, Any]]) -> str:
    """The title's models: one with its architecture, size and quantization (llama 135M Q4_1)."""
    names = list(dict.fromkeys(_model(r) for r in records))
    if len(names) == 1:
        kind = records[0].get("model_type") if records[0].get("scenario") != "serve" else None
        return f"{names[0]} ({kind})" if kind and kind != names[0] else names[0]
    return " vs ".join(names) if len(names) <= 3 else f"{len(names)} models"


def _machine(env: dict[str, Any]) -> str:
    """The CPU, and the GPUs where any ran the model."""
    gpus = env.get("gpu_info") or []
    gpus = [gpus] if isinstance(gpus, str) else gpus
    offloaded = env.get("n_gpu_layers_offloaded")
    names = [str(env.get("cpu_info") or "")] + ([str(g) for g in gpus] if offloaded != 0 else [])
    return " + ".join(n for n in names if n)


def _join(names, sep: str = " / ") -> str:
    return sep.join(dict.fromkeys(n for n in names if n))


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)
