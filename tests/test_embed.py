"""`llmcli embed`, `similar` and collections on a real embedding model: all-MiniLM-L6-v2 converted
by llama.cpp's own converter (tests/minilm.py; skipped where it cannot be built), its vectors held
against a plain mean pool of the same weights (tests/data/minilm_reference.json)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import minilm
import numpy as np
import pytest
from documents import check
from helpers import run

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture(scope="module")
def model() -> Path:
    try:
        return minilm.path()
    except minilm.Unavailable as exc:
        pytest.skip(f"all-MiniLM-L6-v2 cannot be built here: {exc}")


def reference() -> list[dict]:
    return json.loads(minilm.REFERENCE.read_text())["sentences"]


def cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def sha(text: str) -> str:
    """The id of an argument or stdin line: 16 hex digits of its content's SHA-256."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def vectors(result) -> list[list[float]]:
    assert result.exit_code == 0, result.output + result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_vectors_match_the_reference_mean_pool(model, isolated):
    ref = reference()
    got = vectors(run("embed", "-m", str(model), "--no-normalize", *[r["text"] for r in ref]))
    assert len(got) == len(ref)
    for v in got:
        check(v, "embed/vector")
    for r, v in zip(ref, got, strict=True):
        assert len(v) == 384
        assert cosine(v, r["vector"]) >= 0.9999, r["text"]
        # not normalised: the mean pool's own length, as the reference has it
        assert abs(np.linalg.norm(v) - np.linalg.norm(r["vector"])) < 1e-3 * np.linalg.norm(r["vector"])


def test_normalised_by_default_and_related_sentences_rank_first(model, isolated):
    texts = [
        "A man is playing a guitar.",
        "Someone is strumming a guitar.",
        "The stock market fell sharply today.",
    ]
    got = vectors(run("embed", "-m", str(model), *texts))
    assert all(abs(np.linalg.norm(v) - 1) < 1e-4 for v in got)
    assert cosine(got[0], got[1]) > 0.5 > cosine(got[0], got[2])


def test_batched_equals_one_at_a_time(model):
    from llmcli.engine.embedding import LlamaEmbedder

    embedder = LlamaEmbedder(model, threads=2)
    try:
        texts = [r["text"] for r in reference()] + [
            f"sentence number {i} about topic {i % 7}" for i in range(40)
        ]
        seqs = [embedder.tokenize(t) for t in texts]
        assert len(list(embedder.batches(seqs))) < len(seqs)  # several sequences per batch, for real
        together = np.array(embedder.embed(seqs))
        alone = np.array([embedder.embed([s])[0] for s in seqs])
        # the same vectors to float precision (a larger batch takes other matmul kernels' paths)
        assert min(cosine(a, b) for a, b in zip(together, alone, strict=True)) >= 0.99999
    finally:
        embedder.close()


def test_outputs_jsonl_and_npy(model, isolated, tmp_path):
    result = run("embed", "-m", str(model), "--jsonl", input="first line\nsecond line\n")
    lines = [check(d, "embed/line") for d in vectors(result)]
    assert [d["id"] for d in lines] == [sha("first line"), sha("second line")]
    assert [d["tokens"] for d in lines] == [4, 4]  # [CLS] first line [SEP]
    assert all(len(d["vector"]) == 384 for d in lines)
    out = tmp_path / "v.npy"
    files = [tmp_path / "a.txt", tmp_path / "b.txt"]
    for f, text in zip(files, ["one file", "another file"], strict=True):
        f.write_text(text)
    result = run("embed", "-m", str(model), "-i", str(tmp_path / "*.txt"), "-o", str(out))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    matrix = np.load(out)
    assert matrix.shape == (2, 384) and matrix.dtype == np.float32
    whole = vectors(run("embed", "-m", str(model), "--whole", input="one\ntext\n"))
    assert len(whole) == 1


