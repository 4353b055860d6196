"""The prompt-toolkit session with pipe input: key bindings, paste, completion, the interactive loop."""

from __future__ import annotations

import io

import pytest
from prompt_toolkit.document import Document
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from llmcli.contract import SamplingParams
from llmcli.conversation import Conversation
from llmcli.engine.fake import FakeEngine
from llmcli.loader import Loaded
from llmcli.repl.chat_session import ChatSession
from llmcli.repl.loop import Repl, SlashCompleter, build_prompt_session


@pytest.fixture
def pipe():
    with create_pipe_input() as inp:
        yield inp


def ask(pipe, keys: str) -> str:
    session = build_prompt_session(input=pipe, output=DummyOutput())
    pipe.send_text(keys)
    return session.prompt("> ")


def test_enter_sends(pipe):
    assert ask(pipe, "hello\r") == "hello"


def test_escape_enter_inserts_newline(pipe):
    assert ask(pipe, "first\x1b\rsecond\r") == "first\nsecond"


def test_bracketed_paste_keeps_newlines(pipe):
    assert ask(pipe, "\x1b[200~one\ntwo\nthree\x1b[201~\r") == "one\ntwo\nthree"


def test_history_is_persistent(pipe, isolated):
    ask(pipe, "remember me\r")
    history = (isolated / "data" / "chat_history").read_text()
    assert "remember me" in history


def test_slash_completion_from_registry():
    completions = list(SlashCompleter().get_completions(Document("/cl"), None))
    assert [c.text for c in completions] == ["/clear"]
    assert not list(SlashCompleter().get_completions(Document("hello /cl"), None))


def screen_text(stream: str, columns: int = 100) -> str:
    """What a terminal would show for `stream` (a pyte emulator), trailing blanks trimmed."""
    import pyte

    screen = pyte.Screen(columns, 40)
    pyte.Stream(screen).feed(stream.replace("\n", "\r\n"))
    return "\n".join(line.rstrip() for line in screen.display).strip()


def make_repl(out, err) -> tuple[Repl, FakeEngine]:
    engine = FakeEngine()
    session = ChatSession(Loaded(engine, "fake", engine.info.path), SamplingParams(), Conversation())
    return Repl(session, interactive=True, out=out, err=err), engine


def test_interactive_loop_multiline_block_ctrl_c_and_exit(pipe):
    out, err = io.StringIO(), io.StringIO()
    repl, engine = make_repl(out, err)
    prompt = build_prompt_session(input=pipe, output=DummyOutput())
    pipe.send_text('half typed\x03"""\rline one\rline two\r"""\r/exit\r')
    repl.run_interactive(prompt)
    assert len(engine.history) == 1
    assert "line one\nline two" in engine.history[0].prompt
    assert "half typed" not in engine.history[0].prompt
    assert "echo: line two" in screen_text(out.getvalue())
    assert "context" in err.getvalue()


def test_a_multiline_block_is_one_history_entry(pipe, isolated):
    """Up brings a block back whole (Enter sends it again), not its closing fence or last line."""
    out, err = io.StringIO(), io.StringIO()
    repl, engine = make_repl(out, err)
    prompt = build_prompt_session(input=pipe, output=DummyOutput())
    pipe.send_text('"""\rline one\rline two\r"""\rnext\r"""\rdropped\x03/exit\r')  # the last abandoned
    repl.run_interactive(prompt)
    assert len(engine.history) == 2 and "line one\nline two" in engine.history[0].prompt
    entries = list(prompt.history.load_history_strings())  # the file's entries, newest first
    assert entries == ["/exit", "next", "line one\nline two"], entries
    assert list(prompt.history.get_strings())[-3:] == ["line one\nline two", "next", "/exit"]


def test_ctrl_d_exits(pipe):
    out, err = io.StringIO(), io.StringIO()
    repl, engine = make_repl(out, err)
    prompt = build_prompt_session(input=pipe, output=DummyOutput())
    pipe.send_text("\x04")
    repl.run_interactive(prompt)
    assert engine.history == []
