"""Collections of embeddings in SQLite, beside the conversation log (`embeddings.db` in the data
directory), like simonw/llm's: each row an id, the SHA-256 of its content (unchanged content is not
embedded again), the content itself when asked (`--store`), and the vector as a float32 BLOB.

Ranking is numpy's cosine over the collection's vectors, not a vector extension: the sqlite3
module of many Pythons (pyenv's and macOS's among them) is built without loadable extensions, so
`sqlite-vec` could not be loaded there; a collection of 100,000 384-dimension vectors is 150 MB
and ranks in a fraction of a second. Every write is one transaction: a writer killed midway
leaves the rows of before, and readers (WAL) see either all of a write or none of it.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from llmcli.errors import LlmcliError, UsageError

if TYPE_CHECKING:
    import numpy as np

    from llmcli.embed.runs import Model

FILE = "embeddings.db"
BUSY_TIMEOUT_MS = 5000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS collections (
    name TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    dimensions INTEGER NOT NULL,
    created REAL NOT NULL,
    model_id TEXT
);
CREATE TABLE IF NOT EXISTS embeddings (
    collection TEXT NOT NULL REFERENCES collections(name) ON DELETE CASCADE,
    id TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    content TEXT,
    vector BLOB NOT NULL,
    updated REAL NOT NULL,
    PRIMARY KEY (collection, id)
);
CREATE TABLE IF NOT EXISTS passages (
    collection TEXT NOT NULL REFERENCES collections(name) ON DELETE CASCADE,
    id TEXT NOT NULL,
    source TEXT NOT NULL,
    line_start INTEGER NOT NULL,
    line_end INTEGER NOT NULL,
    PRIMARY KEY (collection, id)
);
CREATE INDEX IF NOT EXISTS passages_source ON passages (collection, source);
CREATE TABLE IF NOT EXISTS sources (
    collection TEXT NOT NULL REFERENCES collections(name) ON DELETE CASCADE,
    path TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    chunk INTEGER NOT NULL,
    overlap INTEGER NOT NULL,
    passages INTEGER NOT NULL,
    updated REAL NOT NULL,
    PRIMARY KEY (collection, path)
);
CREATE TABLE IF NOT EXISTS file_hashes (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL
);
"""


_LIST = (
    "SELECT c.name, c.model, c.dimensions,"
    " (SELECT count(*) FROM embeddings e WHERE e.collection = c.name), c.model_id FROM collections c"
)
_PUT = (
    "INSERT OR REPLACE INTO embeddings (collection, id, content_hash, content, vector, updated)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)


class UnknownCollection(UsageError):
    pass


@dataclass
class Collection:
    name: str
    model: str  # the model last used, as a person reads it: a file's path, a served reference
    dimensions: int
    count: int
    model_id: str | None = None  # what the model is (llmcli.embed.identity); None: not known yet


def db_path() -> Path:
    from llmcli.log.store import db_path as log_path

    return log_path().with_name(FILE)


@contextmanager
def connect(path: Path | None = None) -> Iterator[sqlite3.Connection]:
    """The database, created on first use; a damaged file is one line, never a traceback."""
    path = path or db_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    except (OSError, sqlite3.Error) as exc:
        raise LlmcliError(f"cannot open the embeddings database {path}: {exc}") from None
    try:
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA recursive_triggers = ON")
        db.executescript(_SCHEMA)
        _migrate(db)
        yield db
    except sqlite3.DatabaseError as exc:
        raise LlmcliError(f"the embeddings database {path} is damaged or locked: {exc}",
                          hint="move it aside to start afresh") from None  # fmt: skip
    finally:
        db.close()


# The full-text index of every row with content (FTS5, BM25), kept by triggers; its rowid is the
# row's. recursive_triggers (set on connect) makes INSERT OR REPLACE's delete fire them too.
_FTS = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS passages_fts USING fts5(content, tokenize = 'porter unicode61')",
    "CREATE TRIGGER IF NOT EXISTS embeddings_fts_in AFTER INSERT ON embeddings WHEN new.content IS NOT NULL"
    " BEGIN INSERT INTO passages_fts (rowid, content) VALUES (new.rowid, new.content); END",
    "CREATE TRIGGER IF NOT EXISTS embeddings_fts_out AFTER DELETE ON embeddings"
    " BEGIN DELETE FROM passages_fts WHERE rowid = old.rowid; END",
    "CREATE TRIGGER IF NOT EXISTS embeddings_fts_up AFTER UPDATE OF content ON embeddings"
    " BEGIN DELETE FROM passages_fts WHERE rowid = old.rowid;"
    " INSERT INTO passages_fts (rowid, content) SELECT new.rowid, new.content WHERE new.content IS NOT NULL;"
    " END",
)


