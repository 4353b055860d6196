"""Decode and prefill speed next to busy processes: adaptive threads against every fixed count.

Starts its own busy processes (`python -c "while True: pass"`), and for each scenario runs the
adaptive policy and each fixed thread count side by side, alternating, `--runs` times; reports
medians and the ratio adaptive / best fixed. Scenarios:
- quiet; one busy process; two busy processes (decode, a `--tokens`-token answer);
- late: a busy process that starts halfway through the answer; the best fixed choice is taken for
  each half separately (the sum of the better fixed time in each half);
- prefill: a `--prompt-tokens`-token prompt, quiet and with one busy process.
Gemma 3 270M (the bundled `gemma3-270m`), greedy, in this process through the engine `generate`
uses, with the same signal watcher around it. Every run starts from a fresh engine, as a `generate`
process would.

    python benchmarks/busy_threads.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager

BUSY = [sys.executable, "-c", "while True: pass"]


@contextmanager
def busy(n: int):
    procs = [subprocess.Popen(BUSY) for _ in range(n)]
    try:
        time.sleep(0.3 if n else 0)
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def engine(path: str, threads: int | None, n_ctx: int):
    from llmcli.contract import EngineOptions
    from llmcli.engine.llama import LlamaEngine

    return LlamaEngine(path, EngineOptions(ctx_size=n_ctx, threads=threads))


def decode_run(path: str, threads: int | None, tokens: int, late_busy_at: int | None = None) -> dict:
    """One answer; per-token timestamps so each half can be judged on its own."""
    from llmcli import signals
    from llmcli.contract import Done, SamplingParams, Token

    e = engine(path, threads, 2048)
    prompt = e.tokenize("Once upon a time, in a small village by the sea,", special=False, add_bos=True)
    params = SamplingParams(temperature=0, max_tokens=tokens, seed=1)
    stamps: list[float] = []
    late = None
    try:
        with signals.interrupt_on_sigint(e.interrupt):
            for event in e.stream(prompt, params):
                if isinstance(event, Token):
                    stamps.append(time.perf_counter())
                    if late_busy_at is not None and len(stamps) == late_busy_at and late is None:
                        late = subprocess.Popen(BUSY)
                elif isinstance(event, Done):
                    done = event
    finally:
        if late is not None:
            late.kill()
            late.wait()
        e.close()
    half = late_busy_at or len(stamps) // 2
    first = stamps[half - 1] - stamps[0]
    second = stamps[-1] - stamps[half - 1]
    return {
        "tokens": len(stamps),
        "decode_tps": done.stats.decode_tps,
        "first_s": first,
        "second_s": second,
        "threads": done.stats.threads,
    }


def prefill_run(path: str, threads: int | None, prompt_tokens: int) -> dict:
    from llmcli import signals
    from llmcli.contract import Done, SamplingParams

    e = engine(path, threads, max(4096, prompt_tokens + 256))
    words = ("the quick brown fox jumps over the lazy dog " * 2000).split()
    prompt = e.tokenize(" ".join(words), special=False, add_bos=True)[:prompt_tokens]
    try:
        with signals.interrupt_on_sigint(e.interrupt):
            done = [
                ev
                for ev in e.stream(prompt, SamplingParams(temperature=0, max_tokens=1))
                if isinstance(ev, Done)
            ]
    finally:
        e.close()
    return {"prefill_tps": done[0].stats.prefill_tps, "threads": done[0].stats.threads}


def main(argv: list[str] | None = None) -> int:
    from llmcli.engine.llama import physical_cores
    from llmcli.hub import default_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--tokens", type=int, default=1000)
    p.add_argument("--prompt-tokens", type=int, default=2048)
    p.add_argument("--scenarios", default="quiet,one,two,late,prefill-quiet,prefill-one")
    p.add_argument("--json", action="store_true", help="print the raw runs as JSON")
    args = p.parse_args(argv)
    path = str(default_model.model_path("gemma3-270m"))
    cores = physical_cores()
    fixed = sorted({1, cores, max(1, cores - 1)})
    settings: list[int | None] = [None, *fixed]
    label = {None: "adaptive", **{n: f"-t {n}" for n in fixed}}
    report: dict = {"cores": cores, "scenarios": {}}
    for scenario in args.scenarios.split(","):
        runs: dict = {label[s]: [] for s in settings}
        for _ in range(args.runs):
            for s in settings:  # alternate, so every setting sees the same machine
                if scenario in ("quiet", "one", "two"):
                    with busy({"quiet": 0, "one": 1, "two": 2}[scenario]):
                        runs[label[s]].append(decode_run(path, s, args.tokens))
                elif scenario == "late":
                    runs[label[s]].append(decode_run(path, s, args.tokens, late_busy_at=args.tokens // 2))
                else:
                    with busy(0 if scenario == "prefill-quiet" else 1):
                        runs[label[s]].append(prefill_run(path, s, args.prompt_tokens))
        report["scenarios"][scenario] = runs
        print(summarise(scenario, runs, fixed), flush=True)
    if args.json:
        print(json.dumps(report, indent=1))
    return 0


def summarise(scenario: str, runs: dict, fixed: list[int]) -> str:
    med = statistics.median
    if scenario.startswith("prefill"):
        speeds = {k: med(r["prefill_tps"] for r in v) for k, v in runs.items()}
        best = max(speeds[f"-t {n}"] for n in fixed)
        cells = "  ".join(f"{k} {v:7.1f}" for k, v in speeds.items())
        return f"{scenario:14s} prefill tok/s  {cells}  adaptive/best {speeds['adaptive'] / best:.3f}"
    if scenario == "late":
        halves = {k: (med(r["first_s"] for r in v), med(r["second_s"] for r in v)) for k, v in runs.items()}
        best = min(halves[f"-t {n}"][0] for n in fixed) + min(halves[f"-t {n}"][1] for n in fixed)
        totals = {k: a + b for k, (a, b) in halves.items()}
        cells = "  ".join(f"{k} {a:5.2f}+{b:5.2f}s" for k, (a, b) in halves.items())
        return (
            f"{scenario:14s} decode halves  {cells}  adaptive/best-per-half {best / totals['adaptive']:.3f}"
        )
    speeds = {k: med(r["decode_tps"] for r in v) for k, v in runs.items()}
    best = max(speeds[f"-t {n}"] for n in fixed)
    cells = "  ".join(f"{k} {v:6.1f}" for k, v in speeds.items())
    return f"{scenario:14s} decode tok/s   {cells}  adaptive/best {speeds['adaptive'] / best:.3f}"


if __name__ == "__main__":
    raise SystemExit(main())