def test_long_texts_truncated_once_or_refused(model, isolated):
    long = "word " * 3000
    result = run("embed", "-m", str(model), long, long)
    assert len(vectors(result)) == 2
    assert result.stderr.count("warning") == 1 and "--no-truncate" in result.stderr
    result = run("embed", "-m", str(model), "--no-truncate", long)
    assert result.exit_code == 4 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "512" in result.stderr


@pytest.mark.parametrize(
    ("args", "stdin", "says"),
    [
        ((), "", "no text"),
        (("",), None, "empty"),
        ((), b"fine\n\xff\xfe broken\n", "line 2 is not valid UTF-8"),
        ((), "\n \n", "every line on stdin was blank"),  # a blank line among others is skipped (issue 63)
        (("--pooling", "max", "x"), None, "--pooling"),
    ],
)
def test_bad_input_is_one_line(model, isolated, args, stdin, says):
    result = run("embed", "-m", str(model), *args, input=stdin)
    assert result.exit_code == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and says in result.stderr


def test_a_ten_megabyte_line_is_cut_not_choked_on(model, isolated):
    result = run("embed", "-m", str(model), input="word " * 2_000_000 + "\n")
    assert len(vectors(result)) == 1 and result.stderr.count("warning") == 1


def test_the_wrong_kind_of_model_is_refused(model, isolated):
    from servers import smollm2_path

    generative = smollm2_path()
    result = run("generate", "-m", str(model), "hello")
    assert result.exit_code == 2 and "embedding model" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = run("embed", "-m", str(generative), "hello")
    assert result.exit_code == 2 and "generative model" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_collections_store_search_and_skip_unchanged(model, isolated):
    texts = "A man is playing a guitar.\nThe stock market fell sharply today.\nCats sleep most of the day.\n"
    result = run("embed", "-m", str(model), "--collection", "notes", "--store", input=texts)
    assert result.exit_code == 0 and result.stdout == "" and "3 embedded" in result.stderr
    result = run("embed", "-m", str(model), "--collection", "notes", "--store", input=texts)
    assert "0 embedded, 3 unchanged" in result.stderr
    result = run("similar", "notes", "Someone is strumming a guitar.", "--limit", "2")
    matches = [check(m, "embed/match") for m in vectors(result)]
    assert [m["id"] for m in matches][0] == sha("A man is playing a guitar.") and len(matches) == 2
    assert matches[0]["content"] == "A man is playing a guitar." and matches[0]["score"] > matches[1]["score"]
    listed = check(json.loads(run("collections", "list", "--json").stdout), "embed/collections")[
        "collections"
    ]
    assert listed[0]["name"] == "notes" and listed[0]["items"] == 3 and listed[0]["dimensions"] == 384
    result = run("similar", "nope", "x")
    assert result.exit_code == 2 and "no collection named 'nope'" in result.stderr
    assert run("collections", "rm", "notes").exit_code == 0
    assert json.loads(run("collections", "list", "--json").stdout)["collections"] == []


def test_another_model_is_refused_by_a_collection(model, isolated, tmp_path):
    assert run("embed", "-m", str(model), "--collection", "notes", "hello").exit_code == 0
    copy = tmp_path / "other.gguf"
    os.symlink(model, copy)
    result = run("embed", "-m", str(copy), "--collection", "notes", "other")
    if Path(copy).resolve() == Path(model).resolve():  # the same file under another name: the same model
        assert result.exit_code == 0
    from llmcli.embed import collections as store

    with store.connect() as db:
        # another model is another content hash (issue 63: a collection keys its model by content)
        db.execute("UPDATE collections SET model = 'some-other-model.gguf', model_id = 'sha256:0'")
    result = run("embed", "-m", str(model), "--collection", "notes", "again")
    assert result.exit_code == 2 and "some-other-model.gguf" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_damaged_database_is_one_line(model, isolated):
    from llmcli.embed import collections as store

    path = store.db_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"this is not a database" * 100)
    result = run("collections", "list")
    assert result.exit_code == 1 and "damaged" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


