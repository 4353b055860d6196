"""A reasoning model's reasoning told apart from its answer beneath the contract: `Reasoning`
events and `Done.reasoning` for the reasoning, `Token`s and `Done.text` for the answer, the tags in
neither. `generate` prints the answer alone on stdout and the reasoning on stderr (or nowhere with
--hide-thinking), and --json has both. Driven by the fake engine's scripted byte pieces under the
real Qwen3 and DeepSeek-R1-distill templates, and by a server's reasoning fields."""

from __future__ import annotations

import json

import pytest
from helpers import run, use_engine
from records import validate
from test_reasoning import template

from llmcli.engine.fake import FakeEngine
from llmcli.reasoning import ReasoningFormat, Splitter
from llmcli.served.client import Chunk
from llmcli.served.reply import Reply

QWEN3 = ReasoningFormat("<think>", "</think>", "enable_thinking", preopened=False)
R1 = ReasoningFormat("<think>", "</think>", None, preopened=True)


def split(fmt: ReasoningFormat, pieces: list[str]) -> tuple[str, str]:
    splitter = Splitter(fmt)
    reasoning, answer = "", ""
    for piece in pieces:
        r, a = splitter.feed(piece)
        reasoning, answer = reasoning + r, answer + a
    r, a = splitter.finish()
    return reasoning + r, answer + a


@pytest.mark.parametrize(
    "pieces",
    [
        ["<think>\nWhich city?\n</think>\n\nParis."],
        ["<", "think>", "\nWhich ", "city?\n<", "/th", "ink", ">\n", "\n", "Paris."],  # tags split everywhere
        ["\n<think>\nWhich city?\n</think>Paris."],
    ],
)
def test_tags_split_across_pieces_never_reach_either_text(pieces):
    reasoning, answer = split(QWEN3, pieces)
    assert reasoning.strip() == "Which city?" and answer == "Paris."


def test_a_block_the_template_opened_starts_in_reasoning():
    assert split(R1, ["Let me see.", "</think>\n\n", "42"]) == ("Let me see.", "42")


def test_a_model_that_does_not_think_gives_its_answer_whole():
    assert split(QWEN3, ["\n", "Paris is the capital.", " <think> is a word here."]) == (
        "", "\nParis is the capital. <think> is a word here."
    )  # fmt: skip


def test_an_empty_block_gives_no_reasoning_and_no_tags():
    reasoning, answer = split(QWEN3, ["<think>\n\n</think>\n\n", "Hi."])
    assert reasoning.strip() == "" and answer == "Hi."


def test_a_block_never_closed_is_all_reasoning_and_no_answer():
    assert split(R1, ["thinking and ", "thinking </th"]) == ("thinking and thinking </th", "")


@pytest.fixture
def thinking(monkeypatch, tmp_path):
    """A fake engine with Qwen3's template whose replies are scripted byte pieces."""
    engines: list[FakeEngine] = []
    replies: list[list[bytes]] = []
    build = FakeEngine.factory(chat_template=template("qwen3"), architecture="qwen3")

    def factory(path, options, debug):
        engine = build(path, options, debug)
        engine.replies.extend(replies)
        engines.append(engine)
        return engine

    use_engine(factory)
    model = tmp_path / "qwen3.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setenv("LLMCLI_MODEL", str(model))
    return replies


PIECES = [
    b"<th",
    b"ink>\nThe capital",
    b" of France.\n</th",
    b"ink>\n\n",
    b"Par",
    b"is \xc3",
    b"\xa9t\xc3\xa9.",
]


def test_generate_prints_the_answer_alone_on_stdout_and_the_reasoning_on_stderr(thinking):
    thinking.append(PIECES)
    result = run("generate", "Capital of France?")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "Paris été.\n"
    assert "The capital of France." in result.stderr and "think>" not in result.stderr


def test_hide_thinking_keeps_the_reasoning_off_the_screen(thinking):
    thinking.append(PIECES)
    result = run("generate", "Capital of France?", "--hide-thinking")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "Paris été.\n" and "capital" not in result.stderr


def test_the_json_record_has_the_reasoning_apart_and_its_token_count(thinking):
    thinking.append(PIECES)
    doc = validate(json.loads(run("generate", "Capital of France?", "--json").stdout))
    assert doc["text"] == "Paris été." and doc["reasoning"].strip() == "The capital of France."
    usage = doc["usage"]
    assert 0 < usage["reasoning_tokens"] < usage["completion_tokens"] == len(PIECES)


def test_a_model_without_reasoning_has_none_in_its_record(fake):
    doc = json.loads(run("generate", "hello", "--json").stdout)
    assert doc["reasoning"] is None and doc["usage"]["reasoning_tokens"] == 0


def test_raw_text_is_continued_as_it_is(thinking):
    thinking.append([b"<think>", b"x</think>y"])
    result = run("generate", "Once", "--raw")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "<think>x</think>y\n"


