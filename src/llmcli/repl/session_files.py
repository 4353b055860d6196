"""Saved chat sessions: one JSON file per session in the data directory, written atomically.

A session records the model reference, the sampling parameters, the system prompt, every
message (with its timings) and when it was created and last updated. A corrupt file is reported
with its path and left exactly as it is.

A message's images are referred to by SHA-256 (`attachments`: name, media type, bytes, sha256);
their bytes are kept once each, whatever the sessions and messages that hold them, in
`sessions/images/SHA256.EXT`, written before the session that refers to them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llmcli import paths
from llmcli.atomic import write_atomic, write_json
from llmcli.errors import LlmcliError
from llmcli.media.image import Image, from_bytes
from llmcli.names import session_name

FORMAT = 1


class SessionError(LlmcliError):
    label = "session error"


def sessions_dir() -> Path:
    return paths.data_dir() / "sessions"


def session_path(name: str) -> Path:
    return sessions_dir() / f"{session_name(name)}.json"


def images_dir() -> Path:
    return sessions_dir() / "images"


def image_path(sha256: str, media_type: str) -> Path:
    ext = media_type.removeprefix("image/").replace("jpeg", "jpg")
    return images_dir() / f"{sha256}.{ext}"


def keep_images(images: Iterable[Image]) -> None:
    """Each image's bytes, once by hash (one already kept is not written again)."""
    for image in images:
        path = image_path(image.sha256, image.media_type)
        if not path.exists():
            write_atomic(path, image.data, lock=False)  # named by its content: a race writes the same


def read_image(ref: dict[str, Any]) -> Image:
    """The image a saved message refers to, from its bytes kept by hash; ValueError where they are
    gone or are not that image (a conversation that names it is then not loaded)."""
    from llmcli.errors import UsageError

    sha256, media_type = str(ref.get("sha256")), str(ref.get("media_type") or "")
    name = str(ref.get("name") or sha256[:12])
    path = image_path(sha256, media_type)
    try:
        image = from_bytes(name, path.read_bytes())
    except OSError as exc:
        raise ValueError(f"its image {name} ({sha256[:12]}) is gone: {path}: {exc.strerror}") from None
    except UsageError as exc:
        raise ValueError(f"{path}: {exc.message}") from None
    if image.sha256 != sha256:
        raise ValueError(f"{path} does not hold the image {name} it is named for (damaged?)")
    return image


def save(name: str, doc: dict[str, Any]) -> Path:
    """Write the session `name` (its images' bytes are kept first: `keep_images`)."""
    path = session_path(name)
    doc = dict(doc, format=FORMAT, name=name, updated=time.time())
    doc.setdefault("created", doc["updated"])
    write_json(path, doc)
    return path


def load(name: str) -> dict[str, Any]:
    path = session_path(name)
    if not path.exists():
        known = ", ".join(list_names()[:10]) or "none saved yet"
        raise SessionError(f"no session named {name!r}", hint=f"sessions: {known}")
    return read(path)


def read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SessionError(
            f"{path} is not a readable session file ({exc})", hint="the file was left untouched"
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("messages"), list):
        raise SessionError(
            f"{path} is not a session file of format {FORMAT}", hint="the file was left untouched"
        )
    if not isinstance(doc.get("model"), str | None):
        raise SessionError(f'{path}: "model" is not a model reference', hint="the file was left untouched")
    return doc


def list_names() -> list[str]:
    """Session names, most recently updated first."""
    folder = sessions_dir()
    if not folder.is_dir():
        return []
    files = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    return [p.stem for p in files]


def most_recent() -> str | None:
    names = list_names()
    return names[0] if names else None
