"""Embedding throughput, llmcli side by side with llama.cpp's `llama-embedding` (built from the same
vendored source, tests/llamacpp_tools.py) on the same file of sentences and the same GGUF
(all-MiniLM-L6-v2, tests/minilm.py): texts/s and tokens/s, wall clock of the whole run (load
included) for both, and the ratio.

    python benchmarks/embed.py [--sentences 1000] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

SUBJECTS = ["The cat", "A scientist", "My neighbour", "The old train", "A small bird", "The committee"]
VERBS = ["watched", "described", "ignored", "repaired", "followed", "questioned"]
OBJECTS = ["the river at dawn", "a broken clock", "the new policy", "an empty stadium", "the last letter"]


def sentences(n: int) -> list[str]:
    out = []
    for i in range(n):
        s, v, o = SUBJECTS[i % 6], VERBS[(i // 6) % 6], OBJECTS[(i // 36) % 5]
        out.append(f"{s} {v} {o} on day {i}.")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import llamacpp_tools
    import minilm

    model = minilm.path()
    tool = llamacpp_tools.ensure("llama-embedding")["llama-embedding"]
    texts = sentences(args.sentences)
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "sentences.txt"
        file.write_text("\n".join(texts) + "\n")
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        started = time.perf_counter()
        cmd = [sys.executable, "-m", "llmcli", "embed", "-m", str(model), "-t", str(args.threads),
               "-o", str(Path(tmp) / "v.npy")]  # fmt: skip
        subprocess.run(cmd, stdin=file.open("rb"), check=True, env=env, capture_output=True)
        ours = time.perf_counter() - started
        started = time.perf_counter()
        cmd = [str(tool), "-m", str(model), "-f", str(file), "-t", str(args.threads)]
        cmd += ["-b", "2048", "-ub", "2048", "-np", "256", "--embd-output-format", "array"]
        cmd += llamacpp_tools.weights_args("llama-embedding")
        subprocess.run(cmd, check=True, capture_output=True)
        theirs = time.perf_counter() - started
    from llmcli.engine.embedding import LlamaEmbedder

    embedder = LlamaEmbedder(model, threads=args.threads)
    tokens = sum(len(embedder.tokenize(t)) for t in texts)
    embedder.close()
    print(f"{args.sentences} sentences, {tokens} tokens, {args.threads} threads (wall clock, load included)")
    print(f"llmcli embed     {ours:6.2f} s  {len(texts) / ours:8.1f} texts/s  {tokens / ours:9.1f} tokens/s")
    rate = f"{len(texts) / theirs:8.1f} texts/s  {tokens / theirs:9.1f} tokens/s"
    print(f"llama-embedding  {theirs:6.2f} s  {rate}")
    print(f"ratio (llmcli / llama-embedding texts/s): {theirs / ours:.2f}x")


if __name__ == "__main__":
    main()
