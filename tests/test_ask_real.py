"""Passages and answers on real models: all-MiniLM-L6-v2 (tests/minilm.py, skipped where it cannot
be built) cuts and embeds the files by its own tokens and finds the passage that answers; SmolLM2
(the bundled `smollm2-135m`) answers from it, end to end, as a user runs `llmcli ask`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import minilm
import pytest
from helpers import run

SRC = Path(__file__).resolve().parents[1] / "src"
CORPUS = Path(__file__).resolve().parent / "data" / "retrieval"


@pytest.fixture(scope="module")
def model() -> Path:
    try:
        return minilm.path()
    except minilm.Unavailable as exc:
        pytest.skip(f"all-MiniLM-L6-v2 cannot be built here: {exc}")


def test_passages_are_cut_by_the_models_tokens_and_the_answering_one_is_found(model, fake, tmp_path):
    files = [CORPUS / "KV.md", CORPUS / "CONFIG.md"]
    args = [a for f in files for a in ("-i", str(f))]
    result = run(
        "embed", "-m", str(model), *args, "--collection", "docs", "--chunk", "128", "--overlap", "16"
    )
    assert result.exit_code == 0 and "2 files embedded" in result.stderr, result.stderr
    from llmcli.embed import collections as store
    from llmcli.embed.runs import Model

    engine = Model(str(model))
    try:
        with store.connect() as db:
            rows = db.execute("SELECT content FROM embeddings WHERE collection = 'docs'").fetchall()
        # the model's own count, [CLS] and [SEP] included, within the chunk (a block's count is the
        # sum of its lines', each counted alone, which only ever counts more)
        assert rows and all(len(engine.local.tokenize(r[0])) <= 128 + 16 for r in rows)
    finally:
        engine.close()
    question = "How many megabytes of saved KV states are kept at most by default?"
    for mode in ("vector", "hybrid"):
        doc = json.loads(run("ask", "docs", question, "--search", mode, "--json").stdout)
        found = doc["retrieval"]["passages"]
        # KV.md:28 holds the answer (tests/data/retrieval/questions.jsonl), and CONFIG.md:86 too (its key)
        answers = {("KV.md", 28), ("CONFIG.md", 86)}
        assert any(
            (Path(p["source"]).name, line) in answers and p["lines"][0] <= line <= p["lines"][1]
            for p in found[:5]
            for line in (28, 86)
        ), [(p["source"], p["lines"], p["cosine"], p["score"]) for p in found]


@pytest.mark.model
def test_ask_on_smollm2_answers_from_the_passage_and_cites_the_one_holding_the_fact(model, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "garden.md").write_text("# Garden\n\nThe gardener waters the tomatoes every morning at six.\n\n"
                                     "The roses bloom in June.\n")  # fmt: skip
    (notes / "kitchen.md").write_text("# Kitchen\n\nThe oven in the kitchen heats to 250 degrees.\n\n"
                                      "Bread is baked on Fridays.\n")  # fmt: skip
    (notes / "office.md").write_text("# Office\n\nThe printer on the second floor is broken since Monday.\n")
    env = {**os.environ, "PYTHONPATH": str(SRC), "LLMCLI_DATA_DIR": str(tmp_path / "data"),
           "LLMCLI_CONFIG": str(tmp_path / "config.toml")}  # fmt: skip

    def cli(*args: str):
        return subprocess.run([sys.executable, "-m", "llmcli", *args], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=600)  # fmt: skip

    done = cli("embed", "-m", str(model), "-i", "notes/*.md", "--collection", "notes")
    assert done.returncode == 0, done.stderr
    done = cli("ask", "notes", "What temperature does the oven heat to?", "-m", "smollm2-135m",
               "--temperature", "0", "-n", "48", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert "250" in doc["text"]
    passages = doc["retrieval"]["passages"]
    cited = [p for p in passages if p["cited"]]
    assert cited, (doc["text"], passages)
    # every passage the answer is attributed to is the one that holds the fact, cited by number
    # where the model wrote one, else by the words it repeats
    assert all(p["source"] == "notes/kitchen.md" and p["lines"][0] <= 3 <= p["lines"][1] for p in cited)
    plain = cli("ask", "notes", "What temperature does the oven heat to?", "-m", "smollm2-135m",
                "--temperature", "0", "-n", "48")  # fmt: skip
    assert plain.returncode == 0 and "250" in plain.stdout
    number = cited[0]["n"]
    assert f"[{number}] notes/kitchen.md:1-5" in plain.stderr  # the sources, on stderr
