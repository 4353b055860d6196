"""How much does llmcli's generation path cost on top of llama.cpp? Also: --help time, peak RSS.

Side by side in one process, the same model, threads, context parameters and prompt, runs in
rotating order (each runner goes first as often as the others):
- bare: a minimal llama-cpp-python low-level loop (llama_decode in batches for the prompt, then
  greedy sampling and one llama_decode per token) on its own context, created once with the same
  parameters as llmcli's and cleared before each run, timed by wall clock;
- llmcli: what `generate` runs: `LlamaEngine.respond`'s events (`engine/local.py` over `stream`)
  under `signals.interrupt_on_sigint` (signal watcher, incremental UTF-8, stop-string handling,
  abort flag), each event passed to the plain stdout sink
  (writing to /dev/null), timed by wall clock in the consumer;
- control: a second, identical bare loop. control/bare shows how far two identical loops drift
  apart on this machine in this run: the noise floor against which llmcli/bare is read.

Prefill speed = prompt tokens / time to the first token; decode speed = tokens after the first /
time between the first and the last token. Reported per runner as medians, and against bare as the
ratio of medians and the median of the per-round ratios with its 95% confidence interval.

Usage: python benchmarks/generate_overhead.py [--runs 21] [--tokens 128] [--prompt-tokens 512] [--threads N]
                                              [--long-tokens 2000]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import statistics
import subprocess
import sys
import time


class BareLoop:
    """The reference: llama.cpp's low-level API and nothing else."""

    def __init__(self, model_path: str, threads: int, n_ctx: int) -> None:
        import llama_cpp as L

        from llmcli.engine.backend import weight_repack
        from llmcli.engine.llama import silence_logs

        silence_logs(L)
        self.L = L
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        mp.use_extra_bufts = weight_repack()  # the weights where llmcli generate puts them
        self.model = L.llama_model_load_from_file(model_path.encode(), mp)
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, 512, 512
        cp.n_threads = cp.n_threads_batch = threads
        cp.swa_full = True
        cp.n_outputs_max = 1  # as llmcli's engine: logits for one position per batch
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_AUTO
        self.ctx = L.llama_init_from_model(self.model, cp)
        self.vocab = L.llama_model_get_vocab(self.model)

    def run(self, tokens: list[int], n_gen: int) -> tuple[float, float]:
        return speeds(len(tokens), *self.timeline(tokens, n_gen))

    def timeline(self, tokens: list[int], n_gen: int) -> tuple[float, list[float]]:
        """The start time and the time each generated token was sampled."""
        L, ctx = self.L, self.ctx
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        sampler = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        L.llama_sampler_chain_add(sampler, L.llama_sampler_init_greedy())
        buf = ctypes.create_string_buffer(64)
        t0 = time.perf_counter()
        for i in range(0, len(tokens), 512):
            chunk = tokens[i : i + 512]
            arr = (L.llama_token * len(chunk))(*chunk)
            assert L.llama_decode(ctx, L.llama_batch_get_one(arr, len(chunk))) == 0
        tok = L.llama_sampler_sample(sampler, ctx, -1)
        stamps = [time.perf_counter()]
        for _ in range(n_gen - 1):
            L.llama_token_to_piece(self.vocab, tok, buf, 64, 0, False)
            one = (L.llama_token * 1)(tok)
            assert L.llama_decode(ctx, L.llama_batch_get_one(one, 1)) == 0
            tok = L.llama_sampler_sample(sampler, ctx, -1)
            stamps.append(time.perf_counter())
        L.llama_sampler_free(sampler)
        return t0, stamps


def llmcli_timeline(engine, tokens: list[int], n_gen: int, sink_file) -> tuple[float, list[float]]:
    """The start time and the time each Token event reached the consumer."""
    from llmcli import signals
    from llmcli.contract import Prepared, SamplingParams, Token
    from llmcli.engine import local
    from llmcli.render.stream import PlainSink

    engine.reset()
    params = SamplingParams(temperature=0, max_tokens=n_gen, seed=1)
    sink = PlainSink(sink_file)
    stamps = []
    t0 = time.perf_counter()
    # the events as `Engine.respond` passes them up (engine/local.py), past the prompt's building
    events = local.run(engine, tokens, params, Prepared("raw"), 0.0)
    with signals.interrupt_on_sigint(engine.interrupt):
        for event in events:
            sink(event)
            if isinstance(event, Token):
                stamps.append(time.perf_counter())
    sink.stop()
    assert len(stamps) == n_gen, len(stamps)
    return t0, stamps


def speeds(n_prompt: int, t0: float, stamps: list[float]) -> tuple[float, float]:
    """Prefill tok/s (prompt / time to the first token) and decode tok/s (after the first token)."""
    return n_prompt / (stamps[0] - t0), (len(stamps) - 1) / (stamps[-1] - stamps[0])


