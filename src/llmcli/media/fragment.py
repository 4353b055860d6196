"""Text attachments (fragments): a text file, a URL's text or stdin's, put into the prompt with its
name, as a fenced block before the user's own text (simonw/llm's fragments are the model).

What is text: UTF-8 (a BOM dropped) with no NUL byte, by content; its media type and its block's
language tag come from the name's extension (Markdown, JSON, CSV, source code; else text/plain).
A PDF is read where `pypdf` is installed (the `pdf` extra), else refused in one line. Anything
else is neither text nor an image and is refused in one line (media.attach decides which)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath

from llmcli.errors import UsageError

# extension -> (media type, the fence's language tag)
KINDS: dict[str, tuple[str, str]] = {
    ".md": ("text/markdown", "markdown"), ".markdown": ("text/markdown", "markdown"),
    ".json": ("application/json", "json"), ".jsonl": ("application/jsonl", "json"),
    ".csv": ("text/csv", "csv"), ".tsv": ("text/tab-separated-values", "tsv"),
    ".txt": ("text/plain", ""), ".rst": ("text/x-rst", "rst"),
    ".html": ("text/html", "html"), ".css": ("text/css", "css"), ".xml": ("application/xml", "xml"),
    ".toml": ("application/toml", "toml"), ".yaml": ("application/yaml", "yaml"),
    ".yml": ("application/yaml", "yaml"), ".ini": ("text/plain", "ini"), ".sql": ("application/sql", "sql"),
    ".py": ("text/x-python", "python"), ".js": ("text/javascript", "javascript"),
    ".ts": ("text/x-typescript", "typescript"), ".rs": ("text/x-rust", "rust"), ".go": ("text/x-go", "go"),
    ".c": ("text/x-c", "c"), ".h": ("text/x-c", "c"), ".cpp": ("text/x-c++", "cpp"),
    ".hpp": ("text/x-c++", "cpp"), ".java": ("text/x-java", "java"), ".kt": ("text/x-kotlin", "kotlin"),
    ".rb": ("text/x-ruby", "ruby"), ".php": ("text/x-php", "php"), ".swift": ("text/x-swift", "swift"),
    ".sh": ("text/x-shellscript", "bash"), ".bash": ("text/x-shellscript", "bash"),
    ".lua": ("text/x-lua", "lua"), ".r": ("text/x-r", "r"), ".tex": ("text/x-tex", "latex"),
}  # fmt: skip
PDF = "application/pdf"


@dataclass(frozen=True)
class TextFile:
    name: str  # the path or URL as given, or "-" (stdin)
    media_type: str
    text: str
    sha256: str  # of the text's UTF-8 bytes, as the log keeps it
    size: int  # those bytes

    @property
    def title(self) -> str:
        return "stdin" if self.name == "-" else self.name

    def block(self) -> str:
        """The text as it goes into the prompt: its name, then the text in a fence longer than any
        run of backticks inside it."""
        longest = max((len(run) for run in re.findall(r"`{3,}", self.text)), default=2)
        fence = "`" * max(3, longest + 1)
        language = KINDS.get(_suffix(self.name), ("", ""))[1]
        return f"{self.title}\n{fence}{language}\n{self.text.rstrip(chr(10))}\n{fence}"


def _suffix(name: str) -> str:
    path = name.split("?", 1)[0].split("#", 1)[0]
    return PurePosixPath(path).suffix.lower()


def media_type(name: str) -> str:
    return KINDS.get(_suffix(name), ("text/plain", ""))[0]


def from_text(name: str, text: str, kind: str | None = None) -> TextFile:
    data = text.encode("utf-8")
    return TextFile(name, kind or media_type(name), text, hashlib.sha256(data).hexdigest(), len(data))


def decode(name: str, data: bytes) -> TextFile | None:
    """`data` as a text attachment, or None where it is not text (NUL bytes, not UTF-8)."""
    if b"\x00" in data[: 1 << 16]:
        return None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    if not text.strip():
        raise UsageError(f"{name}: empty, no text to attach")
    return from_text(name, text)


def from_pdf(name: str, data: bytes) -> TextFile:
    """A PDF's text, where pypdf is installed; else one line saying it is not read."""
    try:
        import pypdf  # the `pdf` extra
    except ImportError:
        hint = "pip install 'llmcli[pdf]', or attach its text: pdftotext FILE -"
        raise UsageError(f"{name}: a PDF, which llmcli does not read without pypdf", hint=hint) from None
    import io

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        text = "\n\n".join((page.extract_text() or "").strip() for page in reader.pages)
    except Exception as exc:  # pypdf raises many kinds on a damaged file
        raise UsageError(f"{name}: cannot read this PDF ({type(exc).__name__})") from None
    if not text.strip():
        raise UsageError(f"{name}: a PDF with no text in it (scanned pages are images)")
    return from_text(name, text, PDF)


def compose(texts: tuple[TextFile, ...] | list[TextFile], prompt: str) -> str:
    """The user's message: each text's block, then the user's own text."""
    return "\n\n".join([t.block() for t in texts] + ([prompt] if prompt else []))


@dataclass(frozen=True)
class Placed:
    """A text attachment where a request holds it: the index of its user message in the request's
    messages (-1: plain `--raw` text), and the tokens it takes (None: not counted, a server's)."""

    file: TextFile
    message: int
    tokens: int | None

    def attachment(self) -> dict:
        """Its entry in the record's `attachments`."""
        f = self.file
        return {"name": f.name, "media_type": f.media_type, "bytes": f.size, "sha256": f.sha256,
                "width": None, "height": None, "tokens": self.tokens, "encode_ms": None,
                "cached": None}  # fmt: skip


def count(texts: tuple[TextFile, ...] | list[TextFile], tokens_of: Callable[[str], int]) -> list[int | None]:
    """Each text's tokens as its block goes into the prompt (None for all where the model's
    tokenizer cannot be asked: a server that does not tokenize for clients)."""
    from llmcli.errors import LlmcliError

    try:
        return [tokens_of(t.block()) for t in texts]
    except LlmcliError:  # its server counts (and refuses an overflow) itself
        return [None] * len(texts)


def check_room(texts: tuple[TextFile, ...] | list[TextFile], tokens: list[int | None], n_ctx: int,
               rest: int, reserve: int) -> None:  # fmt: skip
    """Refuse, in one line with the numbers, texts that do not fit what the context leaves beside
    the rest of the prompt (`rest` tokens) and the room kept for the answer (`reserve`)."""
    if not texts or not n_ctx or any(n is None for n in tokens):
        return
    need = sum(n for n in tokens if n is not None)
    room = n_ctx - rest - reserve
    if need <= room:
        return
    from llmcli.errors import ContextOverflowError

    what = texts[0].title if len(texts) == 1 else f"the {len(texts)} attached texts"
    raise ContextOverflowError(
        f"{what} needs {need} tokens but the context leaves {max(room, 0)} ({n_ctx} tokens, {rest} for the "
        f"rest of the prompt, {reserve} kept for the answer)",
        hint='ask about it in passages: llmcli embed -i FILE --collection NAME, then llmcli ask NAME "..." '
        "(or generate --from NAME); or a larger -c",
    )
