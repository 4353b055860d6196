"""Collections of passages and answers from them (`embed -i FILE --collection`, `collections sync`,
`ask`, `generate --from`) as a user runs them, on no real model: the fake engine answers (it
echoes its prompt, so what the model was given can be read back), the stand-in embedding server
(tests/embedserver.py: bag-of-words vectors) embeds. The real all-MiniLM-L6-v2 and SmolLM2 are
in test_ask_real.py."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run

SRC = Path(__file__).resolve().parents[1] / "src"

GARDEN = """# Garden

Tomatoes need six hours of sun a day.

Water the tomatoes at dawn, never at noon.
"""
KITCHEN = """# Kitchen

The oven heats to 250 degrees.

```sh
make bread --flour rye
```
"""


def one_line(result, code: int) -> str:
    assert result.exit_code == code and result.stdout == "", (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.fixture
def notes(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "garden.md").write_text(GARDEN)
    (folder / "kitchen.md").write_text(KITCHEN)
    return folder


def _embed(server, *args: str):
    result = run("embed", "-m", server.ref(), "-i", "notes/*.md", "--collection", "n", *args)
    assert result.exit_code == 0 and result.stdout == "", result.stderr
    return result


def _rows(name: str = "n") -> list[tuple]:
    from llmcli.embed import collections as store

    with store.connect() as db:
        return db.execute("SELECT p.source, p.line_start, p.line_end, e.content FROM embeddings e"
                          " JOIN passages p ON p.collection = e.collection AND p.id = e.id"
                          " WHERE e.collection = ? ORDER BY p.source, p.line_start",
                          (name,)).fetchall()  # fmt: skip


# -- passages: lines, unchanged, changed, pruned, binary ------------------------------------------


def test_each_file_becomes_passages_that_know_their_lines(embedding_server, notes):
    lines = GARDEN.splitlines() + [""]
    result = _embed(embedding_server, "--chunk", "16", "--overlap", "0")
    assert "2 files embedded" in result.stderr
    rows = _rows()
    garden = [r for r in rows if r[0].endswith("garden.md")]
    assert len(garden) > 1  # 16 tokens a passage: the file is cut
    for source, first, last, content in rows:
        text = Path(source).read_text().splitlines()
        # every line of the passage is one of the lines it says it holds, in order
        held = [line for line in content.splitlines() if line]
        assert held == [line for line in text[first - 1 : last] if line], (first, last, content)
    assert any("six hours of sun" in r[3] for r in garden) and lines
    # the fenced code block is kept whole, never cut from its fences
    code = [r[3] for r in rows if "make bread" in r[3]]
    assert code and all(c.count("```") == 2 for c in code)


def test_unchanged_files_are_not_embedded_again_changed_ones_replaced_gone_ones_pruned(
    embedding_server, notes
):
    _embed(embedding_server)
    sent = len(embedding_server.embedded())
    result = _embed(embedding_server)
    assert (
        len(embedding_server.embedded()) == sent
        and "0 files embedded (0 passages), 2 unchanged" in result.stderr
    )
    (notes / "garden.md").write_text(GARDEN.replace("six", "eight"))
    (notes / "kitchen.md").unlink()
    result = run("collections", "sync", "n")
    assert result.exit_code == 0 and result.stdout == "", result.stderr
    assert "1 file embedded" in result.stderr and "1 removed (gone)" in result.stderr
    rows = _rows()
    assert {Path(r[0]).name for r in rows} == {"garden.md"}
    assert any("eight hours" in r[3] for r in rows) and not any("six hours" in r[3] for r in rows)
    again = run("collections", "sync", "n")
    assert "0 files embedded (0 passages), 1 unchanged" in again.stderr


def test_a_binary_file_is_skipped_in_one_line_and_the_rest_stored(embedding_server, notes):
    (notes / "image.md").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0")
    result = _embed(embedding_server)
    skipped = [line for line in result.stderr.splitlines() if "skipped" in line and "image.md" in line]
    assert len(skipped) == 1 and "binary" in skipped[0]
    assert {Path(r[0]).name for r in _rows()} == {"garden.md", "kitchen.md"}


@pytest.mark.parametrize(
    ("flags", "said"),
    [(("--chunk", "4"), "too small"), (("--chunk", "64", "--overlap", "40"), "--overlap 40")],
)
def test_chunk_and_overlap_are_checked_before_anything_is_embedded(embedding_server, notes, flags, said):
    result = run("embed", "-m", embedding_server.ref(), "-i", "notes/*.md", "--collection", "n", *flags)
    assert said in one_line(result, 2) and embedding_server.requests == []


def test_a_file_that_changes_while_it_is_embedded_keeps_its_old_passages(
    embedding_server, notes, monkeypatch
):
    _embed(embedding_server)
    before = _rows()
    (notes / "garden.md").write_text(GARDEN + "\nA new paragraph about basil.\n")
    from llmcli.embed import passages, sources

    real = passages.of_file

    def changing(path, *args):
        for i, p in enumerate(real(path, *args)):
            if i == 0:  # someone saves the file while it is being read
                path.write_text(GARDEN + "\nAnother edit, about mint.\n")
            yield p

    monkeypatch.setattr(sources, "of_file", changing)
    result = _embed(embedding_server)
    changed = [line for line in result.stderr.splitlines() if "changed while it was being embedded" in line]
    assert len(changed) == 1 and "garden.md" in changed[0]
    assert _rows() == before  # nothing stored lost, nothing half-stored


def test_a_large_file_is_streamed_in_flat_memory(embedding_server, tmp_path):
    """A ~50 MB file: the process's peak memory grows by far less than the file (read line by line,
    embedded a batch of passages at a time), compared with a 1 MB one."""
    line = "The quick brown fox jumps over the lazy dog, and then it rests for a while.\n"
    peaks = {}
    for name, size in (("small", 1 << 20), ("large", 50 << 20)):
        path = tmp_path / f"{name}.txt"
        with path.open("w") as f:
            for _ in range(size // len(line)):
                f.write(line)
        peak = tmp_path / f"{name}.peak"
        code = ("import atexit, resource, sys\n"
                f"atexit.register(lambda: open({str(peak)!r}, 'w').write(str(resource.getrusage("
                "resource.RUSAGE_SELF).ru_maxrss)))\n"
                "from llmcli.cli.app import main\n"
                "sys.argv = ['llmcli'] + sys.argv[1:]\nmain()\n")  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        args = ["embed", "-m", embedding_server.ref(), "-i", str(path), "--collection", name,
                "--chunk", "512", "--overlap", "0"]  # fmt: skip
        done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                              timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "1 file embedded" in done.stderr
        peaks[name] = int(peak.read_text())  # KiB
    assert peaks["large"] - peaks["small"] < 25 * 1024, peaks  # the file whole would be 50 MB and more


# -- a database from before passages ------------------------------------------------------------


def test_a_collection_from_before_passages_is_migrated_and_its_stored_texts_searched_by_words(
    embedding_server, tmp_path, fake
):
    from embedserver import vector

    from llmcli.embed import collections as store

    path = store.db_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE collections (name TEXT PRIMARY KEY, model TEXT NOT NULL, dimensions INTEGER NOT NULL,
                                  created REAL NOT NULL, model_id TEXT);
        CREATE TABLE embeddings (collection TEXT NOT NULL REFERENCES collections(name) ON DELETE CASCADE,
            id TEXT NOT NULL, content_hash TEXT NOT NULL, content TEXT, vector BLOB NOT NULL,
            updated REAL NOT NULL, PRIMARY KEY (collection, id));
    """)
    import numpy as np

    text = "Tomatoes need six hours of sun a day."
    blob = np.asarray(vector(text), dtype=np.float32).tobytes()
    db.execute("INSERT INTO collections VALUES ('old', ?, 64, 0, NULL)", (embedding_server.ref(),))
    db.execute("INSERT INTO embeddings VALUES ('old', 't1', 'h', ?, ?, 0)", (text, blob))
    db.commit()
    db.close()
    result = run("ask", "old", "How much sun do tomatoes need?", "--search", "text", "--json")
    assert result.exit_code == 0, result.stderr
    passages = json.loads(result.stdout)["retrieval"]["passages"]
    assert [(p["id"], p["source"], p["lines"]) for p in passages] == [("t1", None, None)]
    with store.connect() as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 1


