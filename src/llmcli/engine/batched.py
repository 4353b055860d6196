"""Many sequences decoded together: continuous batching in one llama.cpp context.

A second context on a `LlamaEngine`'s model holds up to `parallel` sequences (n_seq_max), each in
its own stream of the KV cache (kv_unified off): a sequence's attention reads its own cells only,
where in one shared cache every sequence's attention would run over all sequences' cells, masked,
so that a step's attention grows with the square of N (llama-batched-bench on SmolLM2, N=64: 300
tok/s in streams, 132 in one cache). Each step is one `llama_batch`: the next token of every sequence
that is decoding, and as much of the waiting prompts as the batch has room for, each token with
its sequence's id. Each sequence samples from its own logits with its own sampler chain (its
temperature, its seed, a grammar or JSON schema if it has one) and goes through `generate`'s
per-token step (engine/batch_seq.py: stop strings, the grammar's completeness); it ends at an
end-of-generation token, a stop string, its `max_tokens` or its share of the context, and its slot
takes the next item at once.

A prompt prefix that sequences share (the chat template's system prompt, a --template's head) is
prefilled once: a new sequence takes the cells of the longest prefix it shares with a sequence that
holds it (`llama_memory_seq_cp` of that sequence's stream, the rest cut), or keeps
that much of what its slot held before (`llama_memory_seq_rm` of the rest), and prefills only its
own suffix. A sequence admitted beside one still prefilling the same long prefix waits a step for it.

At temperature 0 a sequence picks the highest logit, as `generate` does; the logits come from
batched matrix products whose rounding can differ from one sequence's, so two texts agree as long
as no two candidate tokens are within that rounding of each other (docs/BATCH.md).
"""

from __future__ import annotations

import ctypes
import secrets
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

from llmcli import reporting
from llmcli.contract import Answered, Request
from llmcli.engine.batch_seq import BatchItem, BatchResult, Seq, common_prefix
from llmcli.engine.sampler import GrammarProbe, build_chain, penalised, pick
from llmcli.engine.text import TextStream
from llmcli.engine.threads import LoadFollower, physical_cores
from llmcli.errors import LlmcliError, UsageError

# The engine is a LlamaEngine (its model and library handle are used here), named `Any` since it
# imports this module: `LlamaEngine.respond_many`.
LlamaEngine = Any

__all__ = ["BatchDecoder", "BatchItem", "BatchResult", "LocalMany", "measure_knee", "respond_many"]

FOLLOW_EVERY = 8  # steps between two readings of the run queue (adaptive threads)
PROMPTS_FIRST = True  # a step with a prompt to prefill carries no single tokens (`_step`)
WAIT_FOR_PREFIX = 16  # a new sequence waits a step for a sibling prefilling at least this much of its prompt
KV_PAD = 256  # llama.cpp rounds each stream's cells up to a multiple of this


