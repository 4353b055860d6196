"""Saved KV states: where they live, the size cap, listing and clearing, and the one way callers
save and restore them (never raising: a state is an optimisation, so a failure is reported and
the caller simply re-prefills).

A named chat session's state is `kv/sessions/NAME.kv` under the cache directory, rewritten after
every turn; `generate --prompt-cache FILE` uses the file it is given. States under the cache
directory are capped at `kv_cache_max_mb` megabytes: after each save the oldest are removed
first. The file format and its checks are `llmcli.engine.state`.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmcli import paths, reporting
from llmcli.errors import TerminatedError
from llmcli.names import session_name

SUFFIX = ".kv"


def kv_dir() -> Path:
    return paths.cache_dir() / "kv"


def session_state_path(name: str) -> Path:
    return kv_dir() / "sessions" / f"{session_name(name)}{SUFFIX}"  # the session file's name rules


def cap_bytes(flag: int | None = None) -> int:
    """The cap on states under the cache directory (`kv_cache_max_mb`, or the flag giving it)."""
    from llmcli import settings

    return int(settings.resolve("kv_cache_max_mb", flag)) * 1_000_000


@dataclass
class SaveResult:
    bytes: int = 0
    ms: float = 0.0
    skipped: str | None = None  # why nothing was written


def save(engine, path: Path, *, cap: int | None, reload: bool = False) -> SaveResult:
    """Save `engine`'s cache to `path` atomically; with a `cap` (bytes, for states under the cache
    directory) the oldest states are then removed down to it, and a cap of 0 saves nothing.
    `reload`: see `engine.state.save` (a chat that goes on after saving)."""
    from llmcli.engine.state import save as save_state

    started = time.perf_counter()
    if cap is not None and cap <= 0:
        return SaveResult(skipped="kv_cache_max_mb is 0")
    try:
        written, n_tokens = save_state(engine, path, reload=reload)
    except TerminatedError:
        raise  # SIGTERM ends the command; the previous state stays whole
    except Exception as exc:  # a state that cannot be saved is never an error
        reporting.warn(f"could not save the KV state to {path}: {getattr(exc, 'strerror', None) or exc}")
        return SaveResult(skipped=str(exc))
    ms = (time.perf_counter() - started) * 1000
    reporting.debug(f"kv state: saved {n_tokens} tokens, {written} bytes to {path} in {ms:.0f} ms")
    if cap is not None:
        enforce_cap(cap, keep=path)
    return SaveResult(written, ms)


def restore(engine, path: Path, prompt: list[int], *, what: str) -> int:
    """Load the state in `path` when it belongs to this engine and prompt; returns the tokens it
    lets the next request reuse (0: a fresh prefill). A damaged or foreign file gets one warning;
    a state that merely does not match this prompt is said under --debug."""
    from llmcli.engine.state import StateRejected
    from llmcli.engine.state import restore as restore_state

    started = time.perf_counter()
    try:
        restored = restore_state(engine, path, prompt)
    except FileNotFoundError:
        reporting.debug(f"kv state: none saved for {what} ({path}): full prefill")
        return 0
    except StateRejected as exc:
        engine.reset()
        if exc.reason.startswith("its tokens"):
            reporting.debug(f"kv state: {path} not used for {what}: {exc.reason}: full prefill")
        else:
            reporting.warn(f"ignoring the saved KV state {path}: {exc.reason}; prefilling from scratch")
        return 0
    except TerminatedError:
        engine.reset()
        raise
    except Exception as exc:  # never trust a state that broke the loader
        engine.reset()
        reporting.warn(f"ignoring the saved KV state {path}: {exc}; prefilling from scratch")
        return 0
    ms = (time.perf_counter() - started) * 1000
    reporting.debug(
        f"kv state: restored {restored.saved} tokens from {path} in {ms:.0f} ms for {what}; "
        f"{restored.tokens} match the prompt and are reused"
    )
    return restored.tokens


# -- the directory: listing, cap, clearing -----------------------------------------------------


@dataclass
class Entry:
    path: Path
    size: int
    mtime: float

    @property
    def name(self) -> str:
        rel = self.path.relative_to(kv_dir())
        return str(rel.with_suffix("")) if rel.parts[0] != "sessions" else rel.stem

    @property
    def kind(self) -> str:
        rel = self.path.relative_to(kv_dir())
        return "session" if rel.parts[0] == "sessions" else "other"


def entries() -> list[Entry]:
    """State files under the cache directory, oldest first."""
    folder = kv_dir()
    found: list[Entry] = []
    if folder.is_dir():
        for p in folder.rglob(f"*{SUFFIX}"):
            with contextlib.suppress(OSError):
                st = p.stat()
                found.append(Entry(p, st.st_size, st.st_mtime))
    return sorted(found, key=lambda e: e.mtime)


def total_bytes() -> int:
    return sum(e.size for e in entries())


def enforce_cap(cap: int, *, keep: Path | None = None) -> list[Path]:
    """Remove the oldest states until the total is within `cap` (never `keep`, unless it alone
    is over the cap)."""
    found = entries()
    total = sum(e.size for e in found)
    removed: list[Path] = []
    for e in found:
        if total <= cap:
            break
        if keep is not None and e.path == keep and total - e.size <= cap and len(found) > 1:
            continue
        with contextlib.suppress(OSError):
            e.path.unlink()
            total -= e.size
            removed.append(e.path)
    for p in removed:
        reporting.debug(f"kv state: removed {p} (the states are over kv_cache_max_mb)")
    return removed


def describe(e: Entry) -> dict[str, Any]:
    """One listing row: the header's token count and model size, when the file is readable."""
    from llmcli.engine.state import StateRejected, peek

    row: dict[str, Any] = {"name": e.name, "kind": e.kind, "path": str(e.path), "size_bytes": e.size,
                           "updated": e.mtime, "tokens": None, "ok": True}  # fmt: skip
    try:
        header = peek(e.path)
        row["tokens"] = len(header.tokens)
        row["n_ctx"] = header.identity.get("n_ctx")
    except (StateRejected, OSError) as exc:
        row["ok"] = False
        row["problem"] = str(exc)
    return row


def clear(names: list[str] | None = None) -> list[Path]:
    """Remove every state (or the named sessions' states); returns what was removed."""
    targets = [e.path for e in entries()] if not names else [session_state_path(n) for n in names]
    removed = []
    for p in targets:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
            removed.append(p)
    return removed
