"""The target model's KV cache: sequence 0 of the engine's llama.cpp context and the tokens it holds.

How tokens get in (a batch at the end of the cache; a verification batch with logits at every
position), how they leave (prefix reuse, trimming rejected draft tokens, clearing), how long
evaluating them took (llama.cpp's perf counters, plus what they miss), and the cache as bytes
(`payload`, `load_payload`: engine/state.py has the file format around them).

`tokens` mirrors the cache at positions 0..n-1 and is only ever changed in place, so a decode
loop may hold the list itself rather than look it up on every token.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable

from llmcli.errors import LlmcliError


class KVCache:
    """Sequence 0 of context `ctx`; `verify_positions` > 0 allocates a verification batch of that
    many positions (speculative decoding)."""

    def __init__(self, L, ctx, verify_positions: int = 0) -> None:
        self.L = L
        self.ctx = ctx
        self.tokens: list[int] = []  # whose keys/values sit in the cache at positions 0..n-1
        self.on_clear: Callable[[], None] | None = None  # what else a cleared cache resets (the draft's)
        self._verify_positions = verify_positions
        self._batch = L.llama_batch_init(verify_positions, 0, 1) if verify_positions else None
        self._outputs_reserved = 1  # rows of logits llama.cpp's output buffer holds (it only grows)
        self._untimed_ms = 0.0  # evaluation time llama.cpp's perf counters missed since the reset

    # -- in ------------------------------------------------------------------------------------

    def decode(self, tokens: list[int]) -> int:
        """Evaluate tokens at the end of the cache; returns llama_decode's status."""
        arr = (self.L.llama_token * len(tokens))(*tokens)
        rc = self.L.llama_decode(self.ctx, self.L.llama_batch_get_one(arr, len(tokens)))
        if rc == 0:
            self.tokens.extend(tokens)
        return rc

    def decode_all(self, tokens: list[int]) -> int:
        """Evaluate tokens at the end of the cache with logits at every position (a verification
        batch: `llama_sampler_sample(..., i)` then reads position i); returns llama_decode's status."""
        batch = self._batch
        assert batch is not None and len(tokens) <= self._verify_positions
        start = len(self.tokens)
        for i, t in enumerate(tokens):
            batch.token[i] = t
            batch.pos[i] = start + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1
        batch.n_tokens = len(tokens)
        if len(tokens) <= self._outputs_reserved:
            rc = self.L.llama_decode(self.ctx, batch)
        else:
            rc = self._decode_growing(batch, len(tokens))
        if rc == 0:
            self.tokens.extend(tokens)
        return rc

    def _decode_growing(self, batch, outputs: int) -> int:
        """llama_decode of a batch with more logit rows than any before it on this context. llama.cpp
        then grows its output buffer, and the synchronize that needs restarts its perf clock in the
        middle of the batch: the rest of the batch would count nowhere (decode speed read 2-3x too
        high in a short answer). So such a batch is timed here and the part missed is added."""
        L, ctx = self.L, self.ctx
        L.llama_synchronize(ctx)
        counted, started = self._counted_ms(), time.perf_counter()
        rc = L.llama_decode(ctx, batch)
        L.llama_synchronize(ctx)
        elapsed = (time.perf_counter() - started) * 1000
        self._untimed_ms += max(0.0, elapsed - (self._counted_ms() - counted))
        if rc == 0:
            self._outputs_reserved = outputs
        return rc

    # -- out -----------------------------------------------------------------------------------

    def clear(self) -> None:
        """Forget every cached token (and, through `on_clear`, the draft model's)."""
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)
        del self.tokens[:]
        if self.on_clear is not None:
            self.on_clear()

    def reuse_prefix(self, prompt: list[int]) -> int:
        """Keep the longest cached prefix of `prompt` (leaving one token to evaluate); drop the rest."""
        self.sync()
        common = 0
        limit = min(len(self.tokens), len(prompt) - 1)
        cached = self.tokens
        while common < limit and cached[common] == prompt[common]:
            common += 1
        if common < len(cached):
            mem = self.L.llama_get_memory(self.ctx)
            if not self.L.llama_memory_seq_rm(mem, 0, common, -1):
                self.L.llama_memory_clear(mem, True)
                common = 0
            del cached[common:]
        return common

    def sync(self) -> None:
        """Make `tokens` and the cache agree, after an aborted `llama_decode` (which may leave
        part of a batch, or less than we recorded) or a KeyboardInterrupt raised between a
        `llama_decode` and our bookkeeping (one batch in the cache that we did not record)."""
        mem = self.L.llama_get_memory(self.ctx)
        in_cache = self.L.llama_memory_seq_pos_max(mem, 0) + 1
        if in_cache < len(self.tokens):
            del self.tokens[in_cache:]
        elif in_cache > len(self.tokens) and not self.L.llama_memory_seq_rm(mem, 0, len(self.tokens), -1):
            self.clear()

    def trim(self, length: int) -> None:
        """Drop cached positions from `length` on (rejected draft tokens)."""
        if length >= len(self.tokens):
            return
        mem = self.L.llama_get_memory(self.ctx)
        if self.L.llama_memory_seq_rm(mem, 0, length, -1):
            del self.tokens[length:]
        else:  # cannot happen for the models the engine lets speculate; stay consistent anyway
            self.clear()

    # -- time ----------------------------------------------------------------------------------

    def synchronize(self) -> None:
        """Wait for the evaluation in flight (llama.cpp adds to its counters only then)."""
        self.L.llama_synchronize(self.ctx)

    def perf_ms(self) -> float:
        """Milliseconds llama.cpp has spent evaluating tokens since the last reset."""
        return self._counted_ms() + self._untimed_ms

    def _counted_ms(self) -> float:
        data = self.L.llama_perf_context(self.ctx)
        return data.t_p_eval_ms + data.t_eval_ms

    def reset_perf(self) -> None:
        self.L.llama_perf_context_reset(self.ctx)
        self._untimed_ms = 0.0

    # -- as bytes ------------------------------------------------------------------------------

    def payload(self) -> tuple[list[int], memoryview]:
        """The cached tokens and the KV state, as `llama_state_seq_get_data` writes it for seq_id -1
        (the whole cache, which here is sequence 0 alone): for seq 0 it would leave out the cells a
        sliding-window layer no longer attends to, and a prompt that shares less than all of the
        saved tokens needs them."""
        L = self.L
        self.sync()
        size = L.llama_state_seq_get_size(self.ctx, -1)
        buf = (ctypes.c_uint8 * size)()
        written = L.llama_state_seq_get_data(self.ctx, buf, size, -1)
        if written == 0 and self.tokens:
            raise LlmcliError("llama.cpp could not copy the KV state")
        return list(self.tokens), memoryview(buf).cast("B")[:written]

    def load_payload(self, tokens: list[int], payload: bytearray | memoryview) -> bool:
        """Load what `payload` gave into sequence 0 of an empty cache; False when llama.cpp refuses
        it or it does not hold exactly `tokens` positions (the cache is then empty)."""
        L = self.L
        self.clear()
        if isinstance(payload, memoryview) and payload.readonly:
            payload = bytearray(payload)  # llama.cpp's call takes a writable buffer
        buf = (ctypes.c_uint8 * len(payload)).from_buffer(payload)
        read = L.llama_state_seq_set_data(self.ctx, buf, len(payload), -1)
        del buf  # release the export of `payload`
        in_cache = L.llama_memory_seq_pos_max(L.llama_get_memory(self.ctx), 0) + 1
        if read != len(payload) or in_cache != len(tokens):
            self.clear()
            return False
        self.tokens[:] = tokens
        return True

    def close(self) -> None:
        """Free the verification batch (the engine frees the context)."""
        if self._batch is not None:
            self.L.llama_batch_free(self._batch)
            self._batch = None
