"""`generate` on the real Gemma 3 270M model: properties of the output, never exact prose."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from realmodel import generate_json, llmcli

pytestmark = pytest.mark.model

PROMPT = "Write a short list of fruits."


def test_greedy_is_deterministic_and_record_is_consistent():
    a = generate_json(PROMPT, "--temperature", "0", "-n", "24")
    b = generate_json(PROMPT, "--temperature", "0", "-n", "24")
    assert a["text"] == b["text"] and a["text"].strip()
    usage, timings = a["usage"], a["timings"]
    assert usage["prefill_tokens"] + usage["cached_tokens"] == usage["prompt_tokens"]
    assert usage["decode_tokens"] == usage["completion_tokens"]
    assert 0 < usage["completion_tokens"] <= 24
    for key in (
        "load_ms",
        "prefill_ms",
        "prefill_tokens_per_s",
        "decode_ms",
        "decode_tokens_per_s",
        "ttft_ms",
    ):
        assert timings[key] > 0, key
    assert timings["ttft_ms"] >= timings["prefill_ms"]
    assert a["model"]["architecture"] == "gemma3"
    assert a["model"]["quantization"] == "Q4_K_M"
    assert a["model"]["size_bytes"] > 200_000_000
    assert a["prompt_format"] == "raw" and a["model"]["type"] == "base"  # a base model: plain text
    assert a["versions"]["backend"] and a["versions"]["llama_cpp_python"]


def test_seed_reproducibility_and_reporting():
    a = generate_json(PROMPT, "--seed", "1234", "--temperature", "1.0", "-n", "16")
    b = generate_json(PROMPT, "--seed", "1234", "--temperature", "1.0", "-n", "16")
    assert a["text"] == b["text"]
    assert a["params"]["seed"] == 1234
    c = generate_json(PROMPT, "--temperature", "1.0", "-n", "4")
    assert isinstance(c["params"]["seed"], int)


def test_max_tokens_is_exact():
    doc = generate_json("Count from one to one hundred:", "--raw", "--temperature", "0", "-n", "7")
    assert doc["finish_reason"] == "length"
    assert doc["usage"]["completion_tokens"] == 7


def test_stop_string_cuts_before_it():
    base = generate_json(PROMPT, "--temperature", "0", "-n", "32")["text"]
    words = [w for w in base.split() if len(w) >= 3 and w.isalpha()]
    assert words, base
    word = words[min(1, len(words) - 1)]
    doc = generate_json(PROMPT, "--temperature", "0", "-n", "32", "--stop", word)
    assert doc["finish_reason"] == "stop"
    assert word not in doc["text"]
    assert base.startswith(doc["text"])


def test_json_schema_output_parses():
    schema = {
        "type": "object",
        "properties": {"fruits": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
        "required": ["fruits"],
    }
    doc = generate_json(PROMPT, "--json-schema", json.dumps(schema), "--temperature", "0", "-n", "80")
    value = json.loads(doc["text"])
    assert isinstance(value["fruits"], list)
    assert all(isinstance(x, str) for x in value["fruits"])


def test_grammar_file(tmp_path):
    grammar = tmp_path / "yesno.gbnf"
    grammar.write_text('root ::= ("yes" | "no")\n')
    doc = generate_json("Is water wet?", "--grammar-file", str(grammar), "--temperature", "0", "-n", "8")
    assert doc["text"] in ("yes", "no")


@pytest.mark.parametrize(
    ("grammar", "reason"),
    [
        ('root ::= "yes" | "no', "could not be parsed: unexpected end of input"),
        ("root ::= answer\n", "could not be parsed: Undefined rule identifier 'answer'"),
        ('start ::= "a"\n', "has no `root` rule"),
    ],
)
def test_a_bad_grammar_is_one_line_naming_the_parsers_reason(tmp_path, grammar, reason):
    """llama.cpp's parser prints its error and the whole grammar on stderr itself, past its log;
    llmcli keeps that to one line with the parser's reason."""
    path = tmp_path / "bad.gbnf"
    path.write_text(grammar)
    result = llmcli("generate", "Is water wet?", "--raw", "--grammar-file", str(path), "-n", "4")
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and reason in lines[0], result.stderr


