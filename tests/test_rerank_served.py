"""The reranker under llama-server `--rerank` (`/v1/rerank`) and under llmcli's own rank pooling, on
the same GGUF (tests/reranker_model.py): the same order and the same scores within float precision;
and `llmcli rerank -m URL` against that server."""

from __future__ import annotations

import json

import httpx
import minilm
import pytest
import reranker_model
from documents import check
from helpers import run

pytestmark = pytest.mark.served

QUERY = "What do cats like to eat?"
DOCUMENTS = [
    "Cats eat fish and mice, and sleep most of the day.",
    "The stock market fell sharply today.",
    "A man is playing a guitar on the street.",
    "Kittens drink milk; grown cats often cannot digest it.",
    "Le chat dort sur le canapé.",
    "word " * 40,
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import llamacpp_tools
    from servers import start_llama_server

    try:
        model = reranker_model.path()
        running = start_llama_server(tmp_path_factory.mktemp("logs"), slots=1, ctx=512, model=model,
                                     extra=["--rerank"])  # fmt: skip
    except (minilm.Unavailable, llamacpp_tools.ToolsUnavailable) as exc:
        pytest.skip(f"no llama-server with the test reranker here: {exc}")
    yield model, running
    running.process.terminate()
    running.process.wait(timeout=60)


def test_local_scores_agree_with_llama_server(server, isolated):
    from llmcli import loader

    model, running = server
    body = {"model": running.model, "query": QUERY, "documents": DOCUMENTS}
    answer = httpx.post(f"{running.url}/rerank", json=body, timeout=120).json()
    served = {r["index"]: r["relevance_score"] for r in answer["results"]}
    reranker = loader.load_reranker(str(model))
    try:
        local = reranker.rerank(QUERY, DOCUMENTS)
    finally:
        reranker.close()
    assert sorted(served) == list(range(len(DOCUMENTS)))
    assert [served[i] for i in range(len(DOCUMENTS))] == pytest.approx(local, rel=1e-5, abs=1e-5)
    order = sorted(range(len(DOCUMENTS)), key=lambda i: -local[i])
    assert [r["index"] for r in answer["results"]] == order  # the server sends them best first


def test_rerank_command_against_the_server_matches_the_local_one(server, isolated, tmp_path):
    model, running = server
    files = []
    for i, text in enumerate(DOCUMENTS):
        (tmp_path / f"d{i}.txt").write_text(text)
        files.append(str(tmp_path / f"d{i}.txt"))
    served = run("rerank", "-m", running.url, QUERY, *files, "--json")
    local = run("rerank", "-m", str(model), QUERY, *files, "--json")
    assert served.exit_code == 0 and local.exit_code == 0, served.stderr + local.stderr
    a, b = (
        check(json.loads(served.stdout), "rerank/ranking"),
        check(json.loads(local.stdout), "rerank/ranking"),
    )
    assert [r["file"] for r in a["results"]] == [r["file"] for r in b["results"]]
    assert [r["score"] for r in a["results"]] == pytest.approx([r["score"] for r in b["results"]], rel=1e-5,
                                                               abs=1e-5)  # fmt: skip
    assert a["model"].startswith("http://127.0.0.1:")


def test_a_server_that_does_not_rerank_is_said_in_one_line(tmp_path_factory, isolated, tmp_path):
    import llamacpp_tools
    from servers import start_llama_server

    try:
        running = start_llama_server(tmp_path_factory.mktemp("logs"), slots=1, ctx=512,
                                     model=minilm.path(), extra=["--embeddings"])  # fmt: skip
    except (minilm.Unavailable, llamacpp_tools.ToolsUnavailable) as exc:
        pytest.skip(str(exc))
    try:
        (tmp_path / "a.txt").write_text("a cat")
        result = run("rerank", "-m", running.url, "q", str(tmp_path / "a.txt"))
    finally:
        running.process.terminate()
        running.process.wait(timeout=60)
    errors = [line for line in result.stderr.splitlines() if line.startswith("llmcli: ")]
    assert result.exit_code == 2 and result.stdout == "" and len(errors) == 1, result.stderr
    assert "does not rerank" in errors[0]
