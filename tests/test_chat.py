"""The chat loop and every slash command, on the fake engine through piped stdin."""

from __future__ import annotations

import json
import re

import pytest
from helpers import run, use_engine

from llmcli.engine.fake import FakeEngine


@pytest.fixture
def engine(fake):
    """The fake engine's factory (conftest's `fake`), under the name these tests use."""
    return fake


def chat(*lines: str, args: tuple[str, ...] = ()):
    return run("chat", *args, input="".join(line + "\n" for line in lines))


def test_replies_on_stdout_readout_on_stderr(engine):
    result = chat("first question", "second question")
    assert result.exit_code == 0
    assert result.stdout == "echo: first question\necho: second question\n"
    assert result.stderr.count("decode") >= 2 and "context" in result.stderr


def test_history_is_the_context_and_the_cache_is_reused(engine):
    chat("alpha", "beta")
    first, second = engine.made[0].history
    assert "alpha" in second.prompt and "echo: alpha" in second.prompt and "beta" in second.prompt
    assert second.cached_tokens >= len(first.prompt) - 1
    assert second.cached_tokens > 0


def test_reuse_is_shown_in_the_readout(engine):
    result = chat("alpha", "beta")
    assert "reused" in result.stderr.splitlines()[-1]


def test_clear_resets_history_and_cache(engine):
    chat("alpha", "/clear", "beta")
    last = engine.made[0].history[-1]
    assert "alpha" not in last.prompt
    assert last.cached_tokens == 0


def test_system_prompt(engine):
    chat("/system Answer in French.", "hello")
    assert "Answer in French." in engine.made[0].history[-1].prompt


def test_undo_drops_last_exchange(engine):
    chat("alpha", "beta", "/undo", "gamma")
    prompt = engine.made[0].history[-1].prompt
    assert "alpha" in prompt and "beta" not in prompt and "gamma" in prompt


def test_retry_regenerates_last_answer(engine):
    result = chat("alpha", "/retry")
    assert result.stdout.count("echo: alpha") == 2
    last = engine.made[0].history[-1].prompt
    assert last.count("echo: alpha") == 0  # the discarded answer is not in the retried prompt


def test_set_lists_and_changes_settings(engine):
    result = chat("/set", "/set temperature 0.2", "/set top_p 3", "hello")
    assert "temperature = 0.8" in result.stderr
    assert "json_schema" not in result.stderr and "grammar" not in result.stderr  # not /set's to change
    assert "temperature = 0.2" in result.stderr
    assert "top_p must be in (0, 1]" in result.stderr and "--top-p" not in result.stderr  # /set's name
    assert engine.made[0].history[-1].params.temperature == 0.2
    assert engine.made[0].history[-1].params.top_p == 0.95


def test_set_name_alone_shows_it_and_none_clears_the_stop_list(engine):
    result = chat("/set stop END|STOP", "/set top-k", "/set spec-type", "/set cache-type-v", "hello",
                  "/set stop none", "/set stop", "/set nosuch", "again")  # fmt: skip
    err = result.stderr.splitlines()
    assert "stop = END|STOP" in err and "top-k = 40" in err  # as /set takes it, not a Python list
    assert "spec-type = none" in err and "cache-type-v = f16" in err
    assert err.count("stop = none") == 2 and "usage" not in result.stderr
    assert sum("unknown setting 'nosuch'" in line for line in err) == 1
    assert engine.made[0].history[-1].params.stop == []
    assert len(engine.made) == 1  # showing a speculative or KV setting loads nothing again


def test_set_refuses_what_is_not_a_setting_in_one_line_and_the_chat_goes_on(engine):
    result = chat("/set json_schema off", "/set defaulted abc", "/set seed 1.5", "/set temperature inf",
                  "/set repeat_last_n -3", "/set repeat_penalty inf", "hello")  # fmt: skip
    assert result.exit_code == 0 and "Traceback" not in result.stderr
    assert result.stderr.count("unknown setting") == 2 and "spec-type" in result.stderr
    assert "seed needs an integer (or none), got '1.5'" in result.stderr
    assert "temperature must be >= 0 and finite, got inf" in result.stderr
    assert (
        "repeat_last_n must be >= 0" in result.stderr
        and "repeat_penalty must be > 0 and finite" in result.stderr
        and "--" not in result.stderr
    )
    assert result.stdout == "echo: hello\n"
    params = engine.made[0].history[-1].params
    assert params.temperature == 0.8 and params.repeat_last_n == 64 and params.json_schema is None


