"""Short flags that gave way to one vocabulary (cli/vocabulary.py's RENAMED): each old spelling
still does what it did for one release, and says in one stderr line what replaces it; the new
spelling says nothing."""

from __future__ import annotations

import json

from ggufgen import write_gguf
from helpers import run

LINES = "A man is playing a guitar.\nThe stock market fell sharply today.\nCats sleep most of the day.\n"


def notice(result, old: str, new: str) -> None:
    """The one line that says `old` is now `new`, and no other note."""
    notes = [line for line in result.stderr.splitlines() if line.startswith("llmcli: note:")]
    assert len(notes) == 1 and f"{old} is now {new}" in notes[0], result.stderr


def no_notice(result) -> None:
    assert "llmcli: note:" not in result.stderr


def test_embed_c_is_collection(embedding_server):
    result = run("embed", "-m", embedding_server.ref(), "-c", "notes", input=LINES)
    assert result.exit_code == 0 and "3 embedded" in result.stderr
    notice(result, "-c", "--collection")
    result = run("embed", "-m", embedding_server.ref(), "--collection", "notes", "Another line.")
    assert result.exit_code == 0 and "1 embedded, 0 unchanged" in result.stderr
    no_notice(result)


def test_similar_n_is_limit(embedding_server):
    assert run("embed", "-m", embedding_server.ref(), "--collection", "notes", input=LINES).exit_code == 0
    result = run("similar", "notes", "guitar", "-n", "2")
    assert result.exit_code == 0 and len(result.stdout.splitlines()) == 2
    notice(result, "-n", "--limit")
    for spelling in ("--limit", "--number"):
        result = run("similar", "notes", "guitar", spelling, "1")
        assert result.exit_code == 0 and len(result.stdout.splitlines()) == 1
        no_notice(result)


def test_logs_n_is_limit(isolated):
    from test_logs_scores import TOPICS, log

    log(TOPICS)
    result = run("logs", "-n", "2", "--json")
    assert result.exit_code == 0 and [e["id"] for e in json.loads(result.stdout)] == [4, 3]
    notice(result, "-n", "--limit")
    for spelling in ("--limit", "--count"):
        result = run("logs", spelling, "1", "--json")
        assert result.exit_code == 0 and [e["id"] for e in json.loads(result.stdout)] == [4]
        no_notice(result)


def test_pull_f_is_force(isolated):
    result = run("pull", "someone/some-model-GGUF:Q4_K_M", "-f", "--offline")
    assert result.exit_code == 2 and "--list and --force need the hub" in result.stderr  # -f taken as --force
    notice(result, "-f", "--force")
    result = run("pull", "someone/some-model-GGUF:Q4_K_M", "--force", "--offline")
    assert result.exit_code == 2 and "--force need the hub" in result.stderr
    no_notice(result)


def test_models_show_a_is_all(tmp_path):
    model = write_gguf(tmp_path / "tiny.gguf", extra_kv={"tiny.custom_key": 7})
    result = run("models", "show", str(model), "-a", "--json")
    assert result.exit_code == 0, result.stderr
    notice(result, "-a", "--all")
    shown = json.loads(result.stdout)
    plain = json.loads(run("models", "show", str(model), "--json").stdout)
    assert "tiny.custom_key" in json.dumps(shown) and "tiny.custom_key" not in json.dumps(plain)


def test_models_alias_d_is_delete(isolated):
    old, new = "-d", "--delete"
    assert run("models", "alias", "mine", "someone/some-model-GGUF:Q4_K_M").exit_code == 0
    result = run("models", "alias", "mine", old)
    assert result.exit_code == 0 and "alias mine removed" in result.stderr
    notice(result, old, new)
    assert run("models", "alias", "mine").exit_code == 3  # gone
    assert run("models", "alias", "again", "someone/other-GGUF:Q8_0").exit_code == 0
    result = run("models", "alias", "again", new)
    assert result.exit_code == 0 and "alias again removed" in result.stderr
    no_notice(result)
