"""Base models are recognised and treated as such: plain continuation in `generate`, refused (or
warned about when asked for) in `chat`; instruct models keep their turn format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run, use_engine

from llmcli import templates
from llmcli.engine.fake import FakeEngine


@pytest.mark.parametrize(
    ("template", "metadata", "expected"),
    [
        ("{{ messages }}", {}, "instruct"),
        (None, {"general.name": "SmolLM2 135M Instruct"}, "instruct"),
        (None, {"general.finetune": "it"}, "instruct"),
        (None, {"general.name": "Llama-2-7b-chat"}, "instruct"),
        (None, {"general.tags": ["text-generation", "dpo"]}, "instruct"),
        (None, {"general.name": "Gemma 3 270m", "general.basename": "gemma-3"}, "base"),
        (None, {"general.name": "Qwen2.5 0.5B"}, "base"),
        (None, {}, "base"),
        ("   ", {}, "base"),
        # words must stand alone: "it" inside "Italian" or "chat" inside "chatty" mark nothing
        (None, {"general.name": "Italian Chatty Base"}, "base"),
    ],
)
def test_model_type(template, metadata, expected):
    assert templates.model_type(template, metadata) == expected


@pytest.fixture
def base(monkeypatch, tmp_path):
    factory = FakeEngine.factory(model_type="base")
    use_engine(factory)
    model = tmp_path / "base.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setenv("LLMCLI_MODEL", str(model))
    return factory


def test_generate_continues_a_base_model_as_plain_text_and_says_so_once(base):
    result = run("generate", "Once upon a time", "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["prompt_format"] == "raw" and doc["model"]["type"] == "base"
    prompt = base.made[0].history[0].prompt
    assert prompt == "Once upon a time" and "<start_of_turn>" not in prompt
    notes = [line for line in result.stderr.splitlines() if "base model" in line]
    assert len(notes) == 1 and "--fallback-template" in notes[0]


def test_generate_on_a_base_model_with_fallback_template_uses_the_turn_format(base):
    result = run("generate", "Hello", "--fallback-template", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["prompt_format"] == "fallback:gemma"
    assert "<start_of_turn>user" in base.made[0].history[0].prompt
    assert "base model" not in result.stderr


def test_generate_raw_on_a_base_model_needs_no_notice(base):
    result = run("generate", "Hello", "--raw")
    assert result.exit_code == 0 and result.stderr == ""


def test_generate_on_a_base_model_says_the_system_prompt_is_ignored(base):
    result = run("generate", "Hello", "--system", "Be brief.")
    assert result.exit_code == 0
    assert "--system" in result.stderr and "Be brief." not in base.made[0].history[0].prompt


def test_instruct_model_keeps_its_turn_format_without_notice(fake):
    result = run("generate", "Hello", "--json")
    doc = json.loads(result.stdout)
    assert doc["prompt_format"] == "fallback:gemma" and doc["model"]["type"] == "instruct"
    assert result.stderr == ""


def test_chat_refuses_a_base_model_unless_asked(base):
    result = run("chat", input="hello\n")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "base model" in lines[0] and "--fallback-template" in lines[0]
    assert result.stdout == ""
    assert base.made[0].history == []


def test_chat_with_fallback_template_warns_and_proceeds(base):
    result = run("chat", "--fallback-template", input="hello\n")
    assert result.exit_code == 0
    assert "does not follow instructions" in result.stderr
    assert result.stdout == "echo: hello\n"


def test_a_session_chatted_in_the_fallback_format_resumes_without_the_flag(base, isolated, tmp_path):
    assert run("chat", "--fallback-template", "--session", "b1", input="hello\n").exit_code == 0
    saved = json.loads((isolated / "data" / "sessions" / "b1.json").read_text())
    assert saved["fallback_template"] is True
    again = run("chat", "--session", "b1", input="again\n")
    assert again.exit_code == 0 and again.stdout == "echo: again\n", again.stderr
    assert "continuing session 'b1': 2 messages" in again.stderr
    assert run("chat", "--resume", input="more\n").exit_code == 0
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF")
    elsewhere = run("chat", "--session", "b1", "-m", str(other), input="x\n")  # another model: asked again
    assert elsewhere.exit_code == 2 and "--fallback-template" in elsewhere.stderr
    assert run("chat", "--session", "b2", input="x\n").exit_code == 2  # a new session: asked again


def test_switching_to_a_base_model_in_chat_is_refused(monkeypatch, tmp_path):
    made: list[FakeEngine] = []

    def build(path, options, debug):
        engine = FakeEngine(model_type="base" if Path(path).name == "base.gguf" else "instruct")
        made.append(engine)
        return engine

    use_engine(build)
    instruct, base = tmp_path / "instruct.gguf", tmp_path / "base.gguf"
    for path in (instruct, base):
        path.write_bytes(b"GGUF")
    result = run("chat", "-m", str(instruct), input=f"/model {base}\nhello\n")
    assert result.exit_code == 0
    assert "base model" in result.stderr
    assert result.stdout == "echo: hello\n"
    assert made[0].history and not made[1].history
