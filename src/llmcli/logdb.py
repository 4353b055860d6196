"""The conversation log: every request's record, kept in SQLite in the data directory.

`request.drive` calls `write` (a chat turn) or `defer` (a one-shot `generate`) once after each
request, local or served, with the request's record (`record.build`'s document), its prompt messages and its
conversation id; `cli/logs.py` reads it back (list, search, show, continue, rerun, stats,
import, prune).

Never in the way: a write is one short transaction after the answer (nothing per token) on a
connection in WAL mode with a busy timeout, so two processes writing at once both land. Any
failure (locked past the timeout, read-only, full, corrupt, a database from a newer llmcli) is
reported by one warning line, after which this process logs nothing more; the answer is never
affected.

A one-shot process does not open the database at all: `defer` appends its row, as one JSON line
under an exclusive `flock`, to `logs.db-pending` beside it (a few tens of microseconds, no fsync),
and whatever opens the log next (any `llmcli logs` command, `--continue`, a chat's first write, or
a `defer` that finds the file past `PENDING_DRAIN_BYTES`) moves the waiting rows into the database
in one transaction first (`drain`). So a locked, read-only or damaged database costs a one-shot
`generate` nothing and loses none of its rows: they wait until the log can take them.

Connections ask SQLite not to checkpoint when they close (`_keep_wal`): a plain WAL open and close
costs two fsyncs (the first commit syncs a fresh WAL's header, the last close checkpoints and syncs
the database); this way the next process appends to the same WAL, and a write that finds the WAL
past `WAL_FOLD_BYTES` folds it into the database (synced, as synchronous = NORMAL does at every
checkpoint). The schema's version is SQLite's `user_version`; `MIGRATIONS` takes an older database
forward, one step at a time, inside the transaction that opens it.

API keys never reach the log: the record carries none, and an endpoint URL is stored without
any credentials it embeds (`user:password@`, `?api_key=`).
"""

from __future__ import annotations

import base64
import ctypes
import functools
import json
import os
import secrets
import sqlite3
import time
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from llmcli import paths, reporting

FILE = "logs.db"
BUSY_TIMEOUT_MS = 2000  # a write waits this long for another writer's transaction, then gives up
WAL_FOLD_BYTES = 1024 * 1024  # past this, a write checkpoints the WAL into the database and empties it
NO_CKPT_ON_CLOSE = 1006  # SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE (SQLite 3.25+)
PENDING_DRAIN_BYTES = 1024 * 1024  # a `defer` that leaves more waiting moves them into the database


def db_path() -> Path:
    return paths.data_dir() / FILE


def pending_path(path: Path | None = None) -> Path:
    """Where one-shot processes leave their rows for the database (`defer`, `drain`)."""
    path = path or db_path()
    return path.with_name(path.name + "-pending")


def new_cid() -> str:
    """A conversation id: sortable by time (milliseconds, hex), then random."""
    return f"{int(time.time() * 1000):011x}{secrets.token_hex(5)}"


@dataclass
class Logged:
    """What the request path needs to log a request beside its record: under which reference the
    model was loaded, which command sent it, its conversation, and the record's generate-only
    parts. `kv_state`: a saved KV state file that will hold this conversation (a chat session's,
    `--prompt-cache`), for a later `--continue` to warm from."""

    ref: str
    command: str  # "generate" or "chat"
    cid: str = field(default_factory=new_cid)
    deferred: bool = False  # a one-shot process: the row goes to the pending file (`defer`)
    session: str | None = None
    constraint: str | None = None
    prompt_cache: dict | None = None
    kv_state: str | None = None


# -- the schema -----------------------------------------------------------------------------------

SCHEMA = 1

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
        _keep_wal(db, path)
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


def _keep_wal(db: sqlite3.Connection, path: Path) -> bool:
    """Ask SQLite not to checkpoint (and sync, and delete the WAL) when `db` closes as the last
    connection: Python 3.12's `setconfig`, else the same call made through ctypes where this
    interpreter's connection layout is known (CPython 3.8 to 3.11, the handle checked against the
    file it names before use). False where neither applies: closing then checkpoints, as before."""
    setconfig = getattr(db, "setconfig", None)
    if setconfig is not None:
        try:
            setconfig(getattr(sqlite3, "SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE", NO_CKPT_ON_CLOSE), True)
            return True
        except (sqlite3.Error, ValueError, TypeError):
            return False
    lib = _libsqlite()
    if lib is None:
        return False
    try:
        handle = ctypes.c_void_p.from_address(id(db) + object.__basicsize__).value
        named = lib.sqlite3_db_filename(handle, b"main") if handle else None
        if not named or not os.path.samefile(os.fsdecode(named), path):
            return False
        return lib.sqlite3_db_config(handle, NO_CKPT_ON_CLOSE, 1, None) == 0
    except (OSError, ValueError, ctypes.ArgumentError):
        return False


