"""`llmcli batch` side by side: against a shell loop of `llmcli generate`, against llama.cpp's
`llama-batched-bench` (built from the same vendored source) at the same N, and against vLLM's own
offline batch (`vllm run-batch`) on the same OpenAI batch input file.

    PYTHONPATH=src:tests python benchmarks/batch.py [--model 0.5b|1.5b|PATH] [--prompts 64] [--tokens 128]
        [--parallel 4,8,16,auto] [--loop-prompts 16] [--decode 1,2,4,8,16] [--reps 2] [--vllm]
        [--skip loop,batch,decode]

Parts (each printed as it finishes, a table at the end):

- loop: `llmcli generate --json` once per prompt (a model load each), at temperature 0 with the same
  --max-tokens; aggregate tok/s = answer tokens (each record's completion_tokens) / wall time.
  `--loop-prompts K` runs the first K prompts only: each call costs the same, so the loop's
  tok/s over K prompts is its tok/s over all of them (said in the output).
- batch: `llmcli batch FILE -n N` over all --prompts (chat-templated prompts of 32-64 tokens);
  end to end (process wall, the load and `--parallel auto`'s probe included) and the run's own
  figure (its summary line: tokens / wall after the model is loaded); the ratio to the loop is the
  end-to-end one. For `auto`, the N it chose and the measured step speeds it chose from.
- decode: like for like with llama-batched-bench, which counts decode only (S_TG = N x tg / the
  time of the tg steps, prompt processing apart): `llmcli bench --scenario batch -p 32 -n TOKENS
  --parallel LIST -r 1` (decode-only aggregate through llmcli batch's decoder) and
  `llama-batched-bench -npp 32 -ntg TOKENS -npl LIST` (its own S_TG and S_PP; a KV stream per
  sequence, as llmcli's decoder has) alternated --reps times, mean ± sd of each, same threads,
  same weight layout (`--no-repack` where llmcli keeps weights out of the AMX buffer).
- vllm (--vllm): SmolLM2-135M-Instruct, the model the vLLM tests convert (tests/vllm_tools.py):
  one OpenAI batch file (custom_id, body of a chat completion, --tokens max, temperature 0) read by
  `vllm run-batch` (its CPU build, compiled, as the benchmarks start it) and by `llmcli batch` on
  the bundled GGUF. End to end (process wall) and after start-up (vLLM: from its "Reading batch"
  log line to its exit; llmcli: its summary line), tokens from each side's usage. `--gguf A,B` runs
  llmcli batch on each of those files (say, a BF16 GGUF converted from the same HF folder, beside
  the bundled Q4_1), vLLM once.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

TOPICS = ["a binary search", "a linked list", "HTTP caching", "a mutex", "garbage collection",
          "a hash map", "TCP slow start", "a B-tree", "unicode normalisation", "a bloom filter",
          "copy-on-write", "a thread pool", "DNS resolution", "a ring buffer", "tail calls",
          "SQL joins"]  # fmt: skip


def prompts(n: int) -> list[str]:
    """n prompts of roughly 32-64 tokens once templated."""
    return [f"Explain {TOPICS[i % len(TOPICS)]} to a new programmer in a few sentences, with one short "
            f"example in Python. Keep it practical; this is question {i + 1}." for i in range(n)]  # fmt: skip


def cli(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "llmcli", *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"llmcli {' '.join(args[:3])} ... failed:\n{done.stderr[-2000:]}")
    return done, time.perf_counter() - started


def loop(model: str, items: list[str], tokens: int) -> tuple[int, float]:
    total, wall = 0, 0.0
    for p in items:
        done, took = cli("generate", p, "-m", model, "--temperature", "0", "--max-tokens", str(tokens),
                         "--json")  # fmt: skip
        total += json.loads(done.stdout)["usage"]["completion_tokens"]
        wall += took
    return total, wall


def summary_line(stderr: str) -> dict:
    """What `llmcli batch`'s summary and auto lines say: tokens, wall, tok/s, N, how N was chosen."""
    out: dict = {}
    m = re.search(r"batch: .*?(\d+) tokens, ([\d.]+) s, ([\d.]+) tok/s aggregate, parallel (\d+)", stderr)
    if m:
        out.update(tokens=int(m[1]), wall=float(m[2]), tok_s=float(m[3]), n=int(m[4]))
    auto = re.search(r"batch: parallel \d+ \((auto: [^)]*)\)", stderr)
    if auto:
        out["auto"] = auto[1]
    return out


def batch(model: str, path: str, tokens: int, parallel: str) -> dict:
    done, wall = cli("batch", path, "-m", model, "--temperature", "0", "--max-tokens", str(tokens),
                     "-np", parallel)  # fmt: skip
    lines = [json.loads(line) for line in done.stdout.splitlines()]  # OpenAI input: OpenAI's lines
    total = sum((d.get("record") or d["llmcli"]["record"])["usage"]["completion_tokens"] for d in lines)
    said = {f"run_{k}": v for k, v in summary_line(done.stderr).items()}
    return {"tokens": total, "e2e_wall": wall, **said}


