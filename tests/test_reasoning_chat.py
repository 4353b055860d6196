"""A reasoning model in chat: its reasoning streamed apart from the answer and folded to one line
when the answer starts (`/think show` brings it back), the switch (`/set think`, config `think`),
the history (earlier reasoning in the template's `reasoning_content` field or dropped, never in the
content; `/context` counts what was dropped), saved sessions, and the overflow policy and the KV
cache that outlives the process with reasoning on. Driven by the fake engine's scripted byte pieces
under the real Qwen3 and DeepSeek-R1-distill templates (tests/data/templates)."""

from __future__ import annotations

import io
import json

import pyte
import pytest
from helpers import run, use_engine
from test_reasoning import template

from llmcli.contract import Done, PrefillProgress, Reasoning, Stats, Token
from llmcli.engine.fake import FakeEngine
from llmcli.repl.readout import LiveReadout

THOUGHT = "The user asks for the capital of France."
ANSWER = "Paris été."
# tags split across pieces, an accented character split across two
PIECES = [b"<th", b"ink>\nThe user asks", b" for the capital", b" of France.\n</th", b"ink>\n\n", b"Par",
          b"is \xc3", b"\xa9t\xc3\xa9."]  # fmt: skip


def reply(thought: str, answer: str) -> list[bytes]:
    return [b"<think>\n", thought.encode(), b"\n</think>\n\n", answer.encode()]


@pytest.fixture
def model(monkeypatch, tmp_path):
    """`model(name)`: route loading to fake engines with the real template `name`, all taking their
    replies from one queue; returns (engines built, the queue)."""

    def make(name: str = "qwen3", n_ctx: int = 2048):
        made: list[FakeEngine] = []
        queue: list = []
        build = FakeEngine.factory(chat_template=template(name), architecture="qwen3", n_ctx=n_ctx)

        def factory(path, options, debug):
            engine = build(path, options, debug)
            engine.replies = queue  # one queue for every process of the test
            made.append(engine)
            return engine

        use_engine(factory)
        path = tmp_path / f"{name}.gguf"
        path.write_bytes(b"GGUF")
        monkeypatch.setenv("LLMCLI_MODEL", str(path))
        return made, queue

    return make


def chat(*lines: str, args=()):
    return run("chat", *args, input="".join(line + "\n" for line in lines))


def session(name: str) -> dict:
    from llmcli.repl import session_files

    return session_files.load(name)


# -- on the screen -------------------------------------------------------------------------------


def screen_of(data: str, columns: int = 40, lines: int = 12) -> list[str]:
    screen = pyte.Screen(columns, lines)
    pyte.Stream(screen).feed(data.replace("\n", "\r\n"))  # a terminal in cooked mode maps NL to CR-NL
    return [row.rstrip() for row in screen.display]


def stream(readout: LiveReadout, thought: list[str], answer: list[str]) -> None:
    readout(PrefillProgress(10, 10, 1.0))
    n = 0
    for piece in thought:
        n += 1
        readout(Reasoning(piece, n))
        readout._draw()  # the timer would redraw at any moment
    for piece in answer:
        n += 1
        readout(Token(piece, n))
        readout._draw()


def test_the_reasoning_streams_apart_then_folds_to_one_line_when_the_answer_starts():
    out = io.StringIO()
    readout = LiveReadout(out, columns=60, lines=12, dim=True)
    readout(PrefillProgress(10, 10, 1.0))
    for n, piece in enumerate(
        ["\nFirst I recall ", "that France's capital is a city on the Seine.", "\n"], 1
    ):
        readout(Reasoning(piece, n))
        readout._draw()
    rows = screen_of(out.getvalue(), columns=60)
    assert rows[0] == "First I recall that France's capital is a city on the Seine."
    assert rows[2].startswith("thinking · 3 tok")  # the status line below the reasoning
    assert "\x1b[2mFirst I recall " in out.getvalue()  # dimmed: apart from the answer's text
    for n, piece in enumerate(["Paris", " été."], 4):
        readout(Token(piece, n))
        readout._draw()
    readout(Done("Paris été.", "stop", Stats(), 1))
    readout.stop()
    rows = screen_of(out.getvalue(), columns=60)
    assert rows[0].startswith("thought for 3 tokens (") and rows[0].endswith(" s) · /think show")
    assert rows[1] == "Paris été."
    assert not any("Seine" in row for row in rows) and all(not row for row in rows[2:])