def test_chat_keeps_the_answer_alone_in_the_history(thinking):
    from llmcli.repl import session_files

    thinking.append(PIECES)
    result = run("chat", "--session", "s", input="Capital of France?\n")
    assert result.exit_code == 0, result.stderr
    assert "Paris été." in result.stdout and "think>" not in result.stdout
    answer = [m for m in session_files.load("s")["messages"] if m["role"] == "assistant"][0]
    assert answer["content"] == "Paris été."


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])  # llama-server's, vLLM's
def test_a_servers_reasoning_fields_are_kept_apart(field):
    reply = Reply(started=0.0)
    chunks = [{"choices": [{"delta": {field: "Hmm, "}}]}, {"choices": [{"delta": {field: "France."}}]},
              {"choices": [{"delta": {"content": "Paris."}, "finish_reason": "stop"}]},
              {"choices": [], "usage": {"completion_tokens": 9, "prompt_tokens": 4,
                                        "completion_tokens_details": {"reasoning_tokens": 6}}}]  # fmt: skip
    texts = [reply.add(Chunk(float(i), data), chat=True) for i, data in enumerate(chunks)]
    assert texts == ["", "", "Paris.", ""]
    assert "".join(reply.reasoning) == "Hmm, France." and reply.text == "Paris."
    stats = reply.stats(2048)
    assert stats.reasoning_tokens == 6 and stats.sources["reasoning_tokens"] == "usage"


def test_the_live_readout_says_thinking_with_its_token_count_then_decodes():
    import io

    from llmcli.contract import Reasoning, Token
    from llmcli.repl.readout import LiveReadout

    readout = LiveReadout(io.StringIO())
    readout(Reasoning("Hmm", 3))
    assert readout.status_text().startswith("thinking · 3 tok · ")
    readout(Token("Paris", 5))
    assert readout.status_text().startswith("decode ") and "· 5 tok ·" in readout.status_text()


# -- the switch --------------------------------------------------------------------------------


def engines_with(name: str, monkeypatch, tmp_path, replies: tuple[str, ...] = ()) -> list[FakeEngine]:
    """Route loading to fake engines with the real template `name` (and scripted `replies`, else
    each echoes its prompt); returns those built."""
    made: list[FakeEngine] = []
    build = FakeEngine.factory(chat_template=template(name), architecture="qwen3", replies=list(replies))

    def factory(path, options, debug):
        made.append(build(path, options, debug))
        return made[-1]

    use_engine(factory)
    model = tmp_path / f"{name}.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setenv("LLMCLI_MODEL", str(model))
    return made


def test_no_think_turns_qwen3s_reasoning_off_through_its_template(monkeypatch, tmp_path):
    made = engines_with("qwen3", monkeypatch, tmp_path)
    assert run("generate", "hi").exit_code == 0
    assert run("generate", "hi", "--no-think").exit_code == 0
    on, off = made[0].history[-1].prompt, made[1].history[-1].prompt
    assert not on.rstrip().endswith("</think>")
    assert off.endswith("<think>\n\n</think>\n\n")  # the template's own empty block: the model answers


def test_no_think_on_a_template_without_a_switch_says_so_in_one_line(monkeypatch, tmp_path):
    engines_with("deepseek-r1-distill", monkeypatch, tmp_path, replies=("\n</think>\n\nHello.",))
    result = run("generate", "hi", "--no-think")
    assert result.exit_code == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "--no-think" in line]
    assert len(said) == 1 and "no switch to turn its reasoning off" in said[0]


def test_think_on_a_model_without_reasoning_is_said_to_be_ignored(fake):
    result = run("generate", "hi", "--think")
    assert result.exit_code == 0, result.stderr
    assert "--think: ignored, the model's template shows no reasoning" in result.stderr


def test_a_served_model_gets_the_switch_as_chat_template_kwargs(fault_server):
    assert run("generate", "-m", fault_server.ref, "hi", "--no-think").exit_code == 0
    assert run("generate", "-m", fault_server.ref, "hi").exit_code == 0
    bodies = [r["body"] for r in fault_server.state.requests if r["body"] is not None]
    assert bodies[-2]["chat_template_kwargs"] == {"enable_thinking": False}
    assert "chat_template_kwargs" not in bodies[-1]


# -- no answer: a script can tell -----------------------------------------------------------------


def test_an_answer_left_in_the_reasoning_is_no_answer_exit_8_and_empty_stdout(thinking):
    thinking.append([b"<think>\n12 multiplied by 7 equals 84.\n</think>\n\n"])
    result = run("generate", "What is 12*7? Answer briefly.")
    assert result.exit_code == 8
    assert result.stdout == ""
    assert "84" in result.stderr  # the reasoning, on stderr
    assert "no answer: the model ended after its reasoning without an answer" in result.stderr


def test_a_model_that_stops_inside_its_reasoning_is_exit_8(thinking):
    thinking.append([b"<think>\nstill thinking"])
    result = run("generate", "hi", "--json")
    assert result.exit_code == 8
    doc = validate(json.loads(result.stdout))
    assert doc["finish_reason"] == "no_answer" and doc["text"] == "" and "still thinking" in doc["reasoning"]
    assert "inside its reasoning" in result.stderr


def test_max_tokens_inside_the_reasoning_is_exit_7_and_leaves_stdout_empty(thinking):
    thinking.append([b"<think>\n", b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h", b"i"])
    result = run("generate", "hi", "-n", "4")
    assert result.exit_code == 7
    assert result.stdout == ""
    assert "--max-tokens (4) ended the output inside the reasoning" in result.stderr


def test_chat_says_when_a_reply_has_no_answer(thinking):
    thinking.append([b"<think>\nThe answer is 84.\n</think>\n\n"])
    result = run("chat", "--hide-thinking", input="What is 12*7?\n")
    assert result.exit_code == 0, result.stderr
    assert "no answer" in result.stderr and "reasoning_budget" in result.stderr
