"""One embedding run: an embedding model opened from a reference (a local GGUF through llama.cpp,
or a served one through `/v1/embeddings`), texts checked against its context (cut or refused),
embedded in batches, normalised or not."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from llmcli import reporting
from llmcli.errors import ContextOverflowError, UsageError

if TYPE_CHECKING:
    import numpy as np

    from llmcli.engine.embedding import LlamaEmbedder
    from llmcli.served.embeddings import ServedEmbedder

BYTES_PER_TOKEN_CAP = 64  # with --truncate, a text is cut to n_ctx * this many bytes before tokenizing


@dataclass
class Vectors:
    """What a run gives: one row per text (float32), and what it counted."""

    matrix: np.ndarray
    tokens: int
    truncated: int
    counts: list[int] | None = None  # each text's tokens as embedded (None: a server counts a request's)


class Model:
    """An embedding model, local or served, as a run sees it."""

    def __init__(self, ref: str, *, pooling: str | None = None, threads: int | None = None,
                 batch_tokens: int | None = None, debug: bool = False) -> None:  # fmt: skip
        from llmcli.loader import load_embedder

        port = load_embedder(ref, pooling=pooling, threads=threads, batch_tokens=batch_tokens, debug=debug)
        # a local context tokenizes here (counts, cuts, refuses by the context); a server counts its own
        self.local: LlamaEmbedder | None = port if port.tokenizes else None  # type: ignore[assignment]
        self.served: ServedEmbedder | None = None if port.tokenizes else port  # type: ignore[assignment]
        self.ref = port.ref if self.served is not None else ref
        self.pooling: str = port.pooling
        self.n_ctx: int = port.n_ctx

    @property
    def name(self) -> str:
        """The model as a person reads it: a local file's absolute path, a served one's reference
        (a collection keys its model by content, llmcli.embed.identity; this is what it shows)."""
        return str(self.local.path.resolve()) if self.local is not None else self.ref

    def embed(self, texts: list[str], *, truncate: bool = True, normalize: bool = True) -> Vectors:
        import numpy as np

        for i, text in enumerate(texts):
            if not text.strip():
                raise UsageError(f"text {i + 1} is empty: there is nothing to embed")
        counts: list[int] | None = None
        if self.served is not None:
            rows, tokens = self.served.embed(texts)
            truncated = 0
        else:
            seqs, truncated = self._tokens(texts, truncate)
            rows = self.local.embed(seqs) if self.local is not None else []
            counts = [len(s) for s in seqs]
            tokens = sum(counts)
        matrix: np.ndarray = np.asarray(rows, dtype=np.float32).reshape(len(texts), -1)
        if normalize:
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            matrix = (matrix / np.where(norms == 0, 1, norms)).astype(np.float32)
        return Vectors(matrix, tokens, truncated, counts)

    def _tokens(self, texts: list[str], truncate: bool) -> tuple[list[list[int]], int]:
        assert self.local is not None
        seqs, truncated = [], 0
        cap = self.n_ctx * BYTES_PER_TOKEN_CAP
        for i, text in enumerate(texts):
            data = text.encode("utf-8")
            if truncate and len(data) > cap:  # a 10 MB line: no need to tokenize what is cut anyway
                text = data[:cap].decode("utf-8", "ignore")
            tokens = self.local.tokenize(text)
            if len(tokens) > self.n_ctx or len(text) < len(texts[i]):
                if not truncate:
                    raise ContextOverflowError(
                        f"text {i + 1} is {len(tokens)} tokens, more than the {self.n_ctx} of "
                        f"{Path(self.name).name}'s context",
                        hint="--truncate embeds its beginning",
                    )
                tokens = self.local.fit(tokens)
                truncated += 1
            seqs.append(tokens)
        if truncated:
            reporting.warn(f"{truncated} text(s) longer than the model's {self.n_ctx}-token context: "
                           "embedded their beginning (--no-truncate refuses them)")  # fmt: skip
        return seqs, truncated

    def close(self) -> None:
        if self.local is not None:
            self.local.close()
        if self.served is not None:
            self.served.close()


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