def decode_llmcli(model: str, tokens: int, parallel: str, reps: int, threads: int) -> dict[int, tuple]:
    """{N: (aggregate decode t/s mean, sd, per-sequence mean)} from `llmcli bench --scenario batch`."""
    done, _ = cli("bench", "-m", model, "--scenario", "batch", "--parallel", parallel, "-p", "32", "-n",
                  str(tokens), "-r", str(reps), "-t", str(threads), "-o", "json")  # fmt: skip
    rows = json.loads(done.stdout)["results"]
    keys = ("avg_ts", "stddev_ts", "avg_seq_ts", "avg_prefill_ts")
    return {r["n_parallel"]: tuple(r[k] for k in keys) for r in rows}


def decode_llama(model: str, tokens: int, parallel: str, threads: int) -> dict[int, tuple]:
    """{N: (S_TG, S_PP)} from llama-batched-bench, one pass (its own warm-up first)."""
    import llamacpp_tools

    tool = llamacpp_tools.ensure("llama-batched-bench")["llama-batched-bench"]
    ns = [int(n) for n in parallel.split(",")]
    ctx = max(ns) * (32 + tokens + 8)
    cmd = [str(tool), "-m", model, "-c", str(ctx), "-b", "2048", "-ub", "512", "-npp", "32",
           "-ntg", str(tokens), "-npl", parallel, "-t", str(threads), "--output-format", "jsonl",
           *llamacpp_tools.weights_args("llama-batched-bench")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"llama-batched-bench failed:\n{done.stderr[-2000:]}")
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {r["pl"]: (r["speed_tg"], r["speed_pp"]) for r in rows}