# -- answers from passages ----------------------------------------------------------------------


def test_ask_puts_the_passage_holding_the_fact_in_the_prompt_and_cites_it(embedding_server, notes, fake):
    _embed(embedding_server)
    result = run("ask", "n", "How many hours of sun do tomatoes need?", "--stats")
    assert result.exit_code == 0, result.stderr
    prompt = fake.made[0].history[0].prompt
    assert "[1] notes/garden.md:1-5" in prompt and "six hours of sun" in prompt
    assert "oven" not in prompt  # the kitchen has nothing on it: not in front of the model
    err = result.stderr.splitlines()
    assert err[0] == "[1] notes/garden.md:1-5"  # the sources, on stderr after the answer
    assert err[-1].startswith("retrieve ") and " · 1 passage · prompt " in err[-1]
    assert (
        result.stdout.startswith("echo: ") and "[1] notes/garden.md" not in result.stderr.split("retrieve")[1]
    )


def test_generate_from_json_has_the_retrieval_block(embedding_server, notes, fake):
    _embed(embedding_server)
    result = run("generate", "--from", "n", "What temperature does the oven heat to?", "--json")
    assert result.exit_code == 0 and result.stderr == "", result.stderr
    block = json.loads(result.stdout)["retrieval"]  # the record is checked against its schema (conftest)
    assert block["collection"] == "n" and block["search"] == "hybrid" and block["searched"] == 2
    assert [(p["n"], p["source"], p["lines"]) for p in block["passages"]] == [(1, "notes/kitchen.md", [1, 7])]
    assert block["passages"][0]["cosine"] > 0.3 and block["passages"][0]["bm25"] > 0
    assert set(block["timings_ms"]) == {"embed", "search", "total"}
    plain = json.loads(run("generate", "hello", "--json").stdout)
    assert plain["retrieval"] is None