def test_hidden_reasoning_shows_only_the_folded_line():
    out = io.StringIO()
    readout = LiveReadout(out, columns=40, lines=12, dim=False, show_thinking=False)
    stream(readout, ["Let me think about it."] * 3, ["Paris."])
    readout(Done("Paris.", "stop", Stats(), 1))
    readout.stop()
    rows = screen_of(out.getvalue())
    assert rows[0].startswith("thought for 3 tokens") and rows[1] == "Paris."
    assert "think about" not in out.getvalue()


def test_reasoning_taller_than_the_screen_leaves_its_rows_and_the_line_follows():
    """Rows scrolled off the screen cannot be erased: nothing of the answer is lost or overwritten."""
    out = io.StringIO()
    readout = LiveReadout(out, columns=30, lines=6, dim=False)
    stream(readout, [f"step {i} of many\n" for i in range(10)], ["Paris."])
    readout(Done("Paris.", "stop", Stats(), 1))
    readout.stop()
    rows = screen_of(out.getvalue(), columns=30, lines=6)
    text = [row for row in rows if row]
    assert text[-1] == "Paris." and text[-2].startswith("thought for 10 tokens (")  # the hint did not fit
    assert text[-3] == "step 9 of many"


def test_a_reply_that_ends_inside_the_reasoning_is_folded_too():
    out = io.StringIO()
    readout = LiveReadout(out, columns=60, lines=12, dim=False)
    stream(readout, ["Hmm, let me see"], [])
    readout(Done("", "interrupted", Stats(), 1))
    readout.stop()
    rows = screen_of(out.getvalue(), columns=60)
    assert rows[0].startswith("thought for 1 token (") and "interrupted" in rows[0]
    assert "let me see" not in rows[0] and all(not row for row in rows[1:])


# -- chat, piped -----------------------------------------------------------------------------------


def test_piped_chat_prints_the_answer_alone_and_the_reasoning_on_stderr(model):
    _, queue = model()
    queue.append(PIECES)
    result = chat("Capital of France?", args=("--session", "s"))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ANSWER + "\n"
    assert THOUGHT in result.stderr and "think>" not in result.stderr
    answer = session("s")["messages"][1]
    assert answer["content"] == ANSWER and answer["reasoning"].strip() == THOUGHT


def test_hide_thinking_keeps_the_reasoning_off_the_screen_and_think_show_brings_it_back(model):
    _, queue = model()
    queue.append(PIECES)
    result = chat("Capital of France?", "/think show", args=("--hide-thinking",))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ANSWER + "\n"
    assert result.stderr.count(THOUGHT) == 1  # once: from /think show, not while it streamed
    assert "think>" not in result.stderr


def test_think_show_without_reasoning_says_so(model):
    _, queue = model()
    queue.append("Just an answer.")
    result = chat("hi", "/think show")
    assert result.exit_code == 0, result.stderr
    assert "the last answer has no reasoning" in result.stderr


def test_think_is_in_help_and_completes_as_a_slash_command():
    from prompt_toolkit.document import Document

    from llmcli.repl.loop import SlashCompleter

    result = chat("/help")
    assert "/think [show|on|off|auto]" in result.stderr and "think (on, off, auto)" in result.stderr
    names = [c.text for c in SlashCompleter().get_completions(Document("/thi"), None)]
    assert names == ["/think"]


# -- the switch ------------------------------------------------------------------------------------


def test_set_think_off_turns_qwen3s_reasoning_off_from_the_next_turn(model):
    made, queue = model()
    queue.extend([PIECES, "Bonjour."])
    result = chat("Capital of France?", "/set think off", "/set think", "Say hi", args=("--session", "s"))
    assert result.exit_code == 0, result.stderr
    assert "think = off\n" in result.stderr
    first, second = (r.prompt for r in made[0].history)
    assert not first.endswith("</think>\n\n")
    assert second.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # the template's own switch
    # no empty block anywhere: not on the screen, not in the history the next turn renders
    assert result.stdout == ANSWER + "\nBonjour.\n"
    assert second.count("<think>") == 1  # the generation prompt's alone: no earlier answer carries one
    messages = session("s")["messages"]
    assert messages[3] == {"role": "assistant", "content": "Bonjour.", "stats": messages[3]["stats"]}


