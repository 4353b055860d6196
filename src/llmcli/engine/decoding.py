"""One request on the llama.cpp engine, as a generator of events: prefill the prompt past the
reused prefix, then decode, plainly or with speculative proposals verified in batches, and report.

Every generated token, whether sampled after a single step or accepted from a verification batch,
goes through the one per-token step (`Generation.step`): record it, time the first, end on EOG,
feed the text path, note the grammar. So speculation changes nothing the user sees.

What it uses of the engine is `Runner`: the cache, the tokenizer, the context's limits, the thread
policy's hook (`observe`, `pin_batch_threads`, `thread_report`) and the perf counters' reset.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Generator, Iterator
from typing import Protocol

from llmcli.contract import (
    CallGrammar,
    Done,
    Event,
    FinishReason,
    PrefillProgress,
    SamplingParams,
    Stats,
    ThreadsChanged,
    Token,
)
from llmcli.engine.kvcache import KVCache
from llmcli.engine.mtmd import MediaPrompt, Span, Vision
from llmcli.engine.native import AbortFlag, check_decode
from llmcli.engine.sampler import GrammarProbe, pick
from llmcli.engine.speculation.run import Speculation
from llmcli.engine.text import TextStream
from llmcli.engine.vocab import Tokenizer
from llmcli.reasoning import Tracker
from llmcli.tools.grammar import CallWatch

MIN_PREFILL_SAMPLE = 32  # prefill batches smaller than this say little about thread speed

# What the step returns: the text to show and whether a stop string ended the answer; None for an
# end-of-generation token (it shows nothing and ends the answer).
Fed = tuple[str, bool] | None


class Runner(Protocol):
    """What a request uses of the engine that runs it (`LlamaEngine`)."""

    cache: KVCache
    tokenizer: Tokenizer
    n_ctx: int
    n_batch: int
    n_vocab: int
    load_ms: float

    @property
    def adaptive(self) -> bool: ...  # a thread policy is fed the measured steps

    def observe(self, phase: str, seconds_per_token: float | None) -> tuple[int, str] | None: ...

    def pin_batch_threads(self) -> None: ...

    def thread_report(self) -> dict: ...

    def reset_perf(self) -> None: ...


class Generation:
    """One request's prefill-then-decode loop; `spec` is its speculative decoding, if any."""

    def __init__(self, engine: Runner, tokens: list[int], params: SamplingParams, seed: int, sampler,
                 abort: AbortFlag, spec: Speculation | None = None, tracker: Tracker | None = None,
                 answer_sampler=None, calls: CallGrammar | None = None,
                 call_sampler=None, media: MediaPrompt | None = None,
                 vision: Vision | None = None) -> None:  # fmt: skip
        self.e = engine
        self.media, self.vision = media, vision  # a prompt with images, and the projector
        self.cache = engine.cache
        self.abort = abort
        self.tokens = tokens
        self.params = params
        self.seed = seed
        self.stats = Stats(prompt_tokens=len(tokens), context_size=engine.n_ctx, load_ms=engine.load_ms)
        self.text = TextStream(params.stop)
        self.generated: list[int] = []
        self.stopped_by_string = False
        self.target_prefill_ms = 0.0  # the target's share of prefill_ms (the draft model's is the rest)
        # A reasoning model's block, watched where a budget or a grammar depends on it; the grammar
        # then lives in `answer_sampler` and applies from the answer's first token
        self.tracker = tracker
        self.answer_sampler = answer_sampler
        # Tool calls: how one opens, and the chain whose grammar is one call's JSON, which samples
        # from a call's opening until its JSON is complete
        self.calls, self.call_sampler = calls, call_sampler
        self.call_may_open = calls is not None and calls.bare  # before the answer's first text
        constrained_now = params.grammar and answer_sampler is None
        self.grammar = GrammarProbe(engine.tokenizer, sampler) if constrained_now else None
        self.ended_by_eog = False
        self.spec = spec
        L = self.cache.L
        # at temperature 0 the chain ends in the greedy sampler: alone, nothing else shapes the pick
        greedy = params.temperature <= 0 and L.llama_sampler_chain_n(sampler) == 1
        self.pick = pick(L, self.cache.ctx, sampler, engine.n_vocab, greedy)
        self.step = self._step()
        if tracker is not None or calls is not None:
            self.in_call = False
            self.pick = self._steered_pick(self.pick, None if greedy else sampler)
            self.step = self._steered_step(self.step)

    def _step(self) -> Callable[[int], Fed]:
        """The one per-token step of both decode loops: record the token, time the first, end on
        EOG, feed the text path, note the grammar; returns what the token showed (`Fed`). A closure
        over what it reads, so that sharing it costs the loops no lookups per token."""
        generated, text, grammar, stats = self.generated, self.text, self.grammar, self.stats
        feed, buf = text.feed, ctypes.create_string_buffer(64)
        token_bytes, vocab = self.e.tokenizer.token_bytes, self.e.tokenizer.handle
        is_eog = self.cache.L.llama_vocab_is_eog

        def step(token: int) -> Fed:
            generated.append(token)
            if len(generated) == 1:
                stats.ttft_ms = (time.perf_counter() - self.started) * 1000
            if is_eog(vocab, token):
                self.ended_by_eog = True
                return None
            fed = feed(token_bytes(token, buf))
            self.stopped_by_string = fed[1]
            if grammar is not None:
                grammar.note(text.decoded_chars, pending_bytes=text.mid_character)
            return fed

        return step

    def _steered_pick(self, free: Callable[[int], int], stateful) -> Callable[[int], int]:
        """The pick of a request whose output is steered: the tokens a spent reasoning budget forces
        (its message and the closing tag, fed to the sampler's state as if sampled), a tool call's
        grammar while the model writes one, the answer's grammar from the answer's first token, the
        free chain while the model reasons."""
        tracker, text, L, ctx, n_vocab = self.tracker, self.text, self.cache.L, self.cache.ctx, self.e.n_vocab
        forced: list[int] = []
        answer = self.answer_sampler
        constrained = pick(L, ctx, answer, n_vocab, False) if answer is not None else None
        call_chain = self.call_sampler
        in_call = pick(L, ctx, call_chain, n_vocab, False) if call_chain is not None else None
        token_bytes = self.e.tokenizer.token_bytes

        def picked(i: int) -> int:
            closing = None if tracker is None or forced else tracker.due(mid_character=text.mid_character)
            if closing:
                forced.extend(self.e.tokenizer.tokenize(closing, special=True, add_bos=False))
            if forced:
                token = forced.pop(0)
                if stateful is not None:
                    L.llama_sampler_accept(stateful, token)
                return token
            if in_call is not None:
                if self.in_call:
                    return in_call(i)
                if self.call_may_open and (tracker is None or tracker.answering):
                    token = free(i)  # an answer that opens with bare JSON is a call: the call's grammar
                    if token_bytes(token).decode("utf-8", "replace").lstrip().startswith("{"):
                        L.llama_sampler_reset(call_chain)
                        self.in_call = True
                        return in_call(i)
                    return token
            if constrained is None or tracker is None:
                return free(i)
            if tracker.answering:
                return constrained(i)
            token = free(i)  # at the start, an answer begun without a block is the grammar's
            if tracker.splitter.would_answer(token_bytes(token).decode("utf-8", "replace")):
                return constrained(i)
            return token

        return picked

    def _steered_step(self, step: Callable[[int], Fed]) -> Callable[[int], Fed]:
        """The per-token step, with the reasoning block and tool calls watched: the answer's grammar
        probe starts where the answer does; a call's grammar from its opening to its complete JSON."""
        tracker, text, calls = self.tracker, self.text, self.calls
        grammar_waits = self.answer_sampler is not None
        L = self.cache.L
        call_chain = self.call_sampler
        call_probe = None
        if call_chain is not None:
            call_probe = GrammarProbe(self.e.tokenizer, call_chain, note_start=False)
        watch = CallWatch(calls.trigger) if calls is not None else None

        def steered(token: int) -> Fed:
            nonlocal grammar_waits
            fed = step(token)
            if fed is None:
                return fed
            if tracker is not None:
                tracker.feed(text.last)
                if grammar_waits and tracker.answering:
                    grammar_waits = False
                    self.grammar = GrammarProbe(self.e.tokenizer, self.answer_sampler, note_start=False)
                if self.grammar is not None and self.answer_sampler is not None:
                    self.grammar.note(text.decoded_chars, pending_bytes=text.mid_character)
            if call_probe is not None and watch is not None and (tracker is None or tracker.answering):
                if (
                    self.call_may_open
                    and text.last.strip()
                    and (tracker is None or tracker.splitter.state == "answer")
                ):
                    self.call_may_open = False  # the answer began with text: a bare call no longer opens
                if self.in_call:  # the call's JSON is complete where its grammar would end
                    if not text.mid_character and call_probe.complete_now():
                        self.in_call = False
                else:
                    if watch.feed(text.last):  # the call's opening: its JSON is the grammar's
                        L.llama_sampler_reset(call_chain)
                        self.in_call = True
            return fed

        return steered

    def run(self) -> Iterator[Event]:
        cache = self.cache
        self.started = time.perf_counter()
        self.e.reset_perf()
        reason = yield from self.prefill()
        cache.synchronize()
        self.stats.prefill_ms = self.target_prefill_ms = cache.perf_ms()
        if reason is None and self.spec is not None:
            if not self.spec.prefill_draft() and self.abort.is_set():
                reason = "interrupted"
            self.stats.prefill_ms += self.spec.draft_prefill_ms
        if reason is None:
            reason = yield from (self.decode_loop() if self.spec is None else self.decode_loop_spec())
        yield from self.finish(reason)

    def prefill(self) -> Generator[Event, None, FinishReason | None]:
        """Evaluate the prompt past the reused prefix in n_batch batches (an image's positions
        through the projector); returns None when done."""
        e, cache, stats = self.e, self.cache, self.stats
        start = cache.reuse_prefix(self.tokens)
        span = self.media.span_at(start) if self.media is not None else None
        if span is not None and start > span.start:  # the cache holds part of an image: redo it
            cache.trim(span.start)
            start = span.start
        stats.cached_tokens = start
        todo = self.tokens[start:]
        stats.prefill_tokens = len(todo)
        self.prefill_done = 0
        yield PrefillProgress(0, len(todo), 0.0)
        if e.adaptive and len(todo) > 1 and (changed := e.observe("prefill", None)):
            yield ThreadsChanged("prefill", *changed)
        for piece in self._pieces(start):
            if isinstance(piece, Span):  # the readout shows the encoding as its own phase
                yield self._image_progress(len(todo), encoding=piece.end - piece.start)
                self._image(piece)
                self.prefill_done += piece.end - piece.start
                yield self._image_progress(len(todo))
                continue
            reason = yield from self._prefill_text(piece, start, len(todo))
            if reason is not None:
                return reason
        if self.media is not None:
            self._note_cached_images(start)
        return None

    def _pieces(self, start: int) -> list[list[int] | Span]:
        """The prompt past `start`: runs of text tokens and the image spans between them."""
        if self.media is None:
            return [self.tokens[start:]]
        pieces: list[list[int] | Span] = []
        at = start
        for span in self.media.spans:
            if span.start < start:
                continue
            if span.start > at:
                pieces.append(self.tokens[at : span.start])
            pieces.append(span)
            at = span.end
        if at < len(self.tokens):
            pieces.append(self.tokens[at:])
        return pieces

    def _image_progress(self, total: int, encoding: int = 0) -> PrefillProgress:
        elapsed = (time.perf_counter() - self.started) * 1000
        return PrefillProgress(self.prefill_done, total, elapsed, encoding, self.stats.image_tokens,
                               self.stats.image_ms)  # fmt: skip

    def _image(self, span: Span) -> None:
        """Encode one image and put its embeddings in the cache at the end of it."""
        assert self.vision is not None and self.media is not None
        cache = self.cache
        ms = self.vision.evaluate(cache.ctx, span, len(cache.tokens), self.e.n_batch)
        cache.tokens.extend(self.tokens[span.start : span.end])
        n = span.end - span.start
        self.stats.image_ms += ms
        self.stats.image_tokens += n
        self.stats.images.append(_attachment(span, n, round(ms, 3), cached=False))

    def _note_cached_images(self, start: int) -> None:
        """Images the cache already held: counted, not encoded again."""
        assert self.media is not None
        for span in self.media.spans:
            if span.end <= start:
                n = span.end - span.start
                self.stats.image_tokens += n
                self.stats.images.append(_attachment(span, n, 0.0, cached=True))
        order = {span.image.sha256: i for i, span in enumerate(self.media.spans)}
        self.stats.images.sort(key=lambda a: order.get(a["sha256"], 0))

    def _prefill_text(
        self, todo: list[int], start: int, total: int
    ) -> Generator[Event, None, FinishReason | None]:
        e, cache, stats = self.e, self.cache, self.stats
        for i in range(0, len(todo), e.n_batch):
            chunk = todo[i : i + e.n_batch]
            started = time.perf_counter()
            rc = cache.decode(chunk)
            if rc == 0 and e.adaptive and len(chunk) >= MIN_PREFILL_SAMPLE:
                changed = e.observe("prefill", (time.perf_counter() - started) / len(chunk))
                if changed:
                    yield ThreadsChanged("prefill", *changed)
            if rc == 2 or self.abort.is_set():
                cache.sync()
                stats.prefill_tokens = max(0, len(cache.tokens) - start)
                return "interrupted"
            check_decode(rc, len(cache.tokens), e.n_ctx)
            self.prefill_done += len(chunk)
            yield PrefillProgress(self.prefill_done, total, (time.perf_counter() - self.started) * 1000)
        return None

    def decode_loop(self) -> Generator[Event, None, FinishReason]:
        e, cache = self.e, self.cache
        max_tokens = self.params.max_tokens or 1 << 62
        adaptive, n_ctx = e.adaptive, e.n_ctx
        pick, step, generated = self.pick, self.step, self.generated
        cached, decode, interrupted = cache.tokens, cache.decode, self.abort.is_set
        while True:
            token = pick(-1)
            fed = step(token)
            if fed is None:
                stopped = True
            else:
                text, stopped = fed
                yield Token(text, len(generated))
            if len(cached) >= n_ctx:
                return "stop" if stopped else "length"
            started = time.perf_counter()
            rc = decode([token])
            if rc == 2 or interrupted():
                cache.sync()
                return "interrupted"
            check_decode(rc, len(cached), n_ctx)
            if adaptive and (changed := e.observe("decode", time.perf_counter() - started)):
                yield ThreadsChanged("decode", *changed)
            if stopped:
                return "stop"
            if len(generated) >= max_tokens:
                return "length"

    def _take(self, token: int) -> Generator[Event, None, bool]:
        """A token of the speculative loop through the step; its Token carries the running counts
        of drafted and accepted tokens and target passes. Returns whether it ended the answer."""
        spec = self.spec
        assert spec is not None
        fed = self.step(token)
        spec.seen(token)
        if fed is None:
            return True
        text, stopped = fed
        yield Token(text, len(self.generated), spec.drafted, spec.accepted, spec.passes)
        return stopped

    def decode_loop_spec(self) -> Generator[Event, None, FinishReason]:
        """Decode with proposals verified in batches. Invariant at the top of the loop: `pending` is
        the newest sampled token, and the cache holds everything before it.

        Each batch is [pending, d1..dk]. Position i's logits are sampled with the whole chain (so
        grammar, penalties and the random state advance exactly as in plain decoding); d(i+1) is
        kept while it equals that sample, and the first sample that differs (or the one after the
        last draft) becomes the next `pending`. Rejected positions leave the cache (and the draft
        model's, at its next proposal). The answer's end (EOG, a stop string, --max-tokens, a full
        context) is checked after every token exactly as the plain loop does, leaving the cache as
        the plain loop would; Ctrl-C after a batch keeps every token it accepted."""
        e, cache, spec = self.e, self.cache, self.spec
        assert spec is not None
        max_tokens = self.params.max_tokens or 1 << 62
        n_ctx = e.n_ctx
        pick, generated, cached = self.pick, self.generated, cache.tokens
        e.pin_batch_threads()
        pending = pick(-1)
        while True:
            stopped = yield from self._take(pending)
            n = len(cached)  # where `pending` goes
            if n >= n_ctx:
                return "stop" if stopped else "length"
            room = min(max_tokens - len(generated), n_ctx - n) - 1  # drafts that could be used
            draft = [] if stopped or room <= 0 else spec.propose(room)
            started = time.perf_counter()
            if not draft:
                rc = cache.decode([pending])
                if rc == 2 or self.abort.is_set():
                    cache.sync()
                    return "interrupted"
                check_decode(rc, len(cached), n_ctx)
                # not shown to the thread policy: decode keeps one thread count while speculating, so
                # that the text does not depend on the machine's load (engine/llama.py)
                spec.measured(1, time.perf_counter() - started)
                if stopped:
                    return "stop"
                if len(generated) >= max_tokens:
                    return "length"
                pending = pick(-1)
                continue
            rc = cache.decode_all([pending, *draft])
            if rc == 2:
                cache.sync()
                cache.trim(n + 1)
                return "interrupted"
            check_decode(rc, len(cached), n_ctx)
            spec.measured(len(draft) + 1, time.perf_counter() - started)
            spec.drafted += len(draft)
            accepted = 0
            end: FinishReason | None = None
            for i, proposed in enumerate(draft):
                sample = pick(i)
                if sample != proposed:
                    pending = sample
                    break
                accepted += 1
                spec.accepted += 1
                stopped = yield from self._take(sample)
                if n + 1 + i >= n_ctx:  # the plain loop would not have evaluated this token
                    cache.trim(n + 1 + i)
                    end = "stop" if stopped else "length"
                elif stopped:
                    end = "stop"
                elif len(generated) >= max_tokens:
                    end = "length"
                if end is not None:
                    break
            else:
                pending = pick(len(draft))
            spec.verified(len(draft), accepted)
            if end is not None:
                cache.trim(n + 1 + accepted)
                return end
            cache.trim(n + 1 + accepted)
            if self.abort.is_set():
                return "interrupted"

    def finish(self, reason: FinishReason) -> Iterator[Event]:
        if tail := self.text.finish(self.stopped_by_string):  # held back, never became a stop string
            yield Token(tail, len(self.generated))
        e, cache, stats = self.e, self.cache, self.stats
        cache.synchronize()
        stats.completion_tokens = len(self.generated)
        stats.decode_tokens = max(0, len(cache.tokens) - stats.cached_tokens - stats.prefill_tokens)
        stats.decode_ms = max(0.0, cache.perf_ms() - self.target_prefill_ms)
        stats.total_ms = (time.perf_counter() - self.started) * 1000
        stats.context_used = len(cache.tokens)
        stats.threads = e.thread_report()
        if self.spec is not None:
            stats.decode_ms += self.spec.draft_ms() - self.spec.draft_prefill_ms
            self.spec.report(stats)
        text = self.text.text
        complete = None
        if self.grammar is not None:  # EOG is sampled only where the grammar accepts
            complete = self.ended_by_eog or self.grammar.accepted_at(len(text))
        elif self.params.grammar:  # the answer, and so the grammar, never began
            complete = False
        yield Done(text, reason, stats, self.seed, list(self.generated), complete)


def _attachment(span: Span, tokens: int, encode_ms: float, cached: bool) -> dict:
    image = span.image
    return {"name": image.name, "media_type": image.media_type, "bytes": image.size,
            "sha256": image.sha256, "width": image.width, "height": image.height,
            "tokens": tokens, "encode_ms": encode_ms, "cached": cached}  # fmt: skip