def test_show_and_set_print_values_as_they_are_typed(engine):
    result = chat("/set temperature 0", "/set seed", "/show", "/set")
    err = result.stderr.splitlines()
    assert "temperature = 0" in err and "seed = random" in err
    [params] = [line for line in err if line.startswith("params     ")]
    items = dict(item.split(" ", 1) for item in params.removeprefix("params     ").split(", "))
    assert items["temperature"] == "0" and items["seed"] == "random" and items["stop"] == "none"
    assert "json_schema" not in items and "grammar" not in items and "reasoning_budget_message" not in items
    listed = [line.strip() for line in err if line.startswith("  ") and " = " in line]
    assert "seed = random" in listed and "reasoning_budget = none" in listed
    shown = "\n".join([params, *listed])
    assert not any(word in shown for word in ("None", "False", "True", "[]", "=''"))


def test_show_and_context_and_stats(engine):
    result = chat("/stats", "hello", "/show", "/context", "/stats")
    err = result.stderr
    assert "no turns yet" in err
    assert "template   fallback:gemma" in err
    assert "kv cache   K f16, V f16; weights repacked" in err
    assert "context:" in err and "user" in err and "assistant" in err
    session = [line for line in err.splitlines() if line.startswith("session: ")]
    assert len(session) == 1 and re.fullmatch(
        r"session: 1 turn · prompt \d+ tok · prefill [\d.]+ tok/s · generated \d+ tok · decode [\d.]+ tok/s",
        session[0],
    ), session
    assert re.search(r"^last turn: prompt \d+ tok · .* · context \d+/\d+$", err, re.M)


def test_context_rows_add_up_to_its_total(engine):
    result = chat("/system Be brief.", "hello there", "and again", "/context")
    lines = result.stderr.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("context: "))
    total = int(re.match(r"context: (\d+) of \d+ tokens", lines[head]).group(1))
    row = r"  \s{3} (\S+)\s+(\d+) tok|  \s*\d+ (\S+)\s+(\d+) tok"
    rows = [re.match(row, line) for line in lines[head + 1 :]]
    counts = {}
    for m in filter(None, rows):
        role, n = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        counts.setdefault(role, []).append(int(n))
    assert set(counts) == {"system", "user", "assistant", "template"}
    assert len(counts["user"]) == 2 and counts["template"][0] > 0
    assert sum(sum(v) for v in counts.values()) == total


def test_help_lists_every_command(engine):
    from llmcli.repl.commands import REGISTRY

    result = chat("/help")
    for name in REGISTRY:
        assert name in result.stderr


def test_unknown_command(engine):
    result = chat("/nope", "/he")
    assert "unknown command /nope" in result.stderr
    assert "did you mean /help" in result.stderr


@pytest.mark.parametrize("word", ["/exit", "/bye", "/quit"])
def test_exit_stops_reading(engine, word):
    result = chat("one", word, "two")
    assert result.exit_code == 0 and "echo: one" in result.stdout and "two" not in result.stdout
    assert "unknown command" not in result.stderr


def test_question_mark_is_help(engine):
    assert "/retry" in chat("/?").stderr


def test_double_slash_sends_a_message(engine):
    result = chat("//etc/hosts is a file")
    assert result.stdout == "echo: /etc/hosts is a file\n"


def test_session_saved_after_every_turn_and_resumed(engine, isolated):
    chat("alpha", args=("--session", "work"))
    path = isolated / "data" / "sessions" / "work.json"
    doc = json.loads(path.read_text())
    assert [m["role"] for m in doc["messages"]] == ["user", "assistant"]
    assert doc["messages"][1]["stats"]["completion_tokens"] > 0
    assert doc["model"]
    result = chat("beta", args=("--resume",))
    assert "continuing session 'work'" in result.stderr
    prompt = engine.made[-1].history[-1].prompt
    assert "alpha" in prompt and "beta" in prompt
    doc = json.loads(path.read_text())
    assert len(doc["messages"]) == 4


