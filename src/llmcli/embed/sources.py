"""Files in a collection, as passages (llmcli.embed.passages): each file's passages stored with
its path and lines, its content hash kept (`sources`), so that a file whose content is unchanged
is not embedded again, a changed one has its passages replaced, and one that is gone is pruned
(`collections sync`).

One file is one transaction: its old passages stay until its new ones are all embedded, and a
file that changed while it was read (its hash, size or modification time not those of before)
is rolled back with one line, its old passages kept. A file is read as it is embedded, a batch
of passages at a time, so a file of gigabytes takes no more memory than a small one."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from llmcli.embed import collections as store
from llmcli.embed.passages import Binary, Passage, file_sha256, of_file, sniff
from llmcli.errors import UsageError

if TYPE_CHECKING:
    from llmcli.embed.runs import Model

BATCH = 32  # passages embedded at once


@dataclass
class Outcome:
    embedded: int = 0  # files whose passages were (re)made
    unchanged: int = 0
    passages: int = 0
    skipped: list[str] = field(default_factory=list)  # one line each: binary, changed while read
    pruned: int = 0

    def line(self, name: str) -> str:
        files = f"{self.embedded} file{'s' if self.embedded != 1 else ''}"
        passages = f"{self.passages} passage{'s' if self.passages != 1 else ''}"
        parts = [f"{files} embedded ({passages})", f"{self.unchanged} unchanged"]
        if self.pruned:
            parts.append(f"{self.pruned} removed (gone)")
        if self.skipped:
            parts.append(f"{len(self.skipped)} skipped")
        return f"collection {name}: " + ", ".join(parts)


def shown(path: str) -> str:
    """A stored (absolute) path as a citation shows it: relative to here when it is below here."""
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive
        return path
    return path if rel.startswith("..") else rel


def counter(model: Model) -> Callable[[str], int]:
    """How passages count tokens: the local model's tokenizer; a served model's, estimated (bytes / 4)."""
    if model.local is not None:
        local = model.local
        return lambda text: len(local.tokenize(text))
    return lambda text: len(text.encode("utf-8")) // 4 + 1


def add_files(db: sqlite3.Connection, name: str, model: Model, paths: list[Path], *, chunk: int,
              overlap: int, normalize: bool, model_id: str | None,
              say: Callable[[str], None]) -> Outcome:  # fmt: skip
    """Each of `paths` into collection `name` as passages, skipping what is unchanged."""
    outcome = Outcome()
    count = counter(model)
    for path in paths:
        key = str(path.resolve())
        try:
            sniff(path)
            before = path.stat()
            sha = file_sha256(path)
        except Binary as exc:
            outcome.skipped.append(exc.message)
            say(exc.message)
            continue
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
        row = db.execute("SELECT sha256, chunk, overlap FROM sources WHERE collection = ? AND path = ?",
                         (name, key)).fetchone()  # fmt: skip
        if row is not None and tuple(row) == (sha, chunk, overlap):
            outcome.unchanged += 1
            continue
        made = _one_file(
            db, name, model, path, key, count, chunk, overlap, normalize, model_id, (before, sha)
        )
        if made is None:
            line = (
                f"{path} changed while it was being embedded: its passages were not stored (embed it again)"
            )
            outcome.skipped.append(line)
            say(line)
            continue
        outcome.embedded += 1
        outcome.passages += made
    return outcome


def _one_file(db: sqlite3.Connection, name: str, model: Model, path: Path, key: str, count, chunk: int,
              overlap: int, normalize: bool, model_id: str | None, seen) -> int | None:  # fmt: skip
    """The file's passages in place of its old ones, in one transaction; None: it changed meanwhile."""
    before, sha = seen
    digest = hashlib.sha256()
    now = time.time()
    made = 0
    db.execute("BEGIN IMMEDIATE")
    try:
        _drop(db, name, key)
        # the file stored whole by an earlier llmcli (its id: the path as given): its passages replace it
        db.execute("DELETE FROM embeddings WHERE collection = ? AND id IN (?, ?)", (name, str(path), key))
        for batch in _batches(of_file(path, count, chunk, overlap, digest)):
            result = model.embed([p.text for p in batch], truncate=True, normalize=normalize)
            dimensions = int(result.matrix.shape[1])
            store.check_dimensions(store.get(db, name), dimensions)
            _ensure(db, name, model.name, dimensions, model_id, now)
            ids = [f"{key}#{made + i + 1}" for i in range(len(batch))]
            db.executemany(
                "INSERT OR REPLACE INTO embeddings (collection, id, content_hash, content, vector, updated)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(name, i, hashlib.sha256(p.text.encode()).hexdigest(), p.text, row.tobytes(), now)
                 for i, p, row in zip(ids, batch, result.matrix, strict=True)],
            )  # fmt: skip
            db.executemany(
                "INSERT OR REPLACE INTO passages (collection, id, source, line_start, line_end)"
                " VALUES (?, ?, ?, ?, ?)",
                [(name, i, key, p.first, p.last) for i, p in zip(ids, batch, strict=True)],
            )  # fmt: skip
            made += len(batch)
        after = path.stat()
        now_seen = (digest.hexdigest(), after.st_size, after.st_mtime_ns)
        if now_seen != (sha, before.st_size, before.st_mtime_ns):
            db.execute("ROLLBACK")
            return None
        if made == 0 and store.get(db, name) is None:
            db.execute("ROLLBACK")  # an empty file in a new collection: nothing to create it with
            return 0
        db.execute("INSERT OR REPLACE INTO sources (collection, path, sha256, size, chunk, overlap, passages,"
                   " updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   (name, key, sha, after.st_size, chunk, overlap, made, now))  # fmt: skip
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return made


def _ensure(db: sqlite3.Connection, name: str, model: str, dimensions: int, model_id: str | None,
            now: float) -> None:  # fmt: skip
    db.execute("INSERT OR IGNORE INTO collections (name, model, dimensions, created, model_id)"
               " VALUES (?, ?, ?, ?, ?)", (name, model, dimensions, now, model_id))  # fmt: skip
    db.execute("UPDATE collections SET model = ?, model_id = coalesce(?, model_id) WHERE name = ?",
               (model, model_id, name))  # fmt: skip


def _batches(passages: Iterator[Passage]) -> Iterator[list[Passage]]:
    batch: list[Passage] = []
    for p in passages:
        batch.append(p)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def tracked(db: sqlite3.Connection, name: str) -> list[tuple[str, int, int]]:
    """The files of collection `name`: (path, chunk, overlap)."""
    return [tuple(r) for r in db.execute("SELECT path, chunk, overlap FROM sources WHERE collection = ?"
                                         " ORDER BY path", (name,))]  # fmt: skip


def prune(db: sqlite3.Connection, name: str, path: str) -> None:
    """A file that is gone: its passages and its row, in one transaction."""
    db.execute("BEGIN IMMEDIATE")
    try:
        _drop(db, name, path)
        db.execute("DELETE FROM sources WHERE collection = ? AND path = ?", (name, path))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _drop(db: sqlite3.Connection, name: str, path: str) -> None:
    """A file's passages (inside the caller's transaction)."""
    ids = "SELECT id FROM passages WHERE collection = ? AND source = ?"
    db.execute(f"DELETE FROM embeddings WHERE collection = ? AND id IN ({ids})", (name, name, path))
    db.execute("DELETE FROM passages WHERE collection = ? AND source = ?", (name, path))
