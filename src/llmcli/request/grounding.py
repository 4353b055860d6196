"""An answer from a collection's passages (`ask`, `generate --from`): the passages found before
the model is loaded (`find`: an empty collection, another embedding model or a question that
nothing matches are said in one line before anything else is loaded), then fitted into what the
loaded model's context leaves (`fit`) and numbered in the prompt, so that the answer can cite
them ([1], [2]) and each number maps to `path:lines`. The answer itself is an ordinary generate
request with that prompt (request/generate.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from llmcli.errors import ContextOverflowError, NoAnswerError, UsageError

PASSAGES = 5
MIN_SCORE = 0.3  # the cosine below which a passage does not answer (all-MiniLM-L6-v2: unrelated is ~0.1)
OVERHEAD = 64  # tokens of the instructions and the template around the passages
UNKNOWN_CONTEXT = 4096
OVERLAP_SHARE = 0.6  # an answer that cites nothing is the passage's when this share of its words are


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text.lower()) if len(w) > 3}


INSTRUCTIONS = (
    "Answer the question from the numbered passages below. Cite each passage you use by its number "
    "in square brackets, like [1]. If the passages do not hold the answer, say that they do not."
)


@dataclass
class Ask:
    """How to find the passages: the `--from` flags."""

    collection: str
    search: str = "hybrid"
    passages: int = PASSAGES
    rerank: str | None = None
    min_score: float = MIN_SCORE
    always_answer: bool = False
    embed_model: str = ""  # "": the collection's model (the embed_model setting where that file is gone)


@dataclass
class Grounded:
    ask: Ask
    question: str
    hits: list = field(default_factory=list)  # embed.retrieve.Hit, best first
    searched: int = 0
    model: str | None = None  # the embedding model's name
    ms: dict[str, float] = field(default_factory=dict)
    used: list = field(default_factory=list)  # the hits put in the prompt, numbered from 1
    tokens: list[int] = field(default_factory=list)
    cited: dict[int, str] = field(default_factory=dict)  # passage number -> "model" or "overlap"

    def attribute(self, answer: str) -> None:
        """Which passages the answer draws on: those it cites by number ("model"); where it cites
        none (a small model seldom does), the one whose words it repeats most, if it repeats
        mostly that passage's words ("overlap")."""
        numbers = {int(m) for m in re.findall(r"\[(\d+)\]", answer)}
        self.cited = {n: "model" for n in sorted(numbers) if 1 <= n <= len(self.used)}
        if self.cited or not self.used:
            return
        words = _words(answer)
        if not words:
            return
        shares = [len(words & _words(h.content)) / len(words) for h in self.used]
        best = max(range(len(shares)), key=lambda i: shares[i])
        if shares[best] >= OVERLAP_SHARE:
            self.cited = {best + 1: "overlap"}

    def record(self) -> dict:
        """The record's `retrieval` block (docs/record.schema.json)."""
        from llmcli.embed.sources import shown

        return {
            "collection": self.ask.collection, "query": self.question, "search": self.ask.search,
            "embedding_model": self.model, "reranker": self.ask.rerank, "min_score": self.ask.min_score,
            "searched": self.searched,
            "passages": [
                {"n": n, "id": h.id, "source": shown(h.source) if h.source else None,
                 "lines": list(h.lines) if h.lines else None, "score": h.score, "cosine": h.cosine,
                 "bm25": h.bm25, "rerank": h.rerank, "tokens": t, "cited": self.cited.get(n)}
                for n, (h, t) in enumerate(zip(self.used, self.tokens, strict=True), 1)
            ],
            "timings_ms": {k: round(v, 3) for k, v in self.ms.items()},
        }  # fmt: skip

    def sources(self) -> list[str]:
        """`[1] docs/EMBED.md:10-24`: what each citation number is."""
        how = {"model": " (cited)", "overlap": " (the answer repeats it)"}
        return [f"[{n}] {cite(h)}{how.get(self.cited.get(n, ''), '')}" for n, h in enumerate(self.used, 1)]

    def phase(self) -> str:
        """The stats line's retrieval phase."""
        n = len(self.used)
        return f"retrieve {self.ms.get('total', 0.0) / 1000:.2f} s · {n} passage{'s' if n != 1 else ''}"


def cite(hit) -> str:
    from llmcli.embed.sources import shown

    if hit.source is None:
        return hit.id
    where = shown(hit.source)
    return f"{where}:{hit.lines[0]}-{hit.lines[1]}" if hit.lines else where


