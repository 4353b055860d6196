"""`llmcli bench --scenario embed` on the real all-MiniLM-L6-v2 (tests/minilm.py; skipped where it
cannot be built): texts/s and tokens/s over generated sentences or a file's lines, every repetition
kept, the JSON document held against docs/bench-embed.schema.json; the flags that do not apply are
refused in one line. Properties only, never a speed."""

from __future__ import annotations

import json
from pathlib import Path

import minilm
import pytest
from documents import check
from helpers import run


@pytest.fixture(scope="module")
def model() -> Path:
    try:
        return minilm.path()
    except minilm.Unavailable as exc:
        pytest.skip(f"all-MiniLM-L6-v2 cannot be built here: {exc}")


def bench(*args: str):
    return run("bench", "--scenario", "embed", *args)


def test_json_document_counts_texts_and_tokens_per_repetition(model, isolated):
    result = bench("-m", str(model), "--texts", "24", "-r", "2", "-t", "1", "-b", "0,64", "-o", "json")
    assert result.exit_code == 0, result.stderr
    doc = check(json.loads(result.stdout), "bench-embed")
    assert doc["settings"]["texts"] == "generated" and doc["settings"]["n_texts"] == 24
    assert [r["batch_tokens"] for r in doc["results"]] == [None, 64]
    for r in doc["results"]:
        assert r["n_texts"] == 24 and r["repetitions"] == 2 and len(r["samples_ns"]) == 2
        assert r["n_tokens"] > 24 * 3 and r["pooling"] == "mean" and r["n_threads"] == 1
        assert r["avg_texts_s"] > 0 and r["avg_ts"] > r["avg_texts_s"]  # several tokens per text
        # each sample's rates are its own wall clock's: tokens/s over texts/s is tokens per text
        for texts_s, tokens_s in zip(r["samples_texts_s"], r["samples_ts"], strict=True):
            assert tokens_s / texts_s == pytest.approx(r["n_tokens"] / r["n_texts"], rel=1e-3)
    # the same texts whatever the batch size: the same tokens
    assert doc["results"][0]["n_tokens"] == doc["results"][1]["n_tokens"]


def test_a_files_lines_and_the_table(model, isolated, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("A man is playing a guitar.\n\nThe stock market fell.\nCats sleep.\n")
    result = bench("-m", str(model), "-f", str(texts), "-r", "1", "--no-warmup", "-t", "1")
    assert result.exit_code == 0, result.stderr
    assert "texts/s" in result.stdout and "tokens/s" in result.stdout and "±" in result.stdout
    row = next(line for line in result.stdout.splitlines() if "all-minilm" in line)
    assert [c.strip() for c in row.strip("|").split("|")][4] == "3"  # the blank line is not a text
    assert "repetition 1/1" in result.stderr and "warm-up" not in result.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("-p", "512"), "-p: not for --scenario embed"),
        (("-o", "csv"), "-o md or json"),
        (("-f", "/no/such/file"), "cannot read /no/such/file"),
        (("--texts", "5", "-f", "x"), "give one"),
    ],
)
def test_flags_that_do_not_apply_are_refused(model, isolated, args, says):
    result = bench("-m", str(model), *args)
    assert result.exit_code == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and says in result.stderr


def test_no_model_or_the_wrong_kind_is_one_line(model, isolated):
    from servers import smollm2_path

    result = bench()
    assert result.exit_code == 2 and "needs an embedding model" in result.stderr
    result = bench("-m", str(smollm2_path()), "--texts", "3")
    assert result.exit_code == 2 and "generative model" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = run("bench", "--texts", "3", "-m", str(model))
    assert result.exit_code == 2 and "--texts: only for --scenario embed" in result.stderr


def test_llmcli_model_in_the_environment_gives_way_to_embed_model(model, isolated):
    """LLMCLI_MODEL names the generative model generate and chat use: without -m, the embed
    scenario measures the `embed_model` setting instead; a -m given still wins."""
    from servers import smollm2_path

    env = {"LLMCLI_MODEL": str(smollm2_path()), "LLMCLI_EMBED_MODEL": str(model)}
    result = run("bench", "--scenario", "embed", "--texts", "4", "-r", "1", "-o", "json", env=env)
    assert result.exit_code == 0, result.stderr
    assert Path(json.loads(result.stdout)["results"][0]["model"]).name == model.name
    result = run("bench", "--scenario", "embed", "-m", str(smollm2_path()), "--texts", "3", env=env)
    assert result.exit_code == 2 and "generative model" in result.stderr


def test_a_busy_machine_is_said_as_the_standard_tests_say_it(model, isolated, monkeypatch):
    from llmcli.engine import cpu_load

    monkeypatch.setattr(cpu_load, "other_share", lambda before, after: 0.6)  # a neighbour used 60%
    result = bench("-m", str(model), "--texts", "8", "-r", "1", "--no-warmup", "-t", "1")
    assert result.exit_code == 0, result.stderr
    assert "busy machine: other processes used 60% of the CPU" in result.stdout
    quiet = bench("-m", str(model), "--texts", "8", "-r", "1", "--no-warmup", "-t", "1", "-o", "json")
    doc = check(json.loads(quiet.stdout), "bench-embed")
    assert [r["other_load"] for r in doc["results"]] == [0.6]


def test_embedding_threads_follow_the_run_queue_unless_fixed(model, monkeypatch):
    """As generate's prefill: a core for each thread that will not wait for a busy one."""
    from llmcli.engine import embedding

    follows = embedding.LlamaEmbedder(model)
    try:
        follower = follows._follower
        follower.cores, follower.read_busy = 2, lambda cores: cores  # every core busy
        follows.embed([follows.tokenize("A man is playing a guitar.")])
        assert follows.threads == 1
        follower.read_busy = lambda cores: 0  # quiet again
        follows.embed([follows.tokenize("A man is playing a guitar.")])
        assert follows.threads == 2
    finally:
        follows.close()
    fixed = embedding.LlamaEmbedder(model, threads=1)
    try:
        fixed.embed([fixed.tokenize("Cats sleep.")])
        assert fixed.threads == 1
    finally:
        fixed.close()