@pytest.mark.parametrize("mode", ["vector", "text", "hybrid"])
def test_each_search_finds_the_passage(embedding_server, notes, fake, mode):
    _embed(embedding_server)
    result = run("ask", "n", "When should I water the tomatoes?", "--search", mode, "--json")
    assert result.exit_code == 0, result.stderr
    block = json.loads(result.stdout)["retrieval"]
    assert block["passages"][0]["source"] == "notes/garden.md" and block["search"] == mode
    assert ("embed" in block["timings_ms"]) == (mode != "text")


# -- bad input: one line each, nothing lost ------------------------------------------------------


def test_nothing_found_is_said_and_not_answered_unless_always_answer(embedding_server, notes, fake):
    _embed(embedding_server)
    line = one_line(run("ask", "n", "quantum chromodynamics on a lattice"), 8)
    assert "nothing found in collection 'n'" in line and "--always-answer" in line
    assert fake.made == []  # the model was not even loaded
    result = run("ask", "n", "quantum chromodynamics on a lattice", "--always-answer")
    assert result.exit_code == 0 and result.stdout.startswith("echo: ")
    # answered anyway: from the closest passages there are, with the words to say they do not hold it
    prompt = fake.made[0].history[0].prompt
    assert "[1] notes/" in prompt and "If the passages do not hold the answer" in prompt


def test_an_empty_collection_is_one_line(embedding_server, notes, fake):
    # texts stored without their content (no --store): vectors, but nothing to put in a prompt
    assert run("embed", "-m", embedding_server.ref(), "--collection", "bare", "some text").exit_code == 0
    line = one_line(run("ask", "bare", "anything?"), 2)
    assert "has no passages to answer from" in line and "embed -i" in line
    assert "no collection named 'none'" in one_line(run("ask", "none", "anything?"), 2)
    assert fake.made == []


def test_a_collection_of_another_embedding_model_is_one_line(embedding_server, notes, fake):
    _embed(embedding_server)
    line = one_line(run("ask", "n", "tomatoes?", "--embed-model", embedding_server.ref("other")), 2)
    assert "was embedded with" in line and "do not compare" in line
    assert line.endswith(f"(--embed-model {embedding_server.ref()}, or another collection)")
    assert len(_rows()) == 2 and fake.made == []


