"""Passages for a question: full-text search (FTS5's BM25 over the words of the question), vector
search (cosine over the collection's vectors) or both fused by reciprocal rank (each list's rank
r adds 1 / (RRF_K + r) to a passage's score: no weights to tune between scores of two scales),
then, optionally, a reranking model's scores in place of those (contract.Reranker).

Only rows stored with their content can be searched here (file passages always are; texts with
`--store`): a passage is what is put in front of the model."""

from __future__ import annotations

import re
import sqlite3
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmcli.errors import UsageError

if TYPE_CHECKING:
    import numpy as np

MODES = ("hybrid", "vector", "text")
RRF_K = 60
DEPTH = 50  # how far down each list reciprocal-rank fusion (and a reranker) looks
STOP = frozenset(
    "a an and are as at be by can do does for from how i in is it its of on or that the this to "
    "was what when where which who why will with you your".split()
)


# a row's file and lines, where it is a passage of a file (a text has none)
_PASSAGE = " LEFT JOIN passages p ON p.collection = e.collection AND p.id = e.id"


@dataclass
class Hit:
    id: str
    content: str
    source: str | None
    lines: tuple[int, int] | None
    score: float = 0.0  # the score it is ranked by
    cosine: float | None = None
    bm25: float | None = None  # FTS5's bm25(), negated: higher is better
    rerank: float | None = None

    def scores(self) -> dict:
        return {"cosine": self.cosine, "bm25": self.bm25, "rerank": self.rerank}


@dataclass
class Found:
    hits: list[Hit]
    searched: int  # passages with content in the collection
    ms: dict[str, float] = field(default_factory=dict)  # per stage: embed, search, rerank


def fts_query(question: str) -> str:
    """The question's words as an FTS5 query: any of them (OR), each quoted (no FTS syntax)."""
    words = [w for w in re.findall(r"\w+", question.lower()) if w not in STOP and len(w) > 1]
    return " OR ".join(f'"{w}"' for w in dict.fromkeys(words))


def searchable(db: sqlite3.Connection, name: str) -> int:
    row = db.execute("SELECT count(*) FROM embeddings WHERE collection = ? AND content IS NOT NULL", (name,))
    return int(row.fetchone()[0])


def by_text(db: sqlite3.Connection, name: str, question: str, n: int) -> list[Hit]:
    query = fts_query(question)
    if not query:
        return []
    rows = db.execute(
        "SELECT e.id, e.content, p.source, p.line_start, p.line_end, bm25(passages_fts) AS rank"
        " FROM passages_fts JOIN embeddings e ON e.rowid = passages_fts.rowid" + _PASSAGE +
        " WHERE passages_fts MATCH ? AND e.collection = ? ORDER BY rank LIMIT ?",
        (query, name, n),
    ).fetchall()
    return [_hit(r, bm25=round(-float(r[5]), 6)) for r in rows]


def by_vector(db: sqlite3.Connection, name: str, query: np.ndarray, n: int) -> list[Hit]:
    import numpy as np

    rows = db.execute(
        "SELECT e.id, e.content, p.source, p.line_start, p.line_end, e.vector FROM embeddings e" + _PASSAGE +
        " WHERE e.collection = ? AND e.content IS NOT NULL",
        (name,),
    ).fetchall()
    if not rows:
        return []
    matrix = np.stack([np.frombuffer(r[5], dtype=np.float32) for r in rows])
    norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(query) or 1.0)
    scores = matrix @ query / np.where(norms == 0, 1, norms)
    best = np.argsort(-scores, kind="stable")[:n]
    return [_hit(rows[i], cosine=round(float(scores[i]), 6)) for i in best]


def _hit(r, **scores: float) -> Hit:
    """A passage from its row: id, content, source, first and last line (NULL for a text)."""
    lines = (int(r[3]), int(r[4])) if r[3] is not None else None
    return Hit(r[0], r[1], r[2], lines, **scores)


def fuse(*lists: list[Hit]) -> list[Hit]:
    """Reciprocal-rank fusion: a passage's score is the sum of 1 / (RRF_K + rank) over the lists
    it is in (rank from 1); its cosine and bm25 kept from each."""
    merged: dict[str, Hit] = {}
    for hits in lists:
        for rank, hit in enumerate(hits, 1):
            kept = merged.setdefault(hit.id, Hit(hit.id, hit.content, hit.source, hit.lines))
            kept.score += 1.0 / (RRF_K + rank)
            kept.cosine = hit.cosine if hit.cosine is not None else kept.cosine
            kept.bm25 = hit.bm25 if hit.bm25 is not None else kept.bm25
    out = sorted(merged.values(), key=lambda h: -h.score)
    for hit in out:
        hit.score = round(hit.score, 6)
    return out


def search(db: sqlite3.Connection, name: str, question: str, query: np.ndarray | None, mode: str,
           n: int, *, depth: int = DEPTH) -> list[Hit]:  # fmt: skip
    """The `n` best passages by `mode` (MODES); `query`: the question's vector (not for "text")."""
    if mode not in MODES:
        raise UsageError(f"--search is one of {', '.join(MODES)}, not {mode!r}")
    text = by_text(db, name, question, depth) if mode != "vector" else []
    every = by_vector(db, name, query, 10**9) if mode != "text" and query is not None else []
    vector = every[:depth]
    if mode == "text":
        for hit in text:
            hit.score = hit.bm25 or 0.0
        return text[:n]
    if mode == "vector":
        for hit in vector:
            hit.score = hit.cosine or 0.0
        return vector[:n]
    fused = fuse(vector, text)
    cosines = {h.id: h.cosine for h in every}
    for hit in fused:  # a passage found by text alone still shows its cosine (the threshold reads it)
        if hit.cosine is None:
            hit.cosine = cosines.get(hit.id)
    return fused[:n]


def rerank(reranker, question: str, hits: list[Hit], n: int) -> list[Hit]:
    """`hits` ordered by `reranker`'s scores (contract.Reranker: higher is more relevant), the best `n`."""
    if not hits:
        return hits
    scores = reranker.rerank(question, [h.content for h in hits])
    for hit, score in zip(hits, scores, strict=True):
        hit.rerank = round(float(score), 6)
        hit.score = hit.rerank
    return sorted(hits, key=lambda h: -(h.rerank or 0.0))[:n]


def clock() -> float:
    return time.perf_counter() * 1000
