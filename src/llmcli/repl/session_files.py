"""Saved chat sessions: one JSON file per session in the data directory, written atomically.

A session records the model reference, the sampling parameters, the system prompt, every
message (with its timings) and when it was created and last updated. A corrupt file is reported
with its path and left exactly as it is.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from llmcli import paths
from llmcli.atomic import write_json
from llmcli.errors import LlmcliError
from llmcli.names import session_name

FORMAT = 1


class SessionError(LlmcliError):
    label = "session error"


def sessions_dir() -> Path:
    return paths.data_dir() / "sessions"


def session_path(name: str) -> Path:
    return sessions_dir() / f"{session_name(name)}.json"


def save(name: str, doc: dict[str, Any]) -> Path:
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