def test_ctrl_c_before_a_reply_streams_or_during_the_autosave_keeps_the_chat_and_the_save(
    engine, isolated, monkeypatch
):
    """Ctrl-C while the history is fitted breaks into nothing: the reply stops as it begins and the
    history is as it was. One while the session is saved after a reply is ignored: the save is
    whole. The chat goes on either way (before, it ended the chat with 130)."""
    import os
    import signal

    from llmcli.conversation import Conversation
    from llmcli.repl import session_files

    real_fit, real_save = Conversation.fit, session_files.save

    fits = []

    def fit(self, *args, **kwargs):
        fits.append(1)
        if len(fits) == 1:  # the first turn's
            os.kill(os.getpid(), signal.SIGINT)
        return real_fit(self, *args, **kwargs)

    def save(name, record):
        os.kill(os.getpid(), signal.SIGINT)
        return real_save(name, record)

    monkeypatch.setattr(Conversation, "fit", fit)
    monkeypatch.setattr(session_files, "save", save)
    result = chat("alpha", "beta", "gamma", args=("--session", "work"))
    assert result.exit_code == 0, result.stderr
    assert "echo: alpha" not in result.stdout and "echo: beta\necho: gamma\n" in result.stdout
    assert "interrupted before the first token" in result.stderr
    doc = json.loads((isolated / "data" / "sessions" / "work.json").read_text())
    assert [m["content"] for m in doc["messages"]] == ["beta", "echo: beta", "gamma", "echo: gamma"]


def test_resume_and_load_give_back_the_sessions_sampling_settings_where_no_flag_says_otherwise(
    engine, isolated
):
    chat("/set temperature 0.3", "/set top_k 7", "/set stop END|STOP", "/set seed 5", "alpha",
         args=("--session", "work"))  # fmt: skip
    path = isolated / "data" / "sessions" / "work.json"
    doc = json.loads(path.read_text())
    assert doc["params"]["temperature"] == 0.3 and doc["params"]["stop"] == ["END", "STOP"]
    chat("beta", args=("--resume",))
    params = engine.made[-1].history[-1].params
    assert (params.temperature, params.top_k, params.stop, params.seed) == (0.3, 7, ["END", "STOP"], 5)
    chat("gamma", args=("--resume", "--temperature", "0.9", "--seed", "9"))  # a flag wins
    params = engine.made[-1].history[-1].params
    assert (params.temperature, params.top_k, params.seed) == (0.9, 7, 9)
    doc = json.loads(path.read_text())
    doc["params"].update(temperature="hot", top_k=-3, max_tokens=2.5, stop="END")  # a hand-edited file
    path.write_text(json.dumps(doc))
    result = chat("delta", args=("--resume",))
    assert result.exit_code == 0, result.stderr
    params = engine.made[-1].history[-1].params
    assert (params.temperature, params.top_k, params.max_tokens, params.stop) == (0.8, 40, 512, [])
    chat("/set temperature 0.4", "/save mine")
    result = chat("/load mine", "epsilon")
    assert engine.made[-1].history[-1].params.temperature == 0.4


def test_save_and_load(engine):
    chat("alpha", "/save mine")
    result = chat("/load mine", "beta")
    assert "loaded session 'mine': 2 messages" in result.stderr
    assert "alpha" in engine.made[-1].history[-1].prompt


