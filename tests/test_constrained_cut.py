"""A constrained answer cut short (grammar or JSON schema) never passes as a valid one: a one-line
notice on stderr, exit code 7, and the `--json` record says so. On the fake engine a scripted reply
satisfies the grammar exactly when it runs to its end, as llama.cpp's grammar sampler allows the
end-of-generation token only where the grammar accepts."""

from __future__ import annotations

import json

import pytest
from helpers import run, use_engine

from llmcli.engine.fake import FakeEngine

SCHEMA = '{"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}'


@pytest.fixture
def scripted(monkeypatch, tmp_path):
    def make(reply: str, **kwargs):
        factory = FakeEngine.factory(replies=[reply], **kwargs)
        use_engine(factory)
        model = tmp_path / "m.gguf"
        model.write_bytes(b"GGUF")
        monkeypatch.setenv("LLMCLI_MODEL", str(model))
        return factory

    return make


@pytest.fixture
def grammar(tmp_path):
    path = tmp_path / "g.gbnf"
    path.write_text('root ::= "{" [a-z]* "}"\n')
    return str(path)


def test_cut_by_max_tokens_is_an_error_after_the_text(scripted, grammar):
    scripted("{abcdef}")
    result = run("generate", "x", "--grammar-file", grammar, "-n", "3")
    assert result.exit_code == 7
    assert result.stdout == "{ab\n"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "incomplete" in lines[0] and "--max-tokens" in lines[0] and "3 tokens" in lines[0]
    assert "grammar" in lines[0]


def test_json_record_says_incomplete_and_keeps_the_finish_reason(scripted):
    scripted('{"name": "Ery')
    result = run("generate", "x", "--json-schema", SCHEMA, "-n", "5", "--json")
    assert result.exit_code == 7
    doc = json.loads(result.stdout)
    assert doc["finish_reason"] == "length"
    assert doc["constraint"] == {"kind": "json_schema", "complete": False}
    assert "JSON schema" in result.stderr


def test_complete_constrained_output_changes_nothing(scripted):
    scripted('{"name": "Ada"}')
    result = run("generate", "x", "--json-schema", SCHEMA, "--json")
    assert result.exit_code == 0 and result.stderr == ""
    doc = json.loads(result.stdout)
    assert doc["finish_reason"] == "stop" and doc["constraint"] == {"kind": "json_schema", "complete": True}
    assert json.loads(doc["text"]) == {"name": "Ada"}


def test_unconstrained_output_cut_by_max_tokens_is_not_an_error(scripted):
    scripted("abcdef")
    result = run("generate", "x", "-n", "3", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["constraint"] is None


def test_cut_by_a_stop_string(scripted, grammar):
    scripted("{abc}END")
    result = run("generate", "x", "--grammar-file", grammar, "--stop", "c")
    assert result.exit_code == 7 and "--stop" in result.stderr


def test_interrupted_keeps_exit_130_and_says_incomplete(scripted, grammar):
    scripted("{abcdef}", interrupt_after=2)
    result = run("generate", "x", "--grammar-file", grammar)
    assert result.exit_code == 130
    assert result.stdout == "{a\n"
    assert "incomplete" in result.stderr and "interrupted at 2 tokens" in result.stderr


def test_chat_shows_the_notice_after_a_cut_reply(scripted, grammar):
    engine = scripted("{abcdef}")
    result = run("chat", "--grammar-file", grammar, "-n", "3", input="first\n")
    assert result.exit_code == 0
    assert result.stdout == "{ab\n"
    assert "incomplete" in result.stderr and "--max-tokens" in result.stderr
    assert engine.made[0].history[0].params.grammar


def test_chat_says_nothing_when_the_reply_completes(scripted, grammar):
    scripted("{ok}")
    result = run("chat", "--grammar-file", grammar, input="first\n")
    assert result.exit_code == 0 and result.stdout == "{ok}\n"
    assert "incomplete" not in result.stderr