def find(ask: Ask, question: str, *, debug: bool = False) -> Grounded:
    """The passages for `question`, best first, with what each stage took."""
    from llmcli.embed import collections as store
    from llmcli.embed import retrieve

    if ask.passages < 1:
        raise UsageError(f"--passages must be at least 1, not {ask.passages}")
    if ask.search not in retrieve.MODES:
        raise UsageError(f"--search is one of {', '.join(retrieve.MODES)}, not {ask.search!r}")
    if ask.rerank:
        _reranker_port()
    started = retrieve.clock()
    out = Grounded(ask, question)
    with store.connect() as db:
        found = store.require(db, ask.collection)
        out.searched = retrieve.searchable(db, ask.collection)
        if out.searched == 0:
            hint = f"llmcli embed -i 'docs/**/*.md' --collection {ask.collection}"
            raise UsageError(f"collection {ask.collection!r} has no passages to answer from: it is empty or "
                             "holds vectors without their text", hint=hint)  # fmt: skip
        query = None
        if ask.search != "text":
            query, out.model = _query_vector(db, found, ask.embed_model, question, debug, out.ms)
        t = retrieve.clock()
        depth = max(retrieve.DEPTH, ask.passages * 4)
        hits = retrieve.search(db, ask.collection, question, query, ask.search, depth)
        out.ms["search"] = retrieve.clock() - t
    if ask.rerank and hits:
        t = retrieve.clock()
        hits = _reranked(ask.rerank, question, hits, depth, debug)
        out.ms["rerank"] = retrieve.clock() - t
    out.hits = hits
    out.ms["total"] = retrieve.clock() - started
    _check_found(out)
    return out


def _query_vector(db, found, model: str, question: str, debug: bool, ms: dict):
    from llmcli import settings
    from llmcli.embed import collections as store
    from llmcli.embed import retrieve
    from llmcli.embed.runs import Model

    t = retrieve.clock()
    # the collection knows its model: the embed_model setting only where that is no longer there
    setting = str(settings.resolve("embed_model", None) or "")
    stored = found.model
    gone = setting and "://" not in stored and stored.endswith(".gguf") and not Path(stored).exists()
    engine = Model(model or (setting if gone else found.model), debug=debug)
    try:
        try:
            store.check_model(db, found, engine)
        except UsageError as exc:  # -m is the answering model here: the question's is --embed-model
            hint = f"--embed-model {found.model}, or another collection"
            raise UsageError(exc.message, hint=hint) from None
        vector = engine.embed([question]).matrix[0]
    finally:
        engine.close()
    store.check_dimensions(found, int(vector.shape[0]))
    ms["embed"] = retrieve.clock() - t
    return vector, engine.name


def _reranker_port():
    """The loader's `load_reranker` (the contract's Reranker port), looked up when --rerank asks
    for it, so that an llmcli without one says so in one line before anything is searched."""
    import importlib

    load_reranker = getattr(importlib.import_module("llmcli.loader"), "load_reranker", None)
    if load_reranker is None:
        raise UsageError("--rerank needs reranking models, which this llmcli does not load yet")
    return load_reranker


def _reranked(ref: str, question: str, hits: list, n: int, debug: bool) -> list:
    from llmcli.embed import retrieve

    load_reranker = _reranker_port()

    reranker = load_reranker(ref, debug=debug)
    try:
        return retrieve.rerank(reranker, question, hits, n)
    finally:
        reranker.close()


def _check_found(out: Grounded) -> None:
    """Nothing that answers: said in one line, not answered (unless --always-answer)."""
    ask = out.ask
    if ask.always_answer:
        return
    if ask.search == "text":
        relevant = bool(out.hits)
        why = "no passage shares a word with the question"
    else:
        best = max((h.cosine or 0.0 for h in out.hits), default=0.0)
        relevant = best >= ask.min_score
        why = f"the closest passage scores {best:.2f}, below --min-score {ask.min_score:.2f}"
    if not relevant:
        raise NoAnswerError(f"nothing found in collection {ask.collection!r} for this question ({why}): "
                            "not answered", hint="--always-answer answers anyway")  # fmt: skip


def fit(out: Grounded, engine, max_tokens: int) -> str:
    """The prompt: the instructions, the best passages that fit the context beside the question and
    the answer (`max_tokens`), numbered, then the question."""
    ask = out.ask
    window = engine.n_ctx or UNKNOWN_CONTEXT  # a server that does not say its context: assume a common one
    room = window - (max_tokens or window // 4) - engine.count(out.question) - OVERHEAD
    if ask.search != "text" and not ask.always_answer and not ask.rerank:
        candidates = [h for h in out.hits if (h.cosine or 0.0) >= ask.min_score or h.bm25 is not None]
    else:
        candidates = list(out.hits)
    for hit in candidates:
        if len(out.used) == ask.passages:
            break
        tokens = engine.count(f"[{len(out.used) + 1}] {cite(hit)}\n{hit.content}\n\n")
        if tokens <= room:
            out.used.append(hit)
            out.tokens.append(tokens)
            room -= tokens
    if not out.used and out.hits:
        raise ContextOverflowError(f"no passage of collection {ask.collection!r} fits the "
                                   f"{window}-token context beside the question and the answer",
                                   hint="a larger -c, a smaller -n, or passages embedded with a smaller "
                                   "--chunk")  # fmt: skip
    blocks = [f"[{n}] {cite(h)}\n{h.content}" for n, h in enumerate(out.used, 1)]
    if not blocks:
        return out.question
    return INSTRUCTIONS + "\n\n" + "\n\n".join(blocks) + f"\n\nQuestion: {out.question}"
