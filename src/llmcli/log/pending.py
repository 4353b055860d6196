"""The rows one-shot processes leave for the database, and moving them in.

A one-shot process does not open the database at all: `writer.defer` appends its row, as one JSON
line under an exclusive `flock`, to `logs.db-pending` beside it (`append`; a few tens of
microseconds, no fsync), and whatever opens the log next (any `llmcli logs` command, `--continue`,
a chat's first write, or a `defer` that finds the file past `writer.PENDING_DRAIN_BYTES`) moves the
waiting rows into the database in one transaction first (`drain`). So a locked, read-only or
damaged database costs a one-shot `generate` nothing and loses none of its rows: they wait until
the log can take them.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from llmcli import reporting
from llmcli.log.rows import ATTACHMENTS, insert
from llmcli.log.store import db_path, transaction


def pending_path(path: Path | None = None) -> Path:
    """Where one-shot processes leave their rows for the database (`writer.defer`, `drain`)."""
    path = path or db_path()
    return path.with_name(path.name + "-pending")


def encode(row: dict[str, Any]) -> bytes:
    """One row as the pending file's line: JSON, its bytes (the token ids) as {"b64": ...}."""
    return (json.dumps(_portable(row), ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def append(pending: Path, line: bytes) -> int:
    """Append `line` to the pending file under an exclusive lock (no fsync), creating the file (and
    its directory) the first time; the file's size before it. Raises OSError."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT
    try:
        fd = os.open(pending, flags, 0o600)
    except FileNotFoundError:
        pending.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(pending, flags, 0o600)
    try:
        _lock(fd)
        size = os.fstat(fd).st_size
        _write_line(fd, line, size)
    finally:
        os.close(fd)  # and the lock with it
    return size


def _write_line(fd: int, line: bytes, size: int) -> None:
    """Write `line` at the end of the locked pending file; a line an earlier writer left unfinished
    (killed, disk full) is ended first, and a short write of this one is taken back."""
    if size and os.pread(fd, 1, size - 1) != b"\n":
        line = b"\n" + line
    written = os.write(fd, line)
    if written != len(line):
        os.ftruncate(fd, size)
        raise OSError(28, "no space left for the whole entry")


def _lock(fd: int) -> None:
    try:
        import fcntl
    except ImportError:  # no flock: appends are still whole lines where the platform keeps O_APPEND
        return
    fcntl.flock(fd, fcntl.LOCK_EX)


def _portable(row: dict[str, Any]) -> dict[str, Any]:
    """Bytes (the token ids; an image's content in the row's attachments) as {"b64": ...}."""
    out = {k: {"b64": base64.b64encode(v).decode()} if isinstance(v, bytes) else v for k, v in row.items()}
    if row.get(ATTACHMENTS):
        out[ATTACHMENTS] = [_portable(a) for a in row[ATTACHMENTS]]
    return out


def _native(doc: dict[str, Any]) -> dict[str, Any]:
    out = {k: base64.b64decode(v["b64"]) if isinstance(v, dict) else v for k, v in doc.items()}
    if isinstance(doc.get(ATTACHMENTS), list):
        out[ATTACHMENTS] = [_native(a) for a in doc[ATTACHMENTS]]
    return out


REQUIRED = frozenset({"conversation_id", "created", "command", "model", "prompt", "response", "record"})


def drain(db: sqlite3.Connection, path: Path | None = None) -> int:
    """Move the rows one-shot processes left (`writer.defer`) into the database, in one transaction, then
    empty the pending file; the number moved. Raises sqlite3.Error or OSError (the rows then stay
    where they are, for the next try); a line that is not a row (cut short by a crash) is dropped."""
    pending = pending_path(path)
    try:
        fd = os.open(pending, os.O_RDWR)
    except FileNotFoundError:
        return 0
    try:
        _lock(fd)
        size = os.fstat(fd).st_size
        if not size:
            return 0
        data = os.pread(fd, size, 0)
        rows = []
        for line in data.split(b"\n"):
            try:
                doc = json.loads(line) if line.strip() else None
            except ValueError:
                doc = None
            if isinstance(doc, dict) and REQUIRED <= doc.keys():
                rows.append(doc)
        columns = {r[1] for r in db.execute("PRAGMA table_info(responses)")} - {"id"} | {ATTACHMENTS}
        with transaction(db):
            for doc in rows:
                try:
                    insert(db, {k: v for k, v in _native(doc).items() if k in columns})
                except (sqlite3.IntegrityError, ValueError, TypeError, KeyError, AttributeError):
                    reporting.debug("log: a pending entry that is not a row was dropped")
        os.ftruncate(fd, 0)
        return len(rows)
    finally:
        os.close(fd)