def _migrate(db: sqlite3.Connection) -> None:
    """Older databases brought up to date, each step once (PRAGMA user_version counts them): the
    model identity (filled in on first use); the full-text index of what was stored with its
    content (the tables of passages and their files are new ones, made by _SCHEMA: a row of
    `embeddings` keeps its shape, and a row without a `passages` row is a text)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(collections)")}
    if "model_id" not in columns:
        db.execute("ALTER TABLE collections ADD COLUMN model_id TEXT")
    if db.execute("PRAGMA user_version").fetchone()[0] >= 1:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] >= 1:  # another process did it meanwhile
            db.execute("COMMIT")
            return
        for statement in _FTS:
            db.execute(statement)
        db.execute("INSERT INTO passages_fts (rowid, content)"
                   " SELECT rowid, content FROM embeddings WHERE content IS NOT NULL")  # fmt: skip
        db.execute("PRAGMA user_version = 1")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def get(db: sqlite3.Connection, name: str) -> Collection | None:
    row = db.execute(_LIST + " WHERE c.name = ?", (name,)).fetchone()
    return Collection(*row) if row else None


def require(db: sqlite3.Connection, name: str) -> Collection:
    found = get(db, name)
    if found is None:
        known = ", ".join(c.name for c in listing(db)) or "none"
        raise UnknownCollection(f"no collection named {name!r} (collections: {known})")
    return found


def listing(db: sqlite3.Connection) -> list[Collection]:
    rows = db.execute(_LIST + " ORDER BY c.name").fetchall()
    return [Collection(*r) for r in rows]


def check_model(db: sqlite3.Connection, found: Collection, model: Model) -> str:
    """`model`'s identity, when it is the model that made `found`'s vectors; else one line. A copy
    of the same GGUF elsewhere, or the same served model on another server, is the same model."""
    from llmcli.embed import identity

    mine = identity.of_model(db, model)
    theirs = identity.of_collection(db, found.name, found.model, found.model_id, model)
    if theirs != mine:
        changed = " (the file's content has changed since)" if found.model == model.name else ""
        raise UsageError(f"collection {found.name!r} was embedded with {found.model}{changed}, not "
                         f"{model.name}: vectors of two models do not compare",
                         hint=f"-m {found.model}, or another collection")  # fmt: skip
    return mine


def check_dimensions(found: Collection | None, dimensions: int) -> None:
    """Vectors of another length than the collection's: another model under the same name."""
    if found is not None and found.dimensions != dimensions:
        raise UsageError(f"collection {found.name!r} holds vectors of {found.dimensions} dimensions, and "
                         f"this model makes {dimensions}: vectors of two models do not compare")  # fmt: skip


def unchanged(db: sqlite3.Connection, name: str, items: list[tuple[str, str]]) -> set[str]:
    """The ids among `items` (id, content hash) stored with that same hash: not embedded again."""
    stored = dict(
        db.execute("SELECT id, content_hash FROM embeddings WHERE collection = ?", (name,)).fetchall()
    )
    return {i for i, h in items if stored.get(i) == h}


def store(db: sqlite3.Connection, name: str, model: str, rows: list[tuple[str, str, str | None, bytes]],
          dimensions: int, *, model_id: str | None = None) -> None:  # fmt: skip
    """Write (id, hash, content, vector) rows in one transaction, the collection created if new;
    `model` (how the model reads: the one to load by default) and `model_id` (what it is,
    llmcli.embed.identity) are the collection's from now on."""
    now = time.time()
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("INSERT OR IGNORE INTO collections (name, model, dimensions, created, model_id)"
                   " VALUES (?, ?, ?, ?, ?)", (name, model, dimensions, now, model_id))  # fmt: skip
        db.execute("UPDATE collections SET model = ?, model_id = coalesce(?, model_id) WHERE name = ?",
                   (model, model_id, name))  # fmt: skip
        db.executemany(_PUT, [(name, *r, now) for r in rows])
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def remove(db: sqlite3.Connection, name: str) -> int:
    found = require(db, name)
    db.execute("BEGIN IMMEDIATE")
    db.execute("DELETE FROM embeddings WHERE collection = ?", (name,))
    db.execute("DELETE FROM collections WHERE name = ?", (name,))
    db.execute("COMMIT")
    return found.count


def vector_of(db: sqlite3.Connection, name: str, id_: str) -> np.ndarray:
    import numpy as np

    row = db.execute("SELECT vector FROM embeddings WHERE collection = ? AND id = ?", (name, id_)).fetchone()
    if row is None:
        raise UsageError(f"collection {name!r} has no id {id_!r}")
    return np.frombuffer(row[0], dtype=np.float32)


def rank(db: sqlite3.Connection, name: str, query: np.ndarray, n: int, skip: str | None = None) -> list[dict]:
    """The `n` rows most similar to `query` by cosine, best first (`skip`: an id left out)."""
    import numpy as np

    rows = db.execute("SELECT id, content, vector FROM embeddings WHERE collection = ?", (name,)).fetchall()
    rows = [r for r in rows if r[0] != skip]
    if not rows:
        return []
    matrix = np.stack([np.frombuffer(r[2], dtype=np.float32) for r in rows])
    norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(query) or 1.0)
    scores = matrix @ query / np.where(norms == 0, 1, norms)
    best = np.argsort(-scores, kind="stable")[:n]
    return [{"id": rows[i][0], "score": round(float(scores[i]), 6), "content": rows[i][1]} for i in best]
