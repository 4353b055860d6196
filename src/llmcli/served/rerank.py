"""Reranking by a served model: `/v1/rerank` of llama-server `--rerank` (the Jina/Cohere shape: a
body of `model`, `query`, `documents`; an answer of `results[{index, relevance_score}]`, best first),
through the endpoint's `Client` (its faults, retries and key)."""

from __future__ import annotations

from llmcli.errors import LlmcliError, NetworkError, UsageError
from llmcli.served.client import Client
from llmcli.served.endpoints import Endpoint
from llmcli.served.engine import probe

DOCUMENTS_PER_REQUEST = 64


class ServedReranker:
    """The contract's `Reranker` over HTTP: `rerank(query, documents)` -> a score per document."""

    def __init__(self, endpoint: Endpoint, *, debug: bool = False) -> None:
        self.client = Client(endpoint, connections=1, debug=debug)
        self.model, self.flavour, _listed = probe(self.client, endpoint)
        self.ref = endpoint.with_model(self.model).ref
        self.cut = 0  # the server cuts or refuses long documents itself

    def rerank(self, query: str, documents: list[str]) -> list[float]:
        scores: list[float] = []
        for start in range(0, len(documents), DOCUMENTS_PER_REQUEST):
            scores += self._one(query, documents[start : start + DOCUMENTS_PER_REQUEST])
        return scores

    def _one(self, query: str, documents: list[str]) -> list[float]:
        url = self.client.url("/rerank")
        body = {"model": self.model, "query": query, "documents": documents, "top_n": len(documents)}
        try:
            data = self.client.post_json("/rerank", body)
        except LlmcliError as exc:
            if "not support rerank" in exc.message or "404" in exc.message or "Not Found" in exc.message:
                hint = "a reranker is served by llama-server --rerank with a reranking GGUF"
                raise UsageError(f"{self.ref} does not rerank: {exc.message}", hint=hint) from None
            raise
        rows = data.get("results") if isinstance(data, dict) else None
        if not isinstance(rows, list) or len(rows) != len(documents):
            raise NetworkError(f"{url} did not answer with {len(documents)} rerank results")
        scores: list[float | None] = [None] * len(documents)
        for row in rows:
            index = row.get("index") if isinstance(row, dict) else None
            score = row.get("relevance_score", row.get("score")) if isinstance(row, dict) else None
            bad = f"{url} sent a rerank result without a valid index and relevance_score"
            if not isinstance(index, int) or not isinstance(score, int | float):
                raise NetworkError(bad)
            if not 0 <= index < len(documents):
                raise NetworkError(bad)
            scores[index] = float(score)
        if any(s is None for s in scores):
            raise NetworkError(f"{url} left some documents without a score")
        return [float(s) for s in scores if s is not None]

    def close(self) -> None:
        self.client.close()