def test_set_think_on_a_template_without_a_switch_says_so_in_one_line(model):
    model("deepseek-r1-distill")
    result = chat("/set think off")
    assert result.exit_code == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if line.startswith("think")]
    assert said == ["think = off (the model's template has no switch to turn its reasoning off; its block "
                    "is closed as soon as it opens instead (--reasoning-budget 0))"]  # fmt: skip


def test_set_think_takes_on_off_auto_only(model):
    model()
    result = chat("/set think maybe", "/set")
    assert "error: think needs on, off or auto, got 'maybe'" in result.stderr
    assert "  think = auto\n" in result.stderr


@pytest.mark.parametrize("how", ["env", "config"])
def test_the_think_setting_is_the_switch_and_the_flag_beats_it(model, monkeypatch, isolated, how):
    made, _ = model()
    if how == "env":
        monkeypatch.setenv("LLMCLI_THINK", "off")
    else:
        (isolated / "config.toml").write_text('think = "off"\n')
    assert run("generate", "hi").exit_code == 0
    assert run("generate", "hi", "--think").exit_code == 0
    assert chat("hi").exit_code == 0
    off, flag_on, chat_off = (e.history[-1].prompt for e in made)
    assert off.endswith("<think>\n\n</think>\n\n") and chat_off.endswith("<think>\n\n</think>\n\n")
    assert not flag_on.endswith("</think>\n\n")


def test_a_bad_think_setting_is_one_clear_error(model, isolated):
    model()
    (isolated / "config.toml").write_text('think = "sometimes"\n')
    result = run("generate", "hi")
    assert result.exit_code != 0 and "think must be one of auto, on, off" in result.stderr


# -- the history -----------------------------------------------------------------------------------


def test_earlier_reasoning_goes_to_qwen3_as_reasoning_content_never_inside_the_content(model):
    """Qwen3's template reads the field, and leaves an earlier turn's reasoning out of the prompt."""
    made, queue = model()
    queue.extend([PIECES, reply("Second thoughts.", "Second answer.")])
    result = chat("Capital of France?", "And of Spain?", "/context")
    assert result.exit_code == 0, result.stderr
    second = made[0].history[1].prompt
    assert "<|im_start|>assistant\nParis été.<|im_end|>\n" in second
    assert THOUGHT not in second and second.count("<think>") == 0
    dropped = len(THOUGHT)  # the fake: a token a character
    rows = result.stderr.splitlines()
    # the first answer's reasoning is out; the last one's is still in (Qwen3 keeps the reasoning of
    # the turn after the last question, and so does the KV cache) until the next question
    assert f"reasoning: {dropped} tokens of 1 earlier answer(s) dropped from the context" in result.stderr
    kept = [row for row in rows if row.lstrip().startswith("reasoning ")]
    assert len(kept) == 1 and f" {len('Second thoughts.')} tok" in kept[0]


