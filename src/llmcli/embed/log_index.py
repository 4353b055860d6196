"""The conversation log searched by meaning (`llmcli logs --like TEXT`): every entry's prompt and
answer embedded with the configured embedding model and kept as the collection `@log` in
`embeddings.db`, beside the log.

Lazily: nothing is embedded until the first `--like`, which embeds the whole log; each later one
embeds only the entries logged since (an entry's two texts are the ids `ID/prompt` and
`ID/answer`, with their content hash). Entries pruned from the log lose their vectors. The index
is written in chunks, each its own transaction, so an interrupted first indexing keeps what it
finished. Another embedding model than the index's rebuilds it (vectors of two models do not
compare). An entry's score is the better of its prompt's and its answer's cosine similarity.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from llmcli import reporting
from llmcli.embed import collections as store

COLLECTION = "@log"
CHUNK = 256  # texts embedded and stored per transaction


@dataclass
class Ranked:
    """Log entry ids, best match first, with their scores; and what this search had to embed."""

    scores: dict[int, float]
    embedded: int  # texts (prompts and answers) embedded now
    indexed: int  # texts already in the index before


def _texts(log: sqlite3.Connection) -> list[tuple[str, str]]:
    """(id, text) of every entry's prompt and answer (an empty answer left out)."""
    out = []
    for rowid, prompt, response in log.execute("SELECT id, prompt, response FROM responses ORDER BY id"):
        if prompt and prompt.strip():
            out.append((f"{rowid}/prompt", prompt))
        if response and response.strip():
            out.append((f"{rowid}/answer", response))
    return out


def update(db: sqlite3.Connection, log: sqlite3.Connection, model) -> tuple[int, int]:
    """Bring the index up to date with the log: (texts embedded now, texts already indexed)."""
    from llmcli.embed.runs import content_hash

    found = store.get(db, COLLECTION)
    if found is not None and found.model != model.name:
        reporting.warn(f"the log's index was built with {found.model}: rebuilding it with {model.name}")
        store.remove(db, COLLECTION)
        found = None
    texts = _texts(log)
    hashed = [(i, t, content_hash(t)) for i, t in texts]
    same = store.unchanged(db, COLLECTION, [(i, h) for i, _, h in hashed]) if found else set()
    _forget(db, {i for i, _ in texts})
    todo = [(i, t, h) for i, t, h in hashed if i not in same]
    for start in range(0, len(todo), CHUNK):
        chunk = todo[start : start + CHUNK]
        result = model.embed([t for _, t, _ in chunk])
        rows: list[tuple[str, str, str | None, bytes]] = [
            (i, h, None, row.tobytes()) for (i, _, h), row in zip(chunk, result.matrix, strict=True)
        ]
        store.store(db, COLLECTION, model.name, rows, int(result.matrix.shape[1]))
    return len(todo), len(same)


def _forget(db: sqlite3.Connection, present: set[str]) -> None:
    """Drop the vectors of entries no longer in the log (pruned)."""
    stored = [r[0] for r in db.execute("SELECT id FROM embeddings WHERE collection = ?", (COLLECTION,))]
    gone = [(COLLECTION, i) for i in stored if i not in present]
    if gone:
        db.execute("BEGIN IMMEDIATE")
        db.executemany("DELETE FROM embeddings WHERE collection = ? AND id = ?", gone)
        db.execute("COMMIT")


def rank(log: sqlite3.Connection, model_ref: str, text: str, *, debug: bool = False) -> Ranked:
    """Every log entry scored against `text` by meaning, the index updated first."""
    from llmcli.embed.runs import Model

    model = Model(model_ref, debug=debug)
    try:
        with store.connect() as db:
            embedded, indexed = update(db, log, model)
            query = model.embed([text]).matrix[0]
            matches = store.rank(db, COLLECTION, query, n=1 << 62)
    finally:
        model.close()
    scores: dict[int, float] = {}
    for m in matches:
        rowid = int(m["id"].split("/", 1)[0])
        scores[rowid] = max(scores.get(rowid, -2.0), m["score"])
    return Ranked(dict(sorted(scores.items(), key=lambda kv: -kv[1])), embedded, indexed)
