"""-ctk/--cache-type-k and -ctv/--cache-type-v: flag, environment and config, checked before loading."""

from __future__ import annotations

import pytest
from helpers import run


@pytest.mark.parametrize("command", ["generate", "chat"])
def test_the_flags_reach_the_engine_lowercased(fake, command):
    args = ("hi",) if command == "generate" else ()
    result = run(command, *args, "-ctk", "Q8_0", "--cache-type-v", "q4_0", input="/bye\n")
    assert result.exit_code == 0, result.stderr
    options = fake.made[0].options
    assert (options.type_k, options.type_v) == ("q8_0", "q4_0")


def test_the_default_is_llama_cpps_f16(fake):
    assert run("generate", "hi").exit_code == 0
    assert (fake.made[0].options.type_k or "f16", fake.made[0].options.type_v or "f16") == ("f16", "f16")


def test_environment_then_config(fake, isolated, monkeypatch):
    (isolated / "config.toml").write_text('cache_type_k = "q5_1"\ncache_type_v = "Q8_0"\n')
    assert run("generate", "hi").exit_code == 0
    assert (fake.made[-1].options.type_k, fake.made[-1].options.type_v) == ("q5_1", "q8_0")
    monkeypatch.setenv("LLMCLI_CACHE_TYPE_K", "bf16")
    assert run("generate", "hi").exit_code == 0
    assert fake.made[-1].options.type_k == "bf16"
    assert run("generate", "hi", "-ctk", "f32").exit_code == 0  # the flag over both
    assert fake.made[-1].options.type_k == "f32"


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (("-ctk", "q9"), {}, "--cache-type-k: unknown KV cache type 'q9'"),
        ((), {"LLMCLI_CACHE_TYPE_V": "bogus"}, "$LLMCLI_CACHE_TYPE_V: unknown KV cache type 'bogus'"),
        (("-ctv", "q4_0", "-nfa"), {}, "a quantized V cache (q4_0) needs flash attention"),
    ],
)
def test_bad_input_is_one_line_and_nothing_loads(fake, monkeypatch, args, env, words):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = run("generate", "hi", *args)
    assert result.exit_code == 2
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == "" and fake.made == []


def test_a_bad_config_value_names_the_file(fake, isolated):
    (isolated / "config.toml").write_text('cache_type_v = "q3"\n')
    result = run("generate", "hi")
    assert result.exit_code != 0 and "cache_type_v must be one of" in result.stderr
    assert fake.made == []


def test_a_float_v_cache_needs_no_flash_attention(fake):
    assert run("generate", "hi", "-ctv", "f32", "-nfa").exit_code == 0
    assert fake.made[0].options.type_v == "f32" and fake.made[0].options.flash_attn is False


def test_chat_set_reloads_with_the_new_cache_types_and_keeps_the_conversation(fake):
    lines = ["first", "/set cache-type-k Q8_0", "/set cache_type_v q8_0", "second", "/set"]
    result = run("chat", input="".join(line + "\n" for line in lines))
    assert result.exit_code == 0, result.stderr
    assert "cache-type-k = q8_0 (model reloaded)" in result.stderr
    assert "cache_type_v = q8_0 (model reloaded)" in result.stderr
    assert len(fake.made) == 3  # the start and two reloads
    assert (fake.made[1].options.type_k, fake.made[1].options.type_v) == ("q8_0", None)  # one at a time
    last = fake.made[-1]
    assert (last.options.type_k, last.options.type_v) == ("q8_0", "q8_0")
    assert "first" in last.history[-1].prompt and "second" in last.history[-1].prompt
    assert "  cache-type-k = q8_0" in result.stderr and "  cache-type-v = q8_0" in result.stderr


def test_chat_set_f16_is_the_default_again(fake):
    result = run("chat", "-ctk", "q8_0", input="/set cache-type-k f16\nhello\n")
    assert result.exit_code == 0, result.stderr
    assert fake.made[0].options.type_k == "q8_0" and fake.made[-1].options.type_k is None


