"""Records of files whose hash has been checked, so that loading a model need not re-hash it.

One small JSON file per blob under `paths.cache_dir()/verified/`, named after the blob's path
and holding the SHA-256, the hash the hub vouched for, and the size and mtime the file had when
it was checked. A record only counts while size and mtime still match; `models verify` re-hashes
regardless and rewrites it. A record that cannot be read or makes no sense counts as no record:
the file is hashed again, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from llmcli import paths
from llmcli.atomic import write_atomic
from llmcli.hub.hashing import Expected


def _key(blob: Path) -> str:
    """The blob's real path: the same file reached through a symlinked directory is one record."""
    return os.path.realpath(blob)


def _record_path(blob: Path) -> Path:
    key = hashlib.sha1(_key(blob).encode()).hexdigest()
    return paths.cache_dir() / "verified" / f"{key}.json"


def load(blob: Path) -> dict[str, Any] | None:
    """The record of `blob` if there is one and the file has not changed since."""
    try:
        data = json.loads(_record_path(blob).read_text(encoding="utf-8"))
        st = blob.stat()
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("path") != _key(blob):
        return None
    if data.get("size") != st.st_size or data.get("mtime_ns") != st.st_mtime_ns:
        return None
    return data


def is_verified(blob: Path, expected: Expected | None) -> bool:
    """True when the blob was hashed before, is unchanged, and matched what is expected now."""
    data = load(blob)
    if data is None or not data.get("ok"):
        return False
    if expected is None:
        return True
    return data.get("algo") == expected.algo and data.get("checked") == expected.hexdigest


def save(blob: Path, *, sha256: str, expected: Expected | None, source: str | None = None) -> None:
    """Record a successful check (best effort: a read-only cache dir only costs a re-hash later)."""
    st = blob.stat()
    data = {
        "path": _key(blob),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "sha256": sha256,
        "algo": expected.algo if expected else "sha256",
        "checked": expected.hexdigest if expected else sha256,
        "ok": True,
        "verified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source": source,
    }
    try:
        write_atomic(_record_path(blob), json.dumps(data, indent=1))
    except OSError:
        pass


def forget(blob: Path) -> None:
    try:
        _record_path(blob).unlink(missing_ok=True)
    except OSError:
        pass


def load_any(blob: Path) -> dict[str, Any] | None:
    """The record of `blob` even if the file changed since (for `models verify` to compare with)."""
    try:
        data = json.loads(_record_path(blob).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("path") == _key(blob) else None