@functools.cache
def _libsqlite() -> Any:
    """The SQLite library this interpreter's `sqlite3` module runs on, for `_keep_wal` (None where
    the connection object's layout is not the known one: `sqlite3 *db` right after the header)."""
    import sys

    if sys.implementation.name != "cpython" or not (3, 8) <= sys.version_info[:2] <= (3, 11):
        return None
    if sqlite3.sqlite_version_info < (3, 25, 0) or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    try:
        import _sqlite3

        lib = ctypes.CDLL(_sqlite3.__file__)  # its symbols and those of the SQLite it links
        lib.sqlite3_libversion.restype = ctypes.c_char_p
        if lib.sqlite3_libversion().decode() != sqlite3.sqlite_version:
            return None
        lib.sqlite3_db_filename.restype = ctypes.c_char_p
        lib.sqlite3_db_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.sqlite3_db_config.restype = ctypes.c_int
        lib.sqlite3_db_config.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    except (OSError, AttributeError, ImportError):
        return None
    return lib


def _fold_wal(db: sqlite3.Connection, path: Path) -> None:
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


# -- writing --------------------------------------------------------------------------------------

_writer: dict[str, sqlite3.Connection] = {}  # one connection per database, kept for a chat's turns
_broken: set[str] = set()  # databases that failed in this process: warned once, not tried again


def scrub_url(url: str | None) -> str | None:
    """An endpoint URL without the credentials it may embed."""
    if not url or "://" not in url:
        return url
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    secret = ("key", "token", "secret", "password", "auth")
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
             if not any(word in k.lower() for word in secret)]  # fmt: skip
    return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query), parts.fragment))


def _scrub_record(rec: dict[str, Any]) -> dict[str, Any]:
    model = rec.get("model") or {}
    if model.get("endpoint"):
        rec = {**rec, "model": {**model, "endpoint": scrub_url(model["endpoint"])}}
    return rec


def pack_tokens(tokens: list[int] | None) -> bytes | None:
    return array("i", tokens).tobytes() if tokens else None


def unpack_tokens(blob: bytes | None) -> list[int]:
    if not blob:
        return []
    out = array("i")
    out.frombytes(blob)
    return out.tolist()


