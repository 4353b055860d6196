"""Served models against real servers, no mocks: llama.cpp's llama-server (built from the installed
release's vendored tree, cached outside the checkout; `-np 4`) and llama-cpp-python's own server,
both with the bundled SmolLM2-135M-Instruct. Assertions are about properties (counts, sources,
JSON validity), never the model's exact prose, and never timings."""

from __future__ import annotations

import json

import pytest
from helpers import run

pytestmark = pytest.mark.served


def test_generate_json_record_from_llama_server(llama_server):
    result = run("generate", "-m", llama_server.ref, "Name a colour.", "-n", "12", "--seed", "1", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["text"].strip()
    assert record["model"]["path"] is None and record["model"]["architecture"] is None  # a local file's
    assert {key: value for key, value in record["model"].items() if value is not None} == {
        "ref": llama_server.ref,
        "endpoint": llama_server.url,
        "name": "smollm2",
        "server": "llama-server",
        "context_size": 2048,
    }
    usage, sources = record["usage"], record["sources"]
    assert sources["completion_tokens"] == sources["prompt_tokens"] == "usage"
    assert sources["ttft_ms"] == sources["decode_ms"] == "client"
    assert 0 < usage["completion_tokens"] <= 12 and usage["prompt_tokens"] > 5
    assert record["params"]["seed"] == 1
    server = record["server_timings"]
    assert (
        server["predicted_n"] == usage["completion_tokens"]
        and server["prompt_n"] + server["cache_n"] == (usage["prompt_tokens"])
    )
    assert record["timings"]["ttft_ms"] > 0 and record["timings"]["decode_tokens_per_s"] > 0


def test_generate_streams_text_and_the_stats_line(llama_server):
    result = run("generate", "-m", llama_server.ref, "Say hello.", "-n", "8", "--stats", "--temperature", "0")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip()
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("prompt ") and "decode " in line and "server prefill" in line


def test_raw_generate_uses_completions(llama_server):
    result = run("generate", "-m", llama_server.ref, "--raw", "The capital of France is", "-n", "6", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["prompt_format"] == "raw" and record["usage"]["completion_tokens"] > 0


def test_json_schema_is_honoured_by_llama_server(llama_server):
    schema = '{"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]}'
    result = run(
        "generate",
        "-m",
        llama_server.ref,
        "Give a colour as JSON.",
        "--json-schema",
        schema,
        "-n",
        "64",
        "--temperature",
        "0",
    )
    assert result.exit_code == 0, result.stderr
    assert isinstance(json.loads(result.stdout)["colour"], str)


def test_chat_sends_the_history_and_reports_reused_tokens(llama_server, isolated):
    result = run(
        "chat",
        "-m",
        llama_server.ref,
        "-n",
        "8",
        "--temperature",
        "0",
        "--session",
        "talk",
        input="Hello.\nAnd what is your name?\n",
    )
    assert result.exit_code == 0, result.stderr
    stats = [line for line in result.stderr.splitlines() if line.startswith("prompt ")]
    assert len(stats) == 2
    assert "reused" in stats[1]  # the server's cache held the first turn's prompt
    saved = json.loads((isolated / "data" / "sessions" / "talk.json").read_text())
    assert [m["role"] for m in saved["messages"]] == ["user", "assistant", "user", "assistant"]
    second = saved["messages"][3]["stats"]
    assert (
        second["cached_tokens"] > 0
        and second["prompt_tokens"] > saved["messages"][1]["stats"]["prompt_tokens"]
    )


def test_models_list_endpoint_on_llama_server(llama_server):
    result = run("models", "list", "--endpoint", llama_server.url, "--json")
    assert result.exit_code == 0, result.stderr
    [listed] = json.loads(result.stdout)
    assert listed["id"] == "smollm2"
    # -c 8192 over -np 4: each request gets a 2048-token slot, not the model's trained 8192
    assert listed["context"] == 2048 and listed["n_ctx_train"] == 8192
    table = run("models", "list", "--endpoint", llama_server.url)
    assert table.stdout.splitlines()[1].split()[-1] == "2048"


def test_serving_benchmark_and_compare(llama_server, tmp_path):
    args = [
        "bench",
        "-m",
        llama_server.ref,
        "-p",
        "32",
        "-n",
        "8",
        "-c",
        "1,2",
        "--requests",
        "4",
        "-r",
        "2",
        "--no-warmup",
    ]
    first = run(*args, "-o", "json")
    assert first.exit_code == 0, first.stderr
    doc = json.loads(first.stdout)
    assert doc["complete"] and doc["settings"]["scenario"] == "serve"
    rows = doc["results"]
    assert [r["concurrency"] for r in rows] == [1, 2]
    for r in rows:
        assert r["errors"] == 0 and r["completed"] == 8 and r["tokens_source"] == "usage"
        assert r["total_output_tokens"] == 8 * 8  # ignore_eos: every answer is -n tokens long
        assert r["total_input_tokens"] == 8 * 32  # prompts of exactly -p tokens
        assert r["median_ttft_ms"] <= r["p90_ttft_ms"] <= r["p99_ttft_ms"]
        assert len(r["samples_ts"]) == 2 and r["output_throughput"] > 0
    (tmp_path / "a.json").write_text(first.stdout)
    second = run(*args, "-o", "jsonl")
    assert second.exit_code == 0, second.stderr
    (tmp_path / "b.jsonl").write_text(second.stdout)
    compared = run("bench", "compare", str(tmp_path / "a.json"), str(tmp_path / "b.jsonl"), "-o", "json")
    assert compared.exit_code == 0, compared.stderr
    assert [c["test"] for c in json.loads(compared.stdout)["comparisons"]] == [
        "serve p32 n8 c1",
        "serve p32 n8 c2",
    ]
    table = run(*args[:-3], "--requests", "2", "-r", "1", "-c", "1")
    assert table.exit_code == 0, table.stderr
    assert "TTFT ms (mean/med/p90/p99)" in table.stdout and "server: llama-server" in table.stdout


def test_llama_cpp_python_server_without_usage(python_server):
    result = run("generate", "-m", python_server.ref, "Name a colour.", "-n", "8", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["model"]["server"] == "llama-cpp-python"
    assert record["sources"]["completion_tokens"] == "chunks"  # no usage in its stream: estimated
    assert record["sources"]["prompt_tokens"] == "unknown" and record["usage"]["prompt_tokens"] is None
    assert 0 < record["usage"]["completion_tokens"] <= 8
    stats = run("generate", "-m", python_server.ref, "Name a colour.", "-n", "8", "--stats")
    assert stats.exit_code == 0, stats.stderr
    assert "prompt ? tok" in stats.stderr and "generated ~" in stats.stderr
