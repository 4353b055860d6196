"""`llmcli logs stats` as plain text: a table per model of speeds by prompt length."""

from __future__ import annotations

from typing import Any


def speed_table(groups: list[dict[str, Any]], width: int = 24) -> str:
    """A table per model: each prompt-length bucket's requests, median prefill and decode speed with
    their quartiles, and a bar of the decode median (scaled to the fastest), in plain text."""
    from llmcli.render.tables import plain

    top = max((g["decode_tokens_per_s"] or {}).get("median", 0) for g in groups) or 1
    out: list[str] = []
    for name in dict.fromkeys(g["model"] for g in groups):
        rows = []
        for g in (g for g in groups if g["model"] == name):
            p, d = g["prefill_tokens_per_s"], g["decode_tokens_per_s"]
            bar = "█" * max(1, round(width * d["median"] / top)) if d else ""
            rows.append([g["prompt_tokens"], g["requests"], _spread(p), _spread(d), bar])
        head = ["PROMPT TOK", "N", "PREFILL TOK/S (p25-p75)", "DECODE TOK/S (p25-p75)", "DECODE"]
        out.append(f"{name}\n" + plain(head, rows))
    return "\n".join(out)


def _spread(s: dict | None) -> str:
    if not s:
        return "-"
    return f"{s['median']:.1f} ({s['p25']:.1f}-{s['p75']:.1f})"