_WRITER = """
import struct, sys, time
from llmcli.embed import collections as store
with store.connect() as db:
    vec = struct.pack("384f", *([0.0] * 383 + [1.0]))
    store.store(db, "big", "m.gguf", [(str(i), "h", None, vec) for i in range(10)], 384)
    db.execute("BEGIN IMMEDIATE")
    db.executemany("INSERT OR REPLACE INTO embeddings VALUES ('big', ?, 'h2', NULL, ?, 0)",
                   [(str(i), vec) for i in range(10, 50000)])
    print("writing", flush=True)
    time.sleep(60)
"""


def test_a_killed_writer_leaves_what_was_stored_and_readers_read_on(model, isolated):
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    writer = subprocess.Popen([sys.executable, "-c", _WRITER], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
        # a concurrent reader, mid-write: sees the committed rows, never the open transaction's
        listed = json.loads(run("collections", "list", "--json").stdout)["collections"]
        assert listed == [{"name": "big", "model": "m.gguf", "dimensions": 384, "items": 10}]
        found = run("similar", "big", "--id", "3", "--limit", "100")
        assert found.exit_code == 0, found.stderr
        assert sorted(m["id"] for m in vectors(found)) == [str(i) for i in range(10) if i != 3]
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=60)
    time.sleep(0.1)
    db = sqlite3.connect(f"file:{os.environ['LLMCLI_DATA_DIR']}/embeddings.db?mode=ro", uri=True)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert db.execute("SELECT count(*) FROM embeddings").fetchone() == (10,)
    db.close()
    assert run("embed", "-m", str(model), "--collection", "more", "still writable").exit_code == 0


def test_a_second_batch_of_stdin_lines_adds_to_a_collection(model, isolated):
    first = "A man is playing a guitar.\nThe stock market fell sharply today.\n"
    second = "Cats sleep most of the day.\nA man is playing a guitar.\nCats sleep most of the day.\n"
    stored = run("embed", "-m", str(model), "--collection", "notes", "--store", input=first)
    assert "2 embedded" in stored.stderr
    result = run("embed", "-m", str(model), "--collection", "notes", "--store", input=second)
    # the guitar line is known by its content: unchanged; the repeated cat line is embedded once
    assert result.exit_code == 0 and "1 embedded, 1 unchanged" in result.stderr
    listed = json.loads(run("collections", "list", "--json").stdout)["collections"]
    assert listed[0]["items"] == 3
    matches = vectors(run("similar", "notes", "a sleepy kitten", "--limit", "3"))
    cat = "Cats sleep most of the day."
    assert matches[0]["content"] == cat and matches[0]["id"] == sha(cat)
    # --prefix keeps sources apart: the same line under another prefix is another item
    result = run("embed", "-m", str(model), "--collection", "notes", "--prefix", "mail/", input=cat + "\n")
    assert "1 embedded, 0 unchanged" in result.stderr
    found = vectors(run("similar", "notes", "--id", "mail/" + sha(cat), "--limit", "1"))
    assert found[0]["id"] == sha(cat) and found[0]["score"] > 0.999


def test_a_copy_of_the_model_elsewhere_searches_its_collection(model, isolated, tmp_path):
    texts = "A man is playing a guitar.\nThe stock market fell sharply today.\n"
    assert run("embed", "-m", str(model), "--collection", "notes", "--store", input=texts).exit_code == 0
    copy = tmp_path / "copied" / "minilm-copy.gguf"
    copy.parent.mkdir()
    shutil.copyfile(model, copy)  # another file, the same content: the same model (issue 63)
    matches = vectors(run("similar", "notes", "Someone is strumming a guitar.", "-m", str(copy)))
    assert matches[0]["content"] == "A man is playing a guitar." and matches[0]["score"] > 0.5
    result = run("embed", "-m", str(copy), "--collection", "notes", "Cats sleep most of the day.")
    assert result.exit_code == 0 and "1 embedded, 0 unchanged" in result.stderr
