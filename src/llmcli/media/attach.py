"""`-a FILE|URL|-` and `/attach`: an image or a text, by content. The bytes are read once (a file,
stdin, or a URL fetched into memory: media.fetch); an image by its magic bytes (or a name that
says image: then it must be one) goes to media.image's checks, a PDF to its text, anything else
that is UTF-8 text is a text attachment (media.fragment); the rest is refused in one line."""

from __future__ import annotations

import sys
from pathlib import Path

from llmcli.errors import UsageError
from llmcli.media import fragment, image
from llmcli.media.fragment import TextFile
from llmcli.media.image import Image

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif")


def load(name: str, *, offline: bool = False) -> Image | TextFile:
    """The attachment `name` names, checked; a bad one raises UsageError (a URL that cannot be
    fetched NetworkError) in one line."""
    from llmcli.media import fetch

    if fetch.is_url(name):
        what = "image" if fragment._suffix(name) in IMAGE_SUFFIXES else "attachment"
        data = fetch.fetch(name, image.MAX_BYTES, offline=offline, what=what)
    else:
        data = _read(name)
    if not data:
        raise UsageError(f"{name}: empty, nothing to attach")
    return from_bytes(name, data)


def from_bytes(name: str, data: bytes) -> Image | TextFile:
    if image.sniff(data) is not None or fragment._suffix(name) in IMAGE_SUFFIXES:
        return image.from_bytes(name, data)
    if data.startswith(b"%PDF-"):
        return fragment.from_pdf(name, data)
    found = fragment.decode(name, data)
    if found is None:
        raise UsageError(f"{name}: not an image (PNG, JPEG, WebP or GIF) nor UTF-8 text")
    return found


def load_all(names: list[str], *, offline: bool = False) -> tuple[tuple[Image, ...], tuple[TextFile, ...]]:
    """`-a`'s attachments, in order, split into images and texts (stdin at most once)."""
    if names.count("-") > 1:
        raise UsageError("stdin holds one attachment: give '-' to --attach once")
    found = [load(name, offline=offline) for name in names]
    return (tuple(a for a in found if isinstance(a, Image)),
            tuple(a for a in found if isinstance(a, TextFile)))  # fmt: skip


def _read(name: str) -> bytes:
    try:
        if name == "-":
            data = sys.stdin.buffer.read(image.MAX_BYTES + 1)
        else:
            with Path(name).expanduser().open("rb") as f:
                data = f.read(image.MAX_BYTES + 1)
    except OSError as e:
        what = "image" if fragment._suffix(name) in IMAGE_SUFFIXES else "attachment"
        raise UsageError(f"cannot read {what} {name}: {e.strerror or e}") from None
    if len(data) > image.MAX_BYTES:
        raise UsageError(f"{name}: larger than {image.MAX_BYTES // (1024 * 1024)} MiB")
    return data