def test_save_never_replaces_another_conversation_unless_forced(engine, isolated):
    chat("alpha", "/save mine")
    path = isolated / "data" / "sessions" / "mine.json"
    before = path.read_bytes()
    result = chat("beta", "/save mine", "/save mine extra", "gamma")
    assert result.exit_code == 0 and result.stdout.count("echo:") == 2
    assert "a saved session named 'mine' holds another conversation" in result.stderr
    assert "`/save mine --force` replaces it" in result.stderr and "usage: /save" in result.stderr
    assert path.read_bytes() == before
    chat("/load mine", "delta", "/save mine")  # its own session: saved in place
    assert [m["content"] for m in json.loads(path.read_text())["messages"]][::2] == ["alpha", "delta"]
    result = chat("epsilon", "/save mine --force")
    assert "saved to" in result.stderr
    assert [m["content"] for m in json.loads(path.read_text())["messages"]] == ["epsilon", "echo: epsilon"]


def test_corrupt_session_is_reported_and_left_untouched(engine, isolated):
    folder = isolated / "data" / "sessions"
    folder.mkdir(parents=True)
    bad = folder / "broken.json"
    bad.write_text('{"format": 1, "messages": [tru')
    before = bad.read_bytes()
    result = chat("hello", args=("--session", "broken"))
    assert result.exit_code == 1
    assert "broken.json" in result.stderr and "untouched" in result.stderr
    assert bad.read_bytes() == before
    result = chat("/load broken", "hello")
    assert "broken.json" in result.stderr
    assert bad.read_bytes() == before


def test_resume_without_sessions(engine):
    result = chat("hi", args=("--resume",))
    assert result.exit_code == 2 and "no saved session" in result.stderr


def test_interrupted_answer_is_kept_and_marked(monkeypatch, tmp_path):
    factory = FakeEngine.factory(replies=["0123456789", "ok"], interrupt_after=3)
    use_engine(factory)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    result = run("chat", "-m", str(model), "--session", "s", input="count\nnext\n")
    assert "[interrupted" in result.stderr
    assert result.stdout.startswith("012\n")
    assert "012" in factory.made[0].history[-1].prompt


def test_ctrl_c_before_the_first_token_leaves_the_history_as_it_was(tmp_path):
    """Nothing was said: no empty answer is kept (a history of two user turns in a row would not
    even render with some templates), and /retry stopped that early keeps the previous answer."""
    from llmcli.repl import session_files

    factory = FakeEngine.factory(replies=["first answer", "x", "y"])
    use_engine(factory)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    result = run("chat", "-m", str(model), "--session", "early", input="hello\n")
    assert result.exit_code == 0, result.stderr
    factory.made.clear()
    use_engine(FakeEngine.factory(replies=["never"], interrupt_after=0))
    result = run("chat", "-m", str(model), "--session", "early", input="cut me off\n/retry\n/context\n")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count("[interrupted before the first token: the history is as it was]") == 2
    messages = session_files.load("early")["messages"]
    assert [(m["role"], m["content"]) for m in messages] == [("user", "hello"), ("assistant", "first answer")]


def test_overflow_drops_oldest_with_notice(monkeypatch, tmp_path):
    factory = FakeEngine.factory(n_ctx=400, replies=["x" * 60] * 10)
    use_engine(factory)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    lines = [f"message number {i} " + "y" * 40 for i in range(6)]
    result = run("chat", "-m", str(model), "-n", "60", "--system", "SYS", input="\n".join(lines) + "\n")
    assert result.exit_code == 0
    assert "dropped the" in result.stderr
    last = factory.made[0].history[-1].prompt
    assert "SYS" in last and "message number 5" in last and "message number 0" not in last


def test_overflow_error_policy(monkeypatch, tmp_path):
    factory = FakeEngine.factory(n_ctx=300, replies=["x" * 60] * 10)
    use_engine(factory)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    lines = [f"message number {i} " + "y" * 40 for i in range(5)]
    result = run(
        "chat", "-m", str(model), "-n", "60", "--on-overflow", "error", input="\n".join(lines) + "\n"
    )
    assert "prompt too long" in result.stderr


def test_bad_overflow_policy(engine):
    result = chat("x", args=("--on-overflow", "sometimes"))
    assert result.exit_code == 2


def test_model_switch_keeps_conversation(engine, tmp_path):
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF")
    result = chat("alpha", f"/model {other}", "beta")
    assert "now using" in result.stderr
    assert len(engine.made) == 2
    assert "alpha" in engine.made[1].history[-1].prompt
