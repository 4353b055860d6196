"""One sequence of a batch (engine/batched.py): its item, its sampler chain, the tokens in its
cells, and the per-token step `generate` takes (engine/decoding.py's `Generation.step`): end on an
end-of-generation token, feed the text path (`TextStream`: UTF-8 held until whole, a stop string
cut and never shown), note where the grammar accepts (`GrammarProbe`), then the token cap and the
sequence's context. Its `Done` is built as `generate`'s is, with the same text, finish reason,
token count and constraint completeness."""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from llmcli.contract import Done, FinishReason, SamplingParams, Stats
from llmcli.engine.sampler import GrammarProbe
from llmcli.engine.text import TextStream
from llmcli.engine.vocab import Tokenizer


@dataclass
class BatchItem:
    """One prompt to answer: `key` is the caller's, handed back with its result."""

    key: object
    tokens: list[int]
    params: SamplingParams
    # a benchmark's item: an end-of-generation token does not end it, so every sequence decodes
    # max_tokens, as llama-batched-bench's do (it never samples)
    past_eog: bool = False


@dataclass
class BatchResult:
    key: object
    done: Done | None
    error: str | None = None


@dataclass
class Seq:
    item: BatchItem
    seq_id: int
    seed: int
    chain: object
    greedy: bool
    admitted: float
    text: TextStream
    pick: Callable[[int], int]  # the token from a batch row's logits (sampler.pick), made once
    probe: GrammarProbe | None = None
    pending: list[int] = field(default_factory=list)  # tokens to decode at the next step
    cached: list[int] = field(default_factory=list)  # the tokens in this sequence's cells, in order
    reused: int = 0  # prompt tokens whose cells came from a shared prefix (not prefilled again)
    waiting: Seq | None = None  # the sequence still prefilling the prefix this one will copy
    share: int = 0  # with `waiting`: how many tokens of that prefix
    out: list[int] = field(default_factory=list)
    first: float | None = None
    ended_by_eog: bool = False
    stopped_by_string: bool = False

    @property
    def n_past(self) -> int:
        return len(self.cached)

    def start_at(self, reused: int) -> None:
        """The sequence's cells hold the prompt's first `reused` tokens: prefill the rest."""
        tokens = self.item.tokens
        self.cached, self.pending, self.reused = tokens[:reused], tokens[reused:], reused
        self.waiting, self.share = None, 0

    def take(self, token: int, tokenizer: Tokenizer, buf: ctypes.Array, ctx_per_seq: int) -> bool:
        """The sampled `token` through the one per-token step; whether the sequence has ended."""
        self.out.append(token)
        if self.first is None:
            self.first = time.perf_counter()
        if not self.item.past_eog and tokenizer.L.llama_vocab_is_eog(tokenizer.handle, token):
            self.ended_by_eog = True  # the end token is not part of the answer
            return True
        text = self.text
        _, self.stopped_by_string = text.feed(tokenizer.token_bytes(token, buf))
        if self.probe is not None:
            self.probe.note(text.decoded_chars, pending_bytes=text.mid_character)
        if self.stopped_by_string:
            return True
        cap = self.item.params.max_tokens
        if (cap and len(self.out) >= cap) or self.n_past + 1 >= ctx_per_seq:
            return True
        self.pending.append(token)
        return False

    def done(self, ctx_per_seq: int) -> Done:
        """The answer, as `generate`'s `Done` says it."""
        ended = time.perf_counter()
        first = self.first or ended
        stopped = self.ended_by_eog or self.stopped_by_string
        reason: FinishReason = "stop" if stopped else "length"
        self.text.finish(self.stopped_by_string)
        text = self.text.text
        n_prompt = len(self.item.tokens)
        stats = Stats(
            prompt_tokens=n_prompt,
            cached_tokens=self.reused,
            prefill_tokens=n_prompt - self.reused,
            prefill_ms=(first - self.admitted) * 1000,
            completion_tokens=len(self.out),  # the end token counted, as `generate` counts it
            decode_tokens=len(self.out),
            decode_ms=(ended - first) * 1000,
            ttft_ms=(first - self.admitted) * 1000,
            total_ms=(ended - self.admitted) * 1000,
            context_size=ctx_per_seq,
            context_used=self.n_past + 1,
        )
        complete = None
        if self.probe is not None:  # an end token is sampled only where the grammar accepts
            complete = self.ended_by_eog or self.probe.accepted_at(len(text))
        return Done(text, reason, stats, self.seed, list(self.out), complete)


def common_prefix(a: list[int], b: list[int], limit: int) -> int:
    """How many leading tokens `a` and `b` share, at most `limit`."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if n >= limit or x != y:
            break
        n += 1
    return n