def test_a_template_that_renders_reasoning_content_gets_it_in_the_field():
    """A template that shows earlier reasoning gets it from the field, not from tags in the content."""
    from llmcli.contract import Request, SamplingParams
    from llmcli.engine import local

    reads = ("{% for m in messages %}[{{ m.role }}]{% if m.reasoning_content %}(thought: "
             "{{ m.reasoning_content }}){% endif %}{{ m.content }}{% endfor %}[assistant]"
             "{# <think></think> #}")  # fmt: skip
    engine = FakeEngine(chat_template=reads)
    messages = [{"role": "user", "content": "q1"},
                {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
                {"role": "user", "content": "q2"}]  # fmt: skip
    tokens, _ = local.prompt_tokens(engine, Request(SamplingParams(), messages=messages))
    assert engine.detokenize(tokens) == "[user]q1[assistant](thought: r1)a1[user]q2[assistant]"
    r1 = FakeEngine(chat_template=template("deepseek-r1-distill"))
    tokens, _ = local.prompt_tokens(r1, Request(SamplingParams(), messages=messages))
    prompt = r1.detokenize(tokens)
    assert "a1" in prompt and "r1" not in prompt  # a template without the field: dropped


def test_a_served_model_is_not_sent_earlier_reasoning(fault_server):
    from llmcli.contract import EngineOptions, SamplingParams
    from llmcli.loader import load_engine

    loaded = load_engine(fault_server.ref, EngineOptions())
    messages = [{"role": "user", "content": "q1"},
                {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
                {"role": "user", "content": "q2"}]  # fmt: skip
    list(loaded.engine.stream_messages(messages, SamplingParams(max_tokens=4)))
    body = [r["body"] for r in fault_server.state.requests if r["body"] is not None][-1]
    assert body["messages"][1] == {"role": "assistant", "content": "a1"}


# -- saved sessions --------------------------------------------------------------------------------


def test_a_saved_session_keeps_the_reasoning_and_resumes_with_the_same_context(model):
    """The resumed process renders the same prompt, reuses the same cached prefix as the running
    chat, and /think show still shows the last reasoning."""
    made, queue = model()
    queue.extend([PIECES, reply("Madrid, surely.", "Madrid.")] * 2)
    running = chat("Capital of France?", "And of Spain?")
    assert running.exit_code == 0, running.stderr
    assert chat("Capital of France?", args=("--session", "s")).exit_code == 0
    resumed = chat("/think show", "And of Spain?", args=("--resume",))
    assert resumed.exit_code == 0, resumed.stderr
    assert THOUGHT in resumed.stderr  # the saved turn's reasoning, for display
    assert made[-1].history[0].prompt == made[0].history[1].prompt
    assert made[-1].restored and made[-1].history[0].cached_tokens == made[0].history[1].cached_tokens > 0
    assert [m.get("reasoning", "").strip() for m in session("s")["messages"][1::2]] == [
        THOUGHT,
        "Madrid, surely.",
    ]


def test_a_session_saved_before_reasoning_was_kept_still_loads(model, isolated):
    made, queue = model()
    path = isolated / "data" / "sessions" / "old.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"format": 1, "name": "old", "system": "", "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}))  # fmt: skip
    queue.append(reply("ok", "fine"))
    result = chat("/think show", "next", args=("--session", "old"))
    assert result.exit_code == 0, result.stderr
    assert "the last answer has no reasoning" in result.stderr and result.stdout == "fine\n"
    assert "<|im_start|>assistant\nhello<|im_end|>" in made[0].history[0].prompt


def test_a_session_with_a_bad_reasoning_field_is_refused_untouched(model, isolated):
    model()
    path = isolated / "data" / "sessions" / "bad.json"
    path.parent.mkdir(parents=True)
    text = json.dumps({"format": 1, "messages": [{"role": "assistant", "content": "x", "reasoning": 7}]})
    path.write_text(text)
    result = chat("hi", args=("--session", "bad"))
    assert result.exit_code != 0 and "malformed conversation" in result.stderr
    assert path.read_text() == text


# -- the overflow policy and the KV cache that outlives the process, with reasoning on ---------------


def test_the_overflow_policy_drops_the_oldest_turns_and_their_reasoning_with_them(model):
    made, queue = model(n_ctx=600)
    long = "x" * 150
    for i in range(4):
        queue.append(reply(f"thinking about {i} " + long, f"answer {i}"))
    result = chat(*(f"question {i} " + "y" * 60 for i in range(4)), args=("--session", "s"))
    assert result.exit_code == 0, result.stderr
    assert "history overflowed the context; dropped the" in result.stderr
    prompt = made[0].history[-1].prompt
    assert "question 3" in prompt and "question 0" not in prompt and "<think>" not in prompt
    messages = session("s")["messages"]
    assert (
        messages[0]["content"].startswith("question ") and messages[0]["content"] != "question 0 " + "y" * 60
    )
    kept = [m for m in messages if m["role"] == "assistant"]
    assert kept and all(m["reasoning"].strip().startswith("thinking about") for m in kept)


def test_the_overflow_policy_error_refuses_with_reasoning_on(model):
    _, queue = model(n_ctx=400)
    queue.extend([reply("t" * 120, "a" * 40)] * 3)
    result = chat(*("q" * 80 for _ in range(3)), args=("--on-overflow", "error"))
    assert "the conversation is" in result.stderr and "but the context holds 400" in result.stderr


def test_prompt_cache_works_with_a_reasoning_model(model, tmp_path):
    made, queue = model()
    queue.extend([PIECES, PIECES])
    cache = tmp_path / "doc.kv"
    doc = "A long document that every call shares. " * 8
    first = run("generate", doc + "Question one?", "--prompt-cache", str(cache), "--json")
    second = run("generate", doc + "Question two?", "--prompt-cache", str(cache), "--json")
    assert first.exit_code == 0 and second.exit_code == 0, second.stderr
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a["text"] == b["text"] == ANSWER and b["reasoning"].strip() == THOUGHT
    assert a["usage"]["cached_tokens"] == 0 and b["usage"]["cached_tokens"] > len(doc)


