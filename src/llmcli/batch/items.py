"""A batch item and what it may say of itself: its prompt or messages (content parts included),
its sampling options and its constraints (`stop`, `grammar`, `response_format`), checked, for
JSON lines (batch/inputs.py) and OpenAI batch bodies (batch/openai.py) alike."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from llmcli.errors import UsageError

# per-item sampling options, as JSON lines and OpenAI bodies give them: (type, in range, the range in words)
Check = tuple[type | tuple[type, ...], Callable[[float], bool], str]
OPTIONS: dict[str, Check] = {
    "max_tokens": (int, lambda v: v >= 1, ">= 1"),
    "max_completion_tokens": (int, lambda v: v >= 1, ">= 1"),  # OpenAI's newer name for max_tokens
    "temperature": ((int, float), lambda v: 0 <= v < math.inf, ">= 0"),
    "top_p": ((int, float), lambda v: 0 < v <= 1, "in (0, 1]"),
    "top_k": (int, lambda v: v >= 0, ">= 0"),
    "min_p": ((int, float), lambda v: 0 <= v <= 1, "in [0, 1]"),
    "seed": (int, lambda v: 0 <= v < 2**32 - 1, "in [0, 4294967294]"),
    "frequency_penalty": ((int, float), lambda v: -2 <= v <= 2, "in [-2, 2]"),
    "presence_penalty": ((int, float), lambda v: -2 <= v <= 2, "in [-2, 2]"),
    "repeat_penalty": ((int, float), lambda v: 0 < v < math.inf, "> 0"),
    "repetition_penalty": ((int, float), lambda v: 0 < v < math.inf, "> 0"),  # vLLM's name for it
}
ALIASES = {"max_completion_tokens": "max_tokens", "repetition_penalty": "repeat_penalty"}
JSON_OBJECT: dict = {"type": "object"}  # response_format json_object: any JSON object (kept by identity)


@dataclass
class Item:
    id: str  # as ids are matched (a rerun's resume, the same id used twice): a string
    line: int
    messages: list[dict] | None = None
    prompt: str | None = None
    options: dict = field(default_factory=dict)  # per-item max_tokens, temperature, seed, stop, ...
    path: str | None = None  # --each: the file the prompt is
    attachments: list[str] = field(default_factory=list)  # text files for its (last) user message
    keyed: bool = False  # the id is the input's own (JSON lines), not a line number or a path
    given_id: str | int | None = None  # the id as the input wrote it (its JSON type kept in the output)
    raw: bool = False  # `prompt` is text to continue, with no chat template (/v1/completions)
    openai: str | None = None  # an OpenAI batch line's endpoint ("chat" or "completions")
    response_format: str | None = None  # "json_object" or "json_schema" as the item asked
    unknown: tuple[str, ...] = ()  # fields of an OpenAI body that are not read (warned about)
    work: dict | None = None  # its prompt's and settings' identity, once its request is made (batch/run.py)

    @property
    def output_id(self) -> str | int:
        return self.given_id if self.given_id is not None else self.id


class BadLine(UsageError):
    def __init__(self, path: str, line: int, why: str, *, whole_file: bool = False) -> None:
        where = path if whole_file else f"{path} line {line}"  # --each: the file is the item
        super().__init__(f"{where}: {why}", hint="--skip-bad skips such items")
        self.line = line
        self.where = path if whole_file else f"line {line}"


def fill(item: Item, source: dict, *, messages: object, prompt: object) -> str | None:
    """`item`'s prompt or messages and its own options from `source` (a JSON line, an OpenAI
    body); what is wrong with them, if anything."""
    if prompt is not None:
        if not isinstance(prompt, str) or not prompt.strip():
            return "`prompt` must be a non-empty string"
        item.prompt = prompt
    else:
        why = _messages_error(messages)
        if why:
            return why
        assert isinstance(messages, list)  # OpenAI's `developer` is what a chat template calls system
        item.messages = [dict(m, role="system") if m["role"] == "developer" else m for m in messages]
    return options(source, item)


def options(source: dict, item: Item) -> str | None:
    """The item's sampling options and constraints from `source`, checked, into `item.options`."""
    if "max_tokens" in source and "max_completion_tokens" in source:
        return "give `max_tokens` or `max_completion_tokens`, not both"
    for key, (kind, ok, says) in OPTIONS.items():
        value = source.get(key)
        if value is None:
            continue
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"`{key}` must be a number, got {json.dumps(value)}"
        if not ok(float(value)):  # type: ignore[arg-type]  # a number: checked just above
            return f"`{key}` is out of range: {value} (it must be {says})"
        item.options[ALIASES.get(key, key)] = value
    return _constraints(source, item)


def _constraints(source: dict, item: Item) -> str | None:
    """An item's `stop` (a string or a list of them), `grammar` (GBNF text) and `response_format`
    (OpenAI's: `json_schema` with its `schema`, or `json_object`; `text` is none) into its
    `options` (`stop`, `grammar`, `json_schema`); what is wrong with them, if anything."""
    options = item.options
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
        options["json_schema"] = JSON_OBJECT  # this very object: the record says json_object
    elif kind == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, (dict, bool)):
            return "`response_format` json_schema needs a `json_schema` object with a `schema`"
        options["json_schema"] = schema
    elif kind != "text":
        return "`response_format` must have type json_schema, json_object or text"
    item.response_format = kind if kind != "text" else None
    return None


ROLES = ("system", "developer", "user", "assistant")
PARTS = ("text", "image_url")


def _messages_error(messages: object) -> str | None:
    """What is wrong with `messages`, if anything: each a role and a content, a string or a list
    of content parts (`text`, and `image_url` passed on as it is)."""
    if not isinstance(messages, list) or not messages:
        return "`messages` must be a non-empty list"
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            return "each message needs a role: system, developer, user or assistant"
        content = m.get("content")
        if isinstance(content, list) and content:
            for part in content:
                kind = part.get("type") if isinstance(part, dict) else None
                if kind not in PARTS:
                    return f"a content part of type {json.dumps(kind)}: llmcli reads text and image_url parts"
                if kind == "text" and not isinstance(part.get("text"), str):
                    return "a text part needs its `text`"
                if kind == "image_url" and not isinstance((part.get("image_url") or {}).get("url"), str):
                    return "an image_url part needs its `image_url.url`"
        elif not isinstance(content, str):
            return "each message's content must be a string or a list of content parts"
    return None
