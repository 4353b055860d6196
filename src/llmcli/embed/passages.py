"""A file as passages: read line by line (a file of gigabytes is never held whole), grouped into
blocks on paragraph and code-block boundaries, and the blocks packed into passages of at most
`chunk` tokens of the embedding model, each passage beginning with the last `overlap` tokens'
worth of blocks of the one before, so that a fact cut by a boundary is whole in one of the two.

A block longer than a passage is cut on line boundaries, a line longer than a passage by
characters. Every passage keeps the lines it came from (1-based, inclusive): what a citation
shows as `path:first-last`.

A binary file (a NUL byte in its first 8 KiB, or bytes that are not UTF-8) is not read: `Binary`
says so, in one line."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from llmcli.errors import UsageError

CHUNK = 256  # tokens per passage: a few paragraphs, well inside a 512-token embedding context
OVERLAP = 32
SNIFF = 8192
FENCE = ("```", "~~~")
BLOCK_BYTES = 64 << 10  # a paragraph (or code block) longer than this is cut: memory stays flat


class Binary(UsageError):
    """A file that is not text: skipped with one line."""


@dataclass
class Passage:
    text: str
    first: int  # its first line (1-based)
    last: int  # its last line, inclusive
    tokens: int


@dataclass
class _Block:
    lines: list[str]
    first: int
    last: int
    tokens: int


def check_sizes(chunk: int, overlap: int, n_ctx: int | None) -> None:
    """--chunk and --overlap that can make passages, said before anything is read."""
    if chunk < 16:
        raise UsageError(f"--chunk {chunk} is too small: a passage needs at least 16 tokens")
    if n_ctx and chunk > n_ctx:
        raise UsageError(f"--chunk {chunk} is more than the embedding model's {n_ctx}-token context",
                         hint=f"--chunk {n_ctx} or less")  # fmt: skip
    if not 0 <= overlap < chunk // 2 + 1:
        raise UsageError(f"--overlap {overlap} must be from 0 to half of --chunk ({chunk // 2})")


def sniff(path: Path) -> None:
    """Raise `Binary` for a file that is not text (looked at its beginning only)."""
    with path.open("rb") as f:
        head = f.read(SNIFF)
    if b"\0" in head:
        raise Binary(f"{path}: a binary file, skipped")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not merely a character cut by the sniff's end
            raise Binary(f"{path}: not UTF-8 text, skipped") from None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while data := f.read(1 << 20):
            digest.update(data)
    return digest.hexdigest()


def _lines(path: Path, digest) -> Iterator[str]:
    """The file's lines as text, its bytes fed to `digest` as they are read."""
    with path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            digest.update(raw)
            try:
                yield raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise Binary(f"{path}: line {n} is not UTF-8 text, skipped") from None


def _blocks(lines: Iterator[str]) -> Iterator[tuple[list[str], int]]:
    """Paragraphs (ended by a blank line) and fenced code blocks (kept whole), with their first line."""
    block: list[str] = []
    first, fenced, size = 1, False, 0
    for n, line in enumerate(lines, 1):
        if block and size > BLOCK_BYTES:  # a file with no blank line is not held whole
            yield block, first
            block, size = [], 0
        if not block:
            first, size = n, 0
        size += len(line)
        opens = line.lstrip().startswith(FENCE)
        if opens and not fenced and block:  # a fence begins a block of its own
            yield block, first
            block, first = [], n
        if opens:
            fenced = not fenced
        if not line.strip() and not fenced:
            if block:
                yield block, first
            block = []
            continue
        block.append(line)
        if opens and not fenced:  # the fence closed: the code block is one block
            yield block, first
            block = []
    if block:
        yield block, first


def _split(lines: list[str], first: int, chunk: int, count: Callable[[str], int]) -> Iterator[_Block]:
    """A block as blocks of at most `chunk` tokens: by lines, a line longer than that by characters."""
    current: list[str] = []
    start = last = first
    used = 0
    for i, line in enumerate(lines):
        n = count(line) + 1
        units = [(line, n)]
        if n > chunk:
            width = max(16, len(line) * chunk // (n * 2))
            units = [(p, count(p) + 1) for p in (line[j : j + width] for j in range(0, len(line), width))]
        for piece, cost in units:
            if current and used + cost > chunk:
                yield _Block(current, start, last, used)
                current, used, start = [], 0, first + i
            current.append(piece)
            used += cost
            last = first + i
    if current:
        yield _Block(current, start, last, used)


def _joined(blocks: list[_Block]) -> Passage:
    text = "\n\n".join("\n".join(b.lines) for b in blocks)
    return Passage(text, blocks[0].first, blocks[-1].last, sum(b.tokens for b in blocks))


def passages(lines: Iterator[str], count: Callable[[str], int], chunk: int = CHUNK,
             overlap: int = OVERLAP) -> Iterator[Passage]:  # fmt: skip
    """Pack `lines` into passages of at most `chunk` tokens (`count` counts a text's tokens)."""
    held: list[_Block] = []
    used = 0
    fresh = False  # held has blocks not yet in a passage
    for lines_, first in _blocks(lines):
        for block in _split(lines_, first, chunk, count):
            if held and used + block.tokens > chunk:
                if fresh:
                    yield _joined(held)
                held, used = _tail(held, overlap)
                while held and used + block.tokens > chunk:
                    used -= held.pop(0).tokens
            held.append(block)
            used += block.tokens
            fresh = True
    if held and fresh:
        yield _joined(held)


def _tail(held: list[_Block], overlap: int) -> tuple[list[_Block], int]:
    """The last blocks of a passage, up to `overlap` tokens: the next passage's beginning."""
    kept: list[_Block] = []
    used = 0
    for block in reversed(held):
        if used + block.tokens > overlap:
            break
        kept.insert(0, block)
        used += block.tokens
    return kept, used


def of_file(path: Path, count: Callable[[str], int], chunk: int, overlap: int, digest) -> Iterator[Passage]:
    """`path`'s passages, read as they are made; `digest` (hashlib) is fed the bytes read."""
    return passages(_lines(path, digest), count, chunk, overlap)
