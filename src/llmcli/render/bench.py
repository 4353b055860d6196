"""Benchmark results as text: a Markdown table (the default), CSV, one JSON document, or JSON lines;
and the `bench compare` table. The bench package measures; this module presents.

Also the progress lines a run writes on stderr while it measures (`Progress`, `ServeProgress`).

The Markdown table follows llama-bench's layout (model, size, params, backend, threads, test, t/s),
adding the columns that were swept or changed from the default, the effective memory traffic of
decode tests, and with --roofline its fraction of the measured memory bandwidth. Every sample is
kept in the machine-readable formats.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmcli import defaults
from llmcli.bench import stats, sweep
from llmcli.bench.results import SCHEMA_VERSION, BenchRun, SpecResult
from llmcli.engine.cpu_load import NOISY
from llmcli.render import bench_batch, tables
from llmcli.units import human_size

if TYPE_CHECKING:
    from llmcli.bench.compare import Comparison

FORMATS = ("md", "csv", "json", "jsonl")

# (record field, column title, default value): shown when swept or not at the default
_OPTIONAL = (
    ("n_batch", "n_batch", sweep.DEFAULT_N_BATCH[0]),
    ("n_ubatch", "n_ubatch", sweep.DEFAULT_N_UBATCH[0]),
    ("flash_attn", "fa", False),
    ("type_k", "type_k", "f16"),
    ("type_v", "type_v", "f16"),
    ("repack", "repack", True),  # llama-bench's default; not repacked by default on AMX builds
)


def render(run: BenchRun, fmt: str) -> str:
    return {"md": markdown, "csv": to_csv, "json": to_json, "jsonl": to_jsonl}[fmt](run)


def to_json(run: BenchRun) -> str:
    return json.dumps(run.document(), indent=2, ensure_ascii=False) + "\n"


def to_jsonl(run: BenchRun) -> str:
    """The records as JSON lines; `llmcli bench -o jsonl` writes each with `jsonl_line` as its result
    finishes instead, so this is for a run already held."""
    return "".join(jsonl_line(run.flat_record(i, r)) for i, r in enumerate(run.records(), 1))


def jsonl_line(record: dict[str, Any]) -> str:
    """One `-o jsonl` line: a flat record (`BenchRun.flat_record`), with its schema's version."""
    return json.dumps({"schema_version": SCHEMA_VERSION, **record}, ensure_ascii=False) + "\n"


