"""A batch's input, read line by line: plain text (one prompt per line), JSON lines (`id` and a
`prompt` or `messages`, with per-item options: batch/items.py, and `attachments`: text files whose
text goes before its prompt, or its last user message, as `generate -a` puts it), or the OpenAI
batch format that `vllm run-batch` reads (`custom_id`, `body` with `messages`, ...:
batch/openai.py). The format is the first non-blank line's: a JSON object makes the file JSON
lines, anything else plain text. (`--each`'s files, one prompt each: batch/each.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from llmcli.batch import openai
from llmcli.batch.items import BadLine, Item, fill


@dataclass
class Blanks:
    """Blank lines met while reading (no item; counted, to be said once)."""

    count: int = 0


def read(path: Path | str, blanks: Blanks | None = None) -> Iterator[Item | BadLine]:
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
                if blanks is not None:
                    blanks.count += 1
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
        item = openai.read_line(doc, n)
        return BadLine(name, n, item) if isinstance(item, str) else item
    key = doc.get("id", n)
    if not isinstance(key, (str, int)) or isinstance(key, bool):
        return BadLine(name, n, "the id must be a string or an integer")
    item = Item(str(key), n, keyed=True, given_id=key if "id" in doc else None)
    messages, prompt = doc.get("messages"), doc.get("prompt")
    if (messages is None) == (prompt is None):
        return BadLine(name, n, "give exactly one of `prompt` and `messages`")
    attachments = doc.get("attachments", [])
    if not isinstance(attachments, list) or not all(isinstance(a, str) and a for a in attachments):
        return BadLine(name, n, "`attachments` must be a list of file paths or URLs")
    item.attachments = attachments
    why = fill(item, doc, messages=messages, prompt=prompt)
    return BadLine(name, n, why) if why else item


