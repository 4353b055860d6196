"""`llmcli logs --like TEXT`: the log ranked by meaning with the real all-MiniLM-L6-v2
(tests/minilm.py; skipped where it cannot be built): the related entry first, the index built on
first use and then only for what is new, beside -q; without an embedding model, one line."""

from __future__ import annotations

import json
from pathlib import Path

import minilm
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


@pytest.fixture(scope="module")
def model() -> Path:
    try:
        return minilm.path()
    except minilm.Unavailable as exc:
        pytest.skip(f"all-MiniLM-L6-v2 cannot be built here: {exc}")


def log(entries: list[tuple[str, str]]) -> None:
    """Rows straight through llmcli.log, as the request path writes them."""
    for prompt, answer in entries:
        rec = {"text": answer, "reasoning": None, "tool_calls": None, "finish_reason": "stop", "error": None,
               "model": {"ref": "m1", "name": "n"}, "params": {"seed": 1, "temperature": 0.0},
               "usage": {"prompt_tokens": 10, "cached_tokens": 0, "completion_tokens": 5},
               "timings": {"prefill_ms": 1, "decode_ms": 1, "ttft_ms": 1, "total_ms": 2},
               "versions": {"llmcli": "x"}}  # fmt: skip
        messages = [{"role": "user", "content": prompt}]
        row = row_values(rec, cid=new_cid(), command="generate", messages=messages)
        assert writer.write(row) is not None


def like(*args: str):
    result = run("logs", "--like", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return result, [r["id"] for r in json.loads(result.stdout)]


def test_related_entries_rank_first_and_only_new_rows_are_embedded(model, isolated):
    log(TOPICS)
    # every entry, scored (--min-score -1); by default only those of 0.25 or more (issue 63)
    result, ids = like("undo a commit in version control", "--embed-model", str(model), "--min-score", "-1")
    assert ids[0] == 3 and sorted(ids) == [1, 2, 3, 4]
    scored = json.loads(run("logs", "--like", "undo a commit in version control", "--embed-model", str(model),
                            "--json").stdout)  # fmt: skip
    assert [e["id"] for e in scored] == [3] and scored[0]["score"] > 0.6  # 0.721 measured, the rest < 0.06
    assert "embedded 8 new texts (0 already indexed)" in result.stderr  # a prompt and an answer each
    assert "embedding the log's texts (8 texts)" in result.stderr.splitlines()  # its progress (issue 63)
    result, ids = like("rings around a gas giant", "--embed-model", str(model))
    assert ids[0] == 2 and "embedded" not in result.stderr  # nothing new: nothing embedded
    log([("What should I feed a kitten?", "Kitten food, several small meals a day, and fresh water.")])
    # the model from the setting this time, as a user configures it
    result, ids = run("logs", "--like", "caring for a young cat", "--json"), None
    assert result.exit_code == 2 and "needs an embedding model" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""
    run("config", "set", "embed_model", str(model))
    result, ids = like("caring for a young cat")
    assert ids[0] == 5 and "embedded 2 new texts (8 already indexed)" in result.stderr
    # beside the other filters: -q narrows by full text, -n cuts, and the order stays by meaning
    _, ids = like("baking", "-q", "HEAD", "--min-score", "-1")
    assert ids == [3]
    _, ids = like("a sore back", "--limit", "2", "--min-score", "-1")
    assert len(ids) == 2 and ids[0] == 4


def test_pruned_entries_leave_the_index(model, isolated):
    log(TOPICS)
    like("bread", "--embed-model", str(model))
    assert run("logs", "prune", "--keep", "2").exit_code == 0
    result, ids = like("bread", "--embed-model", str(model), "--min-score", "-1")
    assert sorted(ids) == [3, 4] and "embedded" not in result.stderr
    from llmcli.embed import collections as store
    from llmcli.embed.log_index import COLLECTION

    with store.connect() as db:
        assert store.require(db, COLLECTION).count == 4  # two entries, a prompt and an answer each


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--like", " "), "needs a text"),
        (("--embed-model", "x.gguf"), "give --like too"),
        (("--like", "x", "--embed-model", "/no/such/model.gguf"), "no/such/model.gguf"),
    ],
)
def test_bad_like_is_one_line(model, isolated, args, says):
    log(TOPICS[:1])
    result = run("logs", *args)
    assert result.exit_code != 0 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and says in result.stderr


def test_the_environment_variable_names_the_model_and_plain_logs_ignore_it(model, isolated, monkeypatch):
    log(TOPICS)
    monkeypatch.setenv("LLMCLI_EMBED_MODEL", str(model))
    plain = run("logs", "--json")
    assert plain.exit_code == 0 and len(json.loads(plain.stdout)) == 4  # set, and no --like: a listing
    _, ids = like("a telescope pointed at Saturn")
    assert ids[0] == 2
