"""`llmcli embed`, `similar` and collections as a user runs them, on no real model: a stand-in
embedding server on loopback (tests/embedserver.py) and, for a local GGUF, a tiny embedding GGUF
(tests/ggufgen.py) whose llama.cpp context is replaced by a bag-of-words embedder. What the real
all-MiniLM-L6-v2 gives is in test_embed.py; here: what is refused and when, what is printed, the
default model, and which model a collection accepts."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from documents import check
from embedserver import NOT_COMPLETIONS, vector
from ggufgen import write_gguf
from helpers import run

LINES = "A man is playing a guitar.\nThe stock market fell sharply today.\n"


def one_line(result, code: int = 2) -> str:
    assert result.exit_code == code and result.stdout == "", (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def lines_of(result) -> list:
    assert result.exit_code == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


# -- -o, blank lines, --collection with --jsonl, tokens ------------------------------------------


def test_o_into_a_missing_folder_is_one_line_before_any_text_is_embedded(embedding_server, tmp_path):
    target = tmp_path / "no" / "such" / "folder" / "v.npy"
    line = one_line(run("embed", "-m", embedding_server.ref(), "-o", str(target), input=LINES))
    assert "does not exist" in line and str(target.parent) in line and "Traceback" not in line
    assert embedding_server.requests == []  # refused before the model was even asked for its name
    (tmp_path / "dir.npy").mkdir()
    assert "is a folder" in one_line(
        run("embed", "-m", embedding_server.ref(), "-o", str(tmp_path / "dir.npy"), "x")
    )
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        line = one_line(run("embed", "-m", embedding_server.ref(), "-o", str(locked / "v.npy"), "x"))
        assert "cannot write" in line
    assert embedding_server.requests == []


def test_blank_stdin_lines_are_skipped_and_counted(embedding_server):
    result = run("embed", "-m", embedding_server.ref(), "--jsonl", input="first line\n\n   \nsecond line\n\n")
    got = [check(d, "embed/line") for d in lines_of(result)]
    assert len(got) == 2 and embedding_server.embedded() == ["first line", "second line"]
    assert result.stderr.strip() == "3 blank lines skipped"
    result = run("embed", "-m", embedding_server.ref(), input="only\n\n")
    assert len(lines_of(result)) == 1 and result.stderr.strip() == "1 blank line skipped"
    assert "every line on stdin was blank" in one_line(
        run("embed", "-m", embedding_server.ref(), input="\n \n")
    )
    # an argument that is blank is still refused: the user typed it
    assert "text 2 is empty" in one_line(run("embed", "-m", embedding_server.ref(), "fine", " "))


@pytest.mark.parametrize("extra", [("--jsonl",), ("-o", "v.npy")])
def test_collection_refuses_flags_that_print_or_write_vectors(embedding_server, tmp_path, extra):
    extra = tuple(str(tmp_path / e) if e.endswith(".npy") else e for e in extra)
    result = run("embed", "-m", embedding_server.ref(), "--collection", "notes", *extra, input=LINES)
    line = one_line(result)
    assert "--collection stores the vectors instead of printing them" in line and extra[0] in line
    assert embedding_server.requests == []
    assert json.loads(run("collections", "list", "--json").stdout)["collections"] == []


def test_jsonl_lines_carry_the_tokens_field_the_help_names(embedding_server):
    assert "id, tokens" in " ".join(run("embed", "--help").stdout.split())
    got = [
        check(d, "embed/line")
        for d in lines_of(run("embed", "-m", embedding_server.ref(), "--jsonl", "a b c"))
    ]
    assert list(got[0]) == ["schema_version", "id", "tokens", "vector"]
    assert got[0]["tokens"] is None  # a server counts a request's tokens, not each text's
    assert len(got[0]["vector"]) == 64


# -- the default model: -m > LLMCLI_EMBED_MODEL > the config file ---------------------------------


def _asked(server) -> list[str]:
    return [r["body"]["model"] for r in server.requests if r["path"].endswith("/embeddings")]


def test_embed_takes_the_embed_model_setting_flag_over_env_over_config(embedding_server, monkeypatch):
    assert "embed_model setting" in one_line(run("embed", "hello"))
    assert run("config", "set", "embed_model", embedding_server.ref("emb")).exit_code == 0
    assert len(lines_of(run("embed", "hello"))) == 1 and _asked(embedding_server) == ["emb"]
    monkeypatch.setenv("LLMCLI_EMBED_MODEL", embedding_server.ref("other"))
    assert len(lines_of(run("embed", "hello"))) == 1 and _asked(embedding_server)[-1] == "other"
    assert len(lines_of(run("embed", "-m", embedding_server.ref("third"), "hello"))) == 1
    assert _asked(embedding_server)[-1] == "third"


def test_similar_takes_the_embed_model_setting_flag_over_env_over_config(embedding_server, monkeypatch):
    assert (
        run("embed", "-m", embedding_server.ref("emb"), "--collection", "notes", input=LINES).exit_code == 0
    )
    run("config", "set", "embed_model", embedding_server.ref("emb"))
    assert len(lines_of(run("similar", "notes", "a guitar"))) == 2 and _asked(embedding_server)[-1] == "emb"
    monkeypatch.setenv("LLMCLI_EMBED_MODEL", embedding_server.ref("other"))
    line = one_line(run("similar", "notes", "a guitar"))  # another model than the collection's: refused
    assert "was embedded with" in line and line.endswith(
        "vectors of two models do not compare (-m " + embedding_server.ref("emb") + ", or another collection)"
    )
    assert "#other" in line
    assert len(lines_of(run("similar", "notes", "a guitar", "-m", embedding_server.ref("emb")))) == 2
    monkeypatch.delenv("LLMCLI_EMBED_MODEL")
    run("config", "set", "embed_model", "")
    # no setting at all: the model the collection was stored with
    assert len(lines_of(run("similar", "notes", "a guitar"))) == 2


# -- a collection's model: what it is, not where it is -------------------------------------------


class BagOfWords:
    """Stands in for llama.cpp's embedding context (llmcli.engine.embedding.LlamaEmbedder)."""

    tokenizes = True  # the contract's Embedder that tokenizes here

    def __init__(self, path, *, pooling=None, threads=None, batch_tokens=None, debug=False) -> None:
        self.path, self.n_ctx, self.pooling = Path(path), 512, pooling or "mean"
        self.ref = str(path)
        self.words: list[str] = []

    def tokenize(self, text: str) -> list[int]:
        self.words.append(text)
        return list(range(len(text.split())))

    def fit(self, tokens: list[int]) -> list[int]:
        return tokens[: self.n_ctx]

    def embed(self, seqs):
        texts, self.words = self.words[-len(seqs) :], []
        return [vector(t) for t in texts]

    def close(self) -> None:
        pass