def vllm_side_by_side(n: int, tokens: int, parallel: str, ggufs: list[str]) -> dict:
    """vllm run-batch and llmcli batch on the same OpenAI batch file, SmolLM2-135M-Instruct: {"vllm_*":
    ..., "llmcli": {gguf: llmcli batch's figures}}."""
    import vllm_tools

    from llmcli.hub.default_model import model_path

    folder, interpreter = vllm_tools.smollm2(), vllm_tools.python()
    ggufs = ggufs or [str(model_path("smollm2-135m"))]
    work = Path(tempfile.mkdtemp(prefix="batch-vllm-"))
    src, out = work / "in.jsonl", work / "vllm-out.jsonl"
    with src.open("w") as f:
        for i, p in enumerate(prompts(n)):
            body = {"model": "smollm2", "messages": [{"role": "user", "content": p}], "max_tokens": tokens,
                    "temperature": 0}  # fmt: skip
            f.write(json.dumps({"custom_id": f"q{i + 1}", "method": "POST", "url": "/v1/chat/completions",
                                "body": body}) + "\n")  # fmt: skip
    cmd = [str(interpreter), "-m", "vllm.entrypoints.openai.run_batch", "-i", str(src), "-o", str(out),
           "--model", str(folder), "--served-model-name", "smollm2", "--max-model-len", "2048",
           "--dtype", "bfloat16"]  # fmt: skip
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    env.pop("PYTHONPATH", None)
    started = time.perf_counter()
    reading = None
    with (work / "vllm.log").open("w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if reading is None and "Reading batch from" in line:
                reading = time.perf_counter()
        proc.wait()
    ended = time.perf_counter()
    if proc.returncode != 0:
        raise SystemExit(f"vllm run-batch failed; see {work / 'vllm.log'}")
    answers = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    v_tokens = sum(a["response"]["body"]["usage"]["completion_tokens"] for a in answers if a.get("response"))
    ours = {}
    for gguf in ggufs:
        print(f"llmcli batch on {Path(gguf).name}; load average {os.getloadavg()[0]:.2f}", flush=True)
        ours[gguf] = batch(gguf, str(src), tokens, parallel)
    return {"vllm_tokens": v_tokens, "vllm_e2e": ended - started,
            "vllm_run": ended - (reading or started), "llmcli": ours}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="0.5b", help="0.5b, 1.5b (tests/qwen.py) or a GGUF path")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--parallel", default="4,8,16,auto", help="llmcli batch -n values")
    ap.add_argument("--loop-prompts", type=int, default=0, help="the generate loop over the first K only")
    ap.add_argument("--decode", default="1,2,4,8,16,32,64", help="N for the decode-only comparison")
    ap.add_argument("--gguf", default="", help="--vllm: llmcli batch on these GGUF files (comma list)")
    ap.add_argument("--reps", type=int, default=2, help="repetitions of llmcli bench --scenario batch")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--skip", default="", help="parts to leave out: loop, batch, decode")
    ap.add_argument("--vllm", action="store_true", help="only the vLLM side by side, on SmolLM2")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    if a.vllm:
        n = a.parallel.split(",")[0]
        r = vllm_side_by_side(a.prompts, a.tokens, n, list(filter(None, a.gguf.split(","))))
        print(json.dumps(r), flush=True)
        v_e2e, v_run = r["vllm_tokens"] / r["vllm_e2e"], r["vllm_tokens"] / r["vllm_run"]
        print(f"vllm run-batch: {r['vllm_tokens']} tokens, {r['vllm_e2e']:.1f} s end to end = {v_e2e:.1f} "
              f"tok/s; after start-up {r['vllm_run']:.1f} s = {v_run:.1f} tok/s")  # fmt: skip
        for gguf, o in r["llmcli"].items():
            e2e, run = o["tokens"] / o["e2e_wall"], o.get("run_tok_s", 0)
            print(f"llmcli batch -np {n} on {Path(gguf).name}: {o['tokens']} tokens, {o['e2e_wall']:.1f} s "
                  "end "
                  f"to end = {e2e:.1f} tok/s; after load {o.get('run_wall', 0):.1f} s = {run:.1f} tok/s; "
                  f"N {o.get('run_n')} {o.get('run_auto', '')}")  # fmt: skip
            print(f"  ratio llmcli/vLLM: end to end {e2e / v_e2e:.2f}x, after start-up {run / v_run:.2f}x")
        return
    if a.model in ("0.5b", "1.5b"):
        import qwen

        a.model = str(qwen.path() if a.model == "0.5b" else qwen.path_1_5b())
    items = prompts(a.prompts)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(items) + "\n")
    print(f"{a.prompts} prompts, {a.tokens} tokens each, {Path(a.model).name}, {a.threads} threads; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    base = None
    if "loop" not in skip:
        k = a.loop_prompts or a.prompts
        n, wall = loop(a.model, items[:k], a.tokens)
        base = n / wall
        print(f"generate loop over {k} prompts: {n} tokens in {wall:.1f} s = {base:.1f} tok/s", flush=True)
    if "batch" not in skip:
        for p in a.parallel.split(","):
            r = batch(a.model, f.name, a.tokens, p)
            rate = r["tokens"] / r["e2e_wall"]
            vs = f" ({rate / base:.2f}x the loop)" if base else ""
            print(f"batch -n {p}: {r['tokens']} tokens in {r['e2e_wall']:.1f} s = {rate:.1f} tok/s end to "
                  f"end{vs}; after load {r.get('run_tok_s', 0):.1f} tok/s, N {r.get('run_n')} "
                  f"{r.get('run_auto', '')}; load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    if "decode" not in skip:
        # side by side: each repetition runs llmcli's bench once, then llama-batched-bench once, so a
        # change in the machine's load falls on both alike; means and sds over the repetitions
        ours: dict[int, list[tuple]] = {}
        theirs: dict[int, list[tuple]] = {}
        loads = []
        for _ in range(a.reps):
            for n, row in decode_llmcli(a.model, a.tokens, a.decode, 1, a.threads).items():
                ours.setdefault(n, []).append(row)
            for n, row in decode_llama(a.model, a.tokens, a.decode, a.threads).items():
                theirs.setdefault(n, []).append(row)
            loads.append(os.getloadavg()[0])
        print(f"decode only, -p 32 -n {a.tokens}, {a.reps} alternated repetitions (load average "
              f"{min(loads):.2f}-{max(loads):.2f}):")  # fmt: skip
        print("| N | llmcli t/s (all) | S_TG | ratio | llmcli pp t/s | S_PP | ratio |")
        print("| -: | -: | -: | -: | -: | -: | -: |")

        def ms(values: list[float]) -> tuple[float, float]:
            return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0

        for n in sorted(ours):
            (agg, sd), (pp, ppsd) = ms([r[0] for r in ours[n]]), ms([r[3] or 0 for r in ours[n]])
            if n not in theirs:
                print(f"| {n} | {agg:.1f} ± {sd:.1f} | n/a | n/a | {pp:.1f} ± {ppsd:.1f} | n/a | n/a |")
                continue
            (tg, tgsd), (spp, sppsd) = ms([r[0] for r in theirs[n]]), ms([r[1] for r in theirs[n]])
            cells = [f"{agg:.1f} ± {sd:.1f}", f"{tg:.1f} ± {tgsd:.1f}", f"{agg / tg:.2f}x",
                     f"{pp:.1f} ± {ppsd:.1f}", f"{spp:.1f} ± {sppsd:.1f}", f"{pp / spp:.2f}x"]  # fmt: skip
            print(f"| {n} | " + " | ".join(cells) + " |", flush=True)
    os.unlink(f.name)


if __name__ == "__main__":
    main()
