"""How much does llmcli's generation path cost on top of llama.cpp? Also: --help time, peak RSS.

Side by side in one process, alternating runs, the same model, threads, context and prompt:
- bare: a minimal llama-cpp-python low-level loop (llama_decode in batches for the prompt, then
  greedy sampling and one llama_decode per token), timed by wall clock;
- llmcli: `LlamaEngine.stream` (the path `generate` and `chat` use: worker thread, queue,
  incremental UTF-8, stop-string handling, abort flag), timed by wall clock in the consumer.

Prefill speed = prompt tokens / time to the first token's logits; decode speed = tokens after
the first / time between the first and the last token. Reported as medians and llmcli/bare ratios.

Usage: python benchmarks/generate_overhead.py [--runs 5] [--tokens 128] [--prompt-tokens 512]
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


def bare_run(model_path: str, tokens: list[int], n_gen: int, threads: int, n_ctx: int) -> tuple[float, float]:
    import llama_cpp as L

    from llmcli.engine.llama import _silence_logs

    _silence_logs(L)
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = L.llama_model_load_from_file(model_path.encode(), mp)
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, 512, 512
    cp.n_threads = cp.n_threads_batch = threads
    cp.swa_full = True
    cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_AUTO
    ctx = L.llama_init_from_model(model, cp)
    vocab = L.llama_model_get_vocab(model)
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
    out = []
    for _ in range(n_gen - 1):
        L.llama_token_to_piece(vocab, tok, buf, 64, 0, False)
        out.append(buf.value)
        one = (L.llama_token * 1)(tok)
        assert L.llama_decode(ctx, L.llama_batch_get_one(one, 1)) == 0
        tok = L.llama_sampler_sample(sampler, ctx, -1)
    t_last = time.perf_counter()
    L.llama_sampler_free(sampler)
    L.llama_free(ctx)
    L.llama_model_free(model)
    return len(tokens) / (t_first - t0), (n_gen - 1) / (t_last - t_first)


def llmcli_run(engine, tokens: list[int], n_gen: int) -> tuple[float, float]:
    from llmcli.engine.base import SamplingParams, Token

    engine.reset()
    params = SamplingParams(temperature=0, max_tokens=n_gen, seed=1)
    t0 = time.perf_counter()
    stamps = []
    for event in engine.stream(tokens, params):
        if isinstance(event, Token):
            stamps.append(time.perf_counter())
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
    ap.add_argument("--runs", type=int, default=5)
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
    text = "The history of the sea is long and full of storms. " * 200
    tokens = engine.tokenize(text, special=False, add_bos=True)[: args.prompt_tokens]
    bare_pp, bare_tg, ll_pp, ll_tg = [], [], [], []
    bare_run(path, tokens, 8, threads, args.ctx)  # warm-up
    llmcli_run(engine, tokens, 8)
    for _ in range(args.runs):
        pp, tg = bare_run(path, tokens, args.tokens, threads, args.ctx)
        bare_pp.append(pp)
        bare_tg.append(tg)
        pp, tg = llmcli_run(engine, tokens, args.tokens)
        ll_pp.append(pp)
        ll_tg.append(tg)
    med = statistics.median
    header = gguf_file.read_header(path)
    kv = header.kv_cache_bytes(args.ctx)
    rss = peak_rss_of_generate(path)
    size = os.path.getsize(path)
    report = {
        "threads": threads,
        "prompt_tokens": len(tokens),
        "generated_tokens": args.tokens,
        "runs": args.runs,
        "bare": {"prefill_tok_s": med(bare_pp), "decode_tok_s": med(bare_tg)},
        "llmcli": {"prefill_tok_s": med(ll_pp), "decode_tok_s": med(ll_tg)},
        "ratio_prefill": med(ll_pp) / med(bare_pp),
        "ratio_decode": med(ll_tg) / med(bare_tg),
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
