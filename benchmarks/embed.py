"""Embedding throughput, llmcli side by side with llama.cpp's `llama-embedding` (built from the same
vendored source, tests/llamacpp_tools.py) on the same file of sentences and the same GGUF
(all-MiniLM-L6-v2, tests/minilm.py), in one run, the two interleaved repetition by repetition so
that a machine's changing load falls on both alike.

Three figures per side, mean ± sd over the repetitions:
- end to end: `llmcli embed -o FILE.npy < FILE` and `llama-embedding -f FILE` as processes, wall
  clock, start-up and model load included (Python's start-up is llmcli's cost, not llama.cpp's);
- embedding alone: each process's wall clock on the whole file less its wall clock on one sentence
  of it (start-up and load), per repetition;
- llmcli in process: `llmcli bench --scenario embed`'s measurement (`llmcli.bench.embed.measure`),
  load excluded, for reference.
The ratio is llmcli's texts/s over llama-embedding's (mean wall clocks). llama-embedding runs two
ways (`LLAMA_EMBEDDING`). The vectors of llmcli and of the last llama-embedding are compared (cosine).

    python benchmarks/embed.py [--sentences 1000] [--threads 1] [--repetitions 3] [--busy 1] [--adaptive]

`--busy K` keeps K other processes spinning throughout (a busy machine: the issue's "one other
process running"); `--adaptive` runs llmcli without `-t`, so it picks its threads from the run
queue as `generate` does, while llama-embedding keeps `--threads`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

# llama-embedding two ways: as its README runs many prompts (batches of 2048 tokens, up to 256
# sequences), and shaped as llmcli batches (the model's 512-token context, up to 64 sequences)
LLAMA_EMBEDDING = {
    "llama-embedding -b 2048 -np 256": ["-b", "2048", "-ub", "2048", "-np", "256"],
    "llama-embedding -b 512 -np 64": ["-c", "512", "-b", "512", "-ub", "512", "-np", "64"],
}


def timed(cmd: list[str], stdin: Path | None = None, env: dict | None = None) -> tuple[float, bytes]:
    started = time.perf_counter()
    with (stdin.open("rb") if stdin else open(os.devnull, "rb")) as source:
        result = subprocess.run(cmd, stdin=source, env=env, capture_output=True)
    took = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed: {result.stderr.decode(errors='replace')[-800:]}")
    return took, result.stdout


def spread(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):8.1f} ± {sd:6.1f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0, help="other processes spinning throughout")
    parser.add_argument("--adaptive", action="store_true", help="llmcli without -t (its own choice)")
    args = parser.parse_args()
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        run(args)
    finally:
        for p in spinners:
            p.kill()


def run(args) -> None:
    import llamacpp_tools
    import minilm
    import numpy as np

    from llmcli.bench.embed import measure, sentences

    model = minilm.path()
    tool = llamacpp_tools.ensure("llama-embedding")["llama-embedding"]
    texts = sentences(args.sentences)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    t = str(args.threads)
    sides = ["llmcli", *LLAMA_EMBEDDING]
    walls: dict[str, list[float]] = {side: [] for side in sides}
    alone: dict[str, list[float]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as tmp:
        file, one = Path(tmp) / "sentences.txt", Path(tmp) / "one.txt"
        file.write_text("\n".join(texts) + "\n")
        one.write_text(texts[0] + "\n")
        npy = Path(tmp) / "v.npy"
        threads = [] if args.adaptive else ["-t", t]
        ours = [sys.executable, "-m", "llmcli", "embed", "-m", str(model), *threads, "-o", str(npy)]
        commands = {"llmcli": ours}
        for side, extra in LLAMA_EMBEDDING.items():
            commands[side] = [str(tool), "-m", str(model), "-t", t, *extra, "--embd-output-format", "array",
                              *llamacpp_tools.weights_args("llama-embedding")]  # fmt: skip
        for rep in range(args.repetitions):
            print(f"repetition {rep + 1}/{args.repetitions} ...", file=sys.stderr)
            for side, cmd in commands.items():
                mine = side == "llmcli"
                whole, out = timed(cmd if mine else [*cmd, "-f", str(file)], file if mine else None, env)
                start, _ = timed(cmd if mine else [*cmd, "-f", str(one)], one if mine else None, env)
                walls[side].append(whole)
                alone[side].append(whole - start)
        timed(commands["llmcli"], file, env)
        a, b = np.load(npy), np.asarray(json.loads(out), dtype=np.float32)
    cosines = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    inproc = measure(str(model), texts, threads=None if args.adaptive else args.threads, batch_tokens=None,
                     reps=args.repetitions,
                     warmup=True).record()  # fmt: skip
    n = len(texts)
    tokens = inproc["n_tokens"]
    ours = "llmcli's own choice" if args.adaptive else "the same"
    print(f"{n} sentences, {tokens} tokens, {args.threads} threads for llama-embedding ({ours} for llmcli), "
          f"{args.repetitions} repetitions (mean ± sd), {args.busy} other busy processes, load average "
          f"{os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"{'':50}{'texts/s':>17}  {'tokens/s':>17}")
    for side in sides:
        for label, secs in ((f"{side}, end to end", walls[side]), (f"{side}, embedding alone", alone[side])):
            print(f"{label:50}{spread([n / s for s in secs])}  {spread([tokens / s for s in secs])}")
    rate = f"{inproc['avg_texts_s']:8.1f} ± {inproc['stddev_texts_s']:6.1f}"
    print(f"{'llmcli, in process (bench --scenario embed)':50}{rate}  "
          f"{inproc['avg_ts']:8.1f} ± {inproc['stddev_ts']:6.1f}")  # fmt: skip
    for side in LLAMA_EMBEDDING:
        for label, d in (("end to end", walls), ("embedding alone", alone)):
            ratio = statistics.mean(d[side]) / statistics.mean(d["llmcli"])
            print(f"ratio llmcli / {side}, texts/s, {label}: {ratio:.2f}x")
    print(f"vectors: cosine llmcli vs llama-embedding, min {cosines.min():.6f} over {n}")


if __name__ == "__main__":
    main()
