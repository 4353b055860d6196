"""`llmcli batch` on the OpenAI batch format, both ways, on the fake engine (which echoes the
prompt's last line): every body field a local engine honours is read into the item's settings,
what it cannot do is refused per line, an unknown field is named once, `/v1/completions` items
are raw text, and the output lines are the ones OpenAI's batch API and `vllm run-batch` write
(tests/test_vllm.py holds them against vLLM's own on the same file). And `--text` in input order."""

from __future__ import annotations

import json

import pytest
from batchtools import lines as _lines
from helpers import run

from llmcli.batch import inputs, items
from llmcli.batch.run import request_for


def _line(custom_id: str, body: dict, url: str = "/v1/chat/completions") -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body}) + "\n"


def _user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_every_field_a_local_engine_honours_is_read(fake, tmp_path):
    src = tmp_path / "in.jsonl"
    body = {
        "model": "gpt-x",
        "messages": _user("hello"),
        "max_completion_tokens": 7,
        "temperature": 0.3,
        "top_p": 0.9,
        "seed": 11,
        "stop": ["zz"],
        "frequency_penalty": 0.5,
        "presence_penalty": -0.25,
        "top_k": 5,
        "min_p": 0.1,
        "response_format": {"type": "json_object"},
        "n": 1,
        "logprobs": False,
    }
    src.write_text(_line("all", body) + _line("few", {"messages": _user("hi"), "max_tokens": 3}))
    result = run("batch", str(src))
    assert result.exit_code == 0, result.stderr
    assert "is not read" not in result.stderr  # every field known
    first, second = _lines(result.stdout)
    params = first["llmcli"]["record"]["params"]
    assert params["max_tokens"] == 7 and params["temperature"] == 0.3 and params["top_p"] == 0.9
    assert (
        params["seed"] == 11 and params["stop"] == ["zz"] and params["top_k"] == 5 and params["min_p"] == 0.1
    )
    assert params["frequency_penalty"] == 0.5 and params["presence_penalty"] == -0.25
    assert first["llmcli"]["record"]["constraint"]["kind"] == "json_object"
    assert first["llmcli"]["work"]["settings"]["response_format"] == "json_object"
    assert second["llmcli"]["record"]["params"]["max_tokens"] == 3