def stream_cells(ctx_per_seq: int) -> int:
    """The cells llama.cpp gives a sequence's stream for `ctx_per_seq` tokens."""
    return -(-max(1, ctx_per_seq) // KV_PAD) * KV_PAD


class BatchDecoder:
    """Up to `parallel` sequences of `engine`'s model in one context of `ctx_per_seq` tokens each."""

    def __init__(self, engine: LlamaEngine, parallel: int, ctx_per_seq: int | None = None) -> None:
        L = self._L = engine._L
        self.engine = engine
        self.parallel = max(1, parallel)
        self.ctx_per_seq = ctx_per_seq or engine.n_ctx
        params = L.llama_context_default_params()
        params.n_ctx = stream_cells(self.ctx_per_seq) * self.parallel
        params.n_batch = params.n_ubatch = max(512, self.parallel)
        params.n_seq_max = self.parallel
        params.kv_unified = False  # a stream of cells per sequence (the module's docstring)
        # -t fixes the threads; else a step of many sequences is compute-bound as a prefill is, and
        # takes prefill's rule (engine/threads.py LoadFollower), the run queue read every few steps
        self._follower = LoadFollower(physical_cores()) if engine.adaptive else None
        self.threads = self._follower.current if self._follower is not None else engine.threads
        params.n_threads = params.n_threads_batch = self.threads
        params.no_perf = True
        if hasattr(params, "n_outputs_max"):
            params.n_outputs_max = self.parallel  # one row of logits per sequence and step
        params.swa_full = engine.options.swa_full
        self._batch: Any = None  # the llama_batch every step fills (allocated once the context is)
        self._ctx = L.llama_init_from_model(engine._model, params)
        if not self._ctx:
            raise LlmcliError(
                f"llama.cpp could not create a context of {params.n_ctx} tokens "
                f"for {self.parallel} sequences",
                hint="try a smaller --parallel or --ctx-size",
            )
        self.n_batch = L.llama_n_batch(self._ctx)
        self._memory = L.llama_get_memory(self._ctx)
        self._buf = ctypes.create_string_buffer(64)
        self._batch = L.llama_batch_init(self.n_batch, 0, 1)  # every step's, allocated once
        self._left: dict[int, list[int]] = {}  # a free slot's cells: the tokens its last sequence left
        self.steps = 0
        self.step_ms = 0.0
        self.prompt_tokens = 0  # prompt tokens of the sequences admitted
        self.reused_tokens = 0  # of those, the ones whose cells came from a shared prefix
        # when a list: (ms, sequences decoding, prompt tokens) of every step, for a benchmark
        self.trace: list[tuple[float, int, int]] | None = None

    def run(self, items: Iterable[BatchItem]) -> Iterator[BatchResult]:
        """Answer `items` (read lazily, as slots free up); each result as its sequence ends."""
        source = iter(items)
        free = list(range(self.parallel - 1, -1, -1))  # the lowest last: taken first
        active: dict[int, Seq] = {}
        exhausted = False
        try:
            while True:
                while free and not exhausted:
                    item = next(source, None)
                    if item is None:
                        exhausted = True
                        break
                    seq, refused = self._admit(item, free[-1], active)
                    if seq is None:
                        yield BatchResult(item.key, None, refused)
                        continue
                    active[free.pop()] = seq
                if not active:
                    return
                if exhausted:
                    self._compact(active, free)
                for seq in self._step(active):
                    del active[seq.seq_id]
                    free.append(seq.seq_id)
                    yield self._finish(seq)
                free.sort(reverse=True)
        finally:
            for seq in active.values():
                self._release(seq, keep=False)

    def _compact(self, active: dict[int, Seq], free: list[int]) -> None:
        """With no items left to fill the slots that free up, move the sequences in the highest slots
        into the lowest free ones (a copy of the stream, before the next decode), so that the ids of
        a step's sequences stay one run: llama.cpp computes a batch over several streams as one
        graph per run of consecutive ids, each reading all the weights, and a batch with gaps
        where sequences ended costs a decode per gap."""
        L, mem = self._L, self._memory
        while free and active and free[-1] < (high := max(active)):
            low = free.pop()
            seq = active.pop(high)
            L.llama_memory_seq_cp(mem, high, low, -1, -1)
            L.llama_memory_seq_rm(mem, high, -1, -1)
            self._left.pop(low, None)
            seq.seq_id = low
            active[low] = seq
            free.append(high)
            free.sort(reverse=True)

    def _decode(self, tokens: list[tuple[int, int, int]], logits_all: bool = False) -> None:
        """Decode (sequence, position, token) triples in batches of n_batch (the probe): logits for
        the last token only, or for every token (`logits_all`: a decode step's row per sequence)."""
        L = self._L
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            batch = L.llama_batch_init(len(chunk), 0, 1)
            try:
                for k, (seq, pos, token) in enumerate(chunk):
                    batch.token[k], batch.pos[k], batch.n_seq_id[k] = token, pos, 1
                    batch.seq_id[k][0] = seq
                    batch.logits[k] = 1 if logits_all or k == len(chunk) - 1 else 0
                batch.n_tokens = len(chunk)
                if L.llama_decode(self._ctx, batch) != 0:
                    raise LlmcliError("llama.cpp could not decode the probe's batch")
            finally:
                L.llama_batch_free(batch)

    def _refusal(self, item: BatchItem) -> str | None:
        if not item.tokens:
            return "the prompt has no tokens"
        if len(item.tokens) >= self.ctx_per_seq:
            return (f"the prompt is {len(item.tokens)} tokens, more than the {self.ctx_per_seq - 1} "
                    "a sequence's context leaves room for")  # fmt: skip
        return None

    def _admit(self, item: BatchItem, seq_id: int, active: dict[int, Seq]) -> tuple[Seq | None, str | None]:
        """A sequence for `item` in slot `seq_id`, its prompt's shared prefix taken (`_share`); or
        None and why the item cannot be answered (its prompt, or a grammar llama.cpp refuses)."""
        refused = self._refusal(item)
        if refused is not None:
            return None, refused
        params = item.params
        seed = params.seed if params.seed is not None else secrets.randbelow(2**32 - 1)
        e = self.engine
        try:
            chain = build_chain(self._L, e.tokenizer, e.n_vocab, params, seed, debug=e._debug)
        except UsageError as exc:
            return None, exc.message
        greedy = params.temperature <= 0 and not params.grammar and not penalised(params)
        probe = GrammarProbe(e.tokenizer, chain) if params.grammar else None
        seq = Seq(item, seq_id, seed, chain, greedy, time.perf_counter(), TextStream(params.stop),
                  pick(self._L, self._ctx, chain, e.n_vocab, greedy), probe)  # fmt: skip
        self._share(seq, active)
        self.prompt_tokens += len(item.tokens)
        return seq, None

    def _share(self, seq: Seq, active: dict[int, Seq]) -> None:
        """Give `seq` the longest prefix of its prompt already in the cache: its slot's own cells,
        or another sequence's (copied now, or once that one has prefilled it); at least the last
        prompt token is prefilled, for its logits."""
        L, mem, tokens = self._L, self._memory, seq.item.tokens
        limit = len(tokens) - 1
        own = common_prefix(self._left.pop(seq.seq_id, []), tokens, limit)
        best, source = own, None
        for other in active.values():
            if other.waiting is None and (n := common_prefix(other.item.tokens, tokens, limit)) > best:
                best, source = n, other
        if source is not None and (source.n_past >= best or best >= WAIT_FOR_PREFIX):
            L.llama_memory_seq_rm(mem, seq.seq_id, -1, -1)
            if source.n_past >= best:
                self._copy(source, seq, best)
            else:
                seq.waiting, seq.share = source, best
            return
        if not L.llama_memory_seq_rm(mem, seq.seq_id, own, -1):  # a cache that cannot cut a sequence
            L.llama_memory_seq_rm(mem, seq.seq_id, -1, -1)
            own = 0
        seq.start_at(own)
        self.reused_tokens += own

    def _copy(self, source: Seq, seq: Seq, n: int) -> None:
        """`seq` takes `source`'s first `n` cells: llama.cpp copies a stream whole (before the next
        decode), and the cells past `n` are cut from the copy."""
        L = self._L
        L.llama_memory_seq_cp(self._memory, source.seq_id, seq.seq_id, -1, -1)
        L.llama_memory_seq_rm(self._memory, seq.seq_id, n, -1)
        seq.start_at(n)
        self.reused_tokens += n

    def _step(self, active: dict[int, Seq]) -> list[Seq]:
        """One decode of every active sequence's next tokens; the sequences that ended."""
        L = self._L
        if self._follower is not None and self.steps % FOLLOW_EVERY == 0:
            if (n := self._follower.begin()) != self.threads:  # the machine got busier or quieter
                self.threads = n
                L.llama_set_n_threads(self._ctx, n, n)
        began = time.perf_counter()
        batch = self._batch
        rows: list[tuple[Seq, int]] = []
        takes: dict[int, int] = {}
        room = self.n_batch
        # Prompts first: while a prompt has tokens to prefill, the step carries those only. llama.cpp
        # splits a batch over several streams into micro-batches that take as many tokens from
        # each sequence (llama_batch_allocr::split_equal), so a decoding sequence's single token
        # beside a prompt's many costs one more pass over the weights. Single tokens (a decoding
        # sequence's, a prompt's last after a copied prefix) go together in the next step.
        prompts = PROMPTS_FIRST and any(len(s.pending) > 1 and s.waiting is None for s in active.values())
        for seq in sorted(active.values(), key=lambda s: len(s.pending)):  # decoding ones first
            if prompts and len(seq.pending) == 1:
                continue
            take = min(len(seq.pending), room)
            if take > 0 and seq.waiting is None:
                takes[seq.seq_id] = take
                room -= take
        k = decoding = 0
        # in the order of the sequences' ids: llama.cpp splits a batch over several streams into
        # runs of consecutive ids, one graph each
        for seq_id in sorted(takes):
            seq, take = active[seq_id], takes[seq_id]
            decoding += bool(seq.out)  # its last token, not its prompt
            for j, token in enumerate(seq.pending[:take]):
                batch.token[k] = token
                batch.pos[k] = seq.n_past + j
                batch.n_seq_id[k] = 1
                batch.seq_id[k][0] = seq.seq_id
                last = j == take - 1 and take == len(seq.pending)
                batch.logits[k] = 1 if last else 0
                if last:
                    rows.append((seq, k))
                k += 1
            seq.cached.extend(seq.pending[:take])
            del seq.pending[:take]
        batch.n_tokens = k
        started = time.perf_counter()
        status = L.llama_decode(self._ctx, batch) if k else 0
        self.step_ms += (time.perf_counter() - started) * 1000
        self.steps += 1
        if status != 0:
            raise LlmcliError(f"llama.cpp could not decode a batch of {k} tokens (status {status})",
                              hint="try a smaller --parallel")  # fmt: skip
        for seq in active.values():  # a shared prefix prefilled this step: copied before anything ends
            if seq.waiting is not None and seq.waiting.n_past >= seq.share:
                self._copy(seq.waiting, seq, seq.share)
        ended = [seq for seq, row in rows if self._sample(seq, row)]
        if self.trace is not None:  # the whole step: the batch, its decode, the sampling
            self.trace.append(((time.perf_counter() - began) * 1000, decoding, k - decoding))
        return ended

    def _sample(self, seq: Seq, row: int) -> bool:
        """Sample `seq`'s next token from batch row `row`; whether the sequence has ended."""
        e = self.engine
        token = seq.pick(row)
        return seq.take(token, e.tokenizer, self._buf, self.ctx_per_seq)

    def _finish(self, seq: Seq) -> BatchResult:
        done = seq.done(self.ctx_per_seq)
        self._release(seq, keep=True)
        return BatchResult(seq.item.key, done)

    def _release(self, seq: Seq, *, keep: bool) -> None:
        """Free `seq`'s sampler; its cells stay for the slot's next sequence (`keep`) or go."""
        if seq.chain is not None:
            self._L.llama_sampler_free(seq.chain)
            seq.chain = None
        if keep:
            self._left[seq.seq_id] = seq.cached
        elif self._memory:
            self._L.llama_memory_seq_rm(self._memory, seq.seq_id, -1, -1)

    def close(self) -> None:
        if self._batch is not None:
            self._L.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            self._L.llama_free(self._ctx)
            self._ctx = None

    def __del__(self) -> None:  # pragma: no cover - best effort
        if sys.is_finalizing():  # the process ends: the system takes the memory back at once
            return
        try:
            self.close()
        except Exception:
            pass


PROBE_SIZES = (1, 2, 4, 8, 16)
PROBE_PREFIX = 16  # tokens each probe sequence holds before its timed steps
PROBE_STEPS = 2  # decode steps timed per size and round
PROBE_ROUNDS = 2  # rounds over all sizes, interleaved: a burst of other work hits every size alike
KNEE = 0.9  # the smallest N whose aggregate speed is within this share of the best measured
PROBE_MORE = (32, 64)  # tried past PROBE_SIZES, each while the last doubling still paid
RISE = 1.1  # "still paid": the aggregate speed of the largest N so far over the one before it, past noise


def measure_knee(engine: LlamaEngine, sizes: tuple[int, ...] = PROBE_SIZES,
                 more: tuple[int, ...] = ()) -> tuple[int, dict[int, float]]:  # fmt: skip
    """The number of sequences past which decoding together stops paying, from measured steps:
    for each size N, the aggregate tokens/s of a decode step of N sequences (each at least
    `PROBE_PREFIX` tokens in, a row of logits per sequence as a real step asks), the fastest of
    `PROBE_STEPS` x `PROBE_ROUNDS` steps, the sizes taken in turn each round; the smallest N within
    `KNEE` of the best. Past the largest of `sizes`, each of `more` (32, 64: as many as the items
    and the memory allow) is measured beside the largest so far while the aggregate speed still
    rises by more than the noise (`RISE`). Returns N and {N: tokens/s}."""
    speeds = _probe(engine, sizes)
    for n in more:
        largest = max(speeds)
        if n <= largest or speeds[largest] < RISE * max(v for k, v in speeds.items() if k < largest):
            break  # the last doubling gained no more than the noise: no further
        pair = _probe(engine, (largest, n))
        speeds[n] = pair[n] * speeds[largest] / pair[largest] if pair[largest] > 0 else 0.0
    return knee_of(speeds), speeds


def knee_of(speeds: dict[int, float]) -> int:
    """The smallest N whose aggregate speed is within `KNEE` of the best."""
    top = max(speeds.values())
    return min(n for n, v in speeds.items() if v >= KNEE * top)


def _probe(engine: LlamaEngine, sizes: tuple[int, ...]) -> dict[int, float]:
    """{N: aggregate decode tokens/s} for each of `sizes`, measured in one probe context."""
    per_seq = PROBE_PREFIX + PROBE_ROUNDS * len(sizes) * PROBE_STEPS + 8
    probe = BatchDecoder(engine, max(sizes), ctx_per_seq=per_seq)
    L = probe._L
    bos = L.llama_vocab_bos(engine._vocab)
    token = bos if bos >= 0 else 0
    fastest = dict.fromkeys(sizes, float("inf"))
    try:
        if probe._memory:
            L.llama_memory_clear(probe._memory, True)
        probe._decode([(0, p, token) for p in range(PROBE_PREFIX)])
        for s in range(1, max(sizes)):  # the others copy its stream
            L.llama_memory_seq_cp(probe._memory, 0, s, -1, -1)
        position = dict.fromkeys(range(max(sizes)), PROBE_PREFIX)
        for _ in range(PROBE_ROUNDS):
            for n in sizes:
                for _ in range(PROBE_STEPS):
                    step = [(s, position[s], token) for s in range(n)]
                    started = time.perf_counter()
                    probe._decode(step, logits_all=True)
                    fastest[n] = min(fastest[n], time.perf_counter() - started)
                    for s in range(n):
                        position[s] += 1
    finally:
        probe.close()
    return {n: (n / t if 0 < t < float("inf") else 0.0) for n, t in fastest.items()}


def respond_many(engine: LlamaEngine, parallel: int | None, items: int, *, room: int | None = None,
                 context: int | None = None) -> LocalMany:  # fmt: skip
    """`LlamaEngine.respond_many`: a batch decoder on `engine`'s model for `items` prompts, with the N
    it runs and how N was chosen (`parallel` None: the knee, `measure_knee`, among sizes up to
    `items`). `room`: how many sequences' KV cache the free memory holds (None: unknown); a set N
    above it is reduced, said once. `context`: tokens a sequence needs at most (None: the engine's
    context), each sequence's share of the decoder's context."""
    room = max(1, room) if room is not None else None
    per_seq = min(context, engine.n_ctx) if context else engine.n_ctx
    if parallel is None:
        def fits(n: int) -> bool:
            return n <= max(1, items) and (room is None or n <= room)

        sizes = tuple(n for n in PROBE_SIZES if fits(n))
        if len(sizes) <= 1:
            parallel, how = 1, "auto: one item" if items <= 1 else "auto: memory for one sequence"
        else:
            more = tuple(n for n in PROBE_MORE if fits(n)) if sizes == PROBE_SIZES else ()
            parallel, how = _auto(engine, sizes, more)
    else:
        how, asked = "set", parallel
        if parallel > max(1, items):  # no more sequences than items: a context sized for those
            parallel, how = max(1, items), f"set, at most the {items} items"
        if room is not None and parallel > room:
            reporting.warn(
                f"--parallel {asked}: the free memory holds the KV cache of {room} sequence(s) of "
                f"{per_seq} tokens: {room} decode together (a smaller --ctx-size leaves room for more)"
            )
            parallel, how = room, f"{how}; reduced to fit the memory"
    decoder, n, how = _made(engine, parallel, how, per_seq)
    return LocalMany(engine, decoder, n, how)


PROBE = (PROBE_PREFIX, PROBE_STEPS, PROBE_ROUNDS, int(KNEE * 100), int(RISE * 100))  # in the store's key


def _auto(engine: LlamaEngine, sizes: tuple[int, ...], more: tuple[int, ...]) -> tuple[int, str]:
    """`--parallel auto`'s N and how it was found: the knee of the speeds an earlier run measured on
    this CPU, model, llama.cpp build and settings (engine/speculation/exact.py `MeasuredStore`,
    under the cache dir's `batch-knee/`), else measured now (`measure_knee`, 1-8 s), and stored
    where the machine was quiet throughout: speeds measured beside another busy process would pick
    N for that moment, and every later run would keep it (`cpu_load.NOISY`: other processes used at
    most a tenth of the CPU)."""
    store = getattr(engine, "measured", None)
    threads = physical_cores() if getattr(engine, "adaptive", False) else getattr(engine, "threads", 0)
    stored = store.knee_speeds(threads, sizes, more, PROBE) if store is not None else None
    if stored is not None:
        return knee_of(stored), f"auto: tok/s by N {_shown(stored)}, measured by an earlier run here"
    from llmcli.engine import cpu_load

    before = cpu_load.snapshot()
    chosen, speeds = measure_knee(engine, sizes, more)
    others = cpu_load.other_share(before, cpu_load.snapshot())
    if store is not None and others is not None and others <= cpu_load.NOISY:
        store.save_knee_speeds(threads, sizes, more, PROBE, speeds)
    return chosen, f"auto: measured tok/s by N {_shown(speeds)}"


def _shown(speeds: dict[int, float]) -> str:
    return ", ".join(f"{n}: {v:.0f}" for n, v in speeds.items())


def _made(engine: LlamaEngine, parallel: int, how: str,
          per_seq: int | None = None) -> tuple[BatchDecoder, int, str]:  # fmt: skip
    """The decoder of `parallel` sequences, or of fewer where llama.cpp cannot make that context
    (halved until it can, said once)."""
    asked = parallel
    while True:
        try:
            decoder = BatchDecoder(engine, parallel, ctx_per_seq=per_seq)
            break
        except LlmcliError:
            if parallel == 1:
                raise
            parallel //= 2  # a context of N sequences that llama.cpp cannot make: fewer, said once
    if parallel != asked:
        reporting.warn(f"no context for {asked} sequences of {decoder.ctx_per_seq} tokens here: {parallel} "
                       "decode together (a smaller --ctx-size leaves room for more)")  # fmt: skip
        how = f"{how}; reduced from {asked}"
    return decoder, parallel, how


class LocalMany:
    """`Engine.respond_many` of a llama.cpp engine: every request rendered as `respond` renders it
    (`local.prompt_tokens`: the template, the system prompt, raw text, a grammar or JSON schema)
    and decoded as a sequence of the batch decoder's context. A request with images goes through
    the engine's own `respond` (its projector's chunks need the engine's context), one at a time."""

    def __init__(self, engine: LlamaEngine, decoder: BatchDecoder, n: int, how: str) -> None:
        self.engine, self.decoder, self.n, self.how = engine, decoder, n, how

    def respond(self, requests: Iterable[tuple[object, Request]]) -> Iterator[Answered]:
        from collections import deque

        from llmcli.engine import local
        from llmcli.many import answer

        started: dict[int, tuple[object, Request, str]] = {}
        ready: deque[Answered] = deque()  # answered before or beside the decoder: refused, images

        def feed() -> Iterator[BatchItem]:
            for i, (key, request) in enumerate(requests):
                if request.images or request.history_images:
                    ready.append(Answered(key, request, *answer(self.engine, request)))
                    continue
                try:
                    request.params.validate()
                    tokens, prepared = local.prompt_tokens(self.engine, request)
                except LlmcliError as exc:
                    ready.append(Answered(key, request, None, None, exc.message))
                    continue
                started[i] = (key, request, prepared.prompt_format)
                yield BatchItem(i, tokens, request.params)

        for result in self.decoder.run(feed()):
            while ready:
                yield ready.popleft()
            assert isinstance(result.key, int)
            key, request, fmt = started.pop(result.key)
            yield Answered(key, request, result.done, fmt, result.error)
        while ready:
            yield ready.popleft()

    def close(self) -> None:
        self.decoder.close()
