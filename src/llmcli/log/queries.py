"""Reading the log back for `llmcli logs` and `--continue`: `reader` (a connection, the waiting
rows moved in first), a conversation to continue (`history`), the rows a listing or a search
selects (FTS5), one row, and a row as `--json` prints it.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from llmcli import reporting
from llmcli.log.llm_import import upgraded
from llmcli.log.pending import drain, pending_path
from llmcli.log.rows import MARK, unpack_tokens
from llmcli.log.store import LogError, connect, db_path, why


def reader(path: Path | None = None) -> sqlite3.Connection:
    """A connection for reading (and pruning, importing): UsageError when there is no log yet or it
    cannot be opened."""
    from llmcli.errors import UsageError

    path = path or db_path()
    if not path.exists() and pending_path(path).exists():
        try:
            connect(path).close()  # one-shot processes logged, nothing has opened the log since
        except (sqlite3.Error, LogError, OSError) as exc:
            raise UsageError(f"cannot create the log {path}: {why(exc)}") from None
    if not path.exists():
        raise UsageError(
            f"nothing logged yet ({path} does not exist)",
            hint="every generate and chat turn is logged unless --no-log or `llmcli logs off`",
        )
    try:
        db = connect(path, create=False)
    except (sqlite3.Error, LogError) as exc:
        raise UsageError(f"cannot read the log {path}: {why(exc)}") from None
    try:
        drain(db, path)
    except (sqlite3.Error, OSError) as exc:  # read what is there; the waiting rows stay for later
        reporting.warn(f"entries waiting in {pending_path(path)} are not in the log yet: {why(exc)}")
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
    # the images of its user messages (media.image.Image), by their index in `messages`
    images: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    # its text attachments (media.fragment.Placed), by the index of their message in `messages`
    # (-1: a plain-text conversation's), their blocks already in the content
    texts: tuple[Any, ...] = ()

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
        placed = images(db, row["id"])
        attached = texts(db, row["id"])
        last = expand(db, row)
    finally:
        db.close()
    messages: list[dict[str, str]] = []
    if last["messages"]:
        messages = [{"role": m["role"], "content": m["content"]} for m in json.loads(last["messages"])]
    elif not last["raw"]:
        messages = [{"role": "user", "content": last["prompt"]}]
    if not last["raw"] and last["response"]:
        messages.append({"role": "assistant", "content": last["response"]})
    system = next((m["content"] for m in messages if m["role"] == "system"), None)
    shift = 1 if messages and messages[0]["role"] == "system" else 0  # the system prompt is kept apart
    return History(last["conversation_id"], last["model"], system,
                   [m for m in messages if m["role"] != "system"], bool(last["raw"]), last,
                   {i - shift: imgs for i, imgs in placed.items() if i >= shift},
                   tuple(p if p.message < 0 else replace(p, message=p.message - shift)
                         for p in attached if p.message < 0 or p.message >= shift))  # fmt: skip


def attachments(db: sqlite3.Connection, rowid: int) -> list[dict[str, Any]]:
    """The images of row `rowid`'s prompt, in order: name, media type, bytes, sha256, pixel size,
    the index of their user message in the row's messages, the positions each took."""
    found = db.execute(
        "SELECT ra.name, a.media_type, a.bytes, a.id AS sha256, a.width, a.height, ra.message, ra.tokens "
        "FROM response_attachments ra JOIN attachments a ON a.id = ra.attachment_id "
        "WHERE ra.response_id = ? ORDER BY ra.position",
        (rowid,),
    )
    return [dict(r) for r in found]


def images(db: sqlite3.Connection, rowid: int) -> dict[int, tuple[Any, ...]]:
    """Row `rowid`'s images read back from the log (media.image.Image, checked against their
    hash), by the index of their user message in the row's messages. UsageError where one is gone
    or damaged."""
    from llmcli.errors import UsageError
    from llmcli.media.image import from_bytes

    placed: dict[int, list[Any]] = {}
    found = db.execute(
        "SELECT ra.name, ra.message, a.id, a.content, a.media_type FROM response_attachments ra "
        "JOIN attachments a ON a.id = ra.attachment_id WHERE ra.response_id = ? ORDER BY ra.position",
        (rowid,),
    )
    for name, message, sha256, content, media_type in found:
        if not media_type.startswith("image/"):  # a text: its block is in the prompt (`expand`)
            continue
        image = from_bytes(name or sha256[:12], bytes(content))
        if image.sha256 != sha256:
            raise UsageError(f"entry #{rowid}: the log's copy of the image {name} is damaged (another hash)")
        placed.setdefault(-1 if message is None else int(message), []).append(image)
    return {index: tuple(imgs) for index, imgs in placed.items()}


