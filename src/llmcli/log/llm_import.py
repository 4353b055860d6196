"""Importing simonw/llm's `logs.db` (`llmcli logs import`): its message store (threads, turns,
messages, parts: what llm 0.26+ writes) and its older `responses` table, as rows of this log with
an imported record (`imported_record`; `upgraded` brings one an older llmcli wrote up to date).
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from llmcli.log.rows import insert, row_values
from llmcli.log.store import transaction, why


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
        raise UsageError(f"cannot read {source}: {why(exc)}") from None
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


def upgraded(rec: Any) -> Any:
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