@pytest.fixture
def gguf(tmp_path, monkeypatch) -> Path:
    """A tiny embedding GGUF (BERT, mean pooling) whose context is `BagOfWords`."""
    monkeypatch.setattr("llmcli.engine.embedding.LlamaEmbedder", BagOfWords)
    folder = tmp_path / "models"
    folder.mkdir()
    return write_gguf(folder / "minilm.gguf", arch="bert", extra_kv={"bert.pooling_type": 1})


def test_local_jsonl_counts_each_texts_tokens(gguf):
    got = [
        check(d, "embed/line") for d in lines_of(run("embed", "-m", str(gguf), "--jsonl", "one two", "three"))
    ]
    assert [d["tokens"] for d in got] == [2, 1]


def test_a_copy_of_the_gguf_elsewhere_searches_the_collection(gguf, tmp_path):
    result = run("embed", "-m", str(gguf), "--collection", "notes", "--store", input=LINES)
    assert result.exit_code == 0, result.stderr
    copy = tmp_path / "elsewhere" / "renamed.gguf"
    copy.parent.mkdir()
    shutil.copy(gguf, copy)
    found = lines_of(run("similar", "notes", "playing a guitar", "-m", str(copy)))
    assert found[0]["content"] == "A man is playing a guitar."
    # the original gone, the copy adds to the collection and is its model from now on
    gguf.unlink()
    result = run("embed", "-m", str(copy), "--collection", "notes", "Cats sleep most of the day.")
    assert result.exit_code == 0 and "1 embedded" in result.stderr
    listed = json.loads(run("collections", "list", "--json").stdout)["collections"]
    assert listed[0]["model"] == str(copy.resolve()) and listed[0]["items"] == 3
    assert len(lines_of(run("similar", "notes", "a sleepy cat"))) == 3  # the copy, found by itself
    # another GGUF (other content) is another model, whatever its name
    other = write_gguf(
        tmp_path / "other.gguf", arch="bert", name="another", extra_kv={"bert.pooling_type": 1}
    )
    line = one_line(run("similar", "notes", "x", "-m", str(other)))
    assert "do not compare" in line and str(copy.resolve()) in line
    # the same path with new content is not the same model either, and says so
    copy.write_bytes(other.read_bytes())
    assert "content has changed" in one_line(run("similar", "notes", "x", "-m", str(copy)))


