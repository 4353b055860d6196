"""`llmcli kv list|clear`: the saved KV states under the cache directory (see llmcli.kvstore)."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from llmcli import render

kv_app = typer.Typer(
    name="kv",
    help="Saved KV states of chat sessions (warm resume): list, clear.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@kv_app.command("list")
def list_states(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON document instead of a table.")
    ] = False,
) -> None:
    """List saved KV states: name, tokens, size, age; the total against kv_cache_max_mb.

    Example: llmcli kv list --json
    """
    from llmcli import kvstore
    from llmcli.render.tables import plain
    from llmcli.units import human_size

    rows = [kvstore.describe(e) for e in reversed(kvstore.entries())]
    total, cap = sum(r["size_bytes"] for r in rows), kvstore.cap_bytes()
    if as_json:
        return render.out_json({"directory": str(kvstore.kv_dir()), "total_bytes": total, "cap_bytes": cap,
                                "states": rows}, schema="kv")  # fmt: skip
    if not rows:
        render.info(f"no saved KV states in {kvstore.kv_dir()}")
        return
    table = [
        [r["name"], r["kind"], "damaged" if not r["ok"] else str(r["tokens"]), human_size(r["size_bytes"]),
         _age(r["updated"])]
        for r in rows
    ]  # fmt: skip
    render.out_text(plain(["NAME", "KIND", "TOKENS", "SIZE", "UPDATED"], table))
    states = f"{len(rows)} state{'' if len(rows) == 1 else 's'}"
    render.info(f"{states}, {human_size(total)} of {human_size(cap)} (kv_cache_max_mb) in "
                f"{kvstore.kv_dir()}")  # fmt: skip


@kv_app.command("clear")
def clear(
    names: Annotated[
        list[str] | None, typer.Argument(help="Sessions whose states to remove (default: all).")
    ] = None,
) -> None:
    """Remove saved KV states (all, or the named sessions'); sessions themselves are kept.

    Example: llmcli kv clear notes
    """
    from llmcli import kvstore
    from llmcli.errors import LlmcliError
    from llmcli.repl import session_files
    from llmcli.units import human_size

    # A name that is neither a saved state nor a session is most likely a typo: say so, remove nothing.
    if unknown := [n for n in names or [] if not kvstore.session_state_path(n).exists()
                   and not session_files.session_path(n).exists()]:  # fmt: skip
        raise LlmcliError(f"no session named {unknown[0]!r} and no KV state saved for it",
                          hint="`llmcli kv list` shows the saved states")  # fmt: skip
    before = {e.path: e.size for e in kvstore.entries()}
    removed = kvstore.clear(names or None)
    freed = sum(before.get(p, 0) for p in removed)
    render.info(f"removed {len(removed)} KV state(s), {human_size(freed)}")


def _age(mtime: float) -> str:
    seconds = max(0.0, time.time() - mtime)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"


def register(app: typer.Typer) -> None:
    app.add_typer(kv_app, name="kv")
