"""This process's writes to the log: `write` (a chat turn, on a connection kept open for the
session's turns, `open_writer` opening it ahead), `defer` (a one-shot `generate`: the row left in
the pending file), and giving up on a log that fails: one warning line, then nothing more is tried
on it in this process (`close_all` forgets both, for tests and benchmarks).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from llmcli import reporting
from llmcli.log.cap import enforce_cap
from llmcli.log.pending import append, drain, encode, pending_path
from llmcli.log.rows import insert
from llmcli.log.store import LogError, connect, db_path, fold_wal, transaction, why

PENDING_DRAIN_BYTES = 1024 * 1024  # a `defer` that leaves more waiting moves them into the database
_writer: dict[str, sqlite3.Connection] = {}  # one connection per database, kept for a chat's turns
_broken: set[str] = set()  # databases that failed in this process: warned once, not tried again


def _opened(path: Path) -> sqlite3.Connection:
    """This process's writing connection to `path`, opened (and the waiting rows one-shot
    processes left moved in, in the order they came) the first time. Raises what `connect` and
    `drain` raise."""
    key = str(path)
    db = _writer.get(key)
    if db is None:
        db = _writer[key] = connect(path)
        drain(db, path)
    return db


def _give_up(path: Path, exc: BaseException, what: str) -> None:
    """The log at `path` failed: one warning line, and this process writes no more to it."""
    _broken.add(str(path))
    stale = _writer.pop(str(path), None)
    if stale is not None:
        stale.close()
    reporting.warn(f"{what}: {why(exc)} (the answer is unaffected)")


def open_writer(path: Path | None = None) -> bool:
    """Open the log for a session's writes ahead of its first request (a chat, before its prompt):
    the connection, the schema check and the waiting rows are paid before anyone waits for an
    answer, and every turn is a warm write. False (said once, as `write` does) where it cannot be."""
    path = path or db_path()
    if str(path) in _broken:
        return False
    try:
        _opened(path)
    except (sqlite3.Error, LogError, OSError) as exc:
        _give_up(path, exc, f"not logged: {path}")
        return False
    return True


def write(row: dict[str, Any], path: Path | None = None) -> int | None:
    """Log one row; returns its id, or None when it could not be written (said once, in one
    warning line; the caller goes on as if nothing happened)."""
    path = path or db_path()
    if str(path) in _broken:
        return None
    try:
        db = _opened(path)
        with transaction(db):
            rowid = insert(db, row)
    except (sqlite3.Error, LogError, OSError) as exc:
        _give_up(path, exc, f"not logged: {path}")
        return None
    fold_wal(db, path)
    enforce_cap(db, path)
    return rowid


def defer(row: dict[str, Any], path: Path | None = None) -> bool:
    """Leave one row for the database: one JSON line appended to the pending file under an
    exclusive lock (no fsync, no SQLite). False when it could not be (said in one warning line).
    Past `PENDING_DRAIN_BYTES` waiting, this process moves them into the database itself."""
    path = path or db_path()
    key = str(path)
    if key in _broken:
        return False
    pending = pending_path(path)
    line = encode(row)
    try:
        size = append(pending, line)
    except OSError as exc:
        _broken.add(key)
        reporting.warn(f"not logged: {pending}: {why(exc)} (the answer is unaffected)")
        return False
    if size + len(line) >= PENDING_DRAIN_BYTES:
        try:
            db = _opened(path)
            drain(db, path)  # (already done where `_opened` just opened it: then nothing is left)
            fold_wal(db, path)
            enforce_cap(db, path)
        except (sqlite3.Error, LogError, OSError) as exc:
            _give_up(path, exc, f"log: rows wait in {pending}: {path}")
    return True


def close_all() -> None:
    for db in _writer.values():
        db.close()
    _writer.clear()
    _broken.clear()


def enabled(flag: bool | None = None) -> bool:
    """Whether requests are logged: `--log/--no-log`, else LLMCLI_LOG / config `log`."""
    from llmcli import settings

    return bool(settings.resolve("log", flag))
