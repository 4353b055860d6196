"""`llmcli logs --like TEXT`: the log's entries ranked by meaning (llmcli.embed.log_index), with
the embedding model from --embed-model or the `embed_model` setting, beside -q's full text; each
with its score, those under `--min-score` left out."""

from __future__ import annotations

import sqlite3
from typing import Any

from llmcli import render
from llmcli.errors import UsageError

# The score an entry needs to be shown. Measured with all-MiniLM-L6-v2's GGUF (docs/LOGS.md): 12 questions
# against a log of 12 entries, each question's own entry scored 0.30 to 0.83 (median 0.66), the
# other 132 pairs -0.07 to 0.28 (median 0.05, 95% under 0.19): 0.25 keeps every match and 2 others.
MIN_SCORE = 0.25


def check(like: str | None, embed_model: str | None, given: bool, min_score: float | None = None,
          with_batch: bool = False) -> None:  # fmt: skip
    """What can be refused before the log is opened or a model loaded (`given`: --embed-model was
    typed, not taken from LLMCLI_EMBED_MODEL)."""
    if like is None:
        for flag, used in (("--embed-model", given), ("--min-score", min_score is not None),
                           ("--with-batch", with_batch)):  # fmt: skip
            if used:
                raise UsageError(f"{flag} goes with --like TEXT: give --like too")
        return
    if min_score is not None and not -1.0 <= min_score <= 1.0:
        raise UsageError(f"--min-score is a cosine similarity, from -1 to 1, not {min_score:g}")
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
           model: str | None, since: float | None, cid: str | None, limit: int | None,
           min_score: float, with_batch: bool) -> tuple[list[dict[str, Any]], dict[int, float]]:  # fmt: skip
    """The entries closest in meaning to `like` with a score of at least `min_score`, best first,
    among those the other filters (-q, -m, --since, --cid) select, and every entry's score; the
    index is brought up to date first (said on stderr)."""
    from llmcli.embed import log_index
    from llmcli.log import queries

    ranked = log_index.rank(db, _model(embed_model), like, debug=render.debug(), with_batch=with_batch)
    if ranked.embedded:
        render.info(f"logs --like: embedded {ranked.embedded} new texts ({ranked.indexed} already indexed)")
    rows = queries.select(db, query=query, model=model, since=since, cid=cid, limit=None,
                          ids=list(ranked.scores))  # fmt: skip
    rows.sort(key=lambda r: -ranked.scores[r["id"]])
    kept = [r for r in rows if ranked.scores[r["id"]] >= min_score]
    if rows and not kept:
        render.info(f"logs --like: no entry scores {min_score:g} or more (the closest: "
                    f"{ranked.scores[rows[0]['id']]:.2f}; --min-score 0 shows them all)")  # fmt: skip
    return (kept[:limit] if limit else kept), ranked.scores
