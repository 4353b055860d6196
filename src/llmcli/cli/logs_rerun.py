"""`llmcli logs rerun`'s parts: a request it refuses (one that offered tools), the KV cache type
it loads with, and how the rerun's answer compares with the logged one."""

from __future__ import annotations

from typing import Any


def refuse_tools(number: int, row: dict[str, Any], rec: dict[str, Any]) -> None:
    """A request that offered tools is not rerun: the log keeps the calls it made, not the tools
    (their code, an MCP server) nor the approval rules, and without them the prompt itself differs."""
    from llmcli.errors import UsageError

    if rec.get("tool_calls") is None and not row.get("tool_calls"):
        return
    calls = rec.get("tool_calls") or row.get("tool_calls") or []
    names = sorted({str(c["name"]) for c in calls if isinstance(c, dict) and c.get("name")})
    used = f" (it called {', '.join(names)})" if names else ""
    raise UsageError(
        f"entry #{number} offered the model tools{used}: the log keeps the calls, not the tools, so "
        "a rerun would be another request",
        hint="run the original command again with its --functions/--tool/--mcp and --approve-tools flags",
    )


def kv(kind: str | None) -> str | None:
    return None if kind in (None, "f16") else kind


def compare(row: dict[str, Any], done) -> dict[str, Any]:
    """Whether the rerun's answer is the logged one; where not, the first token (and character) that
    differs. Without token ids (a served model) the text is compared."""
    before, after = row.get("tokens") or [], list(done.tokens)
    old, new = row["response"] or "", done.text
    char = next(
        (i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new))
    )
    if old == new and (not before or not after or before == after):
        return {"identical": True, "differs_at_token": None, "differs_at_char": None,
                "compared": "tokens" if before and after else "text"}  # fmt: skip
    token = None
    if before and after:
        token = next((i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b),
                     min(len(before), len(after)))  # fmt: skip
    return {"identical": False, "differs_at_token": token, "differs_at_char": char,
            "compared": "tokens" if token is not None else "text",
            "original_tokens": len(before) or None, "rerun_tokens": len(after) or None}  # fmt: skip


def describe(verdict: dict[str, Any], entry: int) -> str:
    if verdict["identical"]:
        return f"identical to #{entry} ({verdict['compared']} compared)"
    if verdict["differs_at_token"] is not None:
        return (f"differs from #{entry} from token {verdict['differs_at_token']} "
                f"(character {verdict['differs_at_char']}; {verdict['original_tokens'] or 0} tokens then, "
                f"{verdict['rerun_tokens'] or 0} now)")  # fmt: skip
    return f"differs from #{entry} from character {verdict['differs_at_char']} (no token ids: text compared)"