def test_chat_model_switch_keeps_the_cache_types_set_in_the_session(fake, tmp_path):
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF")
    lines = ["/set cache-type-v q4_0", "/set spec-type lookup", f"/model {other}", "hello"]
    result = run("chat", input="".join(line + "\n" for line in lines))
    assert result.exit_code == 0, result.stderr
    assert "now using" in result.stderr
    last = fake.made[-1]
    assert last.options.type_v == "q4_0"
    assert last.options.speculative.kind == "lookup"  # neither setting undoes the other


@pytest.mark.parametrize(
    ("args", "line", "words"),
    [
        ((), "/set cache-type-k q9", "cache-type-k: unknown KV cache type 'q9' (one of f32, f16"),
        (("-nfa",), "/set cache-type-v q8_0", "a quantized V cache (q8_0) needs flash attention"),
    ],
)
def test_chat_set_refuses_a_bad_cache_type_and_the_chat_goes_on(fake, args, line, words):
    result = run("chat", *args, input=f"{line}\nhello\n")
    assert result.exit_code == 0 and "Traceback" not in result.stderr
    assert words in result.stderr
    assert len(fake.made) == 1 and fake.made[0].history  # nothing reloaded; the next message was answered
    assert (fake.made[0].options.type_k, fake.made[0].options.type_v) == (None, None)


def test_a_saved_session_keeps_the_cache_types_set_in_it(fake, isolated):
    """`/set cache-type-*` is saved with the session and comes back on --resume, as its sampling
    settings do: the resumed chat then reuses the saved KV state, whose identity holds the types."""
    lines = ["/set cache-type-k q8_0", "/set cache-type-v q4_0", "hello"]
    result = run("chat", "--session", "typed", input="".join(line + "\n" for line in lines))
    assert result.exit_code == 0, result.stderr
    import json

    from llmcli.repl import session_files

    doc = json.loads(session_files.session_path("typed").read_text())
    assert (doc["cache_type_k"], doc["cache_type_v"]) == ("q8_0", "q4_0")
    before = len(fake.made)
    result = run("chat", "--resume", input="again\n")
    assert result.exit_code == 0, result.stderr
    resumed = fake.made[before]  # the first engine loaded: no reload
    assert (resumed.options.type_k, resumed.options.type_v) == ("q8_0", "q4_0")
    assert len(fake.made) == before + 1


def test_the_command_line_over_a_saved_sessions_cache_types(fake, isolated, monkeypatch):
    """A flag or variable wins over the session, which then records what ran."""
    lines = "/set cache-type-k q8_0\n/set cache-type-v q8_0\nhello\n"
    assert run("chat", "--session", "typed", input=lines).exit_code == 0
    assert run("chat", "--resume", "-ctk", "q5_0", input="again\n").exit_code == 0
    assert (fake.made[-1].options.type_k, fake.made[-1].options.type_v) == ("q5_0", "q8_0")
    monkeypatch.setenv("LLMCLI_CACHE_TYPE_V", "bf16")
    assert run("chat", "--resume", input="again\n").exit_code == 0
    assert (fake.made[-1].options.type_k, fake.made[-1].options.type_v) == ("q5_0", "bf16")


def test_a_saved_quantized_v_cache_is_skipped_under_no_flash_attention(fake, isolated):
    lines = "/set cache-type-k q8_0\n/set cache-type-v q8_0\nhello\n"
    assert run("chat", "--session", "typed", input=lines).exit_code == 0
    result = run("chat", "--resume", "-nfa", input="again\n")
    assert result.exit_code == 0, result.stderr
    assert (fake.made[-1].options.type_k, fake.made[-1].options.type_v) == ("q8_0", None)


@pytest.mark.parametrize("value", ["q9", 7, None])
def test_a_saved_session_with_no_usable_cache_type_loads_the_default(fake, isolated, value):
    import json

    from llmcli.repl import session_files

    assert run("chat", "--session", "old", input="hello\n").exit_code == 0
    path = session_files.session_path("old")
    doc = json.loads(path.read_text())
    doc["cache_type_k"] = value
    path.write_text(json.dumps(doc))
    result = run("chat", "--resume", input="again\n")
    assert result.exit_code == 0, result.stderr
    assert fake.made[-1].options.type_k is None
