"""Reasoning on a real model: the budget's forced close, thinking switched off, the token cap inside
the reasoning, a JSON schema that waits for the answer, and speculation beside it.

Qwen2.5-Coder-0.5B-Instruct (tests/qwen.py) with two real-shaped templates written into copies of
its file: one whose generation prompt opens the block (`<think>\\n`, as DeepSeek-R1's distills do,
tests/data/templates/qwen2.5-think-preopened.jinja), and Qwen3's own hybrid template (the model
may open a block; `enable_thinking` switches it off). The model was not trained to think: the
mechanism does not care, and the assertions are about the mechanism, never the prose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import qwen
from realmodel import generate_json, llmcli

TEMPLATES = Path(__file__).parent / "data" / "templates"
SCHEMA = '{"type":"object","properties":{"answer":{"type":"integer"}},"required":["answer"]}'
TAGS = ("<think>", "</think>")


@pytest.fixture(scope="module")
def preopened() -> str:
    return str(qwen.with_template(TEMPLATES / "qwen2.5-think-preopened.jinja"))


@pytest.fixture(scope="module")
def hybrid() -> str:
    return str(qwen.with_template(TEMPLATES / "qwen3.jinja"))


def run(model: str, *args: str, no_answer_ok: bool = False) -> dict:
    return generate_json("-m", model, "--temperature", "0", *args, timeout=900, no_answer_ok=no_answer_ok)


def no_tags(text: str) -> bool:
    return not any(tag in text for tag in TAGS)


def test_the_budget_closes_the_block_and_the_answer_follows(preopened):
    record = run(preopened, "-n", "60", "--reasoning-budget", "16", "--reasoning-budget-message",
                 "Time to answer.", "Explain why the sky is blue.")  # fmt: skip
    usage, timings = record["usage"], record["timings"]
    assert record["reasoning"] and record["reasoning"].endswith("Time to answer.")
    assert no_tags(record["reasoning"]) and no_tags(record["text"])
    assert record["text"].strip(), "an answer follows the forced close"
    # the budget, then the message and the closing tag the budget forced
    assert 16 < usage["reasoning_tokens"] <= 16 + 12
    assert usage["reasoning_tokens"] < usage["completion_tokens"]
    assert record["params"]["reasoning_budget"] == 16
    assert timings["reasoning"]["tokens"] == usage["reasoning_tokens"]
    assert timings["answer"]["tokens"] == usage["completion_tokens"] - usage["reasoning_tokens"]
    assert timings["reasoning"]["ttft_ms"] <= timings["answer"]["ttft_ms"]


def test_no_think_without_a_switch_is_a_budget_of_zero(preopened):
    result = llmcli("generate", "-m", preopened, "--temperature", "0", "-n", "24", "--no-think", "--json",
                    "Explain why the sky is blue.", timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["reasoning"] is None  # the block closed before anything was thought
    assert record["text"].strip() and no_tags(record["text"])
    warned = [line for line in result.stderr.splitlines() if "--no-think" in line]
    assert len(warned) == 1 and "no switch" in warned[0]


def test_the_token_cap_inside_the_reasoning_is_no_answer(preopened):
    result = llmcli("generate", "-m", preopened, "--temperature", "0", "-n", "8",
                    "Explain why the sky is blue.", timeout=900)  # fmt: skip
    assert result.returncode == 7
    assert result.stdout.strip() == "", "the reasoning is never printed as the answer"
    errors = [line for line in result.stderr.splitlines() if line.startswith("llmcli: ")]
    assert len(errors) == 1
    assert "--max-tokens" in errors[0] and "--reasoning-budget" in errors[0]


def test_a_schema_applies_to_the_answer_after_the_reasoning(preopened):
    record = run(preopened, "-n", "120", "--reasoning-budget", "24", "--json-schema", SCHEMA,
                 "What is 17+25? Answer in JSON.")  # fmt: skip
    assert record["reasoning"], "the model thought, unconstrained"
    assert isinstance(json.loads(record["text"])["answer"], int)
    assert record["constraint"] == {"kind": "json_schema", "complete": True}


@pytest.mark.parametrize("think", [[], ["--no-think"]], ids=["may-think", "no-think"])
def test_a_schema_with_a_hybrid_template(hybrid, think):
    """Qwen3's template: the model may open a block itself (this one answers at once, and the
    answer's first token is the grammar's), or the switch renders an empty one."""
    record = run(hybrid, "-n", "60", *think, "--json-schema", SCHEMA, "What is 17+25? Answer in JSON.")
    assert no_tags(record["text"])
    assert isinstance(json.loads(record["text"])["answer"], int)
    assert record["constraint"]["complete"] is True


def test_speculation_gives_the_same_reasoning_and_answer(preopened):
    prompt = "Repeat this list twice: alpha, beta, gamma, delta, epsilon."
    args = ("-n", "48", "--reasoning-budget", "20", prompt)
    plain = run(preopened, *args, no_answer_ok=True)  # a budget this tight may leave no answer
    spec = run(preopened, "--spec-type", "lookup", *args, no_answer_ok=True)
    assert spec["finish_reason"] == plain["finish_reason"]
    assert (spec["reasoning"], spec["text"]) == (plain["reasoning"], plain["text"])
    assert spec["usage"]["reasoning_tokens"] == plain["usage"]["reasoning_tokens"]


@pytest.fixture(scope="module")
def reasoning_server(preopened, tmp_path_factory):
    """llama-server with the block-opening model, its reasoning parsed out (`--reasoning-format
    deepseek`: `reasoning_content` in the stream)."""
    import llamacpp_tools
    from servers import start_llama_server

    try:
        server = start_llama_server(
            tmp_path_factory.mktemp("reasoning-server"), slots=1, ctx=2048, model=Path(preopened),
            extra=["--jinja", "--reasoning-format", "deepseek"],
        )  # fmt: skip
    except llamacpp_tools.ToolsUnavailable as exc:
        pytest.skip(f"llama-server cannot be built here: {exc}")
    yield server
    server.stop()


def cut(model: str) -> tuple[dict, str]:
    """A generate --json whose -n ends the output inside the reasoning: exit 7, the record still
    printed (and checked against the schema)."""
    from records import validate

    result = llmcli("generate", "-m", model, "--temperature", "0", "-n", "24", "--json",
                    "Explain why the sky is blue.", timeout=900)  # fmt: skip
    assert result.returncode == 7, result.stderr
    return validate(json.loads(result.stdout)), result.stderr


def test_a_servers_reasoning_content_is_the_reasoning_stream(reasoning_server, preopened):
    """The same model, local and served: the server's `reasoning_content` deltas are the reasoning,
    apart from the answer, as the local split makes them; cut inside it, both are exit 7."""
    served, served_err = cut(reasoning_server.ref)
    local, local_err = cut(preopened)
    assert served["model"]["server"] == "llama-server"
    assert served["reasoning"] and no_tags(served["reasoning"])
    assert served["text"] == local["text"] == ""  # both still reasoning at the cap
    assert served["timings"]["reasoning"]["ttft_ms"] is not None and served["timings"]["answer"] is None
    # the words agree (the server keeps the block's leading newline; the split drops it)
    assert served["reasoning"].split()[:4] == local["reasoning"].split()[:4]
    for err in (served_err, local_err):
        assert "inside the reasoning" in err and "--reasoning-budget" in err
