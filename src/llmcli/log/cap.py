"""Removing old rows: the size cap (`log_max_mb`) each write checks, and `llmcli logs prune`."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from llmcli import reporting
from llmcli.log.store import transaction


def used_bytes(db: sqlite3.Connection) -> int:
    pages = db.execute("PRAGMA page_count").fetchone()[0] - db.execute("PRAGMA freelist_count").fetchone()[0]
    return int(pages) * int(db.execute("PRAGMA page_size").fetchone()[0])


def _file_bytes(path: Path) -> int:
    """The database's and its WAL's sizes on disk: at least the pages in use (read without a query)."""
    total = 0
    for name in (str(path), f"{path}-wal"):
        try:
            total += os.stat(name).st_size
        except OSError:
            pass
    return total


def cap_bytes() -> int:
    from llmcli import settings

    return int(settings.resolve("log_max_mb")) * 1_000_000


def enforce_cap(db: sqlite3.Connection, path: Path) -> None:
    """Over `log_max_mb`: the oldest rows go first, down to nine tenths of it (their pages are reused)."""
    try:
        cap = cap_bytes()
        if cap <= 0 or _file_bytes(path) <= cap or used_bytes(db) <= cap:
            return
        removed = prune_to(db, int(cap * 0.9))
        reporting.debug(f"log: removed the {removed} oldest entries (over log_max_mb)")
    except Exception as exc:  # the cap is housekeeping: the next write tries again
        reporting.debug(f"log: size cap not applied: {exc}")


def prune_to(db: sqlite3.Connection, target: int) -> int:
    """Remove the oldest rows until the used pages are within `target` bytes."""
    removed = 0
    while used_bytes(db) > target:
        total = db.execute("SELECT count(*) FROM responses").fetchone()[0]
        if not total:
            break
        batch = max(1, total // 10)
        with transaction(db):
            db.execute("DELETE FROM responses WHERE id IN (SELECT id FROM responses ORDER BY id LIMIT ?)",
                       (batch,))  # fmt: skip
            _drop_empty_conversations(db)
        removed += batch
    return removed


def _drop_empty_conversations(db: sqlite3.Connection) -> None:
    """Conversations left without rows, and images no row holds any more (their links went with
    the rows), are removed too."""
    db.execute("DELETE FROM conversations WHERE id NOT IN (SELECT DISTINCT conversation_id FROM responses)")
    db.execute("DELETE FROM attachments WHERE id NOT IN (SELECT attachment_id FROM response_attachments)")


def prune(db: sqlite3.Connection, *, before: float | None = None, keep: int | None = None) -> int:
    """Remove rows older than `before` and all but the newest `keep`; then compact the file."""
    removed = 0
    with transaction(db):
        if before is not None:
            removed += db.execute("DELETE FROM responses WHERE created < ?", (before,)).rowcount
        if keep is not None:
            removed += db.execute(
                "DELETE FROM responses WHERE id NOT IN (SELECT id FROM responses ORDER BY id DESC LIMIT ?)",
                (keep,),
            ).rowcount
        _drop_empty_conversations(db)
    if removed:
        db.execute("INSERT INTO responses_fts(responses_fts) VALUES ('optimize')")
        db.execute("VACUUM")
    return removed
