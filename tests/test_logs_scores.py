"""`llmcli logs --like`'s scores, threshold, progress and batch items, and `logs stats` without
batch items, on the stand-in embedding server (tests/embedserver.py: bag-of-words vectors, so an
entry that shares no word with the text scores 0). The ranking by a real model's meaning is
test_logs_like.py's, with all-MiniLM-L6-v2."""

from __future__ import annotations

import json

import documents
import pytest
from helpers import run

from llmcli.log import writer
from llmcli.log.rows import new_cid, row_values

TOPICS = [
    ("How do I bake sourdough bread at home?", "Feed the starter, mix flour and water, proof, bake hot."),
    ("Which planets have rings?", "Saturn most famously; Jupiter, Uranus and Neptune have faint ones."),
    ("How do I revert the last git commit?", "Use git revert HEAD, or git reset --hard HEAD~1 to drop it."),
    ("What is a good stretch for a sore back?", "Try the child's pose and knee-to-chest stretches, slowly."),
]


def log(entries, command: str = "generate", decode: float = 10.0) -> None:
    """Rows straight through llmcli.log, as the request path writes them."""
    for prompt, answer in entries:
        rec = {"text": answer, "reasoning": None, "tool_calls": None, "finish_reason": "stop", "error": None,
               "model": {"ref": "m1", "name": "n"}, "params": {"seed": 1, "temperature": 0.0},
               "usage": {"prompt_tokens": 10, "cached_tokens": 0, "completion_tokens": 5},
               "timings": {"prefill_tokens_per_s": 100.0, "decode_tokens_per_s": decode, "prefill_ms": 1,
                           "decode_ms": 1, "ttft_ms": 1, "total_ms": 2},
               "versions": {"llmcli": "x"}}  # fmt: skip
        row = row_values(rec, cid=new_cid(), command=command, messages=[{"role": "user", "content": prompt}])
        assert writer.write(row) is not None


def errors(doc) -> list[list]:
    """Where `doc` breaks the logs/entries schema: each error's path."""
    return [list(e.absolute_path) for e in documents._validator("logs/entries").iter_errors(doc)]


@pytest.fixture
def server(embedding_server):
    embedding_server.dimensions = 4096  # few shared buckets between unrelated words
    assert run("config", "set", "embed_model", embedding_server.ref()).exit_code == 0
    return embedding_server


def like(*args: str) -> list[dict]:
    result = run("logs", "--like", *args, "--json")
    assert result.exit_code == 0, result.stderr
    entries = json.loads(result.stdout)
    # the schema holds the entries' score (their record is this file's stand-in, not checked here)
    assert {tuple(where[1:2]) for where in errors(entries)} <= {("record",)}
    assert ("score",) in {tuple(where[1:2]) for where in errors([{**e, "score": "high"} for e in entries])}
    return entries


def test_like_gives_each_entry_its_score_and_leaves_the_unrelated_out(server):
    log(TOPICS)
    found = like("revert git commit", "--limit", "3")
    assert [e["id"] for e in found] == [3]  # -n is at most, not filled with unrelated entries
    assert 0.25 <= found[0]["score"] <= 1
    every = like("revert git commit", "--min-score", "0")
    assert len(every) == 4 and every[0]["id"] == 3
    assert [e["score"] for e in every] == sorted((e["score"] for e in every), reverse=True)
    assert {e["score"] for e in every[1:]} == {0.0}
    text = run("logs", "--like", "revert git commit")
    assert text.exit_code == 0 and text.stdout.startswith("#3 ")
    assert f"score {found[0]['score']:.2f}" in text.stdout.splitlines()[0]
    none = run("logs", "--like", "quantum chromodynamics lattice")
    assert none.exit_code == 0 and none.stdout == ""
    assert "no entry scores 0.25 or more (the closest: 0.00; --min-score 0 shows them all)" in none.stderr
    plain = json.loads(run("logs", "--json").stdout)
    assert len(plain) == 4 and all("score" not in e for e in plain)  # a plain listing has no score


def test_the_first_like_shows_its_progress(server):
    log(TOPICS)
    result = run("logs", "--like", "bread", "--json")
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert "embedding the log's texts (8 texts)" in lines
    assert any(line.startswith("  the log's texts: 8 texts in ") for line in lines)
    again = run("logs", "--like", "bread", "--json")
    assert "embedding" not in again.stderr  # nothing new: no progress


def test_batch_items_are_left_out_of_like_unless_asked_for(server):
    log(TOPICS)
    log([(f"Summarise git commit number {i}", f"Commit {i} changes the git history.") for i in range(5)],
        command="batch")  # fmt: skip
    result = run("logs", "--like", "git commit", "--json")
    assert [e["id"] for e in json.loads(result.stdout)] == [3]
    assert "embedded 8 new texts" in result.stderr  # the four entries' prompts and answers, no batch item
    result = run("logs", "--like", "git commit", "--json", "--with-batch")
    ids = [e["id"] for e in json.loads(result.stdout)]
    assert set(ids) == {3, 5, 6, 7, 8, 9} and "embedded 10 new texts (8 already indexed)" in result.stderr
    # indexed once, they stay; a search without them leaves them out again
    result = run("logs", "--like", "git commit", "--json")
    assert [e["id"] for e in json.loads(result.stdout)] == [3] and "embedded" not in result.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--min-score", "0.5"), "--min-score goes with --like TEXT"),
        (("--with-batch",), "--with-batch goes with --like TEXT"),
        (("--like", "x", "--min-score", "2"), "from -1 to 1"),
    ],
)
def test_like_flags_alone_or_out_of_range_are_one_line(server, args, says):
    log(TOPICS[:1])
    result = run("logs", *args)
    assert result.exit_code == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and says in result.stderr
    assert server.embedded() == []


def test_stats_leave_batch_items_out_of_a_models_speed(isolated):
    log(TOPICS, decode=20.0)
    log(TOPICS[:2], command="batch", decode=2.0)  # per-sequence speeds, beside others in the batch
    result = run("logs", "stats", "--json")
    assert result.exit_code == 0, result.stderr
    [group] = json.loads(result.stdout)
    assert group["requests"] == 4 and group["decode_tokens_per_s"]["median"] == 20
    assert group["decode_tokens_per_s"]["min"] == 20
    assert "2 batch items left out" in result.stderr
    table = run("logs", "stats")
    assert table.exit_code == 0 and "2 batch items left out" in table.stderr
