"""An embedding context: a GGUF embedding model (BERT, nomic-bert, Qwen3-embedding, ...) loaded
with `embeddings` on, its pooling from the model's metadata (or the caller's override), and many
sequences per `llama_batch`: each text gets its own sequence id, llama.cpp pools each sequence
(`llama_get_embeddings_seq`), and one decode serves the whole batch.

A non-causal model attends over a whole micro-batch at once, so a batch is one micro-batch
(n_batch == n_ubatch) and no sequence is longer than the context; longer texts are cut here
(`fit`), the caller says so.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from llmcli.engine.native import deferred_signals, raise_for, silence_logs
from llmcli.errors import InvalidModelError, LlmcliError, UsageError

POOLING = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}
POOLING_NAMES = {v: k for k, v in POOLING.items()}
MAX_SEQUENCES = 64  # sequences per batch (llama.cpp allows 256; more only adds bookkeeping)


class LlamaEmbedder:
    """One embedding model and its context; `embed(token_lists)` gives one vector per list (the
    contract's `Embedder` that tokenizes here)."""

    tokenizes = True
    ranks = False  # a reranker (engine/rerank.py): rank pooling, one score per sequence

    def __init__(
        self,
        path: str | Path,
        *,
        pooling: str | None = None,
        threads: int | None = None,
        batch_tokens: int | None = None,
        gpu_layers: int | None = None,
        debug: bool = False,
    ) -> None:
        from llmcli.engine.backend import library

        self._L = L = library()
        self.path = Path(path)
        self.ref = str(path)
        if not debug:
            silence_logs(L)
        L.llama_backend_init()
        self._model = self._ctx = None
        self.pooling: str = "mean"
        self._encoder: bool = False
        self._add_eos: bool = False
        with deferred_signals() as hits:
            params = L.llama_model_default_params()
            if gpu_layers is not None and gpu_layers >= 0:
                params.n_gpu_layers = gpu_layers
            self._model = L.llama_model_load_from_file(str(self.path).encode(), params)
            if hits:
                self.close()
                raise_for(hits)
        if not self._model:
            raise InvalidModelError(f"llama.cpp could not load {self.path}", hint="run with --debug")
        self._vocab = L.llama_model_get_vocab(self._model)
        self.n_embd = L.llama_model_n_embd(self._model)
        self.n_ctx = L.llama_model_n_ctx_train(self._model) or 512
        self.batch_tokens = max(self.n_ctx, batch_tokens or self.n_ctx)
        self._new_context(pooling, threads)

    def _new_context(self, pooling: str | None, threads: int | None) -> None:
        L = self._L
        from llmcli.engine.threads import LoadFollower, physical_cores

        params = L.llama_context_default_params()
        params.embeddings = True
        params.pooling_type = (POOLING["rank"] if self.ranks else POOLING[pooling] if pooling
                               else L.LLAMA_POOLING_TYPE_UNSPECIFIED)  # fmt: skip
        params.n_ctx = self.batch_tokens
        params.n_batch = params.n_ubatch = self.batch_tokens
        params.n_seq_max = MAX_SEQUENCES
        params.kv_unified = True  # a decoder's sequences share the cache instead of n_ctx / n_seq_max each
        # threads fixed by -t, else prefill's rule (engine/threads.py LoadFollower): a core for each
        # thread that will not wait for a busy one, read again before each batch
        self._follower = None if threads else LoadFollower(physical_cores())
        self.threads = threads or self._follower.current  # type: ignore[union-attr]
        params.n_threads = params.n_threads_batch = self.threads
        params.no_perf = True
        self._ctx = L.llama_init_from_model(self._model, params)
        if not self._ctx:
            self.close()
            raise LlmcliError(f"llama.cpp could not create an embedding context for {self.path.name}")
        self.pooling = POOLING_NAMES.get(L.llama_pooling_type(self._ctx), "none")
        if self.pooling in ("none", "rank") and not self.ranks:
            self.close()
            raise UsageError(f"{self.pooling} pooling gives no one vector per text",
                             hint="choose --pooling mean, cls or last")  # fmt: skip
        self._encoder = bool(L.llama_model_has_encoder(self._model)) and not L.llama_model_has_decoder(
            self._model
        )
        self._add_eos = bool(L.llama_vocab_get_add_eos(self._vocab))
        # what one pooled sequence gives: a vector, or a reranker's score(s) from its classifier head
        self.width: int = max(1, L.llama_model_n_cls_out(self._model)) if self.ranks else self.n_embd

    def tokenize(self, text: str, special: bool = True, parse: bool = False) -> list[int]:
        """The tokens of `text` as the model embeds it (its BOS/CLS and EOS/SEP added, unless not
        `special`)."""
        L = self._L
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (L.llama_token * cap)()
        n = L.llama_tokenize(self._vocab, data, len(data), buf, cap, special, parse)
        if n < 0:
            buf = (L.llama_token * -n)()
            n = L.llama_tokenize(self._vocab, data, len(data), buf, -n, special, parse)
        return list(buf[:n])

    def fit(self, tokens: list[int]) -> list[int]:
        """`tokens` cut to the context, the closing separator kept where the model adds one."""
        if len(tokens) <= self.n_ctx:
            return tokens
        if self._add_eos:
            return tokens[: self.n_ctx - 1] + tokens[-1:]
        return tokens[: self.n_ctx]

    def batches(self, seqs: Sequence[list[int]]) -> Iterator[list[int]]:
        """Indices of `seqs` grouped into batches: at most `batch_tokens` tokens and
        MAX_SEQUENCES sequences each, in order."""
        group: list[int] = []
        used = 0
        for i, tokens in enumerate(seqs):
            if group and (used + len(tokens) > self.batch_tokens or len(group) == MAX_SEQUENCES):
                yield group
                group, used = [], 0
            group.append(i)
            used += len(tokens)
        if group:
            yield group

    def embed(self, seqs: Sequence[list[int]]) -> list[list[float]]:
        """One pooled vector per token list (each at most `n_ctx` long, none empty), in order."""
        out: list[list[float]] = []
        for group in self.batches(seqs):
            out += self._one_batch([seqs[i] for i in group])
        return out

    def _one_batch(self, seqs: list[list[int]]) -> list[list[float]]:
        L = self._L
        if self._follower is not None and (n := self._follower.begin()) != self.threads:
            self.threads = n  # the machine got busier or quieter since the last batch
            L.llama_set_n_threads(self._ctx, n, n)
        total = sum(len(s) for s in seqs)
        batch = L.llama_batch_init(total, 0, 1)
        try:
            k = 0
            for seq_id, tokens in enumerate(seqs):
                for pos, token in enumerate(tokens):
                    batch.token[k] = token
                    batch.pos[k] = pos
                    batch.n_seq_id[k] = 1
                    batch.seq_id[k][0] = seq_id
                    batch.logits[k] = 1
                    k += 1
            batch.n_tokens = total
            memory = L.llama_get_memory(self._ctx)
            if memory:
                L.llama_memory_clear(memory, True)
            status = (L.llama_encode if self._encoder else L.llama_decode)(self._ctx, batch)
            if status != 0:
                raise LlmcliError(f"llama.cpp could not embed a batch of {len(seqs)} texts (status {status})")
            vectors = []
            for seq_id in range(len(seqs)):
                ptr = L.llama_get_embeddings_seq(self._ctx, seq_id)
                if not ptr:
                    raise LlmcliError("llama.cpp gave no pooled vector for a sequence")
                vectors.append(list(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float))[: self.width]))
            return vectors
        finally:
            L.llama_batch_free(batch)

    def close(self) -> None:
        L = self._L
        if self._ctx:
            L.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            L.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        if sys.is_finalizing():  # the process ends: the system takes the memory back at once
            return
        try:
            self.close()
        except Exception:
            pass
