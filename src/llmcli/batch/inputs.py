"""A batch's input, read line by line: plain text (one prompt per line), JSON lines (`id` and a
`prompt` or `messages`, with per-item `max_tokens`, `temperature`, `seed`, `stop`, `grammar`,
`response_format`, and `attachments`: text files whose text goes before the item's prompt, or
its last user message, as `generate -a` puts it), or the OpenAI batch format `vllm run-batch`
reads (`custom_id`, `body` with
`messages`, `max_tokens`, ...). The format is the first non-blank line's: a JSON object makes the
file JSON lines, anything else plain text. (`--each`'s files, one prompt each: batch/each.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from llmcli.errors import UsageError

OPTIONS: dict[str, type | tuple[type, ...]] = {"max_tokens": int, "temperature": (int, float), "seed": int}


@dataclass
class Item:
    id: str
    line: int
    messages: list[dict] | None = None
    prompt: str | None = None
    options: dict = field(default_factory=dict)  # per-item max_tokens, temperature, seed, stop, ...
    path: str | None = None  # --each: the file the prompt is
    attachments: list[str] = field(default_factory=list)  # text files for its (last) user message
    keyed: bool = False  # the id is the input's own (JSON lines), not a line number or a path


class BadLine(UsageError):
    def __init__(self, path: str, line: int, why: str, *, whole_file: bool = False) -> None:
        where = path if whole_file else f"{path} line {line}"  # --each: the file is the item
        super().__init__(f"{where}: {why}", hint="--skip-bad skips such items")
        self.line = line


def read(path: Path | str) -> Iterator[Item | BadLine]:
    """Each item of the file in order, or a `BadLine` where a line cannot be read (the caller
    decides whether to stop or skip). Streamed: one line in memory at a time."""
    name = str(path)
    opened = open(0, "rb", closefd=False) if name == "-" else open(name, "rb")  # noqa: SIM115
    jsonl: bool | None = None
    with opened as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                yield BadLine(name, n, f"not valid UTF-8 (byte {exc.start})")
                continue
            if not line.strip():
                continue
            if jsonl is None:
                jsonl = line.lstrip().startswith("{")
            yield _json_item(name, n, line) if jsonl else Item(str(n), n, prompt=line)


def _json_item(name: str, n: int, line: str) -> Item | BadLine:
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as exc:
        return BadLine(name, n, f"not JSON ({exc.msg}, column {exc.colno})")
    if not isinstance(doc, dict):
        return BadLine(name, n, "not a JSON object")
    if "custom_id" in doc:  # the OpenAI batch format (vllm run-batch)
        body = doc.get("body")
        if not isinstance(body, dict):
            return BadLine(name, n, "an OpenAI batch line needs a `body` object")
        key, source = doc["custom_id"], body
    else:
        key, source = doc.get("id", n), doc
    if not isinstance(key, (str, int)) or isinstance(key, bool):
        return BadLine(name, n, "the id must be a string or an integer")
    item = Item(str(key), n, keyed=True)
    messages, prompt = source.get("messages"), source.get("prompt")
    if (messages is None) == (prompt is None):
        return BadLine(name, n, "give exactly one of `prompt` and `messages`")
    if prompt is not None:
        if not isinstance(prompt, str) or not prompt.strip():
            return BadLine(name, n, "`prompt` must be a non-empty string")
        item.prompt = prompt
    else:
        why = _messages_error(messages)
        if why:
            return BadLine(name, n, why)
        item.messages = messages
    for key_, kind in OPTIONS.items():
        value = source.get(key_)
        if value is None:
            continue
        if not isinstance(value, kind) or isinstance(value, bool):
            return BadLine(name, n, f"`{key_}` must be a number, got {json.dumps(value)}")
        number = float(source[key_])
        if (key_ == "max_tokens" and number < 1) or (key_ == "temperature" and number < 0):
            return BadLine(name, n, f"`{key_}` is out of range: {value}")
        item.options[key_] = value
    attachments = source.get("attachments", [])
    if not isinstance(attachments, list) or not all(isinstance(a, str) and a for a in attachments):
        return BadLine(name, n, "`attachments` must be a list of file paths or URLs")
    item.attachments = attachments
    why = _constraints(source, item.options)
    return BadLine(name, n, why) if why else item


def _constraints(source: dict, options: dict) -> str | None:
    """An item's `stop` (a string or a list of them), `grammar` (GBNF text) and `response_format`
    (OpenAI's: `json_schema` with its `schema`, or `json_object`; `text` is none) into `options`
    (`stop`, `grammar`, `json_schema`); what is wrong with them, if anything."""
    stop = source.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
            return "`stop` must be a non-empty string or a list of them"
        options["stop"] = list(stops)
    grammar, fmt = source.get("grammar"), source.get("response_format")
    if grammar is not None and fmt is not None:
        return "give `grammar` or `response_format`, not both"
    if grammar is not None:
        if not isinstance(grammar, str) or not grammar.strip():
            return "`grammar` must be GBNF text"
        options["grammar"] = grammar
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "json_object":
        options["json_schema"] = {"type": "object"}
    elif kind == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, (dict, bool)):
            return "`response_format` json_schema needs a `json_schema` object with a `schema`"
        options["json_schema"] = schema
    elif kind != "text":
        return "`response_format` must have type json_schema, json_object or text"
    return None


def _messages_error(messages: object) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "`messages` must be a non-empty list"
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
            return "each message needs a role: system, user or assistant"
        if not isinstance(m.get("content"), str):
            return "each message's content must be a string"
    return None
