"""The row of one request: `Logged` (how the request path asks for a request to be logged), the
conversation id, the record's figures laid out in the log's columns (`row_values`), the answer's
token ids packed, and `insert`.

API keys never reach the log: the record carries none, and an endpoint URL is stored without
any credentials it embeds (`user:password@`, `?api_key=`; `scrub_url`).
"""

from __future__ import annotations

import json
import secrets
import time
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

if TYPE_CHECKING:
    import sqlite3


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
    deferred: bool = False  # a one-shot process: the row goes to the pending file (`writer.defer`)
    session: str | None = None
    constraint: str | None = None
    prompt_cache: dict | None = None
    kv_state: str | None = None
    retrieval: dict | None = None  # an answer from passages: the record's block (request/grounding.py)


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
    images: list[dict[str, Any]] | None = None,
    fragments: tuple = (),
) -> dict[str, Any]:
    """The row of one request: its record's figures in columns (for filters and stats), the whole
    record as JSON; `images` (`attachments`): stored apart by `insert`. `fragments`: the request's
    text attachments (media.fragment.Placed), whose blocks the prompt holds: each is stored once
    by hash with the images, and its block in the prompt becomes a mark that reading expands."""
    rec = _scrub_record(rec)
    messages, text = marked(messages, text, fragments)
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
        **({ATTACHMENTS: images} if images else {}),
    }


# A row's key that is no column: the request's images (`attachments`), which `insert` stores apart
ATTACHMENTS = "attachments"
# where a text attachment's block was in a logged prompt (log.queries.expand puts it back)
MARK = "\x00attachment:{}\x00"


def marked(messages: list[dict[str, Any]] | None, text: str | None,
           fragments: tuple) -> tuple[list[dict[str, Any]] | None, str | None]:  # fmt: skip
    """The prompt with each text attachment's block replaced by its mark (copies: the request's
    own messages are untouched)."""
    if not fragments:
        return messages, text
    messages = None if messages is None else [dict(m) for m in messages]
    for p in fragments:
        block, mark = p.file.block(), MARK.format(p.file.sha256)
        if p.message < 0 and text is not None:
            text = text.replace(block, mark, 1)
        elif messages is not None and 0 <= p.message < len(messages):
            content = messages[p.message].get("content")
            if isinstance(content, str):
                messages[p.message]["content"] = content.replace(block, mark, 1)
    return messages, text


def attachments(placed: dict[int, tuple[Any, ...]], encoded: list[dict[str, Any]],
                fragments: tuple = ()) -> list[dict[str, Any]]:  # fmt: skip
    """The images of a request's prompt (media.image.Image by the index of their user message in
    the request's messages), in order, with the positions each took (`encoded`: the stats'
    per-image figures; None where unknown), then its texts (`fragments`: media.fragment.Placed,
    their UTF-8 bytes the content), for `row_values`."""
    tokens = {a.get("sha256"): a.get("tokens") for a in encoded}
    return [{"sha256": image.sha256, "media_type": image.media_type, "bytes": image.size,
             "width": image.width, "height": image.height, "content": image.data, "message": index,
             "name": image.name, "tokens": tokens.get(image.sha256)}
            for index, images in sorted(placed.items()) for image in images] + [
            {"sha256": p.file.sha256, "media_type": p.file.media_type, "bytes": p.file.size,
             "width": None, "height": None, "content": p.file.text.encode("utf-8"), "message": p.message,
             "name": p.file.name, "tokens": p.tokens} for p in fragments]  # fmt: skip


def insert(db: sqlite3.Connection, row: dict[str, Any], *, source: str = "llmcli",
           name: str | None = None) -> int:  # fmt: skip
    """Insert one row (and its conversation, the first time) in the open transaction; its images
    (`ATTACHMENTS`) stored once each by hash, and linked to it in order."""
    row = dict(row)
    images = row.pop(ATTACHMENTS, None) or []
    db.execute(
        "INSERT OR IGNORE INTO conversations (id, name, model, created, source) VALUES (?, ?, ?, ?, ?)",
        (row["conversation_id"], name or row.get("session"), row["model"], row["created"], source),
    )
    columns = ", ".join(row)
    marks = ", ".join(f":{k}" for k in row)
    cursor = db.execute(f"INSERT INTO responses ({columns}) VALUES ({marks})", row)
    rowid = int(cursor.lastrowid or 0)
    for position, a in enumerate(images):
        db.execute(
            "INSERT OR IGNORE INTO attachments (id, media_type, bytes, width, height, content, created) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (a["sha256"], a["media_type"], a["bytes"], a.get("width"), a.get("height"), a["content"],
             row["created"]),
        )  # fmt: skip
        db.execute(
            "INSERT INTO response_attachments (response_id, attachment_id, position, message, name, tokens) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (rowid, a["sha256"], position, a.get("message"), a.get("name"), a.get("tokens")),
        )
    return rowid
