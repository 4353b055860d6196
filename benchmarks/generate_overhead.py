"""How much does llmcli's generation path cost on top of llama.cpp? Also: --help time, peak RSS.

Side by side in one process, alternating runs (which one goes first alternates too), the same model,
threads, context parameters and prompt:
- bare: a minimal llama-cpp-python low-level loop (llama_decode in batches for the prompt, then
  greedy sampling and one llama_decode per token) on its own context, created once with the same
  parameters as llmcli's and cleared before each run, timed by wall clock;
- llmcli: what `generate` runs: `LlamaEngine.stream` under `interrupt_on_sigint` (prefill worker
  thread, incremental UTF-8, stop-string handling, abort flag), each event passed to the plain
  stdout sink (writing to /dev/null), timed by wall clock in the consumer.

Prefill speed = prompt tokens / time to the first token; decode speed = tokens after the first /
time between the first and the last token. Reported as medians, the llmcli/bare ratio of medians,
and the median and range of the per-pair ratios.

Usage: python benchmarks/generate_overhead.py [--runs 11] [--tokens 128] [--prompt-tokens 512]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time


class BareLoop:
    """The reference: llama.cpp's low-level API and nothing else."""

    def __init__(self, model_path: str, threads: int, n_ctx: int) -> None:
        import llama_cpp as L

        from llmcli.engine.llama import silence_logs

        silence_logs(L)
        self.L = L
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
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
        t_first = time.perf_counter()
        for _ in range(n_gen - 1):
            L.llama_token_to_piece(self.vocab, tok, buf, 64, 0, False)
            one = (L.llama_token * 1)(tok)
            assert L.llama_decode(ctx, L.llama_batch_get_one(one, 1)) == 0
            tok = L.llama_sampler_sample(sampler, ctx, -1)
        t_last = time.perf_counter()
        L.llama_sampler_free(sampler)
        return len(tokens) / (t_first - t0), (n_gen - 1) / (t_last - t_first)


def llmcli_run(engine, tokens: list[int], n_gen: int, sink_file) -> tuple[float, float]:
    from llmcli.engine.base import SamplingParams, Token
    from llmcli.repl.readout import PlainSink

    engine.reset()
    params = SamplingParams(temperature=0, max_tokens=n_gen, seed=1)
    sink = PlainSink(sink_file)
    stamps = []
    t0 = time.perf_counter()
    with engine.interrupt_on_sigint():
        for event in engine.stream(tokens, params):
            sink(event)
            if isinstance(event, Token):
                stamps.append(time.perf_counter())
    sink.stop()
    assert len(stamps) == n_gen, len(stamps)
    return len(tokens) / (stamps[0] - t0), (n_gen - 1) / (stamps[-1] - stamps[0])


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
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--ctx", type=int, default=4096)
    args = ap.parse_args()

    from llmcli import gguf_file
    from llmcli.engine.base import EngineOptions
    from llmcli.engine.llama import LlamaEngine, physical_cores
    from llmcli.hub import default_model

    path = str(default_model.model_path())
    threads = physical_cores()
    engine = LlamaEngine(path, EngineOptions(ctx_size=args.ctx, threads=threads))
    bare = BareLoop(path, threads, args.ctx)
    text = "The history of the sea is long and full of storms. " * 200
    tokens = engine.tokenize(text, special=False, add_bos=True)[: args.prompt_tokens]
    sink_file = open(os.devnull, "w", encoding="utf-8")
    run_bare = lambda: bare.run(tokens, args.tokens)  # noqa: E731
    run_llmcli = lambda: llmcli_run(engine, tokens, args.tokens, sink_file)  # noqa: E731
    run_bare(), run_llmcli()  # warm-up
    bare_pp, bare_tg, ll_pp, ll_tg = [], [], [], []
    for i in range(args.runs):
        if i % 2:
            (lp, lt), (bp, bt) = run_llmcli(), run_bare()
        else:
            (bp, bt), (lp, lt) = run_bare(), run_llmcli()
        bare_pp.append(bp), bare_tg.append(bt), ll_pp.append(lp), ll_tg.append(lt)
    med = statistics.median

    def paired(ll: list[float], ba: list[float]) -> dict:
        ratios = [a / b for a, b in zip(ll, ba, strict=True)]
        return {"median": med(ratios), "min": min(ratios), "max": max(ratios)}

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
        "bare": {"prefill_tok_s": med(bare_pp), "decode_tok_s": med(bare_tg)},
        "llmcli": {"prefill_tok_s": med(ll_pp), "decode_tok_s": med(ll_tg)},
        "ratio_prefill": med(ll_pp) / med(bare_pp),
        "ratio_decode": med(ll_tg) / med(bare_tg),
        "paired_ratio_prefill": paired(ll_pp, bare_pp),
        "paired_ratio_decode": paired(ll_tg, bare_tg),
        "samples": {"bare_pp": bare_pp, "bare_tg": bare_tg, "llmcli_pp": ll_pp, "llmcli_tg": ll_tg},
        "help_s_median": help_time(),
        "generate_peak_rss_mb": rss / 1e6,
        "budget_mb": (size + kv + 300e6) / 1e6,
        "model_mb": size / 1e6,
        "kv_cache_mb": kv / 1e6,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