def test_an_empty_block_reaches_neither_the_screen_nor_the_history(model):
    """A model that writes an empty block itself (Qwen3 asked not to think in the message): no folded
    line, no reasoning kept, no tags on stdout; and thinking switched off: the answer alone."""
    _, queue = model()
    queue.extend([[b"<think>", b"\n\n", b"</think>", b"\n\n", b"Bonjour."], "Salut."])
    result = chat("Say hi /no_think", "/think show", "/set think off", "Again", args=("--session", "s"))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "Bonjour.\nSalut.\n" and "think>" not in result.stderr
    assert "the last answer has no reasoning" in result.stderr and "thought for" not in result.stderr
    assert all("reasoning" not in m and "think>" not in m["content"] for m in session("s")["messages"])
    out = io.StringIO()
    readout = LiveReadout(out, columns=60, lines=12, dim=False)
    stream(readout, ["\n\n"], ["Bonjour."])
    readout(Done("Bonjour.", "stop", Stats(), 1))
    readout.stop()
    assert [row for row in screen_of(out.getvalue(), columns=60) if row] == ["Bonjour."]


def test_a_resumed_session_keeps_its_think_switch_unless_the_command_line_sets_one(model):
    made, _ = model()
    assert chat("/set think off", "hi", args=("--session", "s")).exit_code == 0
    assert session("s")["think"] == "off"
    assert chat("again", args=("--resume",)).exit_code == 0
    assert chat("and again", args=("--resume", "--think")).exit_code == 0
    resumed, flag_on = made[1].history[-1].prompt, made[2].history[-1].prompt
    assert resumed.endswith("<think>\n\n</think>\n\n") and not flag_on.endswith("</think>\n\n")


@pytest.mark.parametrize("show", [True, False])
def test_an_interactive_turn_folds_the_reasoning_and_keeps_it_for_think_show(show):
    """The REPL on a terminal: the turn's reasoning (shown, or with --hide-thinking not) ends as the
    folded line above the answer; /think show writes it whole to stderr."""
    from llmcli.contract import SamplingParams
    from llmcli.loader import Loaded
    from llmcli.repl import commands
    from llmcli.repl.chat_session import ChatSession
    from llmcli.repl.loop import Repl

    engine = FakeEngine(chat_template=template("qwen3"), architecture="qwen3")
    engine.replies.append(PIECES)
    out, err = io.StringIO(), io.StringIO()
    repl = Repl(ChatSession(Loaded(engine, "fake", engine.info.path), SamplingParams()), interactive=True,
                out=out, err=err, show_thinking=show)  # fmt: skip
    repl.handle("Capital of France?")
    rows = [row for row in screen_of(out.getvalue(), columns=80, lines=24) if row]
    assert rows[0].startswith("thought for ") and rows[1] == ANSWER and len(rows) == 2
    assert ("\x1b[2mThe user asks" in out.getvalue()) is show  # streamed, dimmed, before it folded
    commands.dispatch(repl, "/think show")
    assert THOUGHT in err.getvalue() and "think>" not in err.getvalue()


def test_think_alone_says_where_the_switch_stands_and_think_off_sets_it(model):
    made, _ = model()
    result = chat("/think", "/think off", "hi", "/think on", "/think sometimes")
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert "think = auto (reasoning yes: <think>…</think>, switchable (enable_thinking)); " in lines[1]
    assert "think = off" in lines and "think = on" in lines
    assert "error: usage: /think [show|on|off|auto], got 'sometimes'" in lines
    assert made[0].history[-1].prompt.endswith("<think>\n\n</think>\n\n")


def test_a_reply_cut_inside_the_reasoning_says_there_is_no_answer(model):
    made, queue = model()
    queue.append([b"<think>\n"] + [b"x"] * 40 + [b"</think>", b"never reached"])
    result = chat("/set max_tokens 5", "hi", "/set reasoning_budget 3", "/set reasoning_budget",
                  "/set reasoning_budget -1", "/set reasoning_budget", args=("--session", "s"))  # fmt: skip
    assert result.exit_code == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning: no answer")]
    assert len(warned) == 1 and "--max-tokens (5) ended the output inside the reasoning" in warned[0]
    assert "/set reasoning_budget N" in warned[0] and result.stdout.strip() == ""
    assert "reasoning_budget = 3\n" in result.stderr and "reasoning_budget = none\n" in result.stderr
