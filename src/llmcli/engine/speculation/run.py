"""One request's speculative decoding: who proposes (prompt lookup, or the draft model), how many
tokens (the adaptive k policy, `proposal.py`), and the counts the readout and the record show.
Verifying the proposals is decoding, and lives with the decode loop (`engine/decoding.py`).

What it reads of the engine is `Speculator`: its speculative options, k policy, draft model, cache,
exactness limits, store of measured batch costs, decode thread count and speculative report.
"""

from __future__ import annotations

import time
from typing import Protocol

from llmcli.contract import SamplingParams, SpecOptions, Stats
from llmcli.engine.kvcache import KVCache
from llmcli.engine.speculation.draft import DraftModel
from llmcli.engine.speculation.exact import EXACT_SHORT_CELLS, CostTable, ExactLimits, MeasuredStore
from llmcli.engine.speculation.proposal import KPolicy, NgramProposer


class Speculator(Protocol):
    """What speculation uses of the engine (`LlamaEngine`)."""

    spec: SpecOptions
    k_policy: KPolicy | None
    draft: DraftModel | None
    cache: KVCache
    exact: ExactLimits
    measured: MeasuredStore
    cost_table: CostTable | None  # the calibrated costs the adaptive policy decides by
    threads: int  # decode's, now

    def spec_report(self) -> dict: ...


