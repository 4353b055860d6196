"""`ask` and `generate --from` with served embedding and reranking models (issue 65 point 3: they
work the same way as local ones): a collection embedded through a real llama-server `--embeddings`
on all-MiniLM-L6-v2 (tests/minilm.py) finds the passages the same GGUF finds locally, and
`--rerank URL` through llama-server `--rerank` (`/v1/rerank`, tests/reranker_model.py) scores and
orders them as the local reranker does. The fake engine answers (it echoes its prompt)."""

from __future__ import annotations

import json
from pathlib import Path

import minilm
import pytest
import reranker_model
from helpers import run

pytestmark = pytest.mark.served

NOTES = {
    "garden.md": "# Garden\n\nTomatoes need six hours of sun a day.\n\n"
    "Water the tomatoes at dawn, never at noon.\n\n"
    "Roses bloom in June and want their old flowers cut.\n",
    "kitchen.md": "# Kitchen\n\nThe oven heats to 250 degrees.\n\n"
    "Bread is baked on Fridays with rye flour.\n",
    "office.md": "# Office\n\nThe printer on the second floor has been broken since Monday.\n",
}


def _serve(tmp_path_factory, model, flag: str):
    import llamacpp_tools
    from servers import start_llama_server

    try:
        running = start_llama_server(tmp_path_factory.mktemp("logs"), slots=1, ctx=512, threads=1,
                                     model=model(), extra=[flag])  # fmt: skip
    except (minilm.Unavailable, llamacpp_tools.ToolsUnavailable) as exc:
        pytest.skip(f"no llama-server {flag} with the test model here: {exc}")
    return running


def _stop(running) -> None:
    running.process.terminate()
    running.process.wait(timeout=60)


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    running = _serve(tmp_path_factory, minilm.path, "--embeddings")
    yield running
    _stop(running)


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    running = _serve(tmp_path_factory, reranker_model.path, "--rerank")
    yield running
    _stop(running)


@pytest.fixture
def notes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes").mkdir()
    for name, text in NOTES.items():
        (tmp_path / "notes" / name).write_text(text)


def _embed(model: str, name: str) -> None:
    result = run("embed", "-m", model, "-i", "notes/*.md", "--collection", name, "--chunk", "24",
                 "--overlap", "0")  # fmt: skip
    assert result.exit_code == 0 and result.stdout == "" and "3 files embedded" in result.stderr, (
        result.stderr
    )


def _found(block: dict) -> list[tuple]:
    return [(p["source"], tuple(p["lines"])) for p in block["passages"]]


def test_a_collection_embedded_by_a_served_model_answers_as_a_local_one(embedder, notes, fake):
    _embed(embedder.url, "served")
    _embed(str(minilm.path()), "local")
    question = "What temperature does the oven heat to?"
    blocks = {}
    for name in ("served", "local"):
        result = run("ask", name, question, "--search", "vector", "--json")
        assert result.exit_code == 0, result.stderr
        blocks[name] = json.loads(result.stdout)["retrieval"]
    served, local = blocks["served"], blocks["local"]
    assert served["embedding_model"].startswith(embedder.url) and "embed" in served["timings_ms"]
    assert _found(served)[0] == ("notes/kitchen.md", (1, 3))  # the passage that holds the fact
    # the same GGUF served or local: the same passages in the same order, the same cosines
    assert _found(served) == _found(local)
    cosines = [p["cosine"] for p in local["passages"]]
    assert [p["cosine"] for p in served["passages"]] == pytest.approx(cosines, abs=1e-3)
    prompt = fake.made[0].history[0].prompt
    assert "[1] notes/kitchen.md:1-3" in prompt and "250 degrees" in prompt
    # generate --from and hybrid search too, through the served embedder
    result = run("generate", "--from", "served", "When should I water the tomatoes?", "--json")
    assert result.exit_code == 0, result.stderr
    block = json.loads(result.stdout)["retrieval"]
    assert block["search"] == "hybrid" and block["passages"][0]["source"] == "notes/garden.md"
    assert "dawn" in fake.made[-1].history[0].prompt


def test_ask_rerank_through_a_served_reranker_agrees_with_the_local_one(embedder, reranker, notes, fake):
    _embed(embedder.url, "n")
    question = "When should I water the tomatoes?"
    blocks = {}
    for where, ref in (("served", reranker.url), ("local", str(reranker_model.path()))):
        result = run("ask", "n", question, "--rerank", ref, "--passages", "4", "--json")
        assert result.exit_code == 0, result.stderr
        blocks[where] = json.loads(result.stdout)["retrieval"]
    served, local = blocks["served"], blocks["local"]
    assert served["reranker"] == reranker.url and "rerank" in served["timings_ms"]
    assert len(served["passages"]) == 4 and all(isinstance(p["rerank"], float) for p in served["passages"])
    assert _found(served) == _found(local)  # the same order
    assert [p["rerank"] for p in served["passages"]] == pytest.approx(
        [p["rerank"] for p in local["passages"]], rel=1e-4, abs=1e-4
    )
    # the model was given the passages in the reranker's order
    prompt = fake.made[0].history[0].prompt
    first = served["passages"][0]
    assert f"[1] {first['source']}:{first['lines'][0]}-{first['lines'][1]}" in prompt


def test_a_served_model_that_does_not_rerank_is_one_line(embedder, notes, fake):
    _embed(embedder.url, "n")
    result = run("ask", "n", "When should I water the tomatoes?", "--rerank", embedder.url)
    errors = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and result.stdout == "" and len(errors) == 1, result.stderr
    assert errors[0].startswith("llmcli: ") and "does not rerank" in errors[0]
    assert fake.made == []
    from llmcli.embed import collections as store

    with store.connect() as db:  # nothing stored lost
        sources = {Path(r[0]).name for r in db.execute("SELECT source FROM passages WHERE collection = 'n'")}
    assert sources == set(NOTES)
