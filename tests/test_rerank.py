"""`llmcli rerank` and `loader.load_reranker` on a real cross-encoder: the synthetic MiniLM reranker
of tests/reranker_model.py (its scores mean nothing about relevance; what holds is how they are
made and shown), and the refusals: a generative or embedding model, an empty query, a bad file."""

from __future__ import annotations

import json
from pathlib import Path

import minilm
import pytest
import reranker_model
from documents import check
from helpers import run

DOCS = {
    "cats.txt": "Cats eat fish and mice, and sleep most of the day.",
    "stocks.txt": "The stock market fell sharply today.",
    "guitar.txt": "A man is playing a guitar on the street.",
}


@pytest.fixture(scope="module")
def model() -> Path:
    try:
        return reranker_model.path()
    except minilm.Unavailable as exc:
        pytest.skip(f"the test reranker cannot be built here: {exc}")


@pytest.fixture
def files(tmp_path) -> list[str]:
    for name, text in DOCS.items():
        (tmp_path / name).write_text(text)
    return [str(tmp_path / name) for name in DOCS]


def test_scores_one_line_per_file_best_first(model, files, isolated):
    result = run("rerank", "-m", str(model), "what do cats eat?", *files)
    assert result.exit_code == 0, result.stderr
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert sorted(name for _, name in rows) == sorted(files)
    scores = [float(score) for score, _ in rows]
    assert scores == sorted(scores, reverse=True)
    assert len(set(scores)) == len(scores)  # distinct texts, distinct scores


def test_json_is_the_schema_document_with_the_same_scores_as_the_port(model, files, isolated):
    from llmcli import loader

    result = run("rerank", "-m", str(model), "what do cats eat?", *files, "--json")
    assert result.exit_code == 0, result.stderr
    doc = check(json.loads(result.stdout), "rerank/ranking")
    assert doc["query"] == "what do cats eat?" and doc["model"] == str(model)
    reranker = loader.load_reranker(str(model))
    try:
        scores = reranker.rerank("what do cats eat?", [Path(f).read_text() for f in files])
    finally:
        reranker.close()
    assert {r["file"]: r["score"] for r in doc["results"]} == pytest.approx(
        dict(zip(files, scores, strict=True)), abs=1e-5
    )
    assert [r["file"] for r in doc["results"]] == [
        f for _, f in sorted(zip(scores, files, strict=True), reverse=True)
    ]


def test_pair_is_the_cross_encoders_input_and_long_documents_are_cut(model, isolated):
    """[CLS] query [SEP] document [SEP], as llama-server builds it for a BERT vocabulary; a document
    past the context is cut to it, its closing separator kept, and counted."""
    from llmcli import loader

    reranker = loader.load_reranker(str(model))
    try:
        tokens = reranker.pair("hello world", "a cat")
        assert tokens[0] == 101 and tokens[-1] == 102 and tokens.count(102) == 2  # BERT's [CLS], [SEP]
        assert tokens.index(102) == len(reranker.tokenize("hello world", special=False)) + 1
        scores = reranker.rerank("q", ["short", "word " * 2000])
        assert len(scores) == 2 and reranker.cut == 1
        long_pair = reranker.pair("q", "word " * 2000)
        assert len(long_pair) == reranker.n_ctx and long_pair[-1] == 102
        assert reranker.rerank("q", []) == [] and reranker.cut == 0
    finally:
        reranker.close()


def test_setting_is_the_default_model_and_stdin_is_a_document(model, files, isolated):
    result = run("rerank", "what do cats eat?", files[0], "-", input="Fish, mostly.",
                 env={"LLMCLI_RERANK_MODEL": str(model)})  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert sorted(line.split("\t")[1] for line in result.stdout.splitlines()) == sorted([files[0], "-"])


def one_error(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("llmcli: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_an_embedding_model_is_refused_in_one_line(files, isolated):
    try:
        embedder = minilm.path()
    except minilm.Unavailable as exc:
        pytest.skip(str(exc))
    result = run("rerank", "-m", str(embedder), "q", *files)
    assert result.exit_code == 2 and result.stdout == ""
    assert "is an embedding model" in one_error(result) and "not relevance scores" in one_error(result)


def test_a_generative_model_is_refused_in_one_line(files, isolated, tmp_path):
    from ggufgen import write_gguf

    path = write_gguf(tmp_path / "tiny.gguf")
    result = run("rerank", "-m", str(path), "q", *files)
    assert result.exit_code == 2 and result.stdout == ""
    assert "is a generative model" in one_error(result) and "scores no documents" in one_error(result)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["  ", "FILE"], "the query is empty"),
        (["q", "MISSING"], "cannot read"),
        (["q", "DIR"], "is a folder"),
        (["q", "BINARY"], "is not UTF-8 text"),
        (["q", "-", "-"], "- (stdin) can be given once"),
    ],
)
def test_bad_input_is_one_line_before_any_model_loads(args, said, files, isolated, tmp_path):
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00binary")
    names = {"FILE": files[0], "MISSING": str(tmp_path / "nope.txt"), "DIR": str(tmp_path),
             "BINARY": str(tmp_path / "bin")}  # fmt: skip
    # a model that does not exist: the input is refused before the model is even looked up
    result = run("rerank", "-m", str(tmp_path / "absent.gguf"), *[names.get(a, a) for a in args])
    assert result.exit_code == 2 and result.stdout == ""
    assert said in one_error(result)


def test_no_model_anywhere_says_how_to_give_one(files, isolated):
    result = run("rerank", "q", *files)
    assert result.exit_code == 2 and "rerank_model" in one_error(result)
