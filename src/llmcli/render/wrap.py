"""Lines for a terminal's width: stderr's long lines broken where a reader expects, not mid-word.

A terminal wraps a long line at its last column, wherever that falls ("contex" / "t 281/4096").
On a terminal, a line of " · "-joined parts (the stats line) is broken between parts, any other
at spaces; the lines after the first are indented two columns more than the first. Off a terminal
(a pipe, a file, a test's capture) the text is left as it is: one message, one line.
"""

from __future__ import annotations

import os
from typing import Any

SEPARATOR = " · "
MIN_WIDTH = 20  # narrower than this, breaking lines helps nobody


def terminal_width(stream: Any) -> int | None:
    """The columns of the terminal `stream` writes to; None when it is not a terminal."""
    try:
        if not stream.isatty():
            return None
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return None


def for_stream(text: str, stream: Any) -> str:
    """`text` broken to the width of the terminal `stream` writes to (unchanged off a terminal)."""
    width = terminal_width(stream)
    return fit(text, width) if width else text


def fit(text: str, width: int) -> str:
    """Each line of `text` longer than `width` broken into lines of at most `width` columns
    (but for a word wider than that, left whole)."""
    if width < MIN_WIDTH:
        return text
    return "\n".join(line for raw in text.split("\n") for line in _fit_line(raw, width))


def _fit_line(line: str, width: int) -> list[str]:
    if _columns(line) <= width:
        return [line]
    indent = line[: len(line) - len(line.lstrip(" "))] + "  "
    if SEPARATOR not in line:
        return _words(line, width, indent)
    out: list[str] = []
    current = ""
    for part in line.split(SEPARATOR):
        candidate = f"{current}{SEPARATOR}{part}" if current else (indent if out else "") + part
        if _columns(candidate) <= width or not current:
            current = candidate
            continue
        out.append(current)
        current = indent + part.lstrip(" ")
    out.append(current)
    # a part that is itself too long is broken at its spaces
    return [piece for chunk in out for piece in _words(chunk, width, indent)]


def _words(line: str, width: int, indent: str) -> list[str]:
    """`line` broken at its spaces into lines of at most `width` columns, the later ones after
    `indent`. A word wider than a line (a path, a URL) stands whole on a line of its own: the
    terminal wraps it, and copies it back as one."""
    if _columns(line) <= width:
        return [line]
    lead = line[: len(line) - len(line.lstrip(" "))]
    out: list[str] = []
    current = lead
    for word in line.split():
        gap = "" if current.strip() == "" else " "
        if _columns(current + gap + word) <= width or not current.strip():
            current += gap + word
            continue
        out.append(current)
        current = indent + word
    if current.strip():
        out.append(current)
    return out


def _columns(text: str) -> int:
    if text.isascii():
        return len(text)
    from wcwidth import wcswidth

    width = wcswidth(text)
    return width if width >= 0 else len(text)  # a control character: count code points