def test_a_context_beyond_the_trained_one_is_warned_about_once():
    beyond = llmcli("generate", "-m", "smollm2-135m", "-c", "8448", "-n", "2", "--temperature", "0", "hi")
    assert beyond.returncode == 0 and beyond.stdout.strip(), beyond.stderr
    warned = [line for line in beyond.stderr.splitlines() if "was trained with" in line]
    assert len(warned) == 1 and "8448 tokens" in warned[0] and "8192" in warned[0], beyond.stderr
    within = llmcli("generate", "-m", "smollm2-135m", "-c", "8192", "-n", "2", "--temperature", "0", "hi")
    assert within.returncode == 0 and "trained with" not in within.stderr


def test_more_threads_than_cpus_is_warned_about_once_in_a_chat_that_reloads():
    import os

    many = str(len(os.sched_getaffinity(0)) + 2)
    result = llmcli("chat", "-m", "smollm2-135m", "-t", many, "-n", "2", "--temperature", "0",
                    input="hi\n/set spec-type lookup\nagain\n")  # fmt: skip
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if f"{many} threads is more than" in line]
    assert len(warned) == 1 and "model reloaded" in result.stderr, result.stderr
    fits = llmcli("generate", "-m", "smollm2-135m", "-t", "1", "-n", "2", "--temperature", "0", "hi")
    assert fits.returncode == 0 and "threads is more than" not in fits.stderr


def test_plain_text_to_stdout_and_stats_to_stderr():
    result = llmcli("generate", PROMPT, "--raw", "--temperature", "0", "-n", "8", "--stats", check=True)
    assert result.stdout.endswith("\n") and result.stdout.strip()
    assert "\x1b" not in result.stdout
    assert "tok/s" in result.stderr and "tok/s" not in result.stdout
    assert len(result.stderr.strip().splitlines()) == 1


def test_stdin_then_argument():
    doc = generate_json("Summarize:", "-n", "4", "--temperature", "0", input="The cat sat on the mat.\n")
    assert doc["usage"]["prompt_tokens"] > 10


def test_closed_pipe_is_quiet():
    cmd = f'{sys.executable} -m llmcli generate "Tell me a long story." --raw -n 200 --temperature 0'
    cmd += " | head -c 20"
    result = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=600)
    assert len(result.stdout) <= 20
    assert result.stderr == ""


def test_prompt_longer_than_context_names_both_counts():
    result = llmcli("generate", "word " * 400, "--raw", "-c", "256")
    assert result.returncode == 4
    assert "256" in result.stderr and "tokens" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_utf8_is_never_broken():
    doc = generate_json(
        "Écris trois mots en japonais et en français: 日本語", "--temperature", "0", "-n", "40"
    )
    assert "\ufffd" not in doc["text"]
    doc.get("text").encode("utf-8")


@pytest.mark.parametrize(
    "args",
    [
        ("generate", "hi", "-n", "2"),
        ("generate", "hi", "-n", "2", "-md", "smollm2-135m", "-c", "1024", "-cd", "1100000"),
        ("bench", "--scenario", "spec", "-n", "2", "-r", "1", "--ctx-size", "1100000", "--force"),
    ],
)
def test_a_context_llama_cpp_cannot_allocate_is_one_line_exit_1(args):
    """A context larger than the address space allows (past the memory check with --force):
    llama.cpp refuses it, and that is one line and exit 1, not a crash (the model was freed once
    on the way out, and again at exit)."""
    import resource

    def limit() -> None:  # 8 GiB of address space; 1.1M cells of SmolLM2's KV cache need ~25 GiB
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))

    command = [sys.executable, "-m", "llmcli", *args, "-m", "smollm2-135m", "-t", "2"]
    if args[0] == "generate":
        command += ["-c", "1100000", "--force"] if "-cd" not in args else ["--force"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, preexec_fn=limit)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert "could not create" in result.stderr
