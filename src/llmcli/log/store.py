"""The log's database: where it is, its schema and the migrations that take an older one
forward, opening a connection, a write transaction, and folding the WAL.

Never in the way: a write is one short transaction after the answer (nothing per token) on a
connection in WAL mode with a busy timeout, so two processes writing at once both land. Any
failure (locked past the timeout, read-only, full, corrupt, a database from a newer llmcli) is
reported by one warning line (`why` says it in words), after which this process logs nothing
more; the answer is never affected.

Connections ask SQLite not to checkpoint when they close (`native.keep_wal`): a plain WAL open and
close costs two fsyncs (the first commit syncs a fresh WAL's header, the last close checkpoints and
syncs the database); this way the next process appends to the same WAL, and a write that finds the
WAL past `WAL_FOLD_BYTES` folds it into the database (`fold_wal`; synced, as synchronous = NORMAL
does at every checkpoint). The schema's version is SQLite's `user_version`; `MIGRATIONS` takes an
older database forward, one step at a time, inside the transaction that opens it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from llmcli import paths, reporting
from llmcli.log.native import keep_wal

FILE = "logs.db"
BUSY_TIMEOUT_MS = 2000  # a write waits this long for another writer's transaction, then gives up
WAL_FOLD_BYTES = 1024 * 1024  # past this, a write checkpoints the WAL into the database and empties it


def db_path() -> Path:
    return paths.data_dir() / FILE


SCHEMA = 2

_V1 = """
CREATE TABLE conversations (
    id TEXT PRIMARY KEY,
    name TEXT,
    model TEXT,
    created REAL NOT NULL,
    source TEXT NOT NULL DEFAULT 'llmcli'
);
CREATE TABLE responses (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL REFERENCES conversations(id),
    created REAL NOT NULL,
    command TEXT NOT NULL,
    model TEXT NOT NULL,
    model_name TEXT,
    model_path TEXT,
    endpoint TEXT,
    session TEXT,
    system TEXT,
    prompt TEXT NOT NULL,
    messages TEXT,
    raw INTEGER NOT NULL DEFAULT 0,
    think INTEGER,
    response TEXT NOT NULL,
    reasoning TEXT,
    tool_calls TEXT,
    finish_reason TEXT,
    error TEXT,
    seed INTEGER,
    temperature REAL,
    params TEXT,
    grammar TEXT,
    context_size INTEGER,
    prompt_tokens INTEGER,
    cached_tokens INTEGER,
    completion_tokens INTEGER,
    prefill_ms REAL,
    decode_ms REAL,
    ttft_ms REAL,
    total_ms REAL,
    prefill_tps REAL,
    decode_tps REAL,
    tokens BLOB,
    kv_state TEXT,
    llmcli_version TEXT,
    source_id TEXT,
    record TEXT NOT NULL
);
CREATE UNIQUE INDEX responses_source ON responses(source_id) WHERE source_id IS NOT NULL;
CREATE INDEX responses_conversation ON responses(conversation_id, id);
CREATE INDEX responses_model ON responses(model, created);
CREATE INDEX responses_created ON responses(created);
CREATE VIRTUAL TABLE responses_fts USING fts5(
    prompt, response, reasoning, tool_calls, content='responses', content_rowid='id'
);
CREATE TRIGGER responses_ai AFTER INSERT ON responses BEGIN
    INSERT INTO responses_fts(rowid, prompt, response, reasoning, tool_calls)
    VALUES (new.id, new.prompt, new.response, new.reasoning, new.tool_calls);
END;
CREATE TRIGGER responses_ad AFTER DELETE ON responses BEGIN
    INSERT INTO responses_fts(responses_fts, rowid, prompt, response, reasoning, tool_calls)
    VALUES ('delete', old.id, old.prompt, old.response, old.reasoning, old.tool_calls);
END;
"""

# Images, as simonw/llm keeps attachments: each once by its SHA-256 (`attachments`, the bytes in
# `content`), and which request held which (`response_attachments`: every image of the request's
# prompt, history included, at its user message's index in the row's `messages`, in order)
_V2 = """
CREATE TABLE attachments (
    id TEXT PRIMARY KEY,
    media_type TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    width INTEGER,
    height INTEGER,
    content BLOB NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE response_attachments (
    response_id INTEGER NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
    attachment_id TEXT NOT NULL REFERENCES attachments(id),
    position INTEGER NOT NULL,
    message INTEGER,
    name TEXT,
    tokens INTEGER,
    PRIMARY KEY (response_id, position)
);
CREATE INDEX response_attachments_attachment ON response_attachments(attachment_id);
"""


def _script(sql: str) -> Callable[[sqlite3.Connection], None]:
    """Run `sql`'s statements one by one, inside the caller's transaction (executescript would
    commit it first)."""

    def run(db: sqlite3.Connection) -> None:
        statement = ""
        for line in sql.splitlines(keepends=True):
            statement += line
            if sqlite3.complete_statement(statement):
                db.execute(statement)
                statement = ""

    return run


# MIGRATIONS[n] takes a database at version n to n + 1 (0: an empty file). Append; never edit.
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _script(_V1),
    _script(_V2),
]
assert len(MIGRATIONS) == SCHEMA


class LogError(Exception):
    """The log cannot be used: why, in words."""


def _migrate(db: sqlite3.Connection) -> None:
    """Bring the schema to `SCHEMA`, in one transaction (a second process waits, then sees it done)."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version == SCHEMA:
        return
    if version > SCHEMA:
        raise LogError(f"it was written by a newer llmcli (schema {version}; this one knows {SCHEMA})")
    db.execute("BEGIN IMMEDIATE")
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]  # another process may have done it
        for step in range(version, SCHEMA):
            MIGRATIONS[step](db)
            db.execute(f"PRAGMA user_version = {step + 1}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def connect(path: Path | None = None, *, create: bool = True) -> sqlite3.Connection:
    """A connection to the log at `path` (default: the data directory's), migrated to `SCHEMA`.
    Raises LogError (no database and not `create`, or a newer one) or sqlite3.Error."""
    path = path or db_path()
    if not create and not path.exists():
        raise LogError(f"no log yet at {path}")
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    try:
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        keep_wal(db, path)
        if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")  # WAL: durable at checkpoints, no fsync per commit
        db.execute("PRAGMA foreign_keys = ON")
        _migrate(db)
    except BaseException:
        db.close()
        raise
    db.row_factory = sqlite3.Row
    return db


def fold_wal(db: sqlite3.Connection, path: Path) -> None:
    """Past `WAL_FOLD_BYTES`, checkpoint the WAL into the database and truncate it, without waiting
    for another process's reader or writer (then the next write tries again)."""
    try:
        if os.stat(f"{path}-wal").st_size < WAL_FOLD_BYTES:
            return
        db.execute("PRAGMA busy_timeout = 0")
        try:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        finally:
            db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    except (OSError, sqlite3.Error) as exc:  # housekeeping: the next write tries again
        reporting.debug(f"log: WAL not checkpointed: {exc}")


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction; rolled back on any error, a failed COMMIT included (unless SQLite
    already rolled it back, as it does on some errors: then the error is what is raised)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def why(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in text:
        return (
            "it is not a SQLite database (damaged?); `llmcli logs path` shows it, move it away to start anew"
        )
    return text
