"""OpenAI content parts (a message's `content` as a list of `{"type": "text"}` and
`{"type": "image_url"}` parts, as a batch file for `vllm run-batch` or OpenAI's batch API holds
them) turned into what a `Request` carries: each message's text as a string, and its images as
`Image`s by message (the last user message's are the request's `images`, earlier ones its
`history_images`), so a local engine puts them through its projector and a served one sends them
back as content parts, as for `generate -a`."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from llmcli.errors import UsageError
from llmcli.media.image import MAX_BYTES, Image, from_bytes, load


def split_parts(messages: list[dict[str, Any]], *, offline: bool = False
                ) -> tuple[list[dict[str, Any]], dict[int, tuple[Image, ...]]]:  # fmt: skip
    """`messages` with every list of content parts made one string (the text parts, joined by a
    blank line), and {message index: its images}. An image is a data URI, an http(s) URL (fetched,
    unless `offline`) or a file path (`file://` or plain); one that cannot be read is a UsageError."""
    flat: list[dict[str, Any]] = []
    images: dict[int, tuple[Image, ...]] = {}
    for i, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            flat.append(message)
            continue
        texts = [str(part.get("text") or "") for part in content if part.get("type") == "text"]
        found = tuple(_image(part, offline) for part in content if part.get("type") == "image_url")
        if found:
            images[i] = found
        flat.append({**message, "content": "\n\n".join(t for t in texts if t)})
    return flat, images


def _image(part: dict[str, Any], offline: bool) -> Image:
    url = (part.get("image_url") or {}).get("url")
    if not isinstance(url, str) or not url or url == "-":
        raise UsageError("an image_url part needs its image_url.url (a data URI, a URL or a file)")
    if url.startswith("data:"):
        head, _, payload = url.partition(",")
        if not head.endswith(";base64"):
            raise UsageError("an image's data URI must be base64 (data:image/png;base64,...)")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise UsageError("an image's data URI is not valid base64") from None
        if len(data) > MAX_BYTES:
            raise UsageError(f"an image's data URI holds {len(data)} bytes, more than llmcli reads")
        return from_bytes("image", data)
    return load(url.removeprefix("file://"), offline=offline)
