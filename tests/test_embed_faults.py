"""Collections under faults, with the real all-MiniLM-L6-v2 (tests/minilm.py; skipped where it cannot
be built): a real `embed -c` killed at any moment, bad input into a collection, an unknown
collection or id, a damaged database. Each refusal is one line and a non-zero exit; nothing already
stored is lost."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import minilm
import pytest
from helpers import run

SRC = Path(__file__).resolve().parents[1] / "src"
FIRST = "A man is playing a guitar.\nThe stock market fell sharply today.\nCats sleep most of the day.\n"


@pytest.fixture(scope="module")
def model() -> Path:
    try:
        return minilm.path()
    except minilm.Unavailable as exc:
        pytest.skip(f"all-MiniLM-L6-v2 cannot be built here: {exc}")


def stored(name: str = "notes") -> dict[str, str]:
    """id -> content of a collection, read straight from the database."""
    db = sqlite3.connect(f"file:{os.environ['LLMCLI_DATA_DIR']}/embeddings.db?mode=ro", uri=True)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        return dict(db.execute("SELECT id, content FROM embeddings WHERE collection = ?", (name,)))
    finally:
        db.close()


def one_line(result, code: int = 2) -> str:
    assert result.exit_code == code and result.stdout == "", (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_real_embed_killed_at_any_moment_keeps_the_earlier_rows(model, isolated):
    assert run("embed", "-m", str(model), "--collection", "notes", "--store", input=FIRST).exit_code == 0
    before = stored()
    many = "".join(f"Sentence number {i} about the weather on day {i}.\n" for i in range(3000))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    cmd = [sys.executable, "-m", "llmcli", "embed", "-m", str(model), "--collection", "notes", "--store",
           "-t", "1"]  # fmt: skip
    writer = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    assert writer.stdin is not None
    writer.stdin.write(many.encode())
    writer.stdin.close()
    time.sleep(2)  # somewhere in loading, embedding or writing: every moment must be safe
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=60)
    after = stored()
    assert {k: after[k] for k in before} == before  # the earlier rows, whole
    assert len(after) in (len(before), len(before) + 3000)  # the killed write: all of it or none
    result = run("embed", "-m", str(model), "--collection", "notes", "--store", input=FIRST)
    assert result.exit_code == 0 and "0 embedded, 3 unchanged" in result.stderr


@pytest.mark.parametrize(
    ("args", "stdin", "says"),
    [
        ((), b"Good line.\n\xff\xfe broken\n", "line 2 is not valid UTF-8"),
        ((), b"\n \n", "every line on stdin was blank"),  # a blank line among others is skipped (issue 63)
        (("Good text.", " "), None, "text 2 is empty"),
        (("--no-truncate", "word " * 3000), None, "512"),
    ],
)
def test_bad_input_into_a_collection_stores_nothing_and_loses_nothing(model, isolated, args, stdin, says):
    assert run("embed", "-m", str(model), "--collection", "notes", "--store", input=FIRST).exit_code == 0
    before = stored()
    result = run("embed", "-m", str(model), "--collection", "notes", "--store", *args, input=stdin)
    assert result.exit_code in (2, 4) and result.stdout == ""  # 4: longer than the context
    assert len(result.stderr.strip().splitlines()) == 1 and says in result.stderr
    assert stored() == before  # not even the good texts of the refused batch


def test_a_ten_megabyte_line_goes_into_a_collection(model, isolated):
    long = "word " * 2_000_000 + "\nCats sleep.\n"
    result = run("embed", "-m", str(model), "--collection", "notes", input=long)
    assert result.exit_code == 0 and "2 embedded" in result.stderr
    assert len(stored()) == 2


def test_unknown_collections_and_ids_are_one_line(model, isolated):
    assert run("embed", "-m", str(model), "--collection", "notes", "--store", input=FIRST).exit_code == 0
    before = stored()
    assert "no collection named 'nope' (collections: notes)" in one_line(run("similar", "nope", "x"))
    assert "no collection named 'nope'" in one_line(run("collections", "rm", "nope"))
    assert "has no id 'missing'" in one_line(run("similar", "notes", "--id", "missing"))
    assert "not both" in one_line(run("similar", "notes", "x", "--id", "y"))
    assert stored() == before


def test_a_damaged_database_is_one_line_and_left_as_it_was(model, isolated):
    from llmcli.embed import collections as store

    path = store.db_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    garbage = os.urandom(64) + b"this is not a database" * 200
    path.write_bytes(garbage)
    for args, stdin in [
        (("collections", "list"), None),
        (("embed", "-m", str(model), "--collection", "notes"), FIRST),
        (("similar", "notes", "a guitar"), None),
        (("collections", "rm", "notes"), None),
    ]:
        result = run(*args, input=stdin)
        assert "damaged" in one_line(result, code=1) and str(path) in result.stderr
        assert path.read_bytes() == garbage  # never overwritten, so whatever can be saved still can
