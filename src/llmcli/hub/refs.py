"""The one model reference syntax, parsed in one place.

    path/to/model.gguf              a local file (anything that exists, or starts with / ./ ../ ~)
    org/repo                        the repository's default quantization (see hub.quants)
    org/repo:QUANT                  a quantization, case-insensitive (:q8_0, :IQ4_XS, :UD-Q4_K_XL)
    org/repo/path/file.gguf         one file (the first shard names a split model)
    ...@REVISION                    a branch, tag or commit: org/repo:Q8_0@v1.0, org/repo@main:Q8_0
    NAME                            an alias (`llmcli models alias NAME REF`) or the bundled default

`hf.co/`, `huggingface.co/` and `https://huggingface.co/` prefixes are accepted, and so are the
hub's `.../blob/REV/file.gguf` and `.../resolve/REV/file.gguf` page links.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from llmcli.errors import UsageError
from llmcli.names import NAME as _NAME
from llmcli.names import is_alias_name

SYNTAX_HINT = "use org/repo, org/repo:QUANT, org/repo/file.gguf, add @REVISION, or a path to a .gguf file"

_QUANT = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?$")
_REVISION = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./-]*$")
_PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "https://hf.co/", "http://hf.co/",
             "huggingface.co/", "hf.co/", "hf://")  # fmt: skip
_PAGE_LINK = re.compile(r"^([^/]+/[^/]+)/(?:blob|resolve)/([^/]+)/(.+)$")


@dataclass(frozen=True)
class HubRef:
    """A model on the hub: a repository plus a quantization or a file, at a revision."""

    repo_id: str
    quant: str | None = None  # upper-case, as in file names ("Q4_K_M")
    filename: str | None = None  # a path inside the repository
    revision: str | None = None  # None means the default branch, "main"

    @property
    def rev(self) -> str:
        return self.revision or "main"

    def with_(self, **changes) -> HubRef:
        return replace(self, **changes)

    def __str__(self) -> str:
        text = self.repo_id
        if self.filename:
            text += "/" + self.filename
        if self.quant:
            text += ":" + self.quant
        if self.revision:
            text += "@" + self.revision
        return text


@dataclass(frozen=True)
class PathRef:
    """A GGUF file named by its path."""

    path: Path

    def __str__(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class AliasRef:
    """A name without a slash: an alias, or the bundled default model's name."""

    name: str

    def __str__(self) -> str:
        return self.name


Ref = HubRef | PathRef | AliasRef


def parse(text: str) -> Ref:
    """Parse what the user typed; raises UsageError (exit 2) for a malformed reference."""
    text = text.strip()
    if not text:
        raise UsageError("empty model reference", hint=SYNTAX_HINT)
    if _looks_like_path(text):
        return PathRef(Path(text).expanduser())
    hub_text = _strip_prefix(text)
    if "/" not in hub_text and hub_text == text:
        return _parse_alias(text)
    return parse_hub(hub_text, original=text)


def parse_hub(text: str, *, original: str | None = None) -> HubRef:
    """Parse `org/repo[/file.gguf][:QUANT][@REV]` (also `org/repo@REV:QUANT`)."""
    original = original or text
    head, quant, revision = _split_suffixes(text, original)
    parts = head.split("/")
    if len(parts) < 2:
        raise _malformed(original, "a hub reference needs an organisation and a repository (org/repo)")
    org, repo, file_parts = parts[0], parts[1], parts[2:]
    for name, what in ((org, "organisation"), (repo, "repository")):
        if not _valid_name(name):
            raise _malformed(original, f"{name!r} is not a valid {what} name")
    filename = _check_filename(file_parts, original) if file_parts else None
    if filename and quant:
        raise _malformed(original, "name a file or a quantization, not both")
    return HubRef(f"{org}/{repo}", quant, filename, revision)


def _looks_like_path(text: str) -> bool:
    if text.startswith(("/", "./", "../", "~", ".\\")) or text in (".", ".."):
        return True
    if Path(text).expanduser().is_file():
        return True
    # "model.gguf" or "models/model.gguf": too few parts to be org/repo/file.gguf
    return text.lower().endswith(".gguf") and text.count("/") < 2 and ":" not in text


def _strip_prefix(text: str) -> str:
    for prefix in _PREFIXES:
        if text.lower().startswith(prefix):
            rest = text[len(prefix) :].strip("/")
            if link := _PAGE_LINK.match(rest):
                return f"{link.group(1)}/{link.group(3)}@{link.group(2)}"
            return rest
    return text


def _parse_alias(text: str) -> AliasRef:
    if is_alias_name(text):
        return AliasRef(text)
    if ":" in text or "@" in text:
        raise _malformed(text, "a hub reference needs an organisation and a repository (org/repo:QUANT)")
    raise _malformed(text, "not a file, an alias name or org/repo")


def _split_suffixes(text: str, original: str) -> tuple[str, str | None, str | None]:
    """Split `head[:QUANT][@REV[:QUANT]]` into its three parts."""
    head, revision, tail_quant = text, None, None
    if "@" in text:
        head, tail = text.split("@", 1)
        revision, _, after = tail.partition(":")
        if not revision or not _REVISION.match(revision) or ".." in revision or revision.endswith("/"):
            raise _malformed(original, f"{revision!r} is not a valid revision (a branch, tag or commit)")
        tail_quant = after if ":" in tail else None
    head, sep, before = head.partition(":")
    head_quant = before if sep else None
    if head_quant is not None and tail_quant is not None:
        raise _malformed(original, "more than one quantization")
    quant = head_quant if head_quant is not None else tail_quant
    if quant is not None and not _QUANT.match(quant):
        raise _malformed(original, f"{quant!r} is not a quantization name (e.g. Q4_K_M, Q8_0, IQ4_XS)")
    return head, quant.upper() if quant else None, revision


def _valid_name(name: str) -> bool:
    return bool(_NAME.match(name)) and "--" not in name and ".." not in name and len(name) <= 96


def _check_filename(parts: list[str], original: str) -> str:
    if any(p in ("", ".", "..") for p in parts):
        raise _malformed(original, "the file path inside the repository is not valid")
    filename = "/".join(parts)
    if not filename.lower().endswith(".gguf"):
        raise _malformed(original, f"{filename!r} is not a .gguf file")
    return filename


def _malformed(text: str, why: str) -> UsageError:
    return UsageError(f"malformed model reference {text!r}: {why}", hint=SYNTAX_HINT)
