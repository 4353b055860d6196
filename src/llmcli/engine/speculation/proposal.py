"""Speculative decoding's pure parts: who proposes tokens, and how many to propose.

The target model checks a proposal of k tokens in one batch of k+1 positions. Verification is in
`engine/decoding.py` (lossless: each position is sampled with the full sampler chain and a proposal is
kept only while it equals the sample); this module holds what needs no model:

- `NgramProposer` (prompt lookup): where the last n tokens (n = `ngram_max` down to `ngram_min`)
  occurred before, in the prompt or the answer so far, propose what followed them then. Each token
  is indexed once as it arrives, so a proposal costs a few dictionary look-ups.
- `KPolicy` (adaptive k): from the measured cost of a verification batch of n positions (relative
  to a single decode step) and the running acceptance at each draft position, the k (0 = do not
  draft) that maximises the expected tokens per second; counts decay as the answer goes on, so a
  source that stopped paying is dropped and one that was dropped is tried again later. Batch costs
  are the machine's: the engine stores them (`remember`) and a fresh policy starts from them.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from llmcli import defaults

KINDS = ("none", "lookup", "draft")
# llama.cpp's --spec-type names for the same two proposers, accepted as synonyms.
ALIASES = {"ngram-simple": "lookup", "ngram": "lookup", "draft-simple": "draft", "off": "none"}


def kind_of(name: str) -> str:
    """The proposer kind for a --spec-type value; ValueError naming the choices."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in KINDS:
        choices = ", ".join([*KINDS, *ALIASES])
        raise ValueError(f"--spec-type must be one of {choices}; got {name!r}")
    return key


class NgramProposer:
    """Prompt lookup: propose the tokens that followed the most recent earlier occurrence of the
    longest suffix (`ngram_max` .. `ngram_min` tokens) of everything seen so far. Of the recent
    occurrences of a full-length (`ngram_max`) suffix, one whose context before it matches the
    present's for at least `context_min` tokens, and further than the most recent one's does, is
    taken instead: the answer is copying that stretch (a file quoted twice, a JSON record like an
    earlier one), and the most recent occurrence of a few common tokens may be another place."""

    recent: int = 8  # occurrences of a full-length n-gram compared
    context_min: int = 8  # tokens of matching context that make an older occurrence preferred
    context_max: int = 32  # how far back a context is compared

    def __init__(
        self, ngram_max: int = defaults.SPEC_NGRAM_MAX, ngram_min: int = defaults.SPEC_NGRAM_MIN
    ) -> None:
        self.ngram_max = max(1, ngram_max)
        self.ngram_min = max(1, min(ngram_min, self.ngram_max))
        self.tokens: list[int] = []
        # n-gram -> the position just after its most recent occurrence that has a continuation
        self.index: dict[tuple[int, ...], int] = {}
        # full-length n-gram -> the positions just after its latest `recent` such occurrences
        self.places: dict[tuple[int, ...], list[int]] = {}

    def reset(self, tokens: list[int]) -> None:
        self.tokens = []
        self.index = {}
        self.places = {}
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        for t in tokens:
            self.append(t)

    def append(self, token: int) -> None:
        seq = self.tokens
        seq.append(token)
        end = len(seq) - 1  # `token`'s position: index the n-grams that end just before it
        for n in range(1, self.ngram_max + 1):
            if end - n < 0:
                break
            self.index[tuple(seq[end - n : end])] = end
        if end >= self.ngram_max:
            places = self.places.setdefault(tuple(seq[end - self.ngram_max : end]), [])
            places.append(end)
            if len(places) > self.recent:
                del places[0]

    def truncate(self, length: int) -> None:
        """Forget tokens past `length` (a prompt that diverged); rebuilds the index."""
        if length < len(self.tokens):
            self.reset(self.tokens[:length])

    def propose(self, k: int) -> tuple[list[int], int]:
        """Up to `k` tokens and the length of the n-gram that matched (0: no match, no tokens).
        Where the earlier occurrence is so recent that what followed it runs into the present, the
        answer may be looping with a period shorter than k ("Beta Beta Beta"): once the last three
        periods are the same, the period is carried on to k tokens, as if the proposal's own
        tokens had been accepted. (Carried on after fewer repeats, it guesses wrong in code and
        lists, where a short stretch repeats once and the answer moves on.)"""
        seq = self.tokens
        if k <= 0:
            return [], 0
        for n in range(min(self.ngram_max, len(seq)), self.ngram_min - 1, -1):
            key = tuple(seq[len(seq) - n :])
            pos = self.index.get(key)
            if pos is not None:
                if n == self.ngram_max:
                    pos = self._best_place(key, pos)
                out = seq[pos : pos + k]
                if len(out) < k and self._looping(len(seq) - pos):
                    period = len(seq) - pos
                    while len(out) < k:
                        out.append(out[len(out) - period])
                return out, n
        return [], 0

    def _context(self, pos: int) -> int:
        """How many tokens before the full-length n-gram that ends just before `pos` match those
        before the present's (at most `context_max`)."""
        seq, end = self.tokens, len(self.tokens)
        start = self.ngram_max
        length = 0
        while (
            length < self.context_max
            and pos - start - length - 1 >= 0
            and seq[pos - start - length - 1] == seq[end - start - length - 1]
        ):
            length += 1
        return length

    def _best_place(self, key: tuple[int, ...], latest: int) -> int:
        """Of `key`'s recent places, the one to copy from: `latest` unless another's context
        matches longer, and for at least `context_min` tokens."""
        places = self.places.get(key)
        if not places or len(places) == 1:
            return latest
        best, best_context = latest, self._context(latest)
        for pos in reversed(places):  # the most recent first: it wins ties
            if pos != latest:
                context = self._context(pos)
                if context > best_context:
                    best, best_context = pos, context
        return best if best_context >= self.context_min else latest

    def _looping(self, period: int, repeats: int = 3) -> bool:
        """Whether the last `repeats` stretches of `period` tokens are the same."""
        seq, end = self.tokens, len(self.tokens)
        span = (repeats - 1) * period
        if end < span + period:
            return False
        return all(seq[end - j] == seq[end - j - period] for j in range(1, span + 1))


