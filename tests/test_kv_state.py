"""Saved KV states on the fake engine: the file format and its checks, warm session resume,
`generate --prompt-cache`, the cap, `kv list|clear`, concurrent writers and a crash mid-save."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import run

from llmcli import kvstore
from llmcli.engine import state
from llmcli.engine.fake import FakeEngine


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch) -> Path:
    """States go under the cache directory: give every test its own (the fake needs no model)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("LLMCLI_CACHE_DIR", str(cache))
    return cache


def warm_engine(text: str = "a long shared system prompt. " * 4) -> FakeEngine:
    engine = FakeEngine()
    list(engine.stream(text, _params()))
    return engine


def _params():
    from llmcli.contract import SamplingParams

    return SamplingParams(temperature=0, max_tokens=8)


# -- the file format ------------------------------------------------------------------------


def test_round_trip_restores_the_tokens(tmp_path):
    engine = warm_engine()
    written, n = state.save(engine, tmp_path / "s.kv")
    assert n == len(engine._cached) and written == (tmp_path / "s.kv").stat().st_size
    fresh = FakeEngine()
    prompt = engine._cached + [ord("x")]
    restored = state.restore(fresh, tmp_path / "s.kv", prompt)
    assert restored.tokens == restored.saved == n and fresh._cached == engine._cached


def _rejected(path: Path, engine: FakeEngine | None = None) -> state.StateRejected:
    engine = engine or FakeEngine()
    prompt = warm_engine()._cached + [1]
    with pytest.raises(state.StateRejected) as info:
        state.restore(engine, path, prompt)
    assert engine._cached == []  # nothing half-loaded
    return info.value


@pytest.mark.parametrize("where", ["magic", "header", "token", "payload", "last"])
def test_a_flipped_byte_anywhere_is_detected(tmp_path, where):
    path = tmp_path / "s.kv"
    state.save(warm_engine(), path)
    data = bytearray(path.read_bytes())
    header_len = int.from_bytes(data[12:16], "little")
    header_at = 80
    digits = data.index(b"[", header_at + data[header_at:].index(b'"tokens"')) + 1
    offset = {"magic": 0, "header": header_at + 2, "token": digits, "payload": header_at + header_len + 3,
              "last": len(data) - 1}[where]  # fmt: skip
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    assert _rejected(path).corrupt


@pytest.mark.parametrize("keep", [0, 10, 47, 60, -1])
def test_truncation_is_detected(tmp_path, keep):
    path = tmp_path / "s.kv"
    state.save(warm_engine(), path)
    data = path.read_bytes()
    path.write_bytes(data[:keep])
    error = _rejected(path)
    assert error.corrupt and ("truncated" in error.reason or "damaged" in error.reason)


def test_a_longer_file_is_detected(tmp_path):
    path = tmp_path / "s.kv"
    state.save(warm_engine(), path)
    path.write_bytes(path.read_bytes() + b"\0")
    assert "longer" in _rejected(path).reason


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"model": {"path": "/other/model.gguf"}}, "another model"),
        ({"n_ctx": 4096}, "context size 2048, this run uses 4096"),
        ({"llama_cpp": "0.3.99"}, "another llama.cpp version (fake; this is 0.3.99)"),
        ({"type_k": "q8_0"}, "KV key type"),
        ({"swa_full": False}, "swa_full"),
        ({"repack": False}, "weight repacking True, this run uses False"),
        ({"flash_attn": "on"}, "flash attention"),
    ],
)
def test_a_foreign_or_stale_state_is_refused(tmp_path, monkeypatch, change, words):
    path = tmp_path / "s.kv"
    state.save(warm_engine(), path)
    other = FakeEngine()
    identity = {**other.state_identity(), **change}
    monkeypatch.setattr(other, "state_identity", lambda: identity)
    error = _rejected(path, other)
    assert words in error.reason and not error.corrupt


def test_another_format_version_is_refused(tmp_path):
    path = tmp_path / "s.kv"
    state.save(warm_engine(), path)
    data = bytearray(path.read_bytes())
    data[8:12] = (state.FORMAT + 1).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    assert "format" in _rejected(path).reason