class Speculation:
    """One request's speculative decoding: the proposer (prompt lookup or the draft model), the
    adaptive k policy, and the counts the readout and the record show."""

    def __init__(self, engine: Speculator, prompt: list[int], params: SamplingParams | None = None) -> None:
        self.e = engine
        opts = engine.spec
        self.history = list(prompt)  # prompt and answer so far, the newest sampled token last
        self.n_prompt = len(prompt)
        # the target's repetition penalty, which the draft model applies too: a draft that proposes
        # what the target would pick without it is rejected wherever the penalty decides
        self.penalty: tuple[float, int] | None = None
        if params is not None and params.repeat_penalty != 1.0 and params.repeat_last_n > 0:
            self.penalty = (params.repeat_penalty, params.repeat_last_n)
        self.store = engine.measured
        self.exact = engine.exact
        self.cached = engine.cache.tokens  # the target's cache (a list that is never replaced)
        policy = engine.k_policy  # kept across requests: batch costs are the machine's
        assert policy is not None
        self.table = engine.cost_table if opts.adaptive else None
        if self.table is not None:  # decided by costs measured once and stored: reproducible
            policy.table = dict(self.table.costs)
        elif opts.adaptive:  # what this and earlier runs measured, read again for each request
            policy.stored = self.store.batch_costs(engine.threads)
            policy.stored_threads = engine.threads
        self.policy: KPolicy = policy
        self.policy.chosen = {}
        self.policy.shadows = []
        self.lookup = NgramProposer(opts.ngram_max, opts.ngram_min) if opts.kind == "lookup" else None
        if self.lookup is not None:
            self.lookup.extend(prompt)
        self.draft = engine.draft
        self.source: object = None
        self.tail: list[int] = []  # the proposed tokens past the chosen k
        self.drafted = self.accepted = self.passes = 0
        self.exact_blocked = 0  # steps at which --spec-exact allowed no batch at this context length
        self.draft_ctx_blocked = 0  # steps at which the draft model's context could not hold the history
        self.draft_prefill_ms = 0.0
        self.draft_token_s = 0.0  # measured seconds the draft model spends per proposed token

    def prefill_draft(self) -> bool:
        """Evaluate the prompt in the draft model too (counted as prefill). Not where this answer
        can never draft: --spec-exact allows no batch past the short-context limit at any thread
        count the engine may choose, and the context only grows from here; nor where the draft
        model's context cannot hold the prompt (both are counted as blocked steps when decoding).
        False when the draft model's evaluation failed (an interrupt, if the abort flag is set)."""
        if self.draft is None:
            return True
        if not self.draft_can_run():
            return True
        # the whole prompt, in the target's chunks: a target used as its own draft then holds
        # bit-identical keys and values (a chunk of another shape would round apart)
        ok = self.draft.sync(self.history)
        self.draft_prefill_ms = self.draft_ms()
        return ok

    def draft_can_run(self) -> bool:
        """Whether the draft model could still propose in this answer."""
        assert self.draft is not None
        if len(self.history) + self.policy.k_min > self.draft.n_ctx:
            return False
        if not self.exact.exact or len(self.cached) < EXACT_SHORT_CELLS:
            return True
        return self.exact.batches_past_short(self.policy.k_min)

    def draft_ms(self) -> float:
        """The draft model's evaluation time so far."""
        if self.draft is None:
            return 0.0
        return self.draft.perf_ms()

    def seen(self, token: int) -> None:
        self.history.append(token)
        if self.lookup is not None:
            self.lookup.append(token)
        self.policy.emitted(token)

    def propose(self, room: int) -> list[int]:
        policy = self.policy
        exact_top = self.exact.limit(len(self.cached), self.e.threads) - 1
        top = min(policy.k_max, room, exact_top)
        if top < policy.k_min:
            self.exact_blocked += exact_top < policy.k_min <= room
            return []
        if self.lookup is not None:
            tokens, n = self.lookup.propose(top)
            if not tokens:
                return []
            self.source = ("lookup", n)
            k = policy.choose(self.source, len(tokens), watched=True)
            policy.note_choice(k)
            if k == 0:
                policy.watch(self.source, tokens)
            self.tail = tokens[k:] if k else []  # checked after the batch if all k are accepted
            return tokens[:k]
        assert self.draft is not None
        room_draft = self.draft.n_ctx - len(self.history)  # -cd: what the draft's cache can hold
        if room_draft < policy.k_min:
            self.draft_ctx_blocked += 1
            return []
        top = min(top, room_draft)
        self.source = "draft"
        # the draft's cost per proposed token: calibrated (in plain steps) where the policy decides by
        # the table, else as measured in flight
        draft_cost = self.table.draft_step if self.table is not None else self.draft_token_s
        k = policy.choose(self.source, top, draft_cost)
        policy.note_choice(k)
        if k == 0:
            return []
        started = time.perf_counter()
        window: list[int] | None = None
        if self.penalty is not None:  # the target's penalty sampler has seen the answer's tokens only
            window = self.history[self.n_prompt :][-self.penalty[1] :]
        tokens = self.draft.propose(self.history, k, self.e.threads, self.penalty, window)
        if tokens:
            per_token = (time.perf_counter() - started) / len(tokens)
            old = self.draft_token_s
            self.draft_token_s = per_token if old == 0 else 0.8 * old + 0.2 * per_token
        return tokens

    def measured(self, positions: int, seconds: float) -> None:
        self.passes += 1
        self.policy.observe_batch(positions, seconds)

    def verified(self, drafted: int, accepted: int) -> None:
        self.policy.observe_draft(self.source, drafted, accepted)
        if accepted == drafted and self.tail:  # the undrafted rest meets the tokens that follow
            self.policy.watch(self.source, self.tail, offset=drafted)
        self.tail = []

    def threads_changed(self) -> None:
        """Batch costs measured at the old thread count no longer hold."""
        self.remember()  # what was measured at the old count is kept for it
        self.policy.reset_costs(self.store.batch_costs(self.e.threads) if self.policy.adaptive else None)
        self.policy.stored_threads = self.e.threads

    def remember(self) -> None:
        """Store what this request measured, for the thread count it was measured at (not where the
        calibrated table decides: it is measured once, and only read after that)."""
        if self.table is None and self.policy.adaptive and self.policy.stored_threads:
            self.store.add_batch_costs(self.policy.stored_threads, self.policy.remember())

    def report(self, stats: Stats) -> None:
        stats.drafted_tokens, stats.accepted_tokens = self.drafted, self.accepted
        stats.target_passes = self.passes
        stats.speculative = {**self.e.spec_report(), **self.policy.summary()}
        if self.table is not None:
            stats.speculative.update(self.table.report())
        stats.speculative["exact_blocked"] = self.exact_blocked
        if self.draft is not None:
            stats.speculative["draft_ctx_blocked"] = self.draft_ctx_blocked
        self.remember()
