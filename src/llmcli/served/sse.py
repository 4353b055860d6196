"""Server-sent events (the WHATWG `text/event-stream` format), parsed from lines.

Pure: `events(lines)` turns an iterator of decoded lines (without their line endings) into
`(event, data)` pairs. Comment lines (":") and `id:` / `retry:` fields are skipped; several
`data:` lines of one event are joined with newlines; an event ends at a blank line. The OpenAI
streaming API sends `data: {json}` events and a final `data: [DONE]`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

_FIELDS = ("data", "event", "id", "retry")


class MalformedEvent(ValueError):
    """A line that is no part of an event stream (an HTML error page, say)."""


def events(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    data: list[str] = []
    name = "message"
    for line in lines:
        if not line:
            if data:
                yield name, "\n".join(data)
            data, name = [], "message"
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field not in _FIELDS:
            raise MalformedEvent(line[:120])
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
    if data:
        yield name, "\n".join(data)