def test_the_collection_is_asked_with_its_own_model_whatever_embed_model_says(
    embedding_server, notes, fake, monkeypatch
):
    _embed(embedding_server)
    monkeypatch.setenv("LLMCLI_EMBED_MODEL", embedding_server.ref("other"))
    result = run("ask", "n", "How many hours of sun do tomatoes need?", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["retrieval"]["embedding_model"] == embedding_server.ref()


def test_retrieval_flags_without_from_are_refused(fake):
    assert "add --from NAME" in one_line(run("generate", "hi", "--always-answer"), 2)


# -- the reranker port (loader.load_reranker, built beside this; a stand-in here) ---------------


class StandInReranker:
    """contract.Reranker's shape: scores a passage by how often it says 'dawn'."""

    def __init__(self, ref: str) -> None:
        self.ref, self.closed = ref, False

    def rerank(self, query: str, documents: list[str]) -> list[float]:
        return [float(d.count("dawn")) for d in documents]

    def close(self) -> None:
        self.closed = True


def test_rerank_orders_by_the_rerankers_scores(embedding_server, notes, fake, monkeypatch):
    _embed(embedding_server, "--chunk", "16", "--overlap", "0")
    made = []
    def load_reranker(ref, *, threads=None, debug=False):
        made.append(StandInReranker(ref))
        return made[-1]

    monkeypatch.setattr("llmcli.loader.load_reranker", load_reranker, raising=False)
    result = run("ask", "n", "tomatoes sun water", "--rerank", "rr.gguf", "--json", "--passages", "2")
    assert result.exit_code == 0, result.stderr
    block = json.loads(result.stdout)["retrieval"]
    assert block["reranker"] == "rr.gguf" and "rerank" in block["timings_ms"]
    assert "dawn" in fake.made[0].history[0].prompt.split("\n[1] ")[1].split("\n[2] ")[0]
    assert block["passages"][0]["rerank"] == 1.0 and made[0].closed


def test_rerank_without_a_reranker_port_is_one_line(embedding_server, notes, fake, monkeypatch):
    import llmcli.loader

    if hasattr(llmcli.loader, "load_reranker"):
        monkeypatch.delattr(llmcli.loader, "load_reranker")
    _embed(embedding_server)
    sent = len(embedding_server.requests)
    assert "--rerank needs reranking models" in one_line(run("ask", "n", "sun", "--rerank", "x.gguf"), 2)
    assert len(embedding_server.requests) == sent  # said before anything was searched


# -- fusion -------------------------------------------------------------------------------------


def test_reciprocal_rank_fusion_rewards_agreement():
    from llmcli.embed.retrieve import Hit, fuse

    def hits(*ids):
        return [Hit(i, i, None, None) for i in ids]

    fused = [h.id for h in fuse(hits("a", "b", "c"), hits("c", "b", "d"))]
    assert fused[:2] == ["b", "c"] or fused[:2] == ["c", "b"]  # in both lists: above those in one
    assert fused.index("a") > 1 and fused.index("d") > 1


def test_an_answer_is_attributed_to_the_passages_it_cites_else_to_the_one_it_repeats():
    from llmcli.embed.retrieve import Hit
    from llmcli.request.grounding import Ask, Grounded

    grounded = Grounded(Ask("n"), "q", used=[Hit("a", GARDEN, "/x/garden.md", (1, 5)),
                                              Hit("b", KITCHEN, "/x/kitchen.md", (1, 7))])  # fmt: skip
    grounded.attribute("It heats to 250 degrees [2], see also [7].")
    assert grounded.cited == {2: "model"}  # [7] is no passage of this answer
    grounded.attribute("The oven heats to 250 degrees.")
    assert grounded.cited == {2: "overlap"}
    assert grounded.sources()[1].endswith("kitchen.md:1-7 (the answer repeats it)")
    grounded.attribute("I do not know.")
    assert grounded.cited == {}


def test_chat_from_answers_one_turn_from_the_passages(embedding_server, notes, fake):
    _embed(embedding_server)
    lines = ["/from n How many hours of sun do tomatoes need?", "/from n quantum lattice", "hi"]
    result = run("chat", input="".join(line + "\n" for line in lines))
    assert result.exit_code == 0, result.stderr
    prompts = [r.prompt for r in fake.made[0].history]
    assert len(prompts) == 2  # the question nothing matched was no turn
    assert "[1] notes/garden.md:1-5" in prompts[0] and "six hours of sun" in prompts[0]
    err = result.stderr.splitlines()
    phase = next(i for i, line in enumerate(err) if line.startswith("retrieve "))
    assert err[phase].endswith(" · 1 passage")  # retrieval, its own phase before the reply's
    assert any(line.startswith("[1] notes/garden.md:1-5") for line in err[phase + 1 :])
    assert sum("nothing found in collection 'n'" in line for line in err) == 1


def test_a_model_whose_context_is_not_known_still_gets_the_passages(embedding_server, notes):
    """A served model whose server does not say its context (n_ctx 0): a common one is assumed."""
    from llmcli.engine.fake import FakeEngine
    from llmcli.request import grounding

    _embed(embedding_server)

    found = grounding.find(grounding.Ask("n"), "How many hours of sun do tomatoes need?")
    engine = FakeEngine(n_ctx=0)
    prompt = grounding.fit(found, engine, 512)
    assert "[1] notes/garden.md:1-5" in prompt and "six hours" in prompt


def test_the_logged_record_keeps_the_passages(embedding_server, notes, fake):
    _embed(embedding_server)
    assert run("ask", "n", "How many hours of sun do tomatoes need?").exit_code == 0
    (entry,) = json.loads(run("logs", "--json").stdout)
    passages = entry["record"]["retrieval"]["passages"]
    assert [(p["n"], p["source"], p["lines"]) for p in passages] == [(1, "notes/garden.md", [1, 5])]


def test_a_file_stored_whole_before_passages_is_replaced_by_its_passages(embedding_server, notes):
    # what `embed -i notes/garden.md --collection n` stored before passages: one row, id the path
    result = run("embed", "-m", embedding_server.ref(), "--collection", "n", "--store", "placeholder")
    assert result.exit_code == 0
    from llmcli.embed import collections as store

    with store.connect() as db:
        whole = "UPDATE embeddings SET id = 'notes/garden.md', content = ? WHERE collection = 'n'"
        db.execute(whole, (GARDEN,))
    _embed(embedding_server)
    with store.connect() as db:
        ids = [r[0] for r in db.execute("SELECT id FROM embeddings WHERE collection = 'n'")]
    assert "notes/garden.md" not in ids and len(ids) == 2 and all("#" in i for i in ids)