def flat_cost(engine, bare: BareLoop, n_long: int, window: int, runs: int, sink_file) -> dict:
    """Decode speed over the first and the last `window` tokens of an `n_long`-token answer.

    Attention over a longer cache slows every token a little in llama.cpp itself; what matters is
    whether llmcli's own per-token cost grows with the answer, so llmcli is read against the bare
    loop in the same window: both ratios should be the same."""
    # a repetitive prompt: greedy decoding goes on repeating it and never ends the answer early
    prompt = engine.tokenize(
        "The history of the sea is long and full of storms. " * 8, special=False, add_bos=True
    )
    out: dict[str, dict[str, list[float]]] = {
        "bare": {"first": [], "last": []},
        "llmcli": {"first": [], "last": []},
    }
    for _ in range(runs):
        for name, (_, stamps) in (
            ("bare", bare.timeline(prompt, n_long)),
            ("llmcli", llmcli_timeline(engine, prompt, n_long, sink_file)),
        ):
            out[name]["first"].append(window / (stamps[window] - stamps[0]))
            out[name]["last"].append(window / (stamps[-1] - stamps[-1 - window]))
    med = statistics.median
    result: dict = {"answer_tokens": n_long, "window": window, "runs": runs}
    for part in ("first", "last"):
        result[f"{part}_window_tok_s"] = {name: med(out[name][part]) for name in out}
        result[f"{part}_window_llmcli_vs_bare"] = med(out["llmcli"][part]) / med(out["bare"][part])
    return result


def median_ci(sorted_values: list[float]) -> tuple[float, float]:
    """A distribution-free 95% confidence interval of the median (binomial order statistics)."""
    n = len(sorted_values)
    k, cumulative = 0, 0.0
    while k < n and cumulative + math.comb(n, k) / 2**n <= 0.025:
        cumulative += math.comb(n, k) / 2**n
        k += 1
    if k == 0:  # too few runs for a 95% interval
        return sorted_values[0], sorted_values[-1]
    return sorted_values[k - 1], sorted_values[n - k]


def help_time(runs: int = 10) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "llmcli", "--help"], capture_output=True, check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def peak_rss_of_generate(model_path: str) -> int:
    """Peak RSS of a `generate` run, read by a small launcher process: a child forked from this
    (large) process would count our pages in its ru_maxrss before it execs."""
    launcher = (
        "import resource, subprocess, sys\n"
        "subprocess.run(sys.argv[1:], capture_output=True, check=True)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    cmd = [sys.executable, "-m", "llmcli", "generate", "Tell me about the sea.", "-m", model_path, "-n", "64",
           "--temperature", "0"]  # fmt: skip
    out = subprocess.run([sys.executable, "-c", launcher, *cmd], capture_output=True, text=True, check=True)
    return int(out.stdout.strip()) * 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=None, help="default: physical cores, as generate")
    ap.add_argument(
        "--long-tokens",
        type=int,
        default=0,
        help="also compare the first and last 100 tokens of an answer this long",
    )
    args = ap.parse_args()

    from llmcli import gguf_file
    from llmcli.contract import EngineOptions
    from llmcli.engine.llama import LlamaEngine, physical_cores
    from llmcli.hub import default_model

    path = str(default_model.model_path("gemma3-270m"))
    threads = args.threads or physical_cores()
    engine = LlamaEngine(path, EngineOptions(ctx_size=args.ctx, threads=threads))
    bare = BareLoop(path, threads, args.ctx)
    control = BareLoop(path, threads, args.ctx)  # a second bare loop: the noise floor of the ratios
    text = "The history of the sea is long and full of storms. " * 200
    tokens = engine.tokenize(text, special=False, add_bos=True)[: args.prompt_tokens]
    sink_file = open(os.devnull, "w", encoding="utf-8")
    runners = {
        "bare": lambda: bare.run(tokens, args.tokens),
        "llmcli": lambda: speeds(len(tokens), *llmcli_timeline(engine, tokens, args.tokens, sink_file)),
        "control": lambda: control.run(tokens, args.tokens),
    }
    for run in runners.values():  # warm-up
        run()
    pp: dict[str, list[float]] = {name: [] for name in runners}
    tg: dict[str, list[float]] = {name: [] for name in runners}
    order = list(runners)
    for i in range(args.runs):
        for name in order[i % len(order) :] + order[: i % len(order)]:  # rotate who goes first
            p, t = runners[name]()
            pp[name].append(p)
            tg[name].append(t)
    med = statistics.median

    def compare(samples: dict[str, list[float]], name: str) -> dict:
        ratios = sorted(a / b for a, b in zip(samples[name], samples["bare"], strict=True))
        low, high = median_ci(ratios)
        return {
            "ratio_of_medians": med(samples[name]) / med(samples["bare"]),
            "paired_median": med(ratios),
            "paired_median_95ci": [low, high],
        }

    header = gguf_file.read_header(path)
    kv = header.kv_cache_bytes(args.ctx)
    rss = peak_rss_of_generate(path)
    size = os.path.getsize(path)
    report = {
        "threads": threads,
        "prompt_tokens": len(tokens),
        "generated_tokens": args.tokens,
        "runs": args.runs,
        "load_avg_1m": os.getloadavg()[0],
        "tok_s_medians": {name: {"prefill": med(pp[name]), "decode": med(tg[name])} for name in runners},
        "llmcli_vs_bare": {"prefill": compare(pp, "llmcli"), "decode": compare(tg, "llmcli")},
        "control_vs_bare": {"prefill": compare(pp, "control"), "decode": compare(tg, "control")},
        "samples": {"prefill": pp, "decode": tg},
        "flat_cost": flat_cost(engine, bare, args.long_tokens, 100, 3, sink_file)
        if args.long_tokens
        else None,
        "help_s_median": help_time(),
        "generate_peak_rss_mb": rss / 1e6,
        "budget_mb": (size + kv + 300e6) / 1e6,
        "model_mb": size / 1e6,
        "kv_cache_mb": kv / 1e6,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
