"""`llmcli batch` on the real Qwen2.5-Coder-0.5B (tests/qwen.py): a JSON-schema item gives JSON that
matches its schema and a stop string cuts the answer, beside other sequences; a shared prompt prefix
is prefilled once (the records' `cached_tokens`, the summary) and at --parallel 1 the texts are still
`generate`'s; a --parallel the free memory cannot hold is reduced, said once."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
from documents import check
from helpers import run

SRC = Path(__file__).resolve().parents[1] / "src"
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-m", "llmcli", *args], capture_output=True, text=True,
                          env=env, timeout=900)  # fmt: skip


def _lines(text: str) -> dict[str, dict]:
    docs = [check(json.loads(line), "batch/line") for line in text.splitlines() if line.strip()]
    return {d["id"]: d["record"] for d in docs}


def test_json_schema_and_stop_per_item_in_one_batch(qwen_model, tmp_path):
    count = "Count from 1 to 10, separated by commas. Write only the numbers."
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps(d) for d in [
        {"id": "person", "prompt": "Invent a person.", "max_tokens": 80,
         "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}},
        {"id": "free", "prompt": count},
        {"id": "cut", "prompt": count, "stop": ["5"]},
    ]) + "\n")  # fmt: skip
    result = _cli("batch", str(src), "-m", str(qwen_model), "--temperature", "0", "--max-tokens", "40",
                  "-np", "3", "--no-log")  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = _lines(result.stdout)
    person = lines["person"]
    jsonschema.validate(json.loads(person["text"]), PERSON)  # valid JSON, and what the schema asks
    assert person["constraint"] == {"kind": "json_schema", "complete": True}
    free, cut = lines["free"]["text"], lines["cut"]["text"]
    assert "5" in free, free  # the answer without a stop string goes past it
    assert "5" not in cut and cut.strip() and lines["cut"]["finish_reason"] == "stop"
    # The same answer, cut where the stop string began. Two sequences of one step may round apart
    # (their rows sit at other places in the step's matrices: docs/BATCH.md), so the two items
    # are compared one at a time, where each is decoded exactly as `generate` decodes it.
    alone = _cli("batch", str(src), "-m", str(qwen_model), "--temperature", "0", "--max-tokens", "40",
                 "-np", "1", "--no-log")  # fmt: skip
    assert alone.returncode == 0, alone.stderr
    free, cut = (_lines(alone.stdout)[key]["text"] for key in ("free", "cut"))
    assert "5" in free and "5" not in cut and cut.strip()
    assert free.startswith(cut), (free, cut)


def test_a_shared_prefix_is_prefilled_once_and_the_texts_are_generates(qwen_model, tmp_path):
    prompts = ["What is 2+2?", "Name a color.", "Name a fruit.", "Say hello in French."]
    src = tmp_path / "p.txt"
    src.write_text("\n".join(prompts) + "\n")
    common = ["-m", str(qwen_model), "--temperature", "0", "--max-tokens", "16", "--no-log",
              "--system", "You are a terse assistant. Answer in one short sentence."]  # fmt: skip
    one = _cli("batch", str(src), *common, "-np", "1")
    assert one.returncode == 0, one.stderr
    records = list(_lines(one.stdout).values())
    usage = [r["usage"] for r in records]
    assert all(u["cached_tokens"] + u["prefill_tokens"] == u["prompt_tokens"] for u in usage)
    assert usage[0]["cached_tokens"] == 0 and all(
        u["cached_tokens"] >= 10 for u in usage[1:]
    )  # the system head
    reused = sum(u["cached_tokens"] for u in usage)
    assert f"({reused} from a shared prefix)" in one.stderr
    for prompt, rec in zip(prompts, records, strict=True):
        gen = _cli("generate", prompt, *common, "--json")
        assert gen.returncode == 0, gen.stderr
        assert rec["text"] == json.loads(gen.stdout)["text"], prompt
    four = _cli("batch", str(src), *common, "-np", "4")
    assert four.returncode == 0, four.stderr
    usage = [r["usage"] for r in _lines(four.stdout).values()]
    # admitted together: one prefills the head, the other three copy its cells and prefill the rest
    assert sorted(u["cached_tokens"] >= 10 for u in usage) == [False, True, True, True]
    assert all(u["cached_tokens"] + u["prefill_tokens"] == u["prompt_tokens"] for u in usage)


def test_a_parallel_the_memory_cannot_hold_is_reduced_once(qwen_model, tmp_path, monkeypatch):
    from llmcli import gguf_file
    from llmcli.hub import fit

    header = gguf_file.read_header(qwen_model)
    per_seq = header.kv_cache_bytes(512)
    free = header.tensor_bytes + (128 << 20) + int(2.5 * per_seq)  # the model, and two sequences' cache
    monkeypatch.setattr(fit, "memory", lambda: fit.Memory(available=free, total=free * 2))
    src = tmp_path / "p.txt"
    src.write_text("".join(f"Say the number {i}.\n" for i in range(6)))
    result = run("batch", str(src), "-m", str(qwen_model), "-np", "8", "-c", "512", "--max-tokens", "4",
                 "--temperature", "0", "--no-log")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count("the free memory holds the KV cache of 2 sequence") == 1
    assert "--parallel 8: the free memory" in result.stderr
    assert re.search(r"parallel 2 \(set.*reduced to fit the memory\)", result.stderr), result.stderr
    assert len(_lines(result.stdout)) == 6