def test_tokens_that_do_not_begin_the_prompt_are_not_loaded(tmp_path):
    path = tmp_path / "s.kv"
    state.save(warm_engine("hello there"), path)
    fresh = FakeEngine()
    with pytest.raises(state.StateRejected, match="do not begin"):
        state.restore(fresh, path, fresh.tokenize("something else entirely"))


def test_the_common_prefix_is_what_is_reused(tmp_path):
    path = tmp_path / "s.kv"
    state.save(warm_engine("shared prefix, then question one"), path)
    fresh = FakeEngine()
    prompt = fresh.tokenize("shared prefix, then question two")
    restored = state.restore(fresh, path, prompt)
    assert restored.tokens == len("shared prefix, then question ")
    list(fresh.stream(prompt, _params()))
    assert fresh.history[-1].cached_tokens == restored.tokens


# -- chat sessions ----------------------------------------------------------------------------


def chat(*lines: str, args=()):
    return run("--debug", "chat", *args, input="".join(line + "\n" for line in lines))


def test_a_session_resumes_warm_and_the_readout_shows_the_reuse(fake, own_cache):
    first = chat("first question", args=("--session", "work"))
    assert first.exit_code == 0, first.stderr
    kv = own_cache / "kv" / "sessions" / "work.kv"
    assert kv.is_file()
    second = chat("second question", args=("--session", "work"))
    assert second.exit_code == 0, second.stderr
    engine = fake.made[-1]
    assert engine.restored and engine.history[0].cached_tokens > 0
    assert f"({engine.history[0].cached_tokens} reused)" in second.stderr
    assert "kv state: restored" in second.stderr and "warning" not in second.stderr
    assert fake.made[0].history[1:] == []  # the first process ran one turn


def test_resume_matches_the_turn_of_a_running_chat(fake):
    """The same cached/new split as in the still-running process."""
    running = chat("one", "two")
    split_running = fake.made[-1].history[1].cached_tokens
    chat("one", args=("--session", "s"))
    chat("two", args=("--resume",))
    assert fake.made[-1].history[0].cached_tokens == split_running
    assert fake.made[-1].history[0].prompt == fake.made[0].history[1].prompt
    assert running.exit_code == 0


def test_a_damaged_session_state_gives_one_warning_and_a_fresh_prefill(fake, own_cache):
    chat("first question", args=("--session", "work"))
    kv = own_cache / "kv" / "sessions" / "work.kv"
    data = bytearray(kv.read_bytes())
    data[-5] ^= 0xFF
    kv.write_bytes(bytes(data))
    result = chat("second question", args=("--session", "work"))
    assert result.exit_code == 0
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "checksum" in warnings[0] and str(kv) in warnings[0]
    assert fake.made[-1].history[0].cached_tokens == 0 and "Traceback" not in result.stderr
    assert kv.is_file() and state.peek(kv)  # rewritten whole after the turn


def test_an_edited_history_reuses_only_what_still_matches(fake, isolated, own_cache):
    chat("first question", args=("--session", "work"))
    old_prompt = fake.made[-1].history[0].prompt
    path = isolated / "data" / "sessions" / "work.json"
    doc = json.loads(path.read_text())
    doc["messages"][0]["content"] = "a different first question"
    path.write_text(json.dumps(doc))
    result = chat("second", args=("--session", "work"))
    assert result.exit_code == 0 and "warning" not in result.stderr
    new_prompt = fake.made[-1].history[0].prompt
    common = state.common_prefix(list(old_prompt), list(new_prompt))
    assert 0 < fake.made[-1].history[0].cached_tokens == common
    assert f"{common} match the prompt and are reused" in result.stderr


def test_a_state_that_shares_nothing_is_not_loaded(fake, own_cache):
    chat("first question", args=("--session", "work"))
    kv = own_cache / "kv" / "sessions" / "work.kv"
    other = FakeEngine()
    other.file = fake.made[0].file  # the same model file, other tokens
    list(other.stream([7, 7, 7], _params()))
    state.save(other, kv)
    result = chat("second", args=("--session", "work"))
    assert result.exit_code == 0 and "warning" not in result.stderr
    assert "do not begin this prompt" in result.stderr and fake.made[-1].history[0].cached_tokens == 0


