"""`llmcli batch` against a shell loop of `llmcli generate` over the same prompts: aggregate
tokens/s (answer tokens over wall time, loads included), on Qwen2.5-Coder-0.5B (tests/qwen.py).

    PYTHONPATH=src:tests python benchmarks/batch.py [--prompts 64] [--tokens 128] [--parallel 1,4,8,auto]

Both sides run at temperature 0 with the same --max-tokens; the loop's tokens are the
completion_tokens of each `generate --json`, the batch's those of each line's record."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOPICS = ["a binary search", "a linked list", "HTTP caching", "a mutex", "garbage collection",
          "a hash map", "TCP slow start", "a B-tree", "unicode normalisation", "a bloom filter",
          "copy-on-write", "a thread pool", "DNS resolution", "a ring buffer", "tail calls",
          "SQL joins"]  # fmt: skip


def prompts(n: int) -> list[str]:
    """n prompts of roughly 32-64 tokens once templated."""
    return [f"Explain {TOPICS[i % len(TOPICS)]} to a new programmer in a few sentences, with one short "
            f"example in Python. Keep it practical; this is question {i + 1}." for i in range(n)]  # fmt: skip


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    return subprocess.run([sys.executable, "-m", "llmcli", *args], capture_output=True, text=True, env=env,
                          check=True)  # fmt: skip


def loop(model: str, items: list[str], tokens: int) -> tuple[int, float]:
    started, total = time.perf_counter(), 0
    for p in items:
        doc = json.loads(cli("generate", p, "-m", model, "--temperature", "0", "--max-tokens", str(tokens),
                             "--json").stdout)  # fmt: skip
        total += doc["usage"]["completion_tokens"]
    return total, time.perf_counter() - started


def batch(model: str, path: str, tokens: int, parallel: str) -> tuple[int, float]:
    started = time.perf_counter()
    out = cli("batch", path, "-m", model, "--temperature", "0", "--max-tokens", str(tokens), "-n", parallel)
    total = sum(json.loads(line)["record"]["usage"]["completion_tokens"] for line in out.stdout.splitlines())
    return total, time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--parallel", default="1,4,8,auto")
    ap.add_argument("--model", default=None)
    a = ap.parse_args()
    if a.model is None:
        import qwen

        a.model = str(qwen.path())
    items = prompts(a.prompts)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(items) + "\n")
    print(f"{a.prompts} prompts, {a.tokens} tokens each, {Path(a.model).name}", flush=True)
    n, wall = loop(a.model, items, a.tokens)
    base = n / wall
    print(f"generate loop: {n} tokens in {wall:.1f} s = {base:.1f} tok/s", flush=True)
    for p in a.parallel.split(","):
        n, wall = batch(a.model, f.name, a.tokens, p)
        print(f"batch -n {p}: {n} tokens in {wall:.1f} s = {n / wall:.1f} tok/s ({n / wall / base:.2f}x)",
              flush=True)  # fmt: skip
    os.unlink(f.name)


if __name__ == "__main__":
    main()
