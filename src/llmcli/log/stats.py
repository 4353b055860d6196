"""Speed over time for `llmcli logs stats`: per model and prompt-length bucket, the prefill and
decode speeds the log's rows measured.

Batch items (`llmcli batch`, command "batch") are left out: each decoded beside up to -np others,
so its per-sequence speed is a share of the batch's throughput, not the model's speed on one
request, and mixed in it would drag a model's figures down. `batch_items` counts those left out."""

from __future__ import annotations

import sqlite3
from typing import Any

BUCKETS = (128, 512, 2048, 8192)  # prompt-length buckets' upper bounds, in tokens


def bucket(prompt_tokens: int | None) -> str:
    if prompt_tokens is None:
        return "?"
    low = 0
    for high in BUCKETS:
        if prompt_tokens < high:
            return f"{low}-{high - 1}"
        low = high
    return f"{BUCKETS[-1]}+"


def _filters(model: str | None, since: float | None) -> tuple[list[str], list[Any]]:
    where = ["error IS NULL"]
    args: list[Any] = []
    if model:
        where.append("(model = ? OR model LIKE ?)")
        args += [model, f"%{model}%"]
    if since is not None:
        where.append("created >= ?")
        args.append(since)
    return where, args


def batch_items(db: sqlite3.Connection, *, model: str | None = None, since: float | None = None) -> int:
    """How many batch items the same filters select: left out of `speeds`."""
    where, args = _filters(model, since)
    sql = "SELECT count(*) FROM responses WHERE command = 'batch' AND " + " AND ".join(where)
    return int(db.execute(sql, args).fetchone()[0])


def speeds(db: sqlite3.Connection, *, model: str | None = None, since: float | None = None) -> list[dict]:
    """Per model and prompt-length bucket: the prefill and decode speeds of its rows (tokens/s),
    their median, quartiles and count, oldest row's time to newest; batch items left out."""
    import statistics

    where, args = _filters(model, since)
    where += ["command != 'import'", "command != 'batch'"]
    rows = db.execute(
        "SELECT model, prompt_tokens, cached_tokens, prefill_tps, decode_tps, created FROM responses WHERE "
        + " AND ".join(where) + " ORDER BY id", args
    ).fetchall()  # fmt: skip
    groups: dict[tuple[str, str], list[sqlite3.Row]] = {}
    for r in rows:
        groups.setdefault((r["model"], bucket(r["prompt_tokens"])), []).append(r)

    def summary(values: list[float]) -> dict[str, Any] | None:
        values = [v for v in values if v]
        if not values:
            return None
        q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
        return {"n": len(values), "median": round(statistics.median(values), 2), "p25": round(q[0], 2),
                "p75": round(q[2], 2), "min": round(min(values), 2), "max": round(max(values), 2),
                "series": [round(v, 2) for v in values]}  # fmt: skip

    out = []
    order = {b: i for i, b in enumerate([bucket(0), *(bucket(h) for h in BUCKETS), "?"])}
    for (name, b), members in sorted(groups.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 99))):
        # a prefill served mostly from the cache measures the cache, not the model: left out
        prefill = [
            r["prefill_tps"]
            for r in members
            if r["prefill_tps"] and not (r["cached_tokens"] or 0) * 2 > (r["prompt_tokens"] or 0)
        ]
        out.append({
            "model": name, "prompt_tokens": b, "requests": len(members),
            "first": members[0]["created"], "last": members[-1]["created"],
            "prefill_tokens_per_s": summary(prefill),
            "decode_tokens_per_s": summary([r["decode_tps"] for r in members]),
        })  # fmt: skip
    return out
