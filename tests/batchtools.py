"""What the `llmcli batch` tests share: the CLI run as a user runs it (a subprocess), its lines read
and held against the schema, and the served check run against each real server (llama-server in
tests/test_batch.py, vLLM in tests/test_vllm.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from documents import check

SRC = Path(__file__).resolve().parents[1] / "src"
PROMPTS = ["What is 2+2?", "Name three colors.", "Tell me a joke.", "Why is the sky blue?",
           "List the planets.", "Write a haiku about the sea."]  # fmt: skip


def lines(text: str) -> list[dict]:
    """Each output line, checked against docs/batch.schema.json (llmcli's line, or OpenAI's batch
    output line for OpenAI input)."""
    docs = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [check(d, "batch/openai_line" if "custom_id" in d else "batch/line") for d in docs]


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-m", "llmcli", *args], capture_output=True, text=True,
                          env=env, timeout=900, **kw)  # fmt: skip


def served_batch_resumes(ref: str, tmp_path: Path) -> list[dict]:
    """`llmcli batch -m ref --parallel 4 -o FILE` on four prompts: one line per item, in order, each
    with a non-empty answer from the server; then a fifth prompt added and the same -o: the four
    ids already there are skipped and only the fifth is answered. Returns the five lines."""
    src, out = tmp_path / "p.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(PROMPTS[:4]) + "\n")
    first = cli("batch", str(src), "-m", ref, "--temperature", "0", "--max-tokens", "12",
                "--parallel", "4", "-o", str(out))  # fmt: skip
    assert first.returncode == 0, first.stderr
    done = lines(out.read_text())
    assert [d["id"] for d in done] == ["1", "2", "3", "4"]
    assert all(d["record"]["model"]["endpoint"] and d["record"]["text"].strip() for d in done)
    assert all(d["record"]["usage"]["completion_tokens"] > 0 for d in done)
    src.write_text("\n".join(PROMPTS[:5]) + "\n")
    # the same settings (a rerun at another temperature is refused: tests/test_batch_rerun.py)
    again = cli("batch", str(src), "-m", ref, "--temperature", "0", "--max-tokens", "12", "--parallel", "4",
                "-o", str(out))  # fmt: skip
    assert again.returncode == 0 and "4 already done" in again.stderr, again.stderr
    every = lines(out.read_text())
    assert [d["id"] for d in every] == ["1", "2", "3", "4", "5"]
    assert every[:4] == done  # the lines already there are kept as they were
    assert every[4]["record"]["text"].strip()
    return every