def test_kv_cache_max_mb_zero_saves_nothing(fake, own_cache):
    chat("hello", args=("--session", "w", "--kv-cache-max-mb", "0"))
    assert not (own_cache / "kv" / "sessions" / "w.kv").exists()


def test_save_and_load_commands_carry_the_state(fake, own_cache):
    chat("hello", "/save other")
    assert (own_cache / "kv" / "sessions" / "other.kv").is_file()
    result = chat("/load other", "next")
    assert result.exit_code == 0 and fake.made[-1].history[0].cached_tokens > 0


# -- generate --prompt-cache ---------------------------------------------------------------------

DOC = "A long document that every call shares. " * 10


def gen(*args: str):
    result = run("generate", *args, "--json", "--temperature", "0")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_prompt_cache_reuses_the_longest_common_prefix(fake, tmp_path):
    cache = tmp_path / "doc.kv"
    first = gen("--raw", "--prompt-cache", str(cache), DOC + "Question one?")
    assert first["usage"]["cached_tokens"] == 0 and cache.is_file()
    assert first["prompt_cache"]["saved_bytes"] == cache.stat().st_size
    second = gen("--raw", "--prompt-cache", str(cache), DOC + "Question two?")
    assert second["usage"]["cached_tokens"] == len(DOC + "Question ") + 1  # with BOS
    assert second["prompt_cache"]["restored_tokens"] == second["usage"]["cached_tokens"]
    plain = gen("--raw", DOC + "Question two?")
    assert plain["text"] == second["text"] and plain["usage"]["cached_tokens"] == 0
    assert plain["prompt_cache"] is None


def test_prompt_cache_ro_never_writes(fake, tmp_path):
    cache = tmp_path / "doc.kv"
    gen("--raw", "--prompt-cache", str(cache), "--prompt-cache-ro", DOC)
    assert not cache.exists()
    gen("--raw", "--prompt-cache", str(cache), DOC + "one")
    before = cache.read_bytes()
    ro = gen("--raw", "--prompt-cache", str(cache), "--prompt-cache-ro", DOC + "two")
    assert ro["usage"]["cached_tokens"] > 0 and cache.read_bytes() == before
    assert ro["prompt_cache"]["saved_bytes"] == 0


def test_prompt_cache_ro_needs_a_file(fake):
    result = run("generate", "--prompt-cache-ro", "hi")
    assert result.exit_code == 2 and "--prompt-cache-ro needs --prompt-cache" in result.stderr


@pytest.mark.parametrize("content", [b"", b"garbage", b"LLMCLIKV" + b"\xff" * 100])
def test_a_bad_prompt_cache_file_is_ignored_with_one_warning(fake, tmp_path, content):
    cache = tmp_path / "doc.kv"
    cache.write_bytes(content)
    result = run("generate", "--raw", "--prompt-cache", str(cache), DOC)
    assert result.exit_code == 0 and "Traceback" not in result.stderr
    assert result.stderr.count("warning") == 1 and "ignoring the saved KV state" in result.stderr
    assert state.peek(cache)  # replaced by a whole, valid state


