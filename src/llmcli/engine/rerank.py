"""A reranking context: a cross-encoder GGUF (a BERT-like encoder with a classifier head, e.g.
BertForSequenceClassification or XLMRobertaForSequenceClassification converted by llama.cpp) run
with rank pooling, one sequence per (query, document) pair, one score per sequence.

Each pair is tokenized as llama-server's `/v1/rerank` builds it (tools/server `format_prompt_rerank`),
so the same GGUF scores the same here and there: the model's `rerank` chat template with `{query}`
and `{document}` filled in where it has one; else `[BOS] query [EOS] [SEP] document [EOS]`, each
special token only where the vocabulary adds it (EOS falls back to SEP). A pair longer than the
context has its document cut (the closing token kept); `cut` counts them for the caller to say.
Each pair is decoded alone, so its score is the same whatever else is reranked with it.
"""

from __future__ import annotations

from pathlib import Path

from llmcli.engine.embedding import LlamaEmbedder


class LlamaReranker(LlamaEmbedder):
    """The contract's `Reranker` on llama.cpp: `rerank(query, documents)` -> a score per document."""

    ranks = True

    def __init__(self, path: str | Path, *, threads: int | None = None, debug: bool = False) -> None:
        super().__init__(path, threads=threads, debug=debug)
        L = self._L
        raw = L.llama_model_chat_template(self._model, b"rerank")
        self.template: str | None = raw.decode("utf-8") if raw else None
        self.cut = 0  # documents cut to fit the context, in the last `rerank`

    def _special(self) -> tuple[list[int], list[int], list[int]]:
        """The BOS, EOS and SEP a pair gets (each an empty list where the vocabulary adds none)."""
        L, v = self._L, self._vocab
        eos = L.llama_vocab_eos(v)
        if eos < 0:
            eos = L.llama_vocab_sep(v)
        bos = [L.llama_vocab_bos(v)] if L.llama_vocab_get_add_bos(v) else []
        sep = [L.llama_vocab_sep(v)] if L.llama_vocab_get_add_sep(v) else []
        return bos, ([eos] if L.llama_vocab_get_add_eos(v) else []), sep

    def pair(self, query: str, document: str) -> list[int]:
        """The tokens of one (query, document) pair, fitted to the context."""
        if self.template is not None:
            prompt = self.template.replace("{query}", query).replace("{document}", document)
            tokens = self.tokenize(prompt, special=False, parse=True)
            if len(tokens) > self.n_ctx:
                self.cut += 1
                tokens = tokens[: self.n_ctx]
            return tokens
        bos, eos, sep = self._special()
        head = bos + self.tokenize(query, special=False) + eos + sep
        doc = self.tokenize(document, special=False)
        room = self.n_ctx - len(head) - len(eos)
        if len(doc) > room:
            self.cut += 1
            doc = doc[: max(0, room)]
        return (head + doc + eos)[: self.n_ctx]

    def rerank(self, query: str, documents: list[str]) -> list[float]:
        """One relevance score per document, in order (higher: more relevant)."""
        self.cut = 0
        if not documents:
            return []
        # one pair per decode: a batch of several rounds differently (f16 matmuls of another shape,
        # ~1e-3 apart), and a document's score should not depend on what it was ranked beside; so
        # it is also exactly what llama-server gives a pair in one slot
        return [self.embed([self.pair(query, document)])[0][0] for document in documents]
