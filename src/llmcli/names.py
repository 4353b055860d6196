"""The names a user gives things, and what each may look like, checked in one place: an alias or a
named endpoint (`is_alias_name`), a saved chat session (`session_name`)."""

from __future__ import annotations

import re

from llmcli.errors import UsageError

NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?$")  # also the hub's repository names
_SESSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def is_alias_name(name: str) -> bool:
    """Alias names: letters, digits, '.', '_' and '-', no slash or colon, not ending in .gguf."""
    return bool(NAME.match(name)) and not name.lower().endswith(".gguf") and len(name) <= 64


def session_name(name: str) -> str:
    """`name` when it may name a saved session (and its KV state); else a usage error."""
    if not _SESSION.match(name):
        raise UsageError(f"bad session name {name!r}: use letters, digits, '.', '_' and '-'")
    return name
