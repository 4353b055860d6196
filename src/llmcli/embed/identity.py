"""Which model made a collection's vectors, independent of where the model is: a local GGUF by the
SHA-256 of its content (`sha256:HEX`), so a copy of the file at another path, or the file moved,
is the same model; a served one by its server's model name (`served:NAME`), so the same model on
another host or port is too. The vectors' dimension is the collection's own (`dimensions`), and
the callers check it against every new vector (a served name alone could be reused for another
model).

Hashing a GGUF of hundreds of megabytes takes seconds, so a file's hash is kept in
embeddings.db by path, size and modification time, and computed again only when one changes.

Collections written before this keyed their model by the file's absolute path or the served
reference (`model_id` empty): `of_collection` fills it in on first use, from the file at that path
if it is still there, else from the model being used when its path or reference is the one stored.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmcli.embed.runs import Model

CHUNK = 4 << 20
LOCAL = "sha256:"
SERVED = "served:"


def file_hash(db: sqlite3.Connection, path: Path) -> str:
    """The SHA-256 of `path`'s content, from the cache while its size and mtime are unchanged."""
    path = path.resolve()
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    cached = "SELECT sha256 FROM file_hashes WHERE path = ? AND size = ? AND mtime_ns = ?"
    row = db.execute(cached, key).fetchone()
    if row is not None:
        return str(row[0])
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    db.execute("INSERT OR REPLACE INTO file_hashes (path, size, mtime_ns, sha256) VALUES (?, ?, ?, ?)",
               (*key, digest.hexdigest()))  # fmt: skip
    return digest.hexdigest()


def of_model(db: sqlite3.Connection, model: Model) -> str:
    """The identity of an open embedding model: its file's content hash, or its served name."""
    if model.local is not None:
        return LOCAL + file_hash(db, model.local.path)
    assert model.served is not None
    return SERVED + model.served.model


def of_collection(db: sqlite3.Connection, name: str, stored: str, model_id: str | None,
                  using: Model | None = None) -> str | None:  # fmt: skip
    """A collection's model identity; one written before identities (`model_id` None) gets it now
    from the file at its stored path, or from `using` when that is the stored path or reference;
    None when neither can tell (the file is gone and another model is used)."""
    if model_id:
        return model_id
    found: str | None = None
    path = Path(stored)
    if path.is_absolute() and path.is_file():
        found = LOCAL + file_hash(db, path)
    elif using is not None and using.name == stored:
        found = of_model(db, using)
    if found is not None:
        db.execute("UPDATE collections SET model_id = ? WHERE name = ?", (found, name))
    return found