def test_the_output_lines_are_openais(fake, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(_line("chat-1", {"messages": _user("hello")})
                   + _line("text-1", {"prompt": "Once upon a time"}, url="/v1/completions")
                   + _line("long", {"messages": _user("x" * 3000)}))  # fmt: skip
    result = run("batch", str(src))
    assert result.exit_code == 1  # the long one failed, its line says why
    chat, text, failed = _lines(result.stdout)
    for line in (chat, text, failed):
        assert list(line)[:4] == ["id", "custom_id", "response", "error"]
        assert line["id"] != line["response"]["request_id"]
    assert [x["custom_id"] for x in (chat, text, failed)] == ["chat-1", "text-1", "long"]
    body = chat["response"]["body"]
    assert chat["response"]["status_code"] == 200 and chat["error"] is None
    assert body["object"] == "chat.completion" and body["choices"][0]["message"] == {
        "role": "assistant", "content": "echo: hello"}  # fmt: skip
    assert body["choices"][0]["finish_reason"] == "stop"
    usage = body["usage"]
    record = chat["llmcli"]["record"]
    assert usage["completion_tokens"] == record["usage"]["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    completion = text["response"]["body"]
    assert (
        completion["object"] == "text_completion"
        and completion["choices"][0]["text"] == "echo: Once upon a time"
    )
    assert text["llmcli"]["record"]["prompt_format"] == "raw"  # no chat template
    assert text["llmcli"]["work"]["settings"]["template"] == "raw"
    assert failed["response"]["status_code"] == 500 and failed["response"]["body"] is None
    assert failed["error"]["message"] and failed["llmcli"]["record"]["finish_reason"] == "error"


def test_what_cannot_be_honoured_is_refused_per_line(fake, tmp_path):
    cases = [
        ({"messages": _user("a"), "n": 2}, "/v1/chat/completions", "`n` 2"),
        ({"messages": _user("a"), "logprobs": True, "top_logprobs": 2}, "/v1/chat/completions", "logprobs"),
        ({"messages": _user("a"), "tools": [{"type": "function", "function": {"name": "f"}}]},
         "/v1/chat/completions", "`tools`"),
        ({"input": "a"}, "/v1/embeddings", "/v1/embeddings"),
        ({"messages": _user("a")}, "/v1/completions", "needs a `prompt`"),
        ({"prompt": ["a", "b"]}, "/v1/completions", "several prompts"),
        ({"messages": _user("a"), "max_tokens": 4, "max_completion_tokens": 4}, "/v1/chat/completions",
         "not both"),
        ({"messages": _user("a"), "presence_penalty": 3}, "/v1/chat/completions", "out of range"),
        ({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "/v1/chat/completions",
         "input_audio"),
    ]  # fmt: skip
    for body, url, said in cases:
        src = tmp_path / "in.jsonl"
        src.write_text(_line("fine", {"messages": _user("ok")}) + _line("bad", body, url=url))
        result = run("batch", str(src))
        assert result.exit_code == 2 and result.stdout == "", (body, result.stderr)
        errors = [x for x in result.stderr.splitlines() if x.startswith("llmcli:")]
        assert len(errors) == 1 and "line 2" in errors[0] and said in errors[0], (body, result.stderr)
    skipped = run("batch", str(src), "--skip-bad")
    assert skipped.exit_code == 0 and "1 bad line(s) skipped: line 2" in skipped.stderr
    assert [d["custom_id"] for d in _lines(skipped.stdout)] == ["fine"]


def test_an_unknown_field_is_named_once(fake, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(
        "".join(_line(f"r{i}", {"messages": _user("hi"), "mystery": 1, "model": "m"}) for i in range(3))
    )
    result = run("batch", str(src))
    assert result.exit_code == 0, result.stderr
    warned = [x for x in result.stderr.splitlines() if "mystery" in x]
    assert len(warned) == 1 and "(3 item(s))" in warned[0]
    assert "`model`" not in result.stderr  # documented: -m chooses


def test_image_content_parts_become_the_requests_images(tmp_path):
    """An OpenAI item's image parts travel as `generate -a` sends them: the message's text as its
    content, the image in the request (a local engine's projector, a served one's content part)."""
    import base64
    import io

    from PIL import Image as PILImage

    from llmcli.runspec import resolve_run

    png = io.BytesIO()
    PILImage.new("RGB", (4, 4), "red").save(png, format="PNG")
    uri = "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()
    src = tmp_path / "in.jsonl"
    parts = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": uri}}]
    src.write_text(_line("img", {"messages": [{"role": "developer", "content": "Be brief."},
                                              {"role": "user", "content": parts}]}))  # fmt: skip
    (item,) = list(inputs.read(src))
    assert isinstance(item, items.Item) and item.openai == "chat"
    request = request_for(item, resolve_run({}), False)
    assert request.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is this?"},
    ]
    assert [image.data for image in request.images] == [png.getvalue()]
    assert item.work is not None and len(item.work["prompt"]) == 64  # the image's hash is in the prompt's


def test_a_rerun_of_openai_input_resumes_by_custom_id(fake, tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(_line("a", {"messages": _user("one"), "seed": 1}))
    assert run("batch", str(src), "-o", str(out)).exit_code == 0
    src.write_text(src.read_text() + _line("b", {"messages": _user("two"), "seed": 1}))
    again = run("batch", str(src), "-o", str(out))
    assert again.exit_code == 0 and "1 already done" in again.stderr
    assert [d["custom_id"] for d in _lines(out.read_text())] == ["a", "b"]
    src.write_text(_line("a", {"messages": _user("one, changed"), "seed": 1}))
    changed = run("batch", str(src), "-o", str(out))
    assert changed.exit_code == 2 and 'id "a"' in changed.stderr and "another prompt" in changed.stderr
    plain = tmp_path / "p.txt"
    plain.write_text("one\n")
    mixed = run("batch", str(plain), "-o", str(out))  # llmcli's lines into a file of OpenAI's
    assert mixed.exit_code == 2 and "holds OpenAI batch lines" in mixed.stderr


def test_text_prints_the_answers_in_input_order(fake, tmp_path):
    (tmp_path / "p.txt").write_text("".join(f"prompt {i}\n" for i in range(12)))
    result = run("batch", str(tmp_path / "p.txt"), "--text", "-np", "4")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [f"echo: prompt {i}" for i in range(12)]


@pytest.mark.model
def test_frequency_and_presence_penalties_reach_llama_cpps_sampler(tmp_path):
    """On SmolLM2 at temperature 0, raw text that invites repetition: the answer changes under each
    penalty (the batch decoder's chain takes them; a greedy shortcut would ignore them)."""
    from batchtools import cli

    ask = {"prompt": " ".join(["1"] * 16), "max_tokens": 24, "temperature": 0}
    src = tmp_path / "in.jsonl"
    asks = (("plain", {}), ("freq", {"frequency_penalty": 2}), ("presence", {"presence_penalty": 2}))
    src.write_text("".join(_line(name, {**ask, **extra}, url="/v1/completions") for name, extra in asks))
    result = cli("batch", str(src), "-m", "smollm2-135m", "--parallel", "1", "--no-log")
    assert result.returncode == 0, result.stderr
    texts = {d["custom_id"]: d["response"]["body"]["choices"][0]["text"] for d in _lines(result.stdout)}
    assert texts["plain"].count("1") > texts["freq"].count("1"), texts  # it goes on repeating without them
    assert texts["plain"].count("1") > texts["presence"].count("1"), texts