def test_the_hash_is_computed_once_per_file_version(gguf, monkeypatch):
    from llmcli.embed import identity

    assert run("embed", "-m", str(gguf), "--collection", "notes", input=LINES).exit_code == 0
    import hashlib
    from types import SimpleNamespace

    hashed = []
    spy = SimpleNamespace(sha256=lambda *a: hashed.append(1) or hashlib.sha256(*a))
    monkeypatch.setattr(identity, "hashlib", spy)  # identity's own hashing only
    assert len(lines_of(run("similar", "notes", "guitar", "-m", str(gguf)))) == 2
    assert hashed == []  # path, size and mtime unchanged: from the cache
    os.utime(gguf, ns=(1, 1))
    assert len(lines_of(run("similar", "notes", "guitar", "-m", str(gguf)))) == 2
    assert hashed == [1]


def test_collections_keyed_by_path_before_are_migrated_on_first_use(gguf, tmp_path):
    from llmcli.embed import collections as store

    # a database as llmcli wrote it before identities: no model_id column, the model by its path
    path = store.db_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE collections (name TEXT PRIMARY KEY, model TEXT NOT NULL, dimensions INTEGER NOT NULL,
                                  created REAL NOT NULL);
        CREATE TABLE embeddings (collection TEXT NOT NULL REFERENCES collections(name) ON DELETE CASCADE,
            id TEXT NOT NULL, content_hash TEXT NOT NULL, content TEXT, vector BLOB NOT NULL,
            updated REAL NOT NULL, PRIMARY KEY (collection, id));
    """)
    import numpy as np

    blob = np.asarray(vector("A man is playing a guitar."), dtype=np.float32).tobytes()
    db.execute("INSERT INTO collections VALUES ('old', ?, 64, 0)", (str(gguf.resolve()),))
    db.execute("INSERT INTO embeddings VALUES ('old', 'g', 'h', 'A man is playing a guitar.', ?, 0)", (blob,))
    db.commit()
    db.close()
    copy = shutil.copy(gguf, tmp_path / "copy.gguf")
    found = lines_of(run("similar", "old", "guitar", "-m", str(copy)))
    assert found[0]["id"] == "g" and found[0]["score"] > 0.3
    with store.connect() as db:
        assert store.require(db, "old").model_id.startswith("sha256:")


def test_the_same_served_model_on_another_server_searches_the_collection(embedding_server):
    from embedserver import start

    assert run("embed", "-m", embedding_server.ref(), "--collection", "notes", input=LINES).exit_code == 0
    second = start()  # the same model name on another port
    try:
        assert len(lines_of(run("similar", "notes", "guitar", "-m", second.ref()))) == 2
        assert "do not compare" in one_line(run("similar", "notes", "guitar", "-m", second.ref("other")))
        second.dimensions = 32  # the same name, vectors of another length: another model
        line = one_line(run("similar", "notes", "guitar", "-m", second.ref()))
        assert "64 dimensions" in line and "32" in line
    finally:
        second.stop()


def test_an_embeddings_only_server_refuses_generate_in_its_own_words(embedding_server):
    result = run("generate", "-m", embedding_server.ref(), "hi")
    line = one_line(result, code=1)
    assert "request refused" in line and "HTTP 500" in line and NOT_COMPLETIONS in line