@dataclass
class _Acceptance:
    """Decaying counts of how often the j-th drafted token was accepted, given the ones before it."""

    tried: list[float]
    kept: list[float]

    @classmethod
    def new(cls, k_max: int) -> _Acceptance:
        return cls([0.0] * k_max, [0.0] * k_max)


@dataclass
class KPolicy:
    """Choose how many tokens to draft, from measured batch costs and acceptance.

    `observe_batch(n, seconds)` records what a target decode of n positions cost (n = 1 is a plain
    step); `observe_draft(source, drafted, accepted)` what a verification gave. `choose(source,
    available, draft_cost)` returns the k in {0} and [k_min, min(k_max, available)] maximising

        E(k) / (t(k + 1) + k * draft_cost),  E(k) = 1 + sum_{j<=k} prod_{i<=j} a_i

    where t(n) is the measured cost of n positions (interpolated linearly between measured sizes,
    a prior slope where only one is known) and a_i the decayed acceptance at draft position i,
    pulled toward `prior` while little is known; a draft only where it is expected to beat a plain
    step by `draft_margin`. With `adaptive` False it always drafts min(k_max, available)."""

    k_max: int = 8
    k_min: int = 1
    adaptive: bool = True
    prior: float = 0.4  # acceptance assumed where nothing is known
    prior_weight: float = 0.5
    prior_slope: float = 0.15  # cost of one more position, relative to one step, before measuring
    decay: float = 0.95  # per emitted token: old evidence fades (half-life about 14 tokens)
    # A source not tried for a while (decayed tries at the first position below this, about 27
    # tokens) is probed with a short draft even when the model says no: a prior that never gets
    # evidence could keep a copying answer from ever being drafted. Not for a `watched` source
    # (prompt lookup): its undrafted proposals are checked anyway, so a probe would buy nothing.
    explore_below: float = 0.25
    explore_k: int = 2
    # A draft model is probed only where a draft accepted at this rate at every position would pay
    # (by the margin): a draft model rarely keeps 90% for long, and each probe after a pause also
    # has it catch up on every token since its last one. Where even that could not pay (on two CPU
    # cores, Qwen2.5-Coder 0.5B drafting for 1.5B: it would need 95% at k of 8 or more), it is not
    # probed at all, and speculation costs next to nothing.
    explore_acceptance: float = 0.9
    # A source expected to give at least this many tokens a pass at the largest k is tried there
    # while that batch size has no measured cost: extrapolating from small batches overestimates
    # big ones (a batch's cost grows less than linearly with its positions). The bar is for a
    # largest k of `explore_long_k` and rises in proportion above it: a miss at k=16 costs about
    # twice as much (in the replay, a fixed bar of 3 had SmolLM2's nothing-to-copy answer try 17
    # positions).
    explore_long_tokens: float = 3.0
    explore_long_k: int = 8
    # Near-ties go to the longer draft: the best k's expected speed is compared with costs of batch
    # sizes measured at different moments and depths, which on a busy machine differ by more than
    # this; a longer draft also keeps measuring acceptance further out.
    prefer_longer: float = 0.08
    # A draft must be expected to beat a plain step by this much: the acceptance it is chosen on is
    # an estimate, chosen because it looks high, so a draft predicted barely to pay loses on average.
    draft_margin: float = 0.03
    cost_window: int = 9  # batches of one size whose median is its cost
    costs: dict[int, float] = field(default_factory=dict)  # positions -> median seconds
    samples: dict[int, deque] = field(default_factory=dict)
    # What earlier runs measured on this machine, model and settings (positions -> cost relative
    # to one step; `remember`): a fresh engine starts from it instead of trying batch sizes blind,
    # and a size measured in this run is a blend that leans on it like `stored_weight` batches.
    # A measurement's weight halves every `stored_half_life` batches since its size last ran: a size
    # measured in a busy moment and never chosen since drifts back to the stored cost, and once it
    # is a near-tie again it is refreshed (without stored costs it would stay dear for good).
    stored: dict[int, float] = field(default_factory=dict)
    stored_weight: float = 2.0
    stored_half_life: float = 64.0
    observed: dict[int, int] = field(default_factory=dict)  # positions -> batches counted
    remembered_at: dict[int, int] = field(default_factory=dict)  # positions -> `observed` when stored
    stored_threads: int = 0  # the thread count `stored` and the measured costs are for
    # The calibrated costs (positions -> cost relative to one step, measured once per machine, build,
    # model and settings, `exact.CostTable`): when set, the policy decides by them alone, never by
    # the batches it times, so that k, and so the text, does not depend on this run's timing.
    table: dict[int, float] = field(default_factory=dict)
    refresh_within: float = 0.8
    refresh_every: int = 16  # batches
    refresh_every_idle: int = 48
    batches: int = 0  # target batches observed
    refreshed_at: int = 0
    measured_at: dict[int, int] = field(default_factory=dict)  # positions -> batch count then
    warmed: set[int] = field(default_factory=set)
    stats: dict[object, _Acceptance] = field(default_factory=dict)
    chosen: dict[int, int] = field(default_factory=dict)  # k -> times chosen (for the record)
    # Free proposals (prompt lookup) that were not drafted are still checked against the tokens
    # that follow, as if they had been: [source, tokens, matched so far], one per plain step.
    shadows: list[list] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.k_max = max(0, self.k_max)
        self.k_min = max(1, min(self.k_min, max(1, self.k_max)))

    # -- evidence ------------------------------------------------------------------------------

    def observe_batch(self, positions: int, seconds: float) -> None:
        """A target decode of `positions` took `seconds`; the first of each size is not counted
        (llama.cpp builds and allocates a graph for a new batch shape). A size's cost is the
        median of its last `cost_window` batches, so one batch that waited for a preempted
        thread does not steer the choice for long. With stored costs to lean on, a size that runs
        again after `stored_half_life` batches starts a new window: its old batches tell of
        another moment of the machine, and the stored cost damps the new one's noise."""
        if positions < 1 or seconds <= 0:
            return
        self.batches += 1
        last = self.measured_at.get(positions, self.batches)
        self.measured_at[positions] = self.batches
        if positions not in self.warmed:
            self.warmed.add(positions)
            return
        window = self.samples.setdefault(positions, deque(maxlen=self.cost_window))
        if self.stored.get(positions) and self.batches - last > self.stored_half_life:
            window.clear()
        window.append(seconds)
        self.costs[positions] = statistics.median(window)
        self.observed[positions] = self.observed.get(positions, 0) + 1

    def reset_costs(self, stored: dict[int, float] | None = None) -> None:
        """Forget every measured batch cost (the thread count changed); `stored`: what earlier runs
        measured at the new settings."""
        self.costs.clear()
        self.samples.clear()
        self.measured_at.clear()
        self.observed.clear()
        self.remembered_at.clear()
        self.stored = dict(stored or {})

    def remember(self) -> dict[int, tuple[float, int]]:
        """What to add to the stored costs: positions -> (cost relative to one step, batches it
        stands for), for each size measured since the last call (a policy kept across requests is
        asked once per request; nothing is counted twice). A ratio stands for no more batches than
        either side of it was measured in: one plain step is a noisy unit."""
        unit = self.costs.get(1)
        if not unit:
            return {}
        steps = len(self.samples.get(1, ()))
        out = {}
        for n, c in self.costs.items():
            new = self.observed.get(n, 0) - self.remembered_at.get(n, 0)
            if n > 1 and new > 0:
                out[n] = (c / unit, min(new, steps, self.cost_window))
                self.remembered_at[n] = self.observed[n]
        return out

    def observe_draft(self, source: object, drafted: int, accepted: int) -> None:
        self._count(source, drafted, accepted)

    def watch(self, source: object, tokens: list[int], offset: int = 0) -> None:
        """A free proposal that is not being drafted: check it against the tokens emitted next, so
        the acceptance evidence stays current while the policy is not drafting (otherwise a few
        misses would stop drafting until a probe, however well the answer starts copying again).
        `offset` > 0 is the undrafted tail of a proposal whose first `offset` tokens were all
        accepted: it counts at draft positions offset+1.., which a shorter k would otherwise never
        see again (one old miss there would keep k short long after the answer settled)."""
        room = self.k_max - offset
        if tokens and room > 0:
            self.shadows.append([source, list(tokens[:room]), 0, offset])

    def emitted(self, token: int) -> None:
        """One token emitted: old evidence fades, and the watched proposals are checked against it,
        each draft position counted as soon as its token is known (a proposal that keeps matching
        is evidence from its first token, not only once all of it has been seen)."""
        self.tokens_emitted(1)
        if not self.shadows:
            return
        still = []
        for shadow in self.shadows:
            source, tokens, matched, offset = shadow
            acc = self._acc(source)
            j = offset + matched  # the draft position this token answers (room was checked)
            acc.tried[j] += 1
            if tokens[matched] != token:
                continue
            acc.kept[j] += 1
            if matched + 1 < len(tokens):
                shadow[2] = matched + 1
                still.append(shadow)
        self.shadows = still

    def _count(self, source: object, drafted: int, accepted: int, offset: int = 0) -> None:
        acc = self._acc(source)
        for j in range(min(drafted, self.k_max - offset)):
            acc.tried[offset + j] += 1
            if j < accepted:
                acc.kept[offset + j] += 1
            else:
                break  # positions after the first miss were never really tried

    def tokens_emitted(self, n: int) -> None:
        """Let old acceptance evidence fade by `n` tokens' worth."""
        f = self.decay**n
        for acc in self.stats.values():
            acc.tried = [x * f for x in acc.tried]
            acc.kept = [x * f for x in acc.kept]

    def _acc(self, source: object) -> _Acceptance:
        if source not in self.stats:
            self.stats[source] = _Acceptance.new(self.k_max)
        return self.stats[source]

    # -- the model -----------------------------------------------------------------------------

    def acceptance(self, source: object) -> list[float]:
        """Per draft position, the chance it is accepted given the ones before it. A position with
        little evidence leans on the one before it (not on the prior): long proposals that are
        accepted early are then tried longer, so the policy can find out they pay."""
        acc = self.stats.get(source) or _Acceptance.new(self.k_max)
        w = self.prior_weight
        rates, prev = [], self.prior
        for tried, kept in zip(acc.tried, acc.kept, strict=True):
            prev = (kept + w * prev) / (tried + w)
            rates.append(prev)
        return rates

    def cost(self, positions: int) -> float:
        """Seconds for a batch of `positions`, relative units where nothing is measured."""
        if self.table:
            return self._table_cost(positions)
        if self.stored:
            return self._cost_with_stored(positions)
        costs = self.costs
        if positions in costs:
            return costs[positions]
        if not costs:
            return 1.0 + self.prior_slope * (positions - 1)
        sizes = sorted(costs)
        if len(sizes) == 1:
            base = costs[sizes[0]] / (1.0 + self.prior_slope * (sizes[0] - 1))
            return base * (1.0 + self.prior_slope * (positions - 1))
        lo = max((s for s in sizes if s < positions), default=None)
        hi = min((s for s in sizes if s > positions), default=None)
        if lo is None or hi is None:  # extrapolate from the two nearest measured sizes
            a, b = (sizes[0], sizes[1]) if lo is None else (sizes[-2], sizes[-1])
        else:
            a, b = lo, hi
        slope = max(0.0, (costs[b] - costs[a]) / (b - a))
        return max(costs[a] + slope * (positions - a), 1e-9)

    def _cost_with_stored(self, positions: int) -> float:
        """`cost` with earlier runs' relative costs: scaled by this run's plain step (or, before
        one is measured, by the sizes that are), each blended with what this run measured."""
        stored, costs = self.stored, self.costs
        if 1 in costs:
            unit = costs[1]
        else:
            scales = [costs[n] / stored[n] for n in costs if stored.get(n)]
            unit = statistics.median(scales) if scales else 1.0
        rel = stored.get(positions)
        if rel is None:
            if positions in costs:
                return costs[positions]
            known = sorted(set(stored) | set(costs))
            lo = max((s for s in known if s < positions), default=None)
            hi = min((s for s in known if s > positions), default=None)
            if hi is None or lo is None:  # outside what is known: the prior slope from the nearest
                near = hi if lo is None else lo
                assert near is not None  # `stored` is not empty
                return max(self.cost(near) + self.prior_slope * unit * (positions - near), 1e-9)
            a, b = self.cost(lo), self.cost(hi)
            return a + (b - a) * (positions - lo) / (hi - lo)
        guess = rel * unit
        if positions not in costs:
            return guess
        age = self.batches - self.measured_at.get(positions, self.batches)
        j = len(self.samples.get(positions, ())) * 0.5 ** (age / self.stored_half_life)
        w = self.stored_weight
        return (j * costs[positions] + w * guess) / (j + w)

    def _table_cost(self, positions: int) -> float:
        """The calibrated cost of `positions` (in plain steps), interpolated between the sizes
        measured, and beyond the largest along the slope of the last two."""
        table = self.table
        if positions in table:
            return table[positions]
        sizes = sorted(table)
        lo = max((s for s in sizes if s < positions), default=None)
        hi = min((s for s in sizes if s > positions), default=None)
        if lo is None:
            return table[sizes[0]]
        if hi is None:
            if len(sizes) < 2:
                return table[lo] + self.prior_slope * (positions - lo)
            a, b = sizes[-2], sizes[-1]
            slope = max(self.prior_slope, (table[b] - table[a]) / (b - a))
            return table[lo] + slope * (positions - lo)
        return table[lo] + (table[hi] - table[lo]) * (positions - lo) / (hi - lo)

    def known_cost(self, positions: int) -> bool:
        """Whether a batch of `positions` has a measured or stored cost (not extrapolated)."""
        if self.table:
            return True
        return positions in self.costs or positions in self.stored

    def expected_tokens(self, rates: list[float], k: int) -> float:
        total, p = 1.0, 1.0
        for a in rates[:k]:
            p *= a
            total += p
        return total

    def choose(self, source: object, available: int, draft_cost: float = 0.0, watched: bool = False) -> int:
        """How many of `available` proposed tokens to verify (0: a plain step). `draft_cost` is
        the seconds a draft model spends per proposed token (0 for prompt lookup); `watched` says
        the proposal is checked with `watch` when it is not drafted."""
        top = min(self.k_max, available)
        if top < self.k_min:
            return 0
        if not self.adaptive:
            return top
        rates = self.acceptance(source)
        unit = self.cost(1)
        speeds = {0: 1.0 / unit}
        for k in range(self.k_min, top + 1):
            speeds[k] = self.expected_tokens(rates, k) / (self.cost(k + 1) + k * draft_cost)
        best_k = max(speeds, key=lambda k: (speeds[k], -k))
        if best_k > 0 and speeds[best_k] < (1 + self.draft_margin) * speeds[0]:
            best_k = 0
        best = speeds[best_k]
        if best_k > 0 and self.prefer_longer > 0:
            best_k = max(k for k in speeds if k > 0 and speeds[k] >= (1 - self.prefer_longer) * best)
        # A near-tie is decided by costs measured long ago when one side is never chosen: a batch
        # size measured while the machine was busy would stay "expensive" for good. Now and then
        # the stalest close candidate (within `refresh_within` of the best) runs instead, at most
        # one such batch in `refresh_every` while drafting; while not drafting the candidate is a
        # draft expected to lose, so only one in `refresh_every_idle`.
        every = self.refresh_every if best_k > 0 else self.refresh_every_idle
        # (calibrated costs are not measured in flight: nothing to refresh)
        if not self.table and self.batches - self.refreshed_at > every:
            floor = self.refresh_within * best
            close = [k for k in speeds if k != best_k and self.known_cost(k + 1) and speeds[k] >= floor]
            stale = min(close, key=lambda k: self.measured_at.get(k + 1, 0), default=None)
            if stale is not None and self.batches - self.measured_at.get(stale + 1, 0) > self.refresh_every:
                self.refreshed_at = self.batches
                return stale
        acc = self._acc(source)
        if best_k == 0 and acc.tried[0] < self.explore_below and not watched:
            # no probe where a draft accepted at `explore_acceptance` could not pay: a draft model
            # too slow next to the target (its cost per token, catching up included, is measured)
            if draft_cost > 0:
                a, bar = self.explore_acceptance, (1 + self.draft_margin) * best
                if all(  # k accepted at `a` each: 1 + a + ... + a^k tokens a pass
                    (1 - a ** (k + 1)) / (1 - a) / (self.cost(k + 1) + k * draft_cost) <= bar
                    for k in range(self.k_min, top + 1)
                ):
                    return 0
            return max(self.k_min, min(top, self.explore_k))
        long_bar = self.explore_long_tokens * max(1.0, top / self.explore_long_k)
        if (
            best_k < top == self.k_max
            and not self.known_cost(top + 1)
            and acc.tried[0] >= 1
            and self.expected_tokens(rates, top) >= long_bar
        ):
            return top
        return best_k

    def note_choice(self, k: int) -> None:
        self.chosen[k] = self.chosen.get(k, 0) + 1

    def summary(self) -> dict:
        unit = self.costs.get(1)
        relative = {str(n): round(c / unit, 3) for n, c in sorted(self.costs.items())} if unit else {}
        return {
            "k_chosen": {str(k): n for k, n in sorted(self.chosen.items())},
            "batch_cost": relative,
            "batch_cost_stored": {str(n): round(r, 3) for n, r in sorted(self.stored.items())},
        }
