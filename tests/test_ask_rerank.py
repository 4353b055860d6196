"""`ask --rerank MODEL` with the real test reranker (tests/reranker_model.py: a synthetic
cross-encoder GGUF under llama.cpp's rank pooling, skipped where it cannot be built), end to end as a
user runs it: the stand-in embedding server (tests/embedserver.py) embeds the collection, the fake
engine answers (it echoes its prompt, so what the model was given can be read back). The
reranker's scores mean nothing about relevance; what is checked is that they are its own, and that
they order the passages the model is given."""

from __future__ import annotations

import json
from pathlib import Path

import minilm
import pytest
import reranker_model
from helpers import run

NOTES = {
    "garden.md": "# Garden\n\nTomatoes need six hours of sun a day.\n\n"
    "Water the tomatoes at dawn, never at noon.\n\n"
    "Roses bloom in June and want their old flowers cut.\n",
    "kitchen.md": "# Kitchen\n\nThe oven heats to 250 degrees.\n\n"
    "Bread is baked on Fridays with rye flour.\n",
}
QUESTION = "When should I water the tomatoes in the sun?"


@pytest.fixture(scope="module")
def reranker() -> Path:
    try:
        return reranker_model.path()
    except minilm.Unavailable as exc:
        pytest.skip(f"the test reranker cannot be built here: {exc}")


@pytest.fixture
def notes(tmp_path, monkeypatch, embedding_server):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes").mkdir()
    for name, text in NOTES.items():
        (tmp_path / "notes" / name).write_text(text)
    result = run("embed", "-m", embedding_server.ref(), "-i", "notes/*.md", "--collection", "n",
                 "--chunk", "16", "--overlap", "0")  # fmt: skip
    assert result.exit_code == 0 and result.stdout == "", result.stderr
    from llmcli.embed import collections as store

    with store.connect() as db:
        rows = db.execute("SELECT p.source, p.line_start, p.line_end, e.content FROM embeddings e"
                          " JOIN passages p ON p.collection = e.collection AND p.id = e.id"
                          " WHERE e.collection = 'n'").fetchall()  # fmt: skip
    assert len(rows) > 3  # 16 tokens a passage: several, so there is an order to change
    return {(Path(source).name, first, last): content for source, first, last, content in rows}


def test_ask_rerank_scores_the_passages_with_the_real_reranker_and_gives_them_in_its_order(
    reranker, notes, fake, monkeypatch
):
    from llmcli import loader

    loaded = []
    real = loader.load_reranker

    def spy(ref, **kwargs):
        loaded.append(real(ref, **kwargs))
        return loaded[-1]

    monkeypatch.setattr(loader, "load_reranker", spy)
    result = run("ask", "n", QUESTION, "--rerank", str(reranker), "--passages", "3", "--json")
    assert result.exit_code == 0, result.stderr
    assert len(loaded) == 1 and type(loaded[0]).__name__ == "LlamaReranker"  # rank pooling, in process
    block = json.loads(result.stdout)["retrieval"]  # the record, checked against its schema (conftest)
    assert block["reranker"] == str(reranker)
    assert set(block["timings_ms"]) == {"embed", "search", "rerank", "total"}
    assert block["timings_ms"]["rerank"] > 0
    passages = block["passages"]
    assert len(passages) == 3 and all(isinstance(p["rerank"], float) for p in passages)
    assert [p["rerank"] for p in passages] == sorted((p["rerank"] for p in passages), reverse=True)
    assert all(p["score"] == p["rerank"] for p in passages)  # the reranker's order is the answer's
    # the scores are the reranker's own: scored again here, directly, the same
    contents = [notes[(Path(p["source"]).name, *p["lines"])] for p in passages]
    direct = real(str(reranker))
    try:
        again = direct.rerank(QUESTION, contents)
    finally:
        direct.close()
    assert [p["rerank"] for p in passages] == pytest.approx(again, abs=1e-4)
    # and the model was given them in that order, numbered as cited
    prompt = fake.made[0].history[0].prompt
    places = [prompt.index(f"[{p['n']}] {p['source']}:{p['lines'][0]}-{p['lines'][1]}") for p in passages]
    assert places == sorted(places) and [p["n"] for p in passages] == [1, 2, 3]
    assert all(content in prompt for content in contents)


def test_ask_rerank_stats_line_and_log_keep_the_rerank(reranker, notes, fake):
    result = run("ask", "n", QUESTION, "--rerank", str(reranker), "--stats")
    assert result.exit_code == 0 and result.stdout.startswith("echo: "), result.stderr
    assert any(line.startswith("retrieve ") and " passage" in line for line in result.stderr.splitlines())
    (entry,) = json.loads(run("logs", "--json").stdout)
    block = entry["record"]["retrieval"]
    assert block["reranker"] == str(reranker) and "rerank" in block["timings_ms"]
    assert block["passages"] and all(isinstance(p["rerank"], float) for p in block["passages"])


def test_a_generative_or_embedding_model_as_the_reranker_is_one_line_exit_2(notes, fake, tmp_path):
    from ggufgen import write_gguf

    generative = write_gguf(tmp_path / "tiny-llama.gguf")
    result = run("ask", "n", QUESTION, "--rerank", str(generative))
    assert result.exit_code == 2 and result.stdout == "", result.stderr
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("llmcli: "), result.stderr
    assert "tiny-llama.gguf is a generative model" in errors[0] and "scores no documents" in errors[0]
    assert fake.made == []  # no answer from unranked passages: the model was not even loaded
    try:
        embedder = minilm.path()
    except minilm.Unavailable:
        return
    result = run("ask", "n", QUESTION, "--rerank", str(embedder))
    errors = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and result.stdout == "" and len(errors) == 1, result.stderr
    assert "is an embedding model" in errors[0] and fake.made == []
    assert len(notes) == len(_stored())  # nothing stored lost


def _stored() -> list:
    from llmcli.embed import collections as store

    with store.connect() as db:
        return db.execute("SELECT id FROM embeddings WHERE collection = 'n'").fetchall()