def to_csv(run: BenchRun) -> str:
    rows = run.flat_records()
    fields: dict[str, None] = {}
    for row in rows:
        fields.update(dict.fromkeys(row))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(fields), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_value(v) for k, v in row.items()})
    return out.getvalue()


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return " ".join(str(_csv_value(v)) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return value


# -- Markdown --------------------------------------------------------------------------------


def markdown(run: BenchRun) -> str:
    records = run.records()
    tests = [r for r in records if r["scenario"] == "tests"]
    chats = [r for r in records if r["scenario"] == "chat"]
    specs = [r for r in records if r["scenario"] == "spec"]
    batches = [r for r in records if r["scenario"] == "batch"]
    if run.settings.get("scenario") == "serve":
        serves = [r for r in records if r["scenario"] == "serve"]
        body = tables.markdown(*_serve_table(serves)) if serves else "No test finished.\n"
        return body + "\n" + serve_footer(run)
    roofline = run.bandwidth is not None
    backend = run.environment.get("backends") or "CPU"
    parts = []
    if tests:
        parts.append(tables.markdown(*_test_table(tests, backend, roofline)))
    if chats:
        parts.append(tables.markdown(*_chat_table(chats, roofline)))
    if specs:
        parts.append(tables.markdown(*_spec_table(specs, roofline)))
    if batches:
        parts.append(bench_batch.table(batches, roofline))
    if not records:
        parts.append("No test finished.\n")
    parts.append(footer(run))
    return "\n".join(parts)


def _test_table(
    rows: list[dict], backend: str, roofline: bool
) -> tuple[list[str], list[list[str]], list[bool]]:
    show_ngl = backend != "CPU" or any(r["n_gpu_layers_offloaded"] for r in rows)
    optional = [(key, title) for key, title, default in _OPTIONAL if _shown(rows, key, default)]
    with_gbps = any(r["effective_gbps"] is not None for r in rows)
    head = ["model", "size", "params", "backend"] + (["ngl"] if show_ngl else []) + ["threads"]
    head += [title for _, title in optional] + ["test", "t/s"] + (["GB/s"] if with_gbps else [])
    head += ["roofline"] if roofline and with_gbps else []
    body = []
    for r in rows:
        row = [r["model_type"], human_size(r["model_size"]), _params(r["model_n_params"]), backend]
        row += [str(r["n_gpu_layers_offloaded"])] if show_ngl else []
        row += [str(r["n_threads"])] + [_cell(r[key]) for key, _ in optional]
        row += [r["test"], _ts(r)] + ([_gbps(r["effective_gbps"])] if with_gbps else [])
        row += [_percent(r["roofline_fraction"])] if roofline and with_gbps else []
        body.append(row)
    right = [h not in ("model", "backend", "test", "type_k", "type_v") for h in head]
    return head, body, right


def _chat_table(rows: list[dict], roofline: bool) -> tuple[list[str], list[list[str]], list[bool]]:
    head = ["model", "threads", "n_gen", "cache", "turn", "prompt", "reused", "ttft ms", "t/s", "GB/s"]
    head += ["roofline"] if roofline else []
    body = []
    for r in rows:
        row = [r["model_type"], str(r["n_threads"]), str(r["n_gen"]), r["cache"], str(r["turn"])]
        row += [_ints(r["prompt_tokens"]), _ints(r["cached_tokens"])]
        row += [f"{r['avg_ttft_ms']:.1f} ± {r['stddev_ttft_ms']:.1f}", _ts(r), _gbps(r["effective_gbps"])]
        row += [_percent(r["roofline_fraction"])] if roofline else []
        body.append(row)
    right = [h not in ("model", "cache") for h in head]
    return head, body, right


def _spec_table(rows: list[dict], roofline: bool) -> tuple[list[str], list[list[str]], list[bool]]:
    """--scenario spec: one row per proposer setting, the plain baseline first in each group."""
    spec_rows = [r for r in rows if r["spec_type"] != "none"]
    optional = [(key, title) for key, title, default in _OPTIONAL if _shown(rows, key, default)]
    with_min = any(r["spec_draft_n_min"] not in (None, defaults.SPEC_DRAFT_N_MIN) for r in rows)
    with_ngram = any(
        (r["spec_ngram_max"], r["spec_ngram_min"]) != (defaults.SPEC_NGRAM_MAX, defaults.SPEC_NGRAM_MIN)
        for r in spec_rows
        if r["spec_type"] == "lookup"
    )
    with_draft = any(r["spec_type"] == "draft" for r in rows)
    head = ["model", "threads"] + [title for _, title in optional] + ["n_gen", "spec", "k"]
    head += (["k min"] if with_min else []) + (["ngram"] if with_ngram else [])
    head += ["draft"] if with_draft else []
    head += ["adaptive", "exact", "prompt", "ttft ms", "pp t/s", "t/s", "vs plain", "drafted", "accepted"]
    head += ["accept", "tok/pass", "k used", "= plain"] + (["roofline"] if roofline else [])
    body = []
    for r in rows:
        spec = r["spec_type"] != "none"
        row = [r["model_type"], str(r["n_threads"])] + [_cell(r[key]) for key, _ in optional]
        row += [str(r["n_gen"]), r["spec_type"] if spec else "plain"]
        row += [str(r["spec_draft_n_max"]) if spec else ""]
        row += [_cell(r["spec_draft_n_min"]) if spec else ""] if with_min else []
        if with_ngram:
            row += [f"{r['spec_ngram_min']}-{r['spec_ngram_max']}" if r["spec_type"] == "lookup" else ""]
        row += [Path(str(r["model_draft"])).name if r["spec_type"] == "draft" else ""] if with_draft else []
        row += [_cell(r["spec_adaptive"]) if spec else "", _cell(r["spec_exact"]) if spec else ""]
        row += [_ints(r["prompt_tokens"]), f"{r['avg_ttft_ms']:.1f} ± {r['stddev_ttft_ms']:.1f}"]
        vs = "" if r["vs_plain"] is None else f"{r['vs_plain']:.2f}x"
        row += [f"{r['avg_prefill_ts']:.1f}", _ts(r), vs]
        reps = max(1, r["repetitions"])
        row += [f"{sum(r['drafted']) / reps:.0f}", f"{sum(r['accepted']) / reps:.0f}"] if spec else ["", ""]
        per_pass = "" if r["tokens_per_pass"] is None or not spec else f"{r['tokens_per_pass']:.2f}"
        row += [_percent(r["acceptance"]), per_pass]
        row += [_k_used(r), {True: "yes", False: "no", None: ""}[r["text_matches_plain"]]]
        row += [_percent(r["roofline_fraction"])] if roofline else []
        body.append(row)
    right = [h not in ("model", "spec", "draft", "= plain") for h in head]
    return head, body, right


def _k_used(r: dict) -> str:
    """The k the policy chose, as a mean over its decisions (fixed k: k whenever it drafted)."""
    if r["spec_type"] == "none" or r["mean_k"] is None:
        return ""
    return f"{r['mean_k']:.1f}"


def spec_notes(run: BenchRun) -> list[str]:
    """Footer lines for --scenario spec: the prompt, the method, and settings that drafted nothing."""
    records = [r for r in run.records() if r["scenario"] == "spec"]
    if not records:
        return []
    source = run.settings.get("prompt") or "default"
    what = "the built-in copy-heavy prompt" if source == "default" else source
    fmt = records[0]["prompt_format"]
    lines = [f"prompt: {what} ({'through the chat template' if fmt == 'template' else 'plain text'}), "
             "greedy; t/s = wall clock, tokens after the first / first->last token; vs plain = t/s over "
             "the plain case with the same model, context and n_gen"]  # fmt: skip
    capped: dict[tuple, str] = {}
    for r in records:
        exact = r["exact_positions"] or {}
        if r["spec_type"] == "none" or not r["spec_exact"] or not exact:
            continue
        short, long = exact.get("short", 0), exact.get("long", 0)
        if short - 1 < r["spec_draft_n_max"] or long - 1 < r["spec_draft_n_max"]:
            capped.setdefault((r["model_filename"], short, long), r["model_type"])
    for (_, short, long), model in capped.items():
        lines.append(f"--spec-exact: {model} gives logits bit-identical to single steps in batches of "
                     f"at most {short} positions while the cache holds up to 256 tokens and {long} beyond "
                     f"(probed on this build and settings), so k is capped at {short - 1} / {long - 1} "
                     "there; --spec-exact 0 lifts the cap")  # fmt: skip
    if any(r["text_matches_plain"] is False for r in records):
        lines.append("= plain: no: the greedy text differs from plain decoding's (batched kernels may round "
                     "near-ties differently; --spec-exact 1 keeps it identical)")  # fmt: skip
    return lines


def _serve_table(rows: list[dict]) -> tuple[list[str], list[list[str]], list[bool]]:
    """The serving benchmark: throughputs (mean ± sd over repetitions), then TTFT, TPOT and ITL as
    mean / median / the chosen percentiles in milliseconds over every request; the request rate
    and goodput columns when some row has them."""
    qs = rows[0].get("percentiles") or [90, 99] if rows else [90, 99]
    rated = any(r.get("request_rate") is not None for r in rows)
    slo = any(r.get("slo_ms") for r in rows)
    head = (
        ["model", "p", "n", "c"] + (["rate"] if rated else []) + ["requests", "errors", "req/s", "output t/s"]
    )
    head += ["goodput req/s", "good"] if slo else []
    kinds = "/".join(["mean", "med", *(f"p{q:g}" for q in qs)])
    head += [f"{name} ms ({kinds})" for name in ("TTFT", "TPOT", "ITL")]
    body = []
    for r in rows:
        req = r["samples_request_throughput"]
        row = [r["model_type"], _opt(r["n_prompt"]), _opt(r["n_gen"]), _opt(r["concurrency"], "∞")]
        if rated:
            row.append(_opt(r.get("request_rate"), "inf"))
        row += [str(r["completed"] + r["errors"]), str(r["errors"]),
                f"{stats.mean(req):.2f} ± {stats.stdev(req):.2f}" if req else "n/a", _ts(r)]  # fmt: skip
        if slo:
            share = r.get("goodput_share")
            row += [_opt(r.get("request_goodput"), "n/a", ".2f"), "n/a" if share is None else f"{share:.0%}"]
        row += [_quartet(r, metric, qs) for metric in ("ttft", "tpot", "itl")]
        if r.get("saturated"):
            row[0] += " (saturated)"
        body.append(row)
    right = [h != "model" for h in head]
    return head, body, right


def _opt(value, none: str = "-", spec: str = "g") -> str:
    return none if value is None else format(value, spec)


def _quartet(r: dict, metric: str, qs=(90, 99)) -> str:
    values = [r.get(f"{kind}_{metric}_ms") for kind in ("mean", "median", *(f"p{q:g}" for q in qs))]
    if any(v is None for v in values):
        return "n/a"
    return "/".join(f"{v:.1f}" for v in values)


def sweep_answer(answer: dict) -> str:
    """The rate sweep's answer in one line (stderr)."""
    slo = ", ".join(f"{k} ≤ {v:g} ms" for k, v in answer["slo_ms"].items())
    target = f"{answer['target_share']:.0%} of requests within {slo}"
    held = answer["highest_rate_held"]
    if held is None:
        line = f"sweep: no rate tried held {target}"
    else:
        share = answer["goodput_share_at_it"]
        line = f"sweep: the highest rate that held {target}: {held:g} req/s ({share:.0%} good)"
        if answer["lowest_rate_failed"] is not None:
            line += f"; {answer['lowest_rate_failed']:g} req/s did not"
    if answer["saturated_at"] is not None:
        line += (f"; at {answer['saturated_at']:g} req/s the queue grew without bound "
                 "(over-saturated): that rate stopped early")  # fmt: skip
    return line


def serve_footer(run: BenchRun) -> str:
    env, settings = run.environment, run.settings
    warmup = "yes" if settings.get("warmup") else "no"
    slots = f", {env['server_slots']} slots" if env.get("server_slots") else ""
    build = f" {env['server_build']}" if env.get("server_build") else ""
    lines = [
        f"server: {env.get('server')}{build} at {env.get('endpoint')}{slots}; "
        f"llmcli {env.get('llmcli_version')}",
        f"repetitions: {settings.get('repetitions')}, warm-up: {warmup}, started {run.started_at}; "
        + _loop(settings)
        + "; times on the client's monotonic clock",
    ]
    if settings.get("slo_ms"):
        slo = ", ".join(f"{k} ≤ {v:g} ms" for k, v in settings["slo_ms"].items())
        lines.append(f"goodput: requests meeting every SLO ({slo}), per second and as a share of those sent")
    if any(r.get("saturated") for r in run.records()):
        lines.append("saturated: the queue grew without bound, so that case stopped early")
    records = run.records()
    if any("chunks" in (r.get("tokens_source") or "") for r in records):
        lines.append("output tokens estimated from streamed chunks: the server reports no usage")
    failed = [m for r in records for m in r.get("error_messages") or []]
    if failed:
        lines.append(f"errors: {'; '.join(sorted(set(failed))[:3])}")
    if not run.complete:
        lines.append(f"**incomplete**: interrupted after {len(run.results)} of {run.planned} results")
    return "\n".join(lines) + "\n"


def _loop(settings: dict) -> str:
    rates = (settings.get("sweep") or {}).get("request_rate") or [None]
    if all(r is None for r in rates) and not settings.get("sweep_rate"):
        if None in ((settings.get("sweep") or {}).get("concurrency") or [1]):
            return "every request sent at once"
        return "closed loop: c requests in flight"
    shape = (
        "Poisson"
        if settings.get("burstiness", 1.0) == 1.0
        else f"gamma (burstiness {settings['burstiness']:g})"
    )
    ramp = f", ramped up over {settings['ramp_up_s']:g} s" if settings.get("ramp_up_s") else ""
    return f"open loop: {shape} arrivals at the rate{ramp}, at most c in flight (∞: no cap)"


def footer(run: BenchRun) -> str:
    env = run.environment
    simd = " ".join(env.get("cpu_simd") or []) or "no SIMD flags found"
    gpu = f"; gpu: {', '.join(env['gpu_info'])}" if env.get("gpu_info") else ""
    warmup = "yes" if run.settings.get("warmup") else "no"
    lines = [
        f"build: {env.get('build_commit') or 'unknown'} (ggml {env.get('ggml_version') or '?'}), "
        f"llama-cpp-python {env.get('llama_cpp_python_version') or '?'}, llmcli {env.get('llmcli_version')}",
        f"cpu: {env.get('cpu_info') or 'unknown'} ({simd}){gpu}",
        f"repetitions: {run.settings.get('repetitions')}, warm-up: {warmup}, started {run.started_at}",
    ]
    repacked = any(r.get("repack") for r in run.records())
    if env.get("weight_repack") is False and not repacked:  # llama-bench's default repacks; this did not
        lines.append(
            "weights: not repacked (this build would use llama.cpp's AMX kernels); "
            "compare with llama-bench --repack 0"
        )
    lines += spec_notes(run)
    lines += bench_batch.notes(run.records())
    bw = run.bandwidth
    if bw is not None:
        lines.append(
            f"memory bandwidth: read {bw.read_gbps:.1f} GB/s, copy {bw.copy_gbps:.1f} GB/s "
            f"({bw.threads} threads, best of {bw.reps}; roofline = GB/s / read)"
        )
    busy = run.settings.get("busy_processes") or 0
    busiest = run.busiest()
    if busy:
        lines.append(f"measured next to {busy} busy process{'es' if busy > 1 else ''} started by --busy")
    elif busiest is not None and busiest[1] > NOISY:
        lines.append(f"busy machine: other processes used {busiest[1]:.0%} of the CPU during {busiest[0]}; "
                     "numbers measured under load are noisy")  # fmt: skip
    if not run.complete:
        lines.append(f"**incomplete**: interrupted after {len(run.results)} of {run.planned} results")
    return "\n".join(lines) + "\n"


def _shown(rows: list[dict], key: str, default: Any) -> bool:
    values = {r[key] for r in rows}
    return len(values) > 1 or values != {default}


def _cell(value: Any) -> str:
    if value is None:
        return "auto"
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _ts(r: dict) -> str:
    if not r["samples_ts"]:
        return "n/a"
    return f"{r['avg_ts']:.2f} ± {r['stddev_ts']:.2f}"


def _gbps(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def _percent(value: float | None) -> str:
    return "" if value is None else f"{value * 100:.0f}%"


def _ints(values: list[int]) -> str:
    if not values:
        return ""
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


def _params(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.2f} M"


# -- bench compare ------------------------------------------------------------------------------------


def comparison(result: Comparison) -> str:
    """`bench compare` as text: one row per matched test, then the files and what was left out."""
    head = ["test", "old t/s", "new t/s", "ratio", "p", "verdict"]
    body = [
        [p.label, _mean_sd(p.old), _mean_sd(p.new), f"{p.ratio:.3f}",
         "" if p.welch is None else f"{p.welch.p_value:.3g}", p.verdict(result.alpha)]
        for p in result.pairs
    ]  # fmt: skip
    right = [False, True, True, True, True, False]
    if any(p.acceptance is not None for p in result.pairs):  # --scenario spec
        head += ["old accept", "new accept"]
        right += [True, True]
        for row, p in zip(body, result.pairs, strict=True):
            old, new = p.acceptance or (None, None)
            row += [_percent(old), _percent(new)]
    lines = [tables.markdown(head, body, right)]
    lines.append(f"old: {result.old.path}\nnew: {result.new.path}")
    lines.append(f"Welch's t-test on tokens/s per repetition; a difference counts when p < {result.alpha:g}.")
    if result.only_old:
        lines.append(f"only in old: {', '.join(result.only_old)}")
    if result.only_new:
        lines.append(f"only in new: {', '.join(result.only_new)}")
    return "\n".join(lines) + "\n"


def _mean_sd(values: list[float]) -> str:
    return f"{stats.mean(values):.2f} ± {stats.stdev(values):.2f}"


# -- progress on stderr ----------------------------------------------------------------------


class Progress:
    """A bench run's progress (`runner.Event`s) on stderr: a live line on a terminal, one line per
    finished test otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()

    def __call__(self, event) -> None:
        from llmcli import render

        if render.quiet():
            return
        where = f"[{event.index + 1}/{event.total}] {event.name}"
        if event.phase == "done" and event.result is not None:
            self._line(f"llmcli bench: {where}: {self.finished(event.result)}")
        elif event.phase == "done":
            self._line(f"llmcli bench: {where}: done")
        elif self.tty:
            step = "warm-up" if event.phase == "warmup" else f"run {event.rep}/{event.reps}"
            sys.stderr.write(f"\r\033[K{where}: {step}")
            sys.stderr.flush()

    def finished(self, result) -> str:
        busy = result.other_load or 0.0
        note = f" (other processes used {busy:.0%} of the CPU)" if busy > NOISY else ""
        if isinstance(result, SpecResult):
            r = result.record()
            line = f"{r['avg_ts']:.2f} ± {r['stddev_ts']:.2f} t/s" if r["samples_ts"] else "n/a t/s"
            if r["vs_plain"] is not None:
                line += f" ({r['vs_plain']:.2f}x plain)"
            if r["spec_type"] != "none":
                drafted, accepted = sum(r["drafted"]), sum(r["accepted"])
                share = f" ({accepted / drafted:.0%})" if drafted else ""
                line += f", accepted {accepted}/{drafted}{share}"
            return line + note
        if getattr(result, "case", None) is not None and not hasattr(result, "timing"):  # --scenario batch
            return bench_batch.finished(result.record()) + note
        t = result.timing
        return f"{t.avg_ts:.2f} ± {t.stddev_ts:.2f} t/s{note}"

    def _line(self, text: str) -> None:
        sys.stderr.write(("\r\033[K" if self.tty else "") + text + "\n")
        sys.stderr.flush()


class ServeProgress(Progress):
    """The serving benchmark's progress: the same lines, a finished case in requests and tokens."""

    def finished(self, result) -> str:
        r = result.record()
        errors = f", {r['errors']} errors" if r["errors"] else ""
        good = f", {r['goodput_share']:.0%} within the SLOs" if r.get("goodput_share") is not None else ""
        saturated = "; the queue grew without bound: stopped early" if r.get("saturated") else ""
        return (f"{r['request_throughput']:.2f} req/s, {r['output_throughput']:.1f} output tok/s{errors}"
                f"{good}{saturated}")  # fmt: skip
