"""Tables, in one place: plain aligned columns (`models list`, `pull --list`, `models alias`)
and the Markdown grid of `bench` results. Both return text; the caller writes it to stdout.
"""

from __future__ import annotations

import re
from typing import Any

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(value: Any) -> str:
    """Metadata comes from strangers: control characters (terminal escapes, newlines) are shown
    escaped, so a model file cannot drive the terminal that lists it."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(value))


def plain(headers: list[str], rows: list[list[Any]]) -> str:
    """Aligned columns with no truncation, so they grep and pipe well; an empty cell is "-"."""
    cells = [headers] + [["-" if c in (None, "") else printable(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)
    return "".join(line + "\n" for line in lines)


def markdown(head: list[str], body: list[list[str]], right: list[bool]) -> str:
    """A Markdown table; `right` says which columns are right-aligned (numbers)."""
    # at least 3: a delimiter cell needs a dash besides the colon ("-:" is not one in GFM)
    widths = [max(3, len(h), *(len(row[i]) for row in body)) for i, h in enumerate(head)]

    def line(cells: list[str]) -> str:
        padded = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)]
        return "| " + " | ".join(padded) + " |"

    rule = (
        "| "
        + " | ".join(("-" * (w - 1) + ":") if r else "-" * w for w, r in zip(widths, right, strict=True))
        + " |"
    )
    return "\n".join([line(head), rule, *(line(row) for row in body)]) + "\n"