def test_an_unwritable_prompt_cache_warns_and_keeps_the_answer(fake, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = run("generate", "--raw", "--prompt-cache", str(blocker / "sub" / "c.kv"), "hello")
    assert result.exit_code == 0 and "could not save the KV state" in result.stderr
    assert "echo: hello" in result.stdout


# -- the directory: cap, list, clear ---------------------------------------------------------------


def test_the_cap_drops_the_oldest_first(tmp_path):
    engine = warm_engine("x" * 2000)
    paths = [kvstore.session_state_path(f"s{i}") for i in range(4)]
    for i, p in enumerate(paths):
        kvstore.save(engine, p, cap=10**9)
        os.utime(p, (1000 + i, 1000 + i))
    size = paths[0].stat().st_size
    newest = kvstore.session_state_path("new")
    kvstore.save(engine, newest, cap=int(size * 2.5))
    left = sorted(p.name for p in (kvstore.kv_dir() / "sessions").glob("*.kv"))
    assert left == ["new.kv", "s3.kv"]


def test_kv_list_and_clear(fake, own_cache):
    chat("hello", args=("--session", "alpha"))
    chat("hello", args=("--session", "beta"))
    listed = run("kv", "list", "--json")
    doc = json.loads(listed.stdout)
    assert [s["name"] for s in doc["states"]] == ["beta", "alpha"]
    assert all(s["tokens"] > 0 and s["ok"] for s in doc["states"])
    assert doc["total_bytes"] == sum(s["size_bytes"] for s in doc["states"])
    table = run("kv", "list")
    assert table.stdout.splitlines()[0].split() == ["NAME", "KIND", "TOKENS", "SIZE", "UPDATED"]
    assert "2 states" in table.stderr
    assert "removed 1 KV state" in run("kv", "clear", "alpha").stderr
    assert [s["name"] for s in json.loads(run("kv", "list", "--json").stdout)["states"]] == ["beta"]
    run("kv", "clear")
    assert json.loads(run("kv", "list", "--json").stdout)["states"] == []
    assert (own_cache / "kv").is_dir()


def test_kv_clear_refuses_a_bad_name(fake):
    result = run("kv", "clear", "../etc")
    assert result.exit_code == 2 and "bad session name" in result.stderr


def test_kv_clear_of_an_unknown_name_is_an_error_and_removes_nothing(fake, own_cache):
    chat("hello", args=("--session", "alpha"))
    result = run("kv", "clear", "alpha", "alhpa")
    assert result.exit_code == 1 and result.stdout == ""
    assert "no session named 'alhpa'" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert [s["name"] for s in json.loads(run("kv", "list", "--json").stdout)["states"]] == ["alpha"]
    assert "removed 1 KV state" in run("kv", "clear", "alpha").stderr
    again = run("kv", "clear", "alpha")  # the session is still there, its state already gone
    assert again.exit_code == 0 and "removed 0 KV state" in again.stderr


def test_doctor_shows_the_states(fake):
    chat("hello", args=("--session", "alpha"))
    result = run("doctor", "--offline", "--json")
    kv = json.loads(result.stdout)["directories"]["kv"]
    assert kv["used_bytes"] > 0 and kv["cap_bytes"] == 2000 * 10**6
    assert "KV states" in run("doctor", "--offline").stdout


# -- never a half state ------------------------------------------------------------------------------


def test_a_crash_mid_save_leaves_the_previous_state(tmp_path, monkeypatch):
    path = tmp_path / "s.kv"
    state.save(warm_engine("old"), path)
    before = path.read_bytes()

    def crash(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(KeyboardInterrupt):
        state.save(warm_engine("new and longer"), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_concurrent_writers_never_leave_a_half_file(tmp_path):
    path = tmp_path / "shared.kv"
    writer = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from llmcli.engine import state
        from llmcli.engine.fake import FakeEngine
        from llmcli.contract import SamplingParams
        for i in range(25):
            e = FakeEngine()
            list(e.stream(sys.argv[1] * (50 + 37 * i), SamplingParams(temperature=0, max_tokens=2)))
            state.save(e, Path({str(path)!r}))
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", writer, c]) for c in "ab"]
    checked = 0
    while any(p.poll() is None for p in procs):
        if path.exists():
            header = state.peek(path)  # whole: size and shape check out
            try:
                state.restore(FakeEngine(), path, header.tokens + [1])  # and the checksum
            except state.StateRejected as exc:
                assert not exc.corrupt, exc.reason  # replaced in between: another whole file
            checked += 1
    assert all(p.wait() == 0 for p in procs)
    assert state.peek(path)
    assert checked > 0


def test_sigterm_mid_save_is_not_swallowed_and_keeps_the_previous_state(tmp_path, monkeypatch):
    from llmcli.errors import TerminatedError

    path = tmp_path / "s.kv"
    kvstore.save(warm_engine("old"), path, cap=None)
    before = path.read_bytes()

    def term(fd):
        raise TerminatedError("received SIGTERM")

    monkeypatch.setattr(os, "fsync", term)
    with pytest.raises(TerminatedError):
        kvstore.save(warm_engine("new"), path, cap=None)
    assert path.read_bytes() == before
