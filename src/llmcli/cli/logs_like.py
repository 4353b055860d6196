"""`llmcli logs --like TEXT`: the log's entries ranked by meaning (llmcli.embed.log_index), with
the embedding model from --embed-model or the `embed_model` setting, beside -q's full text."""

from __future__ import annotations

import sqlite3

from llmcli import render
from llmcli.errors import UsageError


def check(like: str | None, embed_model: str | None, given: bool) -> None:
    """What can be refused before the log is opened or a model loaded (`given`: --embed-model was
    typed, not taken from LLMCLI_EMBED_MODEL)."""
    if like is None:
        if given:
            raise UsageError("--embed-model is the model of --like TEXT: give --like too")
        return
    if not like.strip():
        raise UsageError("--like needs a text to compare the entries with")
    if not _model(embed_model):
        raise UsageError(
            "--like needs an embedding model, and none is configured",
            hint="--embed-model FILE.gguf, or llmcli config set embed_model FILE.gguf",
        )


def _model(flag: str | None) -> str:
    from llmcli import settings

    return str(settings.resolve("embed_model", flag or None) or "")


def search(db: sqlite3.Connection, like: str, embed_model: str | None, *, query: str | None,
           model: str | None, since: float | None, cid: str | None,
           limit: int | None) -> list[sqlite3.Row]:  # fmt: skip
    """The entries closest in meaning to `like`, best first, among those the other filters (-q,
    -m, --since, --cid) select; the index is brought up to date first (said on stderr)."""
    from llmcli.embed import log_index
    from llmcli.log import queries

    ranked = log_index.rank(db, _model(embed_model), like, debug=render.debug())
    if ranked.embedded:
        render.info(f"logs --like: embedded {ranked.embedded} new texts ({ranked.indexed} already indexed)")
    rows = queries.select(db, query=query, model=model, since=since, cid=cid, limit=None,
                          ids=list(ranked.scores))  # fmt: skip
    rows.sort(key=lambda r: -ranked.scores[r["id"]])
    return rows[:limit] if limit else rows