def texts(db: sqlite3.Connection, rowid: int) -> tuple[Any, ...]:
    """Row `rowid`'s text attachments (media.fragment.Placed, by the index of their user message in
    the row's messages), as the log keeps them."""
    from llmcli.media.fragment import Placed, TextFile

    found = db.execute(
        "SELECT ra.name, ra.message, ra.tokens, a.id, a.media_type, a.content FROM response_attachments ra "
        "JOIN attachments a ON a.id = ra.attachment_id WHERE ra.response_id = ? AND a.media_type NOT LIKE "
        "'image/%' ORDER BY ra.position", (rowid,),
    )  # fmt: skip
    return tuple(
        Placed(TextFile(name or sha[:12], kind, bytes(content).decode("utf-8", errors="replace"), sha,
                        len(content)), -1 if message is None else int(message), tokens)
        for name, message, tokens, sha, kind, content in found
    )  # fmt: skip


_MARKED = re.compile(MARK.format("([0-9a-f]{64})").replace("\x00", "\\x00"))


def expand(db: sqlite3.Connection, row: sqlite3.Row | dict[str, Any]) -> dict[str, Any]:
    """`row` as a dict, each text attachment's mark in its prompt and messages (log.rows.marked)
    replaced by the block it stood for, rebuilt from the text stored once by hash."""
    from llmcli.errors import UsageError
    from llmcli.media.fragment import TextFile

    d = dict(row)
    marked = "\x00attachment:" in (d.get("prompt") or "") or "\\u0000attachment:" in (d.get("messages") or "")
    if not marked:
        return d
    blocks: dict[str, str] = {}
    found = db.execute(
        "SELECT ra.name, a.id, a.media_type, a.content FROM response_attachments ra "
        "JOIN attachments a ON a.id = ra.attachment_id WHERE ra.response_id = ?", (d["id"],),
    )  # fmt: skip
    for name, sha256, media_type, content in found:
        text = bytes(content).decode("utf-8", errors="replace")
        blocks[sha256] = TextFile(name or sha256[:12], media_type, text, sha256, len(content)).block()

    def put_back(match: re.Match) -> str:
        if match.group(1) not in blocks:
            raise UsageError(f"entry #{d['id']}: the log's copy of an attached text is gone")
        return blocks[match.group(1)]

    for key in ("prompt", "messages"):
        if d.get(key):
            if key == "messages":  # JSON: the block goes in as a JSON string's content
                d[key] = _MARKED_JSON.sub(lambda m: json.dumps(put_back(m))[1:-1], d[key])
            else:
                d[key] = _MARKED.sub(put_back, d[key])
    return d


_MARKED_JSON = re.compile(r"\\u0000attachment:([0-9a-f]{64})\\u0000")


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
    ids: list[int] | None = None,
) -> list[dict[str, Any]]:
    """Rows, newest first (with `query`: best match first, by FTS5's bm25 rank); `ids`: only those."""
    where: list[str] = []
    args: list[Any] = []
    if ids is not None:
        where.append("r.id IN (SELECT value FROM json_each(?))")
        args.append(json.dumps(ids))
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
    return [expand(db, row) for row in db.execute(sql, args).fetchall()]


def one(db: sqlite3.Connection, rowid: int) -> dict[str, Any] | None:
    """Row `rowid` as a dict, its text attachments' blocks back in its prompt (`expand`)."""
    row = db.execute("SELECT * FROM responses WHERE id = ?", (rowid,)).fetchone()
    return None if row is None else expand(db, row)


def as_json(row: sqlite3.Row | dict[str, Any]) -> dict[str, Any]:
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
    d["record"] = upgraded(d.get("record"))
    return d
