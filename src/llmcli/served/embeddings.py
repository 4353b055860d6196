"""Embeddings from a served model: `/v1/embeddings` of llama-server `--embeddings` or vLLM's pooling
runner, through the endpoint's `Client` (its faults, retries and key), many texts per request."""

from __future__ import annotations

from llmcli.errors import ContextOverflowError, LlmcliError, NetworkError
from llmcli.served.client import Client
from llmcli.served.endpoints import Endpoint
from llmcli.served.engine import probe

TEXTS_PER_REQUEST = 64


class ServedEmbedder:
    """A served embedding model: `embed(texts)` gives one vector per text, in order."""

    pooling = "the server's"
    tokenizes = False  # the contract's `Embedder`: the server takes texts and counts their tokens
    n_ctx = 0

    def __init__(self, endpoint: Endpoint, *, debug: bool = False) -> None:
        self.client = Client(endpoint, connections=1, debug=debug)
        self.model, self.flavour, _listed = probe(self.client, endpoint)
        self.ref = endpoint.with_model(self.model).ref
        self.dimensions = 0

    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]:
        """The vectors of `texts` and the tokens the server counted (0 where it says none)."""
        vectors: list[list[float]] = []
        tokens = 0
        for start in range(0, len(texts), TEXTS_PER_REQUEST):
            chunk = texts[start : start + TEXTS_PER_REQUEST]
            body = {"model": self.model, "input": chunk, "encoding_format": "float"}
            try:
                data = self.client.post_json("/embeddings", body)
            except LlmcliError as exc:
                if "too large" in exc.message or "context" in exc.message:
                    raise ContextOverflowError(
                        f"the server refused a text as too long: {exc.message}"
                    ) from None
                raise
            rows = data.get("data") if isinstance(data, dict) else None
            if not isinstance(rows, list) or len(rows) != len(chunk):
                raise NetworkError(
                    f"{self.client.url('/embeddings')} did not answer with {len(chunk)} embeddings"
                )
            rows = sorted(rows, key=lambda r: r.get("index", 0) if isinstance(r, dict) else 0)
            for row in rows:
                vector = row.get("embedding") if isinstance(row, dict) else None
                if not isinstance(vector, list) or not vector:
                    raise NetworkError(
                        f"{self.client.url('/embeddings')} sent an embedding that is not a list"
                    )
                vectors.append([float(x) for x in vector])
            usage = data.get("usage") or {}
            tokens += int(usage.get("prompt_tokens") or 0)
        if vectors:
            self.dimensions = len(vectors[0])
        return vectors, tokens

    def close(self) -> None:
        self.client.close()