def row_values(
    rec: dict[str, Any],
    *,
    cid: str,
    command: str,
    messages: list[dict[str, Any]] | None,
    text: str | None = None,
    think: bool | None = None,
    grammar: str | None = None,
    tokens: list[int] | None = None,
    session: str | None = None,
    kv_state: str | None = None,
    created: float | None = None,
) -> dict[str, Any]:
    """The row of one request: its record's figures in columns (for filters and stats), the whole
    record as JSON."""
    rec = _scrub_record(rec)
    model, usage, timings = rec.get("model") or {}, rec.get("usage") or {}, rec.get("timings") or {}
    params = rec.get("params") or {}
    system = next((m.get("content") for m in messages or [] if m.get("role") == "system"), None)
    prompt = (
        text
        if messages is None
        else next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
    )
    tool_calls = rec.get("tool_calls")
    return {
        "conversation_id": cid,
        "created": time.time() if created is None else created,
        "command": command,
        "model": model.get("ref") or model.get("name") or "?",
        "model_name": model.get("name"),
        "model_path": model.get("path"),
        "endpoint": model.get("endpoint"),
        "session": session,
        "system": system,
        "prompt": prompt or "",
        "messages": None if messages is None else json.dumps(messages, ensure_ascii=False),
        "raw": int(messages is None),
        "think": None if think is None else int(think),
        "response": rec.get("text") or "",
        "reasoning": rec.get("reasoning"),
        "tool_calls": json.dumps(tool_calls, ensure_ascii=False) if tool_calls else None,
        "finish_reason": rec.get("finish_reason"),
        "error": rec.get("error"),
        "seed": params.get("seed"),
        "temperature": params.get("temperature"),
        "params": json.dumps(params),
        "grammar": grammar,
        "context_size": model.get("context_size"),
        "prompt_tokens": usage.get("prompt_tokens"),
        "cached_tokens": usage.get("cached_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "prefill_ms": timings.get("prefill_ms"),
        "decode_ms": timings.get("decode_ms"),
        "ttft_ms": timings.get("ttft_ms"),
        "total_ms": timings.get("total_ms"),
        "prefill_tps": timings.get("prefill_tokens_per_s"),
        "decode_tps": timings.get("decode_tokens_per_s"),
        "tokens": pack_tokens(tokens),
        "kv_state": kv_state,
        "llmcli_version": (rec.get("versions") or {}).get("llmcli"),
        "record": json.dumps(rec, ensure_ascii=False),
    }


def insert(db: sqlite3.Connection, row: dict[str, Any], *, source: str = "llmcli",
           name: str | None = None) -> int:  # fmt: skip
    """Insert one row (and its conversation, the first time) in the open transaction."""
    db.execute(
        "INSERT OR IGNORE INTO conversations (id, name, model, created, source) VALUES (?, ?, ?, ?, ?)",
        (row["conversation_id"], name or row.get("session"), row["model"], row["created"], source),
    )
    columns = ", ".join(row)
    marks = ", ".join(f":{k}" for k in row)
    cursor = db.execute(f"INSERT INTO responses ({columns}) VALUES ({marks})", row)
    return int(cursor.lastrowid or 0)


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
    reporting.warn(f"{what}: {_why(exc)} (the answer is unaffected)")


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
    _fold_wal(db, path)
    _enforce_cap(db, path)
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
    line = (json.dumps(_portable(row), ensure_ascii=False, separators=(",", ":")) + "\n").encode()
    try:
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT
        try:
            fd = os.open(pending, flags, 0o600)
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(pending, flags, 0o600)
        try:
            _lock(fd)
            size = os.fstat(fd).st_size
            _append(fd, line, size)
        finally:
            os.close(fd)  # and the lock with it
    except OSError as exc:
        _broken.add(key)
        reporting.warn(f"not logged: {pending}: {_why(exc)} (the answer is unaffected)")
        return False
    if size + len(line) >= PENDING_DRAIN_BYTES:
        try:
            db = _opened(path)
            drain(db, path)  # (already done where `_opened` just opened it: then nothing is left)
            _fold_wal(db, path)
            _enforce_cap(db, path)
        except (sqlite3.Error, LogError, OSError) as exc:
            _give_up(path, exc, f"log: rows wait in {pending}: {path}")
    return True


def _append(fd: int, line: bytes, size: int) -> None:
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
    return {k: {"b64": base64.b64encode(v).decode()} if isinstance(v, bytes) else v for k, v in row.items()}


def _native(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: base64.b64decode(v["b64"]) if isinstance(v, dict) else v for k, v in doc.items()}


REQUIRED = frozenset({"conversation_id", "created", "command", "model", "prompt", "response", "record"})


def drain(db: sqlite3.Connection, path: Path | None = None) -> int:
    """Move the rows one-shot processes left (`defer`) into the database, in one transaction, then
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
        columns = {r[1] for r in db.execute("PRAGMA table_info(responses)")} - {"id"}
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


def _why(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in text:
        return (
            "it is not a SQLite database (damaged?); `llmcli logs path` shows it, move it away to start anew"
        )
    return text


def close_all() -> None:
    for db in _writer.values():
        db.close()
    _writer.clear()
    _broken.clear()


# -- the size cap ---------------------------------------------------------------------------------


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


def _enforce_cap(db: sqlite3.Connection, path: Path) -> None:
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
    db.execute("DELETE FROM conversations WHERE id NOT IN (SELECT DISTINCT conversation_id FROM responses)")


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


def enabled(flag: bool | None = None) -> bool:
    """Whether requests are logged: `--log/--no-log`, else LLMCLI_LOG / config `log`."""
    from llmcli import settings

    return bool(settings.resolve("log", flag))


# -- reading --------------------------------------------------------------------------------------


def reader(path: Path | None = None) -> sqlite3.Connection:
    """A connection for reading (and pruning, importing): UsageError when there is no log yet or it
    cannot be opened."""
    from llmcli.errors import UsageError

    path = path or db_path()
    if not path.exists() and pending_path(path).exists():
        try:
            connect(path).close()  # one-shot processes logged, nothing has opened the log since
        except (sqlite3.Error, LogError, OSError) as exc:
            raise UsageError(f"cannot create the log {path}: {_why(exc)}") from None
    if not path.exists():
        raise UsageError(
            f"nothing logged yet ({path} does not exist)",
            hint="every generate and chat turn is logged unless --no-log or `llmcli logs off`",
        )
    try:
        db = connect(path, create=False)
    except (sqlite3.Error, LogError) as exc:
        raise UsageError(f"cannot read the log {path}: {_why(exc)}") from None
    try:
        drain(db, path)
    except (sqlite3.Error, OSError) as exc:  # read what is there; the waiting rows stay for later
        reporting.warn(f"entries waiting in {pending_path(path)} are not in the log yet: {_why(exc)}")
    return db


@dataclass
class History:
    """A logged conversation, to continue: its id, its model and how it was prompted, and the
    messages so far (system first, ending with the last answer)."""

    cid: str
    model: str
    system: str | None
    messages: list[dict[str, str]]
    raw: bool
    last: dict[str, Any]  # its latest row

    @property
    def text(self) -> str:
        """A plain-text (`--raw`) conversation so far: the last prompt and its continuation."""
        return str(self.last["prompt"]) + str(self.last["response"])


def history(cid: str | None = None, path: Path | None = None) -> History:
    """The conversation `cid` (None: the one logged last), rebuilt from its latest row: the prompt
    messages that row sent, and its answer. UsageError when there is none."""
    from llmcli.errors import UsageError

    db = reader(path)
    try:
        if cid is None:
            row = db.execute("SELECT * FROM responses ORDER BY id DESC LIMIT 1").fetchone()
            if row is None:
                raise UsageError("--continue: nothing logged yet")
        else:
            row = db.execute(
                "SELECT * FROM responses WHERE conversation_id = ? ORDER BY id DESC LIMIT 1", (cid,)
            ).fetchone()
            if row is None:
                raise UsageError(f"--cid: no logged conversation {cid!r}", hint="`llmcli logs` lists them")
    finally:
        db.close()
    last = dict(row)
    messages: list[dict[str, str]] = []
    if last["messages"]:
        messages = [{"role": m["role"], "content": m["content"]} for m in json.loads(last["messages"])]
    elif not last["raw"]:
        messages = [{"role": "user", "content": last["prompt"]}]
    if not last["raw"] and last["response"]:
        messages.append({"role": "assistant", "content": last["response"]})
    system = next((m["content"] for m in messages if m["role"] == "system"), None)
    return History(last["conversation_id"], last["model"], system,
                   [m for m in messages if m["role"] != "system"], bool(last["raw"]), last)  # fmt: skip


# -- queries for `llmcli logs` --------------------------------------------------------------------


def fts_query(text: str) -> str:
    """Words as FTS5 phrases (every one must appear), so that punctuation is never FTS syntax."""
    words = [w for w in text.split() if w.strip()]
    return " ".join('"' + w.replace('"', '""') + '"' for w in words)


def select(
    db: sqlite3.Connection,
    *,
    query: str | None = None,
    model: str | None = None,
    since: float | None = None,
    cid: str | None = None,
    limit: int | None = 20,
) -> list[sqlite3.Row]:
    """Rows, newest first (with `query`: best match first, by FTS5's bm25 rank)."""
    where: list[str] = []
    args: list[Any] = []
    if model:
        where.append("(r.model = ? OR r.model LIKE ? OR r.model_name = ?)")
        args += [model, f"%{model}%", model]
    if since is not None:
        where.append("r.created >= ?")
        args.append(since)
    if cid:
        where.append("r.conversation_id = ?")
        args.append(cid)
    if query:
        where.append("responses_fts MATCH ?")
        args.append(fts_query(query))
        source = "responses_fts JOIN responses r ON r.id = responses_fts.rowid"
        order = "responses_fts.rank, r.id DESC"
    else:
        source, order = "responses r", "r.id DESC"
    sql = (
        f"SELECT r.* FROM {source}"
        + (" WHERE " + " AND ".join(where) if where else "")
        + f" ORDER BY {order}"
    )
    if limit:
        sql += f" LIMIT {int(limit)}"
    return db.execute(sql, args).fetchall()


def one(db: sqlite3.Connection, rowid: int) -> sqlite3.Row | None:
    return db.execute("SELECT * FROM responses WHERE id = ?", (rowid,)).fetchone()


def as_json(row: sqlite3.Row) -> dict[str, Any]:
    """A row for `--json`: its columns, with the messages, params, tool calls and record parsed
    and the token ids as a list."""
    d = dict(row)
    for key in ("messages", "params", "tool_calls", "record"):
        if d.get(key):
            try:
                d[key] = json.loads(d[key])
            except ValueError:
                pass
    d["tokens"] = unpack_tokens(d.get("tokens"))
    d["raw"] = bool(d["raw"])
    d["record"] = _upgraded(d.get("record"))
    return d


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


# -- speed over time --------------------------------------------------------------------------------

BUCKETS = (128, 512, 2048, 8192)  # prompt-length buckets' upper bounds, in tokens


def bucket(prompt_tokens: int | None) -> str:
    if prompt_tokens is None:
        return "?"
    low = 0
    for high in BUCKETS:
        if prompt_tokens < high:
            return f"{low}-{high - 1}"
        low = high
    return f"{BUCKETS[-1]}+"


def speeds(db: sqlite3.Connection, *, model: str | None = None, since: float | None = None) -> list[dict]:
    """Per model and prompt-length bucket: the prefill and decode speeds of its rows (tokens/s),
    their median, quartiles and count, oldest row's time to newest."""
    import statistics

    where = ["error IS NULL", "command != 'import'"]
    args: list[Any] = []
    if model:
        where.append("(model = ? OR model LIKE ?)")
        args += [model, f"%{model}%"]
    if since is not None:
        where.append("created >= ?")
        args.append(since)
    rows = db.execute(
        "SELECT model, prompt_tokens, cached_tokens, prefill_tps, decode_tps, created FROM responses WHERE "
        + " AND ".join(where) + " ORDER BY id", args
    ).fetchall()  # fmt: skip
    groups: dict[tuple[str, str], list[sqlite3.Row]] = {}
    for r in rows:
        groups.setdefault((r["model"], bucket(r["prompt_tokens"])), []).append(r)

    def summary(values: list[float]) -> dict[str, Any] | None:
        values = [v for v in values if v]
        if not values:
            return None
        q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
        return {"n": len(values), "median": round(statistics.median(values), 2), "p25": round(q[0], 2),
                "p75": round(q[2], 2), "min": round(min(values), 2), "max": round(max(values), 2),
                "series": [round(v, 2) for v in values]}  # fmt: skip

    out = []
    order = {b: i for i, b in enumerate([bucket(0), *(bucket(h) for h in BUCKETS), "?"])}
    for (name, b), members in sorted(groups.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 99))):
        # a prefill served mostly from the cache measures the cache, not the model: left out
        prefill = [
            r["prefill_tps"]
            for r in members
            if r["prefill_tps"] and not (r["cached_tokens"] or 0) * 2 > (r["prompt_tokens"] or 0)
        ]
        out.append({
            "model": name, "prompt_tokens": b, "requests": len(members),
            "first": members[0]["created"], "last": members[-1]["created"],
            "prefill_tokens_per_s": summary(prefill),
            "decode_tokens_per_s": summary([r["decode_tps"] for r in members]),
        })  # fmt: skip
    return out


