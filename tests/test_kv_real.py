"""Saved KV states on the real Gemma 3 270M: warm session resume gives the running chat's text,
`generate --prompt-cache` reuses the shared prefix, and a damaged, foreign or stale state is
ignored with one warning and the answer a fresh prefill gives."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from realmodel import llmcli

pytestmark = pytest.mark.model

DOC = (
    "The river rises in the hills above the town, where three streams meet in a wide pool. "
    "In spring the snow melts and the water runs fast and brown past the old mill. "
) * 8


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """Gemma by path, with a cache directory of this test's own for the states."""
    from llmcli.hub.default_model import model_path

    gemma = str(model_path("gemma3-270m"))
    e = dict(os.environ, LLMCLI_MODEL=gemma, LLMCLI_CACHE_DIR=str(tmp_path / "cache"))
    e["GEMMA"] = gemma
    return e


FIXED = ("-t", "2", "--temperature", "0", "-c", "2048")  # one thread count: the same arithmetic


def chat(env, *lines: str, args=()):
    result = llmcli("--debug", "chat", "--fallback-template", *FIXED, "-n", "12", *args,
                    input="".join(line + "\n" for line in lines), env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result


LONG = [DOC * 2 + " Tell me about the river.", DOC + " And the mill?", "What about the bridge?"]


def test_a_resumed_session_answers_as_the_running_chat_would(env, tmp_path):
    """A history longer than Gemma's 512-token sliding window, answers long enough to differ."""
    running = chat(env, *LONG, args=("--session", "running", "-n", "60"))
    first = chat(env, *LONG[:2], args=("--session", "r", "-n", "60"))
    kv = tmp_path / "cache" / "kv" / "sessions" / "r.kv"
    assert kv.stat().st_size > 1_000_000
    resumed = chat(env, LONG[2], args=("--resume", "-n", "60"))
    assert "kv state: restored" in resumed.stderr and "ignoring the saved KV state" not in resumed.stderr
    reused = re.findall(r"prompt (\d+) tok \((\d+) reused\)", resumed.stderr)
    running_reuse = re.findall(r"prompt (\d+) tok \((\d+) reused\)", running.stderr)
    assert reused and reused[0] == running_reuse[-1]  # the same cached/new split as the running process
    assert int(reused[0][1]) > 512
    assert first.stdout + resumed.stdout == running.stdout  # so the same text


def test_set_spec_type_keeps_the_cache_and_the_running_chats_text(env):
    """`/set spec-type lookup` loads the model again for its verification batches; the cache goes
    with it (past Gemma's sliding window), so the next turn prefills only the new message, and
    with --spec-exact (which drafts nothing at this depth) its text is the running chat's, whose
    cache is reloaded from its saved state after each turn as this one is."""
    running = chat(env, *LONG[:2], args=("--session", "same", "-n", "40"))
    switched = chat(env, LONG[0], "/set spec-type lookup", LONG[1], args=("-n", "40", "--spec-exact"))
    kept = re.search(
        r"spec-type = lookup \(model reloaded; its KV cache of (\d+) tokens kept\)", switched.stderr
    )
    assert kept and int(kept[1]) > 512, switched.stderr
    reused = re.findall(r"prompt (\d+) tok \((\d+) reused\)", switched.stderr)
    assert reused and int(reused[-1][1]) == int(kept[1])  # all of it, none prefilled again
    assert switched.stdout == running.stdout


def test_a_prefix_shorter_than_the_state_is_exact(env):
    """Reusing less than the saved tokens needs the cells a sliding-window layer had stopped
    attending to: the state holds them, so the answer is a fresh prefill's."""
    from llmcli.contract import EngineOptions, SamplingParams
    from llmcli.engine import state
    from llmcli.engine.llama import LlamaEngine

    def new():
        return LlamaEngine(env["GEMMA"], EngineOptions(ctx_size=4096, threads=2))

    params = SamplingParams(temperature=0, max_tokens=16)
    a = new()
    tokens = a.tokenize(DOC * 8, add_bos=True)[:2000]
    list(a.stream(tokens, params))
    path = Path(env["LLMCLI_CACHE_DIR"]) / "long.kv"
    state.save(a, path)
    short = tokens[:1000] + a.tokenize(" Once upon a time", add_bos=False)
    a.close()
    b = new()
    assert state.restore(b, path, short).tokens == 1000
    restored = list(b.stream(short, params))[-1]
    fresh = list(new().stream(short, params))[-1]
    assert restored.stats.cached_tokens == 1000 and restored.text == fresh.text


def test_prompt_cache_reuses_the_document_and_a_bad_file_gives_a_fresh_answer(env, tmp_path):
    cache = tmp_path / "doc.kv"

    def gen(question: str, *extra: str, ctx: str = "2048"):
        args = ("generate", "--raw", *FIXED[:4], "-c", ctx, "-n", "8", "--json", *extra, DOC + question)
        result = llmcli(*args, env=env)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout), result.stderr

    first, _ = gen("Where does the river rise?", "--prompt-cache", str(cache))
    assert first["usage"]["cached_tokens"] == 0 and cache.is_file()
    second, _ = gen("What runs past the mill?", "--prompt-cache", str(cache))
    doc_tokens = first["usage"]["prompt_tokens"] - 12
    assert second["usage"]["cached_tokens"] >= doc_tokens
    assert second["prompt_cache"]["restored_tokens"] == second["usage"]["cached_tokens"]
    before = cache.read_bytes()
    ro, _ = gen("Why is the water brown?", "--prompt-cache", str(cache), "--prompt-cache-ro")
    assert ro["usage"]["cached_tokens"] >= doc_tokens and cache.read_bytes() == before

    question = "Why is the water brown?"
    fresh, _ = gen(question)
    damaged = bytearray(before)
    damaged[len(damaged) // 2] ^= 0x10
    cases = {"checksum": bytes(damaged), "truncated": before[: len(before) // 3]}
    for words, content in cases.items():
        cache.write_bytes(content)
        result, err = gen(question, "--prompt-cache", str(cache), "--prompt-cache-ro")
        assert err.count("warning") == 1 and words in err, err
        assert result["usage"]["cached_tokens"] == 0 and result["text"] == fresh["text"]


def _rewrite_identity(path: Path, **change) -> None:
    from llmcli.engine import state

    with open(path, "rb") as f:
        header = state.read_header(f)
        payload = f.read()
    path.write_bytes(b"".join(bytes(p) for p in state.file_parts({**header.identity, **change},
                                                                 header.tokens, payload)))  # fmt: skip


@pytest.mark.parametrize("case", ["other n_ctx", "other version", "other model"])
def test_a_stale_or_foreign_state_is_ignored_with_one_warning(env, tmp_path, case):
    cache = tmp_path / "doc.kv"
    base = ("generate", "--raw", *FIXED[:4], "-n", "8", "--json")
    if case == "other model":
        from llmcli.hub.default_model import model_path

        llmcli(*base, "-c", "2048", "-m", str(model_path()), "--prompt-cache", str(cache), DOC, env=env,
               check=True)  # fmt: skip
    else:
        ctx = "1024" if case == "other n_ctx" else "2048"
        llmcli(*base, "-c", ctx, "--prompt-cache", str(cache), DOC, env=env, check=True)
        if case == "other version":
            _rewrite_identity(cache, llama_cpp="0.0.1")
    fresh = json.loads(llmcli(*base, "-c", "2048", DOC + " Then", env=env, check=True).stdout)
    result = llmcli(*base, "-c", "2048", "--prompt-cache", str(cache), DOC + " Then", env=env, check=True)
    words = {"other n_ctx": "context size 1024, this run uses 2048", "other version": "0.0.1",
             "other model": "another model file"}[case]  # fmt: skip
    assert result.stderr.count("warning") == 1 and words in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    assert doc["usage"]["cached_tokens"] == 0 and doc["text"] == fresh["text"]
