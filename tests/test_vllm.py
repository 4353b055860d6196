"""Served models against a real vLLM server (its CPU build, in a venv of its own, cached outside the
checkout; tests/vllm_tools.py) serving the bundled SmolLM2-135M-Instruct converted to a Hugging Face
folder: generate, chat (history, /context, Ctrl-C), the serving benchmark, and vLLM's own faults and
fields. Properties only: no exact prose, no timings.

Cost: on a fresh machine the first run installs vLLM (about 1 GB from PyPI) and converts the model
(about 2 minutes together on two cores); the server starts without torch.compile (-O0) in about
half a minute, and the tests themselves take about half a minute more."""

from __future__ import annotations

import json
import os
import re
import sys

import pytest
from helpers import run

pexpect = pytest.importorskip("pexpect")

pytestmark = [pytest.mark.served, pytest.mark.vllm]


def test_generate_text_and_json_record(vllm_server):
    text = run("generate", "-m", vllm_server.ref, "Say hello.", "-n", "8", "--temperature", "0", "--stats")
    assert text.exit_code == 0, text.stderr
    assert text.stdout.strip()
    assert text.stderr.strip().splitlines()[-1].startswith("prompt ")
    result = run("generate", "-m", vllm_server.ref, "Name a colour.", "-n", "12", "--seed", "1", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["text"].strip()
    model = record["model"]
    assert model["server"] == "vllm" and model["name"] == "smollm2" and model["endpoint"] == vllm_server.url
    assert model["path"] is None
    usage, sources = record["usage"], record["sources"]
    assert sources["completion_tokens"] == sources["prompt_tokens"] == "usage"
    assert 0 < usage["completion_tokens"] <= 12 and usage["prompt_tokens"] > 5
    assert record["params"]["seed"] == 1
    assert record["timings"]["ttft_ms"] > 0


def test_raw_generate_uses_completions_and_runs_to_the_length(vllm_server):
    result = run("generate", "-m", vllm_server.ref, "--raw", "The capital of France is", "-n", "6", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["prompt_format"] == "raw" and 0 < record["usage"]["completion_tokens"] <= 6


def test_a_prompt_past_the_context_is_exit_4_with_vllms_message(vllm_server, tmp_path):
    prompt = tmp_path / "long.txt"
    prompt.write_text("word " * 3000)  # SmolLM2's tokenizer: about one token a word, past 2048
    result = run("generate", "-m", vllm_server.ref, "-f", str(prompt), "-n", "4")
    assert result.exit_code == 4, result.stderr
    assert result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if line.startswith("llmcli: ")]
    assert len(errors) == 1, result.stderr
    assert "2048" in errors[0] and "context" in errors[0].lower()  # vLLM's own words: its limit


def test_reasoning_field_is_told_apart_not_dropped(vllm_server):
    """The server's parser (tests/data/vllm_reasoning_plugin.py) sends an answer's first tokens in
    vLLM's `reasoning` field when --think asks for thinking: llmcli keeps them out of the answer on
    stdout, shows them on stderr, and --json has them with their count."""
    args = ["generate", "-m", vllm_server.ref, "Say hello.", "-n", "10", "--temperature", "0"]
    thinking = run(*args, "--think", "--json")
    assert thinking.exit_code == 0, thinking.stderr
    record = json.loads(thinking.stdout)
    assert record["reasoning"].strip(), record
    assert record["reasoning"].strip() not in record["text"]
    plain = run(*args, "--json")
    assert plain.exit_code == 0, plain.stderr
    plain_record = json.loads(plain.stdout)
    assert not plain_record.get("reasoning")
    # greedy: the same answer either way, cut in two where the server said
    assert (record["reasoning"] + record["text"]).strip() == plain_record["text"].strip()
    shown = run(*args, "--think")
    assert shown.exit_code == 0, shown.stderr
    assert record["reasoning"].strip() in shown.stderr and record["reasoning"].strip() not in shown.stdout


def test_chat_history_context_and_ctrl_c(vllm_server, isolated):
    env = dict(os.environ, TERM="xterm", COLUMNS="100", LINES="40")
    env.pop("NO_COLOR", None)
    prompt = r"\x1b\[\?2004h"  # prompt-toolkit turns bracketed paste on as each prompt appears
    args = ["-m", "llmcli", "chat", "-m", vllm_server.ref, "--temperature", "0", "-n", "16", "--session", "v"]
    child = pexpect.spawn(sys.executable, args, env=env, encoding="utf-8", timeout=300, dimensions=(40, 100))
    try:
        child.expect(prompt)
        child.sendline("My name is Ada. Say hello.")
        child.expect(r"prompt (\d+) tok")
        first = int(child.match.group(1))
        child.expect(prompt)
        child.sendline("What is my name?")
        child.expect(r"prompt (\d+) tok")
        assert int(child.match.group(1)) > first  # the whole history went with the second turn
        child.expect(prompt)
        child.sendline("/set max_tokens 1500")
        child.expect(prompt)
        child.sendline("Write a very long story about the sea.")
        child.expect(r"decode [\d.]+ tok/s · \d+ tok")  # the live readout: the answer is streaming
        child.sendintr()
        child.expect(r"\[interrupted")
        child.expect(prompt)
        child.sendline("/context")
        child.expect(r"context: (\d+) ")
        child.expect(r"\[interrupted\]")
        child.expect(prompt)
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    saved = json.loads((isolated / "data" / "sessions" / "v.json").read_text())
    roles = [m["role"] for m in saved["messages"]]
    assert roles == ["user", "assistant"] * 3
    assert "Ada" in saved["messages"][0]["content"]


def test_serving_benchmark_against_vllm(vllm_server, tmp_path):
    args = ["bench", "-m", vllm_server.ref, "-p", "16", "-n", "4", "-c", "1,2", "--requests", "4", "-r", "1"]
    result = run(*args, "--no-warmup", "-o", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["complete"] and doc["environment"]["server"] == "vllm"
    rows = doc["results"]
    assert [r["concurrency"] for r in rows] == [1, 2]
    for r in rows:
        assert r["errors"] == 0 and r["completed"] == 4 and r["tokens_source"] == "usage"
        assert r["total_output_tokens"] == 4 * 4  # ignore_eos: every answer is -n tokens long
        assert r["median_ttft_ms"] <= r["p99_ttft_ms"] and r["output_throughput"] > 0
    assert re.search(r"server: vllm", run(*args, "--no-warmup", "-c", "1").stdout)


def test_open_loop_goodput_and_random_lengths_against_vllm(vllm_server):
    """An open loop at a rate with a cap, random lengths in a range (cut to length by vLLM's own
    /tokenize), goodput against a generous SLO and chosen percentiles."""
    args = ["bench", "-m", vllm_server.ref, "-p", "24", "-n", "6", "--range-ratio", "0.5", "-c", "2",
            "--request-rate", "8", "--requests", "8", "-r", "1", "--no-warmup", "--seed", "5",
            "--goodput", "e2el:120000", "--percentiles", "95", "-o", "json"]  # fmt: skip
    result = run(*args)
    assert result.exit_code == 0, result.stderr
    (row,) = json.loads(result.stdout)["results"]
    assert row["test"] == "serve p24 n6 c2 r8" and row["errors"] == 0 and row["completed"] == 8
    assert 8 * 12 <= row["total_input_tokens"] <= 8 * 36  # each prompt 12..36 tokens, exactly as drawn
    assert 8 * 3 <= row["total_output_tokens"] <= 8 * 9
    assert row["total_input_tokens"] != 8 * 24  # spread, not all the middle length
    assert row["goodput_share"] == 1.0 and row["request_goodput"] > 0 and "p95_tpot_ms" in row
    again = run(*args)
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["results"][0]["total_input_tokens"] == row["total_input_tokens"]  # seeded


def test_batch_sends_four_at_once_and_resumes_by_id(vllm_server, tmp_path):
    """`llmcli batch --parallel 4` against vLLM: one line per item with vLLM's answer, and a rerun
    with the same -o answers only the item not already there (tests/batchtools.py, as against
    llama-server in tests/test_batch.py)."""
    from batchtools import served_batch_resumes

    every = served_batch_resumes(vllm_server.ref, tmp_path)
    assert all(d["record"]["model"]["server"] == "vllm" for d in every)


# Run by vLLM's interpreter: each of llmcli's output lines read by vLLM's own model of a batch
# output line; the body must come out as its chat completion
_READ_BACK = """
import sys
from vllm.entrypoints.launchers.run_batch import BatchRequestOutput

for line in open(sys.argv[1]):
    out = BatchRequestOutput.model_validate_json(line)
    print(out.custom_id, type(out.response.body).__name__, out.response.status_code)
"""


def test_batch_writes_the_lines_vllm_run_batch_writes(tmp_path):
    """The same OpenAI batch file through `vllm run-batch` and `llmcli batch` (SmolLM2 on each):
    the same ids in the same order, the same line shape (llmcli's own fields under `llmcli` only),
    bodies whose fields are among vLLM's, and vLLM's own reader takes llmcli's lines."""
    import subprocess

    import vllm_tools
    from batchtools import cli

    try:
        interpreter, folder = vllm_tools.python(), vllm_tools.smollm2()
    except vllm_tools.VllmUnavailable as exc:
        pytest.skip(f"vLLM cannot be installed here: {exc}")
    src, theirs, ours = tmp_path / "in.jsonl", tmp_path / "vllm.jsonl", tmp_path / "llmcli.jsonl"
    bodies = [
        {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0},
        {"messages": [{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "Name a colour."}],
         "max_completion_tokens": 8, "seed": 3, "top_p": 0.9, "frequency_penalty": 0.5},
        {"messages": [{"role": "user", "content": "Give a JSON object."}], "max_tokens": 12,
         "response_format": {"type": "json_object"}, "presence_penalty": 0.2, "stop": ["\n\n"]},
    ]  # fmt: skip
    url = "/v1/chat/completions"
    src.write_text("".join(json.dumps({"custom_id": f"req-{i}", "method": "POST", "url": url,
                                       "body": {"model": "smollm2", **b}}) + "\n"
                           for i, b in enumerate(bodies, 1)))  # fmt: skip
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    env.pop("PYTHONPATH", None)
    cmd = [str(interpreter), "-m", "vllm.entrypoints.openai.run_batch", "-i", str(src), "-o", str(theirs),
           "--model", str(folder), "--served-model-name", "smollm2", "--max-model-len", "2048",
           "--dtype", "bfloat16", "-O0"]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    mine = cli("batch", str(src), "-m", "smollm2-135m", "-o", str(ours), "--no-log")
    assert mine.returncode == 0, mine.stderr
    vllm_lines = [json.loads(x) for x in theirs.read_text().splitlines()]
    our_lines = [json.loads(x) for x in ours.read_text().splitlines()]
    ids = ["req-1", "req-2", "req-3"]
    assert [d["custom_id"] for d in our_lines] == [d["custom_id"] for d in vllm_lines] == ids
    for v, o in zip(vllm_lines, our_lines, strict=True):
        assert set(o) - {"llmcli"} == set(v) and set(o["response"]) == set(v["response"])
        assert o["response"]["status_code"] == v["response"]["status_code"] == 200
        assert o["error"] is None and v["error"] is None
        vb, ob = v["response"]["body"], o["response"]["body"]
        assert set(ob) <= set(vb) and ob["object"] == vb["object"] == "chat.completion"
        assert set(ob["choices"][0]) <= set(vb["choices"][0])
        assert set(ob["choices"][0]["message"]) <= set(vb["choices"][0]["message"]) | {"reasoning_content"}
        assert set(ob["usage"]) <= set(vb["usage"]) and ob["usage"]["completion_tokens"] > 0
        assert ob["choices"][0]["message"]["content"].strip()
    read = subprocess.run([str(interpreter), "-c", _READ_BACK, str(ours)], env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert read.returncode == 0, read.stderr[-3000:]
    assert read.stdout.split() == [w for i in ids for w in (i, "ChatCompletionResponse", "200")]