# -- simonw/llm's logs.db -------------------------------------------------------------------------


def import_llm(source: Path, db: sqlite3.Connection) -> tuple[int, int, int]:
    """Copy an llm `logs.db` into this log, conversations kept together (llm's conversation or thread
    id is the conversation id here). Reads llm's message store (threads, turns, messages, parts:
    what llm 0.26+ writes) and its older `responses` table; a response already imported is
    skipped. Returns (imported, skipped, conversations)."""
    from llmcli.errors import UsageError

    try:
        src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
        src.row_factory = sqlite3.Row
        tables = {r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    except sqlite3.Error as exc:
        raise UsageError(f"cannot read {source}: {_why(exc)}") from None
    if not tables & {"turns", "responses"}:
        raise UsageError(f"{source} is not an llm logs.db (no turns or responses table)")
    rows: list[dict[str, Any]] = []
    try:
        if "turns" in tables:
            rows += _llm_turns(src)
        if "responses" in tables:
            rows += _llm_responses(src)
    except sqlite3.Error as exc:
        raise UsageError(f"cannot read {source}: {exc}") from None
    finally:
        src.close()
    rows.sort(key=lambda r: r["created"])
    imported = skipped = 0
    conversations: set[str] = set()
    with transaction(db):
        for row in rows:
            if db.execute("SELECT 1 FROM responses WHERE source_id = ?", (row["source_id"],)).fetchone():
                skipped += 1
                continue
            name = row.pop("_name", None)
            insert(db, row, source="llm", name=name)
            imported += 1
            conversations.add(row["conversation_id"])
    return imported, skipped, len(conversations)


def _utc(text: str | None) -> float:
    from datetime import datetime, timezone

    if not text:
        return time.time()
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return time.time()
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


IMPORTED_SCHEMA_VERSION = 1  # docs/logs.schema.json's $defs/imported_record


def imported_record(*, model: str, text: str, reasoning: str | None, tool_calls: list | None,
                    params: dict[str, Any], prompt_tokens: int | None, completion_tokens: int | None,
                    total_ms: float | None) -> dict[str, Any]:  # fmt: skip
    """The record of a response imported from simonw/llm's log: the request record's fields (a
    figure llm did not keep is null), marked `source` "llm"; its params and tool calls are llm's."""
    none = dict.fromkeys
    return {
        "schema_version": IMPORTED_SCHEMA_VERSION, "source": "llm", "text": text,
        "reasoning": reasoning or None, "finish_reason": None, "error": None,
        "model": {**none(("path", "endpoint", "server", "architecture", "quantization", "size_bytes",
                          "parameters", "context_size", "gpu_layers", "weight_repack", "cache_type_k",
                          "cache_type_v", "type")), "ref": model, "name": model},
        "prompt_format": None, "constraint": None, "params": params,
        "usage": {**none(("cached_tokens", "prefill_tokens", "reasoning_tokens", "decode_tokens")),
                  "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": None if prompt_tokens is None or completion_tokens is None
                  else prompt_tokens + completion_tokens},
        "timings": {**none(("load_ms", "prefill_ms", "prefill_tokens_per_s", "decode_ms",
                            "decode_tokens_per_s", "ttft_ms", "tool_ms", "reasoning", "answer")),
                    "total_ms": total_ms},
        "threads": None, "speculative": None, "prompt_cache": None, "sources": None,
        "server_timings": None, "tool_calls": tool_calls or None, "versions": None,
    }  # fmt: skip


def _upgraded(rec: Any) -> Any:
    """An imported record as this version writes it: those before it had no schema_version and
    only the figures llm keeps."""
    if not isinstance(rec, dict) or rec.get("source") != "llm" or rec.get("schema_version") is not None:
        return rec
    usage, timings, model = rec.get("usage") or {}, rec.get("timings") or {}, rec.get("model") or {}
    return imported_record(model=model.get("ref") or "?", text=rec.get("text") or "",
                           reasoning=rec.get("reasoning"), tool_calls=rec.get("tool_calls"),
                           params=rec.get("params") or {}, prompt_tokens=usage.get("prompt_tokens"),
                           completion_tokens=usage.get("completion_tokens"),
                           total_ms=timings.get("total_ms"))  # fmt: skip


def _imported_row(*, source_id: str, cid: str, name: str | None, model: str, created: float,
                  messages: list[dict[str, Any]], response: str, reasoning: str | None,
                  tool_calls: list | None, options: str | None, input_tokens: int | None,
                  output_tokens: int | None, duration_ms: int | None) -> dict[str, Any]:  # fmt: skip
    try:
        params = json.loads(options) if options else {}
    except ValueError:
        params = {}
    rec = imported_record(model=model, text=response, reasoning=reasoning, tool_calls=tool_calls,
                          params=params, prompt_tokens=input_tokens, completion_tokens=output_tokens,
                          total_ms=duration_ms)  # fmt: skip
    row = row_values(rec, cid=cid, command="import", messages=messages, created=created)
    row.update(source_id=source_id, llmcli_version=None, seed=params.get("seed"),
               temperature=params.get("temperature"))  # fmt: skip
    row["_name"] = name
    return row


def _llm_parts(src: sqlite3.Connection, message_hash: str) -> list[dict[str, Any]]:
    """A message's parts, as dicts with their type, and their text put back together from fragments."""
    parts = []
    for p in src.execute("SELECT * FROM parts WHERE message_hash = ? ORDER BY position", (message_hash,)):
        payload = json.loads(p["payload"]) if p["payload"] else {}
        payload["type"] = p["type"]
        if p["text"] is not None:
            payload["text"] = p["text"]
        elif "text_ref" in payload:
            pieces = []
            for piece in payload.pop("text_ref"):
                if "literal" in piece:
                    pieces.append(piece["literal"])
                else:
                    found = src.execute(
                        "SELECT content FROM fragments WHERE id = ?", (piece["fragment"],)
                    ).fetchone()
                    pieces.append(found[0] if found else "")
            payload["text"] = "".join(pieces)
        parts.append(payload)
    return parts


def _llm_chain(src: sqlite3.Connection, tip: str | None) -> list[tuple[str, str]]:
    """(hash, role) of the messages from the root to `tip`."""
    chain = []
    seen = set()
    while tip and tip not in seen:
        seen.add(tip)
        found = src.execute("SELECT hash, parent_hash, role FROM messages WHERE hash = ?", (tip,)).fetchone()
        if found is None:
            break
        chain.append((found["hash"], found["role"]))
        tip = found["parent_hash"]
    return chain[::-1]


def _llm_turns(src: sqlite3.Connection) -> list[dict[str, Any]]:
    names = {r["id"]: r["name"] for r in src.execute("SELECT id, name FROM threads")}
    rows = []
    for t in src.execute("SELECT * FROM turns ORDER BY datetime_utc, id").fetchall():
        chain = _llm_chain(src, t["tip_message_hash"])
        hashes = [h for h, _ in chain]
        split = hashes.index(t["parent_message_hash"]) + 1 if t["parent_message_hash"] in hashes else 0
        messages: list[dict[str, Any]] = []
        response, reasoning, calls = [], [], []
        for i, (h, role) in enumerate(chain):
            parts = _llm_parts(src, h)
            text = "".join(p.get("text") or "" for p in parts if p["type"] == "text")
            if i < split or role != "assistant":
                messages.append({"role": role, "content": text})
                continue
            response.append(text)
            reasoning += [p.get("text") or "" for p in parts if p["type"] == "reasoning"]
            calls += [{"name": p.get("name"), "arguments": p.get("arguments"), "id": p.get("tool_call_id")}
                      for p in parts if p["type"] == "tool_call"]  # fmt: skip
        rows.append(_imported_row(
            source_id=f"llm:turn:{t['id']}", cid=t["thread_id"], name=names.get(t["thread_id"]),
            model=t["model"], created=_utc(t["datetime_utc"]), messages=messages,
            response="".join(response), reasoning="\n".join(r for r in reasoning if r) or None,
            tool_calls=calls, options=t["options_json"], input_tokens=t["input_tokens"],
            output_tokens=t["output_tokens"], duration_ms=t["duration_ms"],
        ))  # fmt: skip
    return rows


def _llm_responses(src: sqlite3.Connection) -> list[dict[str, Any]]:
    """llm's older table: one row per response, its prompt and system apart; a conversation's
    messages are the rows before it."""
    columns = {r[1] for r in src.execute("PRAGMA table_info(responses)")}
    names: dict[str, str] = {}
    if "conversations" in {r[0] for r in src.execute("SELECT name FROM sqlite_master")}:
        names = {r["id"]: r["name"] for r in src.execute("SELECT id, name FROM conversations")}
    tables = {r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    in_turns = {r[0] for r in src.execute("SELECT id FROM turns")} if "turns" in tables else set()
    history: dict[str, list[dict[str, Any]]] = {}
    rows = []
    for r in src.execute("SELECT * FROM responses ORDER BY datetime_utc, id").fetchall():
        if r["id"] in in_turns:  # written to both (or backfilled): the turn is the richer record
            continue
        cid = r["conversation_id"] or f"llm-{r['id']}"
        before = history.setdefault(cid, [])
        messages = [m for m in before if m["role"] != "system"]
        if r["system"]:
            messages.insert(0, {"role": "system", "content": r["system"]})
        messages.append({"role": "user", "content": r["prompt"] or ""})
        rows.append(_imported_row(
            source_id=f"llm:response:{r['id']}", cid=cid, name=names.get(cid), model=r["model"] or "?",
            created=_utc(r["datetime_utc"]), messages=messages, response=r["response"] or "",
            reasoning=r["reasoning"] if "reasoning" in columns else None, tool_calls=None,
            options=r["options_json"], input_tokens=r["input_tokens"] if "input_tokens" in columns else None,
            output_tokens=r["output_tokens"] if "output_tokens" in columns else None,
            duration_ms=r["duration_ms"],
        ))  # fmt: skip
        before[:] = messages + [{"role": "assistant", "content": r["response"] or ""}]
    return rows
