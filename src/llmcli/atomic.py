"""Writing files so that a crash never leaves them half-written.

Every file llmcli writes (sessions, configuration, aliases, records) goes through
`write_atomic`: a temporary file in the same directory, flushed and fsynced, renamed over the
target, and the directory fsynced; concurrent writers are serialised by a lock file. A reader
therefore sees the old version or the new one, never a mix.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def locked(path: Path, timeout: float = 30.0) -> Iterator[None]:
    """An inter-process lock guarding `path` (a `.lock` file beside it)."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock", timeout=timeout):
        yield


def write_atomic(
    path: Path, data: bytes | str | Sequence[Any], *, mode: int | None = None, lock: bool = True
) -> None:
    """Replace `path` with `data` atomically; `lock=False` where a lock file beside it would be
    mistaken for data (e.g. `refs/` in the Hugging Face cache, where every file is a ref). A list
    of buffers is written in order without joining them (large KV states are not copied)."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    parts = [data] if isinstance(data, bytes | bytearray | memoryview) else list(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path) if lock else contextlib.nullcontext():
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                for part in parts:
                    f.write(part)
                f.flush()
                os.fsync(f.fileno())
            if mode is not None:
                os.chmod(tmp, mode)
            elif path.exists():
                os.chmod(tmp, path.stat().st_mode & 0o777)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _fsync_dir(path.parent)


def write_json(path: Path, doc: Any) -> None:
    write_atomic(path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
