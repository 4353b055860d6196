"""The conversation log searched by meaning (`llmcli logs --like TEXT`): every entry's prompt and
answer embedded with the configured embedding model and kept as the collection `@log` in
`embeddings.db`, beside the log.

Lazily: nothing is embedded until the first `--like`, which embeds the whole log; each later one
embeds only the entries logged since (an entry's two texts are the ids `ID/prompt` and
`ID/answer`, with their content hash). Entries pruned from the log lose their vectors. The index
is written in chunks, each its own transaction, so an interrupted first indexing keeps what it
finished, and says how far it got on stderr (a first index of thousands of entries takes
minutes). Another embedding model than the index's rebuilds it (vectors of two models do not
compare). An entry's score is the better of its prompt's and its answer's cosine similarity.

Batch items (`llmcli batch`, command "batch" in the log) are left out unless asked for
(`with_batch`): a batch run logs hundreds or thousands of items made from one prompts file, which
would take most of the first index's time and crowd the conversations out of the ranking. Asked
for once, their vectors stay in the index; a search without them leaves them out of its ranking.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from llmcli import reporting
from llmcli.embed import collections as store

COLLECTION = "@log"
CHUNK = 256  # texts embedded and stored per transaction


BATCH = "batch"  # the log's command of a batch item


@dataclass
class Ranked:
    """Log entry ids, best match first, with their scores; and what this search had to embed."""

    scores: dict[int, float]
    embedded: int  # texts (prompts and answers) embedded now
    indexed: int  # texts already in the index before


def _texts(log: sqlite3.Connection, with_batch: bool) -> list[tuple[str, str]]:
    """(id, text) of every entry's prompt and answer (an empty answer left out); batch items'
    only `with_batch`."""
    out = []
    where = "" if with_batch else f" WHERE command != '{BATCH}'"
    sql = f"SELECT id, prompt, response FROM responses{where} ORDER BY id"
    for rowid, prompt, response in log.execute(sql):
        if prompt and prompt.strip():
            out.append((f"{rowid}/prompt", prompt))
        if response and response.strip():
            out.append((f"{rowid}/answer", response))
    return out


def update(db: sqlite3.Connection, log: sqlite3.Connection, model, *,
           with_batch: bool = False) -> tuple[int, int]:  # fmt: skip
    """Bring the index up to date with the log: (texts embedded now, texts already indexed)."""
    from llmcli.embed import identity
    from llmcli.embed.runs import content_hash

    found = store.get(db, COLLECTION)
    mine = identity.of_model(db, model)
    theirs = identity.of_collection(db, COLLECTION, found.model, found.model_id, model) if found else None
    if found is not None and theirs != mine:
        reporting.warn(f"the log's index was built with {found.model}: rebuilding it with {model.name}")
        store.remove(db, COLLECTION)
        found = None
    texts = _texts(log, with_batch)
    hashed = [(i, t, content_hash(t)) for i, t in texts]
    same = store.unchanged(db, COLLECTION, [(i, h) for i, _, h in hashed]) if found else set()
    _forget(db, {r[0] for r in log.execute("SELECT id FROM responses")})
    todo = [(i, t, h) for i, t, h in hashed if i not in same]
    if todo:
        with (
            reporting.progress() as progress,
            progress.task("the log's texts", len(todo), verb="embedding", unit="texts") as task,
        ):
            for start in range(0, len(todo), CHUNK):
                chunk = todo[start : start + CHUNK]
                result = model.embed([t for _, t, _ in chunk])
                rows: list[tuple[str, str, str | None, bytes]] = [
                    (i, h, None, row.tobytes()) for (i, _, h), row in zip(chunk, result.matrix, strict=True)
                ]
                dimensions = int(result.matrix.shape[1])
                store.check_dimensions(found, dimensions)
                store.store(db, COLLECTION, model.name, rows, dimensions, model_id=mine)
                task.advance(len(chunk))
    return len(todo), len(same)


def _forget(db: sqlite3.Connection, present: set[int]) -> None:
    """Drop the vectors of entries no longer in the log (pruned)."""
    stored = [r[0] for r in db.execute("SELECT id FROM embeddings WHERE collection = ?", (COLLECTION,))]
    gone = [(COLLECTION, i) for i in stored if int(i.split("/", 1)[0]) not in present]
    if gone:
        db.execute("BEGIN IMMEDIATE")
        db.executemany("DELETE FROM embeddings WHERE collection = ? AND id = ?", gone)
        db.execute("COMMIT")


def rank(log: sqlite3.Connection, model_ref: str, text: str, *, debug: bool = False,
         with_batch: bool = False) -> Ranked:  # fmt: skip
    """Every log entry scored against `text` by meaning, the index updated first; batch items
    only `with_batch`."""
    from llmcli.embed.runs import Model

    model = Model(model_ref, debug=debug)
    try:
        with store.connect() as db:
            embedded, indexed = update(db, log, model, with_batch=with_batch)
            query = model.embed([text]).matrix[0]
            matches = store.rank(db, COLLECTION, query, n=1 << 62)
    finally:
        model.close()
    batch = set()
    if not with_batch:
        batch = {r[0] for r in log.execute("SELECT id FROM responses WHERE command = ?", (BATCH,))}
    scores: dict[int, float] = {}
    for m in matches:
        rowid = int(m["id"].split("/", 1)[0])
        if rowid not in batch:
            scores[rowid] = max(scores.get(rowid, -2.0), m["score"])
    return Ranked(dict(sorted(scores.items(), key=lambda kv: -kv[1])), embedded, indexed)
