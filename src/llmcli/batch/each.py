"""`--each FILE...`: one prompt per file, its id the path as given (a glob the shell left quoted is
expanded here, sorted); and `--template`, the text each prompt is put into: `{content}` (the
file's text, or a line's or JSON item's prompt), `{name}` and `{path}` (an --each file's name and
path). Files are read one at a time, when their item is checked and again when it is answered."""

from __future__ import annotations

import glob
import string
from collections.abc import Iterator
from pathlib import Path

from llmcli.batch.items import BadLine, Item
from llmcli.errors import UsageError

FIELDS = ("content", "name", "path")
EACH_ONLY = ("name", "path")


class Template:
    """`--template TEXT`, checked once: at least one placeholder, each a known one (`{{` and `}}`
    are literal braces)."""

    def __init__(self, text: str, *, each: bool) -> None:
        try:
            names = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
        except ValueError as exc:
            raise UsageError(
                f"--template is not a template: {exc} (write {{{{ for a literal brace)"
            ) from None
        if not names:
            raise UsageError("--template has no placeholder: put {content} where each prompt goes")
        for name in names:
            if name not in FIELDS:
                known = ", ".join("{" + f + "}" for f in FIELDS)
                raise UsageError(f"--template: unknown placeholder {{{name}}} (known: {known})")
            if name in EACH_ONLY and not each:
                raise UsageError(f"--template: {{{name}}} is an --each file's; a line has only {{content}}")
        self.text = text

    def apply(self, content: str, path: str | None = None) -> str:
        name = Path(path).name if path is not None else ""
        return self.text.format(content=content, name=name, path=path or "")

    def apply_to(self, item: Item) -> Item:
        """The item with its prompt (or its messages' last user turn) put into the template."""
        if item.prompt is not None:
            item.prompt = self.apply(item.prompt, item.path)
            return item
        assert item.messages is not None
        messages = [dict(m) for m in item.messages]
        for m in reversed(messages):
            if m["role"] == "user":
                if isinstance(m["content"], str):
                    m["content"] = self.apply(m["content"], item.path)
                else:  # content parts: the template takes the last text part
                    parts = [dict(p) for p in m["content"]]
                    texts = [p for p in parts if p.get("type") == "text"]
                    if texts:
                        texts[-1]["text"] = self.apply(texts[-1]["text"], item.path)
                    m["content"] = parts
                break
        item.messages = messages
        return item


def expand(patterns: list[str]) -> list[str]:
    """The files of `--each`, in the order given: a path as it is, a glob's matches sorted (the
    shell usually expands it first); each file once. A name or glob that names no file: UsageError."""
    files: list[str] = []
    seen: set[str] = set()
    for pattern in patterns:
        if Path(pattern).is_file():
            matches = [pattern]
        elif glob.has_magic(pattern):
            matches = sorted(p for p in glob.glob(pattern, recursive=True) if Path(p).is_file())
            if not matches:
                raise UsageError(f"--each: {pattern} matches no file")
        else:
            raise UsageError(f"--each: no file {pattern}")
        for m in matches:
            if m not in seen:
                seen.add(m)
                files.append(m)
    return files


def read(files: list[str]) -> Iterator[Item | BadLine]:
    """One item per file: its text the prompt, its path the id; a file that cannot be read, is not
    UTF-8 or holds only white space is a `BadLine`."""
    for n, path in enumerate(files, 1):
        try:
            content = Path(path).read_bytes().decode("utf-8")
        except OSError as exc:
            yield BadLine(path, n, f"cannot be read ({exc.strerror or exc})", whole_file=True)
            continue
        except UnicodeDecodeError as exc:
            yield BadLine(path, n, f"not valid UTF-8 (byte {exc.start})", whole_file=True)
            continue
        if not content.strip():
            yield BadLine(path, n, "is empty", whole_file=True)
            continue
        yield Item(path, n, prompt=content, path=path)
