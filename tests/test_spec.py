"""Speculative decoding without a model: the proposer, the adaptive k policy (on simulated batch
costs), and the flags, settings, stats, readout and `--json` record on the fake engine."""

from __future__ import annotations

import io
import json
import random

import pytest
from helpers import run

from llmcli.contract import SpecOptions, Stats, Token
from llmcli.engine.speculation.proposal import KPolicy, NgramProposer, kind_of
from llmcli.errors import UsageError

# -- prompt lookup ------------------------------------------------------------------------------


def test_lookup_proposes_what_followed_the_longest_earlier_match():
    p = NgramProposer(ngram_max=3, ngram_min=1)
    p.extend([1, 2, 3, 4, 5, 6, 9, 2, 3])
    tokens, n = p.propose(3)
    assert (tokens, n) == ([4, 5, 6], 2)  # "2 3" matched; "9 2 3" never occurred before
    p.append(4)
    assert p.propose(8) == ([5, 6, 9, 2, 3, 4], 3)  # runs up to the end of what is known


def test_lookup_carries_a_short_loop_on_for_the_whole_draft():
    """A greedy answer stuck in a loop of period 2 ("Beta Beta" is one token repeated, "a b a b"
    two): the most recent occurrence of the last n-gram is a token or two back, so what followed it
    is only that long; once three periods are the same, the proposal continues it up to k."""
    p = NgramProposer(ngram_max=4, ngram_min=1)
    p.extend([9, 1, 2, 1, 2, 1, 2])
    assert p.propose(5) == ([1, 2, 1, 2, 1], 4)
    q = NgramProposer()
    q.extend([3, 7, 7, 7, 7])
    assert q.propose(8) == ([7] * 8, 3)  # "7 7 7" occurred one token back
    r = NgramProposer()
    r.extend([5, 1, 2, 1, 2])  # two periods only: not yet a loop
    assert r.propose(8) == ([1, 2], 2)


def test_lookup_prefers_the_most_recent_occurrence_and_misses_cleanly():
    p = NgramProposer(ngram_max=2, ngram_min=2)
    p.extend([7, 8, 1, 7, 8, 2, 7, 8])
    assert p.propose(1) == ([2], 2)
    q = NgramProposer(ngram_max=3, ngram_min=2)
    q.extend([1, 2, 3, 4])
    assert q.propose(4) == ([], 0)
    assert q.propose(0) == ([], 0)


def test_lookup_follows_the_occurrence_whose_context_matches_longest():
    """An answer copying a stretch of the prompt: the last 4 tokens also occur later in the prompt
    (a common phrase), but only the first place's context matches what the answer has copied, so
    that is where the proposal is taken from. A context shorter than `context_min` does not count."""
    copied = list(range(100, 112))  # 12 tokens of context the answer has copied
    phrase = [1, 2, 3, 4]
    prompt = [7, *copied, *phrase, 50, 51, 52, 9, 9, *phrase, 60, 61, 62]
    p = NgramProposer()
    p.extend([*prompt, 8, *copied, *phrase])
    assert p.propose(3) == ([50, 51, 52], 4)
    q = NgramProposer()
    q.extend([*prompt, 8, *copied[-5:], *phrase])  # 5 tokens of matching context: the latest wins
    assert q.propose(3) == ([60, 61, 62], 4)
    r = NgramProposer()
    r.extend([*prompt, 8, 5, 6, *phrase])  # no context: the most recent place
    assert r.propose(3) == ([60, 61, 62], 4)
    r.truncate(len(prompt))  # the places are rebuilt with the index
    r.extend([8, *copied, *phrase])
    assert r.propose(3) == ([50, 51, 52], 4)


def test_lookup_truncate_forgets_later_tokens():
    p = NgramProposer(ngram_max=2, ngram_min=1)
    p.extend([5, 6, 7, 5])
    assert p.propose(2) == ([6, 7], 1)
    p.truncate(3)
    assert p.tokens == [5, 6, 7] and p.propose(2) == ([], 0)


def test_kind_names_follow_llama_cpp_too():
    assert kind_of("ngram-simple") == "lookup" and kind_of("draft-simple") == "draft"
    assert kind_of("Lookup") == "lookup"
    with pytest.raises(ValueError, match="--spec-type must be one of"):
        kind_of("medusa")


# -- adaptive k on simulated machines ------------------------------------------------------------


def simulate(policy: KPolicy, accept: float, cost_per_position: float, steps: int = 400, seed: int = 0,
             costs: dict[int, float] | None = None):  # fmt: skip
    """Run the policy against a machine where a batch of n positions costs 1 + c*(n-1) (or
    `costs[n]`) and each drafted token is accepted with probability `accept` (given the ones
    before it)."""
    rng = random.Random(seed)
    emitted, seconds, ks = 0, 0.0, []
    for _ in range(steps):
        k = policy.choose("src", policy.k_max)
        ks.append(k)
        cost = costs[k + 1] if costs else 1.0 + cost_per_position * k
        policy.observe_batch(k + 1, cost)
        seconds += cost
        kept = 0
        while kept < k and rng.random() < accept:
            kept += 1
        if k:
            policy.observe_draft("src", k, kept)
        emitted += kept + 1
        policy.tokens_emitted(kept + 1)
    return emitted / seconds, ks


def test_policy_drafts_long_when_proposals_are_accepted_and_batches_cheap():
    speed, ks = simulate(KPolicy(k_max=8), accept=0.95, cost_per_position=0.05)
    assert sum(ks[-100:]) / 100 >= 6
    assert speed > 3.0  # far above plain decoding's 1 token per unit


def test_policy_stops_drafting_when_proposals_miss():
    speed, ks = simulate(KPolicy(k_max=8), accept=0.05, cost_per_position=0.4)
    assert ks[-100:].count(0) >= 85  # mostly plain steps; the rest are re-checks
    assert speed >= 0.9  # re-checking costs little


def test_policy_drafts_short_when_each_position_is_expensive():
    _, ks = simulate(KPolicy(k_max=8), accept=0.6, cost_per_position=0.35)
    tail = ks[-100:]
    assert 0 < sum(tail) / len(tail) <= 3


def test_policy_beats_every_fixed_k_it_could_have_chosen_within_a_margin():
    for accept, cost in ((0.9, 0.1), (0.5, 0.2), (0.2, 0.4)):
        adaptive, _ = simulate(KPolicy(k_max=8), accept, cost)
        best_fixed = max(simulate(KPolicy(k_max=k, k_min=k, adaptive=False), accept, cost)[0]
                         for k in range(1, 9))  # fmt: skip
        plain = 1.0
        assert adaptive >= 0.85 * max(best_fixed, plain), (accept, cost)


GEMMA_LIKE = {1: 1.0, 2: 1.7, 3: 2.3, 4: 2.5, 5: 3.0, 6: 3.5, 7: 4.0, 8: 4.5, 9: 5.1}  # measured shape


def test_policy_finds_long_drafts_pay_after_small_batches_looked_expensive():
    """Gemma 3 on two cores: a batch costs less than linearly more per position, and the first
    measured batch of 3 waited on a preempted thread. Extrapolating from it says never draft; the
    policy must still try the largest k once and learn that it pays."""
    rng = random.Random(3)
    policy = KPolicy(k_max=8)
    policy.observe_batch(1, 1.0)
    policy.observe_batch(1, 1.0)
    policy.observe_batch(3, 2.3)  # graph build: not counted
    policy.observe_batch(3, 6.0)  # the slow one
    emitted, seconds, ks = 0, 0.0, []
    for _ in range(300):
        k = policy.choose("src", 8)
        ks.append(k)
        cost = GEMMA_LIKE[k + 1]
        policy.observe_batch(k + 1, cost)
        seconds += cost
        kept = 0
        while kept < k and rng.random() < 0.95:
            kept += 1
        if k:
            policy.observe_draft("src", k, kept)
        emitted += kept + 1
        policy.tokens_emitted(kept + 1)
    best = max(sum(0.95**j for j in range(k + 1)) / GEMMA_LIKE[k + 1] for k in range(9))  # 1.48, k = 3
    assert ks[-100:].count(0) <= 10
    assert emitted / seconds >= 0.9 * best  # plain decoding is 1 token per unit


def test_policy_checks_free_proposals_it_did_not_draft_and_resumes_drafting():
    """After a run of misses the policy stops drafting; prompt lookup's proposals cost nothing, so
    each one it does not draft is still checked against the tokens that follow. Once the answer
    copies again, drafting resumes within a few tokens, not at the next probe."""
    p = KPolicy(k_max=8)
    for n in (1, 1, 3, 3, 5, 5, 9, 9):
        p.observe_batch(n, {1: 1.0, 3: 2.3, 5: 3.0, 9: 5.1}[n])
    src = ("lookup", 3)
    for _ in range(4):
        p.observe_draft(src, 8, 0)
        p.emitted(0)
    assert p.choose(src, 8) == 0
    text = list(range(100, 200))  # the answer now copies `text`, token by token
    waited = None
    for i in range(40):
        if p.choose(src, 8):
            waited = i
            break
        p.watch(src, text[i : i + 8])
        p.emitted(text[i])
    assert waited is not None and waited <= 12
    # a proposal that misses is counted as a miss at the position where it missed
    q = KPolicy(k_max=8)
    q.watch("s", [1, 2, 3])
    for token in (1, 2, 9):
        q.emitted(token)
    assert q.shadows == []
    assert q.stats["s"].tried[:3] == pytest.approx([1, 1, 1], rel=0.1)
    assert q.stats["s"].kept[:3] == pytest.approx([1, 1, 0], rel=0.1, abs=1e-9)


def test_policy_probes_an_unknown_source_only_when_its_proposals_are_not_watched():
    p = KPolicy(k_max=8)
    for n, c in {1: 1.0, 3: 2.3, 9: 5.1}.items():
        p.observe_batch(n, c)
        p.observe_batch(n, c)
    src = ("lookup", 2)
    for _ in range(3):  # misses long ago: nothing known now, and the prior says do not draft
        p.observe_draft(src, 2, 0)
    p.tokens_emitted(200)
    assert p.choose(src, 8) == p.explore_k  # a draft model's proposals: probed
    assert p.choose(src, 8, watched=True) == 0  # prompt lookup: its proposals are checked anyway


def test_policy_does_not_probe_a_draft_model_that_could_never_pay():
    p = KPolicy(k_max=4)
    for n, c in ((1, 1.0), (1, 1.0), (3, 1.5), (3, 1.5), (5, 2.0), (5, 2.0)):
        p.observe_batch(n, c)
    assert p.choose("draft", 4, draft_cost=0.05) > 0  # a cheap draft: probed (then judged)
    slow = KPolicy(k_max=4, costs=dict(p.costs), warmed=set(p.warmed))
    assert slow.choose("draft", 4, draft_cost=0.95) == 0  # 100% accepted would still lose
    for _ in range(200):
        slow.tokens_emitted(1)
        assert slow.choose("draft", 4, draft_cost=0.95) == 0


def test_policy_refreshes_a_stale_cost_that_decides_a_near_tie():
    """Batches of 9 were measured while the machine was busy, so k=3 looks a little better and
    9 would never run again; the close second is re-run now and then, and the policy moves to the
    k that is really faster."""
    true = {1: 1.0, 2: 1.7, 3: 2.3, 4: 2.5, 5: 3.0, 6: 3.5, 7: 4.0, 8: 4.5, 9: 4.6}
    p = KPolicy(k_max=8)
    for n, c in true.items():
        p.observe_batch(n, c)  # graph builds
        p.observe_batch(n, c if n != 9 else 6.0)  # a busy moment for the batch of 9
    rng = random.Random(5)
    ks = []
    for _ in range(400):
        k = p.choose("src", 8)
        ks.append(k)
        p.observe_batch(k + 1, true[k + 1])
        kept = 0
        while kept < k and rng.random() < 0.97:
            kept += 1
        if k:
            p.observe_draft("src", k, kept)
        p.tokens_emitted(kept + 1)
    assert ks[:20].count(8) < 10  # it started on the stale estimate
    assert ks[-100:].count(8) >= 35  # the rest: k=3 to 7 after a miss deep in a draft (0 without)


def test_policy_checks_the_undrafted_tail_of_a_fully_accepted_draft():
    """Misses at draft position 7 made k=6 the choice; while k stays 6, positions 7 and 8 are
    never drafted again. The proposal's undrafted rest is checked against the tokens that follow
    the batch, so the old miss is outweighed within a few batches and k goes back to 8."""
    costs = {1: 1.0, 7: 4.2, 9: 5.1}
    src = ("lookup", 3)

    def run(watch_tail: bool) -> list[int]:
        p = KPolicy(k_max=8, prefer_longer=0.0)
        for n, c in costs.items():
            p.observe_batch(n, c)
            p.observe_batch(n, c)
        for _ in range(2):  # misses at position 7
            p.observe_draft(src, 8, 6)
            for t in range(7):
                p.emitted(t)
        text = list(range(1000, 1200))  # from now on every proposal is right
        i, ks = 0, []
        for _ in range(12):
            k = p.choose(src, 8)
            ks.append(k)
            proposal = text[i : i + 8]
            for token in proposal[:k]:  # accepted one by one, as the engine does
                p.emitted(token)
            p.observe_draft(src, k, k)
            if watch_tail and k < 8:
                p.watch(src, proposal[k:], offset=k)
            for token in text[i + k : i + k + 1]:  # the token sampled after the draft
                p.emitted(token)
            i += k + 1
        return ks

    without, watched = run(watch_tail=False), run(watch_tail=True)
    assert 8 not in without[:6]  # the premise: only the slow fading of the misses brings k back
    assert 8 in watched[:5] and watched.index(8) + 3 <= without.index(8) and watched[-6:] == [8] * 6
    # the tail's counts land at its own positions
    q = KPolicy(k_max=8)
    q.watch("s", [5, 6, 7], offset=3)
    for token in (5, 6, 9):
        q.emitted(token)
    assert q.stats["s"].tried[:6] == pytest.approx([0, 0, 0, 1, 1, 1], abs=0.1)
    assert q.stats["s"].kept[:6] == pytest.approx([0, 0, 0, 1, 1, 0], abs=0.1)


def test_policy_gives_a_near_tie_to_the_longer_draft_but_not_a_loss():
    p = KPolicy(k_max=8)
    for n, c in {1: 1.0, 7: 4.2, 9: 5.55}.items():  # all accepted: k=6 gives 1.67/unit, k=8 1.62
        p.observe_batch(n, c)
        p.observe_batch(n, c)
    src = "src"
    p.observe_draft(src, 8, 8)
    p.observe_draft(src, 8, 8)
    assert p.choose(src, 8) == 8
    assert KPolicy(k_max=8, prefer_longer=0.0, costs=dict(p.costs), stats=p.stats).choose(src, 8) == 6
    far = KPolicy(k_max=8, costs={1: 1.0, 7: 4.2, 9: 7.0}, stats=p.stats)  # k=8 would lose 23%
    assert far.choose(src, 8) == 6


def test_policy_drafts_only_what_is_expected_to_beat_a_plain_step_by_a_margin():
    """A draft predicted to be barely faster than a plain step is not run: the acceptance behind
    the prediction is an estimate picked because it looked high."""

    def policy(kept: int, margin: float) -> KPolicy:
        p = KPolicy(k_max=1, draft_margin=margin)
        for _ in range(2):
            p.observe_batch(1, 1.0)
            p.observe_batch(2, 1.7)
        for i in range(41):
            p.observe_draft(src, 1, int(i < kept))
        return p

    src = ("lookup", 4)
    barely = policy(30, 0.03)
    assert 1.0 < (1 + barely.acceptance(src)[0]) / 1.7 < 1.03  # 1.6% faster than plain, predicted
    assert barely.choose(src, 1, watched=True) == 0
    assert policy(30, 0.0).choose(src, 1, watched=True) == 1
    clearly = policy(38, 0.03)
    assert (1 + clearly.acceptance(src)[0]) / 1.7 > 1.1
    assert clearly.choose(src, 1, watched=True) == 1


def test_policy_refreshes_rarely_while_not_drafting():
    """Not drafting, the close candidate is a draft expected to lose: it is re-measured once in
    `refresh_every_idle` batches, not once in `refresh_every`."""
    p = KPolicy(k_max=1)
    for _ in range(2):
        p.observe_batch(1, 1.0)
        p.observe_batch(2, 1.7)
    src = ("lookup", 3)
    ks = []
    for i in range(144):  # half accepted: k=1 gives 1.5 tokens for 1.7 steps, 0.88 of plain
        k = p.choose(src, 1, watched=True)
        ks.append(k)
        p.observe_batch(k + 1, 1.7 if k else 1.0)
        p.observe_draft(src, 1, i % 2)  # drafted, or what the watched proposal gave
    refreshes = len(ks) - ks.count(0)
    assert 1 <= refreshes <= len(ks) // p.refresh_every_idle + 1 < len(ks) // p.refresh_every


def test_policy_cost_is_robust_to_one_slow_batch():
    p = KPolicy()
    for seconds in (9.0, 1.0, 1.1, 0.9, 30.0, 1.0):  # the first is the graph build
        p.observe_batch(5, seconds)
    assert p.cost(5) == pytest.approx(1.0)
    p.reset_costs()
    assert p.costs == {} and p.cost(5) == pytest.approx(1.0 + 4 * p.prior_slope)


def test_policy_fixed_k_and_limits():
    p = KPolicy(k_max=4, adaptive=False)
    assert p.choose("x", 10) == 4 and p.choose("x", 2) == 2
    assert KPolicy(k_max=4, k_min=3).choose("x", 2) == 0  # fewer than k_min available
    assert KPolicy(k_max=0).choose("x", 5) == 0


def test_policy_ignores_the_first_batch_of_each_size():
    p = KPolicy()
    p.observe_batch(3, 100.0)  # the graph being built: not counted
    p.observe_batch(3, 1.2)
    assert p.costs[3] == pytest.approx(1.2)


def test_policy_starts_from_stored_costs_scaled_by_this_runs_step_and_blends_what_it_measures():
    p = KPolicy(k_max=8)
    p.stored = {1: 1.0, 5: 3.0, 9: 5.0}
    assert p.cost(9) == pytest.approx(5.0) and p.cost(3) == pytest.approx(2.0)  # relative units
    assert p.known_cost(9) and p.known_cost(5) and not p.known_cost(3)
    for _ in range(4):  # the first is the graph build
        p.observe_batch(1, 0.02)
    assert p.cost(9) == pytest.approx(0.10) and p.cost(7) == pytest.approx(0.08)
    assert p.cost(10) == pytest.approx(0.10 + p.prior_slope * 0.02)  # past what is known
    for seconds in (0.5, 0.06, 0.06):  # this run's batch of 9 costs 3 steps, not 5
        p.observe_batch(9, seconds)
    assert p.cost(9) == pytest.approx((2 * 0.06 + p.stored_weight * 0.10) / (2 + p.stored_weight))
    p.reset_costs({1: 1.0, 9: 4.0})  # another thread count: its own stored costs
    assert p.costs == {} and p.stored == {1: 1.0, 9: 4.0} and p.cost(9) == pytest.approx(4.0)


def test_policy_with_stored_costs_does_not_try_a_batch_they_say_is_too_dear():
    """Without stored costs a fresh policy tries the largest k once while it is unmeasured (small
    batches overestimate big ones); stored costs from an earlier run answer that already."""

    def first_choices(stored):
        p = KPolicy(k_max=8)
        p.stored = dict(stored)
        for _ in range(3):
            p.observe_batch(1, 1.0)
        for _ in range(3):
            p.observe_batch(3, 1.6)
            p.observe_draft("src", 2, 2)
        return p.choose("src", 8)

    assert first_choices({}) == 8
    assert first_choices({1: 1.0, 3: 1.6, 5: 2.2, 9: 12.0}) < 8


def test_policy_with_stored_costs_recovers_from_a_batch_size_measured_in_a_busy_moment():
    """Batches of 8 and 9 measured while the machine was busy look dear; never chosen again, their
    cost would stay so for good (the median holds the old batches). With stored costs to lean on,
    an unused measurement fades toward the stored cost, the size is tried again, and its new
    batches replace the old: the policy ends on the long drafts that pay."""
    cost = {1: 1.0, 2: 1.7, 3: 2.0, 4: 2.4, 5: 3.3, 6: 3.8, 7: 4.2, 8: 4.4, 9: 4.6}

    def run(stored):
        p = KPolicy(k_max=8)
        p.stored = dict(stored)
        for n, seconds in ((1, 1.0), (9, 9.0), (8, 8.0)):
            for _ in range(4):
                p.observe_batch(n, seconds)
        return simulate(p, 0.97, 0.0, steps=300, seed=1, costs=cost)[1]

    assert max(run({})) < 7  # stuck on short drafts
    tail = run(cost)[-100:]
    assert sum(k >= 7 for k in tail) >= 60  # (72: near-ties are refreshed now and then)


def test_policy_remembers_each_batch_once_and_only_with_a_measured_step():
    p = KPolicy(k_max=8)
    for seconds in (1.0, 1.0, 2.0, 2.0):  # size 3: the first is the graph build
        p.observe_batch(3, seconds)
    assert p.remember() == {}  # no plain step measured yet: no unit
    p.observe_batch(1, 0.5)
    p.observe_batch(1, 0.5)
    assert p.remember() == {3: (pytest.approx(4.0), 1)}  # one step: it stands for one batch
    assert p.remember() == {}  # nothing new since
    for _ in range(3):
        p.observe_batch(1, 0.5)
        p.observe_batch(3, 2.0)
    assert p.remember() == {3: (pytest.approx(4.0), 3)}


def test_policy_counts_a_watched_proposal_from_its_first_matching_token():
    """Evidence from a proposal that was not drafted arrives token by token: after two of its
    tokens came true, the first two draft positions are counted accepted, before it ends."""
    p = KPolicy(k_max=8)
    p.watch("src", [5, 6, 7, 8, 9, 10, 11, 12])
    p.emitted(5)
    p.emitted(6)
    acc = p.stats["src"]
    assert acc.tried[0] > 0.8 and acc.kept[0] == acc.tried[0]
    assert acc.tried[1] > 0.9 and acc.kept[1] == acc.tried[1]
    assert acc.tried[2] == 0 and len(p.shadows) == 1
    p.emitted(0)  # a miss at the third position ends it
    assert acc.tried[2] == 1 and acc.kept[2] == 0 and p.shadows == []


def test_spec_options_validate():
    with pytest.raises(UsageError, match="needs a draft model"):
        SpecOptions(kind="draft").validate()
    with pytest.raises(UsageError, match="--spec-draft-n-max"):
        SpecOptions(kind="lookup", draft_max=100).validate()
    with pytest.raises(UsageError, match="--spec-ngram-min"):
        SpecOptions(kind="lookup", ngram_min=4, ngram_max=3).validate()
    SpecOptions(kind="lookup").validate()


# -- the CLI on the fake engine ------------------------------------------------------------------


def test_json_record_carries_the_proposer_and_counts(fake):
    fake_engine_accepts = 2
    result = run("generate", "hello", "--spec-type", "lookup", "--spec-draft-n-max", "4", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    spec = doc["speculative"]
    n = doc["usage"]["completion_tokens"]
    passes = -(-n // (fake_engine_accepts + 1))
    assert spec["type"] == "lookup" and spec["draft_max"] == 4 and spec["adaptive"] is True
    assert spec["ngram_max"] == 4 and spec["exact"] is False
    assert spec["target_passes"] == passes
    assert spec["drafted_tokens"] == 4 * passes and spec["accepted_tokens"] == 2 * passes
    assert spec["acceptance"] == pytest.approx(0.5)
    assert fake.made[0].options.speculative.kind == "lookup"


def test_no_speculation_means_a_null_record_and_no_stats_part(fake):
    doc = json.loads(run("generate", "hello", "--json").stdout)
    assert doc["speculative"] is None
    line = run("generate", "hello", "--stats").stderr
    assert "accepted" not in line and "tok/pass" not in line


def test_stats_line_shows_acceptance_and_tokens_per_pass(fake):
    result = run("generate", "hello", "--spec-type", "lookup", "--stats")
    assert result.exit_code == 0
    assert result.stdout == "echo: hello\n"
    assert "accepted " in result.stderr and " tok/pass" in result.stderr


def test_settings_come_from_env_and_config(fake, isolated, monkeypatch):
    (isolated / "config.toml").write_text('spec_type = "lookup"\nspec_draft_n_max = 5\n')
    assert run("generate", "hi").exit_code == 0
    spec = fake.made[-1].options.speculative
    assert (spec.kind, spec.draft_max) == ("lookup", 5)
    monkeypatch.setenv("LLMCLI_SPEC_DRAFT_N_MAX", "3")
    run("generate", "hi")
    assert fake.made[-1].options.speculative.draft_max == 3
    run("generate", "hi", "--spec-draft-n-max", "2", "--no-spec-adaptive")
    spec = fake.made[-1].options.speculative
    assert spec.draft_max == 2 and spec.adaptive is False
    run("generate", "hi", "--spec-type", "none")
    assert not fake.made[-1].options.speculative.enabled


def test_the_config_file_takes_what_the_flags_take_and_names_its_own_keys(fake, isolated, monkeypatch):
    assert run("config", "set", "spec_type", "off").exit_code == 0  # a --spec-type synonym
    assert run("config", "set", "spec_type", "ngram").exit_code == 0
    refused = run("config", "set", "spec_draft_n_max", "100")  # --spec-draft-n-max's range, 0-64
    assert refused.exit_code != 0 and "spec_draft_n_max must be at most 64" in refused.stderr
    from llmcli import environment

    (isolated / "config.toml").write_text('spec_type = "lookup"\nspec_draft_n_min = 17\n')
    environment.current().settings_cache.clear()  # the file is read once per process
    result = run("generate", "hi")  # above the default n-max, 16: the error says where 17 came from
    assert result.exit_code == 2 and result.stdout == ""
    assert "spec_draft_n_min = 17 in the config file" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    (isolated / "config.toml").write_text('spec_type = "lookup"\n')
    environment.current().settings_cache.clear()
    monkeypatch.setenv("LLMCLI_SPEC_NGRAM_MIN", "9")
    result = run("generate", "hi")
    assert result.exit_code == 2 and "$LLMCLI_SPEC_NGRAM_MIN = 9" in result.stderr
    assert not fake.made


def _config(isolated, text: str) -> None:
    from llmcli import environment

    (isolated / "config.toml").write_text(text)
    environment.current().settings_cache.clear()  # the file is read once per process


def test_config_set_keeps_each_pair_in_order_and_a_hand_made_bad_pair_stops_only_its_users(fake, isolated):
    refused = run("config", "set", "spec_ngram_min", "5")
    assert refused.exit_code != 0 and refused.stdout == ""
    assert "spec_ngram_min = 5 is above spec_ngram_max = 4, its default" in refused.stderr
    assert "set spec_ngram_max first" in refused.stderr
    assert (
        not (isolated / "config.toml").exists()
        or "spec_ngram_min" not in (isolated / "config.toml").read_text()
    )
    assert run("config", "set", "spec_ngram_max", "6").exit_code == 0
    assert run("config", "set", "spec_ngram_min", "5").exit_code == 0
    refused = run("config", "set", "spec_ngram_max", "3")
    assert refused.exit_code != 0
    assert "spec_ngram_max = 3 is below spec_ngram_min = 5 in the config file" in refused.stderr
    assert "spec_ngram_max = 6" in (isolated / "config.toml").read_text()  # unchanged
    refused = run("config", "set", "spec_draft_n_min", "17")  # the default n-max is 16
    assert refused.exit_code != 0 and "spec_draft_n_min = 17 is above spec_draft_n_max = 16" in refused.stderr
    assert run("config", "set", "spec_draft_n_max", "0").exit_code == 0  # 0 (off) keeps n-min 1 valid

    _config(isolated, "spec_ngram_min = 5\nspec_ngram_max = 4\nspec_draft_n_max = 2\nspec_draft_n_min = 3\n")
    assert run("generate", "hi").exit_code == 0  # speculation off: the pairs are not used
    assert not fake.made[-1].options.speculative.enabled
    result = run("generate", "hi", "--spec-type", "lookup")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "in the config file" in result.stderr


def test_a_flag_counts_as_typed_by_where_click_took_it_from(fake, isolated, monkeypatch):
    """An exported draft setting written another way than Click prints it (0512) is still a default,
    no error in a run without a draft model; the same value typed on the command line is typed."""
    monkeypatch.setenv("LLMCLI_CTX_SIZE_DRAFT", "0512")
    monkeypatch.setenv("LLMCLI_GPU_LAYERS_DRAFT", "+3")
    result = run("generate", "hi")
    assert result.exit_code == 0, result.stderr
    result = run("generate", "hi", "-ngld", "3")
    assert result.exit_code == 2 and "-ngld, -cd, -ctkd and -ctvd set up the draft model" in result.stderr


def test_errors_name_the_variable_or_config_key_a_spec_setting_came_from(fake, isolated, monkeypatch):
    monkeypatch.setenv("LLMCLI_SPEC_TYPE", "bogus")
    result = run("generate", "hi")
    assert result.exit_code == 2 and "--spec-type must be one of" in result.stderr
    assert "$LLMCLI_SPEC_TYPE = bogus" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    monkeypatch.delenv("LLMCLI_SPEC_TYPE")
    _config(isolated, 'spec_type = "draft"\n')
    result = run("generate", "hi")
    assert result.exit_code == 2 and "needs a draft model" in result.stderr
    assert 'spec_type = "draft" in the config file' in result.stderr
    _config(isolated, 'model_draft = "nosuchdraft"\n')
    result = run("generate", "hi")
    assert result.exit_code != 0 and "draft model: no model or alias named 'nosuchdraft'" in result.stderr
    assert 'model_draft = "nosuchdraft" in the config file' in result.stderr
    _config(isolated, "")
    monkeypatch.setenv("LLMCLI_MODEL_DRAFT", "otherdraft")
    result = run("generate", "hi")
    assert result.exit_code != 0 and "$LLMCLI_MODEL_DRAFT = otherdraft" in result.stderr
    result = run("generate", "hi", "-md", "typeddraft")  # typed: no hint to look elsewhere
    assert "typeddraft" in result.stderr and "LLMCLI_MODEL_DRAFT" not in result.stderr
    assert not fake.made


def test_the_config_and_environment_take_the_words_the_flags_take(fake, isolated, monkeypatch):
    from llmcli import settings, values

    assert run("config", "set", "spec_type", "LOOKUP").exit_code == 0
    assert 'spec_type = "lookup"' in (isolated / "config.toml").read_text()
    _config(isolated, 'spec_type = "Lookup"\n')
    assert run("generate", "hi").exit_code == 0
    assert fake.made[-1].options.speculative.kind == "lookup"
    for word, value in (("y", True), ("T", True), ("n", False), ("f", False), ("on", True)):
        assert values.parse(settings.SETTINGS["spec_exact"], word, text=True) is value
    monkeypatch.setenv("LLMCLI_SPEC_EXACT", "n")
    shown = run("config", "show")
    assert shown.exit_code == 0, shown.stderr
    monkeypatch.setenv("LLMCLI_SPEC_TYPE", "OFF")
    assert run("generate", "hi").exit_code == 0
    assert not fake.made[-1].options.speculative.enabled


def test_draft_flags_over_configured_and_environment_defaults(fake, isolated, monkeypatch, tmp_path):
    """A configured or exported setting is a default: -md on the command line picks the draft model
    over a configured `spec_type = "lookup"`, and a draft setting exported for every run is no
    error in a run without a draft model."""
    draft = tmp_path / "draft.gguf"
    draft.write_bytes(b"GGUF")
    (isolated / "config.toml").write_text('spec_type = "lookup"\n')
    assert run("generate", "hi", "-md", str(draft)).exit_code == 0
    assert fake.made[-1].options.speculative.kind == "draft"
    monkeypatch.setenv("LLMCLI_GPU_LAYERS_DRAFT", "0")
    monkeypatch.setenv("LLMCLI_MODEL_DRAFT", str(draft))
    result = run("generate", "hi", "--spec-type", "lookup")
    assert result.exit_code == 0, result.stderr
    assert fake.made[-1].options.speculative.kind == "lookup"


def test_model_draft_alone_turns_on_the_draft_model_resolved_like_m(fake, tmp_path):
    draft = tmp_path / "draft.gguf"
    draft.write_bytes(b"GGUF")
    result = run("generate", "hi", "-md", str(draft), "-ngld", "0", "-cd", "512", "--json")
    assert result.exit_code == 0, result.stderr
    spec = fake.made[-1].options.speculative
    assert spec.kind == "draft" and spec.model_draft == str(draft.resolve())
    assert spec.gpu_layers_draft == 0 and spec.ctx_size_draft == 512
    assert json.loads(result.stdout)["speculative"]["model_draft_path"] == str(draft.resolve())


def test_llama_cpp_names_of_the_draft_flags_are_taken(fake, tmp_path):
    """llama.cpp's current names (--spec-draft-model, --spec-draft-ngl, --n-gpu-layers-draft,
    --n-gpu-layers) set the same settings as -md, -ngld and -ngl."""
    draft = tmp_path / "draft.gguf"
    draft.write_bytes(b"GGUF")
    for args, layers in (
        (("--spec-draft-model", str(draft), "--spec-draft-ngl", "2", "--n-gpu-layers", "0"), 2),
        (("--spec-draft-model", str(draft), "--n-gpu-layers-draft", "5"), 5),
    ):
        result = run("generate", "hi", *args)
        assert result.exit_code == 0, result.stderr
        made = fake.made[-1].options
        assert made.speculative.kind == "draft" and made.speculative.model_draft == str(draft.resolve())
        assert made.speculative.gpu_layers_draft == layers
    assert made.gpu_layers is None and fake.made[-2].options.gpu_layers == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (("--spec-type", "medusa"), "--spec-type must be one of"),
        (("--spec-type", "draft"), "needs a draft model"),
        (("--spec-type", "lookup", "--spec-draft-n-max", "99"), "--spec-draft-n-max must be in"),
        (("-md", "/nonexistent/draft.gguf"), "draft model: no such model file: /nonexistent/draft.gguf"),
        (("-md", "nosuchalias"), "draft model: no model or alias named 'nosuchalias'"),
        (
            ("--spec-type", "lookup", "-md", "/some/draft.gguf"),
            "-md/--model-draft is given but --spec-type is lookup",
        ),
        (("-ngld", "3"), "-ngld, -cd, -ctkd and -ctvd set up the draft model"),
        (("--spec-type", "lookup", "-cd", "128"), "-ngld, -cd, -ctkd and -ctvd set up the draft model"),
    ],
)
def test_bad_speculative_input_is_one_line_and_nonzero(fake, args, message):
    result = run("generate", "hi", *args)
    assert result.exit_code != 0
    assert message in result.stderr
    assert result.stdout == ""
    assert not fake.made  # nothing loaded


def test_chat_set_reloads_with_new_speculative_settings_and_keeps_the_conversation(fake):
    lines = ["first", "/set spec-type lookup", "/set spec-draft-n-max 3", "second", "/stats",
             "/set spec-type bogus", "/set spec-type draft", "/set"]  # fmt: skip
    result = run("chat", input="".join(line + "\n" for line in lines))
    assert result.exit_code == 0, result.stderr
    assert "spec-type = lookup (model reloaded; its KV cache of" in result.stderr
    assert "error: spec-type must be one of" in result.stderr and "--spec-type" not in result.stderr
    assert "spec-type draft needs a draft model: /set model-draft REF" in result.stderr
    assert "spec-draft-n-max = 3" in result.stderr
    last = fake.made[-1]
    assert last.options.speculative.kind == "lookup" and last.options.speculative.draft_max == 3
    assert "first" in last.history[-1].prompt  # the conversation went on in the new engine
    assert "speculative: lookup, k up to 3, adaptive" in result.stderr


def test_chat_set_spec_carries_the_kv_cache_to_the_reloaded_model(fake):
    lines = ["first", "/set spec-type lookup", "second", "/set cache-type-k q8_0", "third"]
    result = run("chat", input="".join(line + "\n" for line in lines))
    assert result.exit_code == 0, result.stderr
    start, lookup, q8 = fake.made
    carried = start.cached_tokens
    assert carried > 0 and lookup.restored == [carried]  # the whole first turn, prompt and answer
    assert f"spec-type = lookup (model reloaded; its KV cache of {carried} tokens kept)" in result.stderr
    assert lookup.history[0].cached_tokens == carried  # the second turn prefilled only what is new
    # keys and values of another type are not the same bytes: that reload starts empty
    assert q8.restored == [] and q8.history[0].cached_tokens == 0
    assert "cache-type-k = q8_0 (model reloaded)\n" in result.stderr
    assert "first" in q8.history[0].prompt and "second" in q8.history[0].prompt


def test_chat_model_switch_keeps_the_speculative_settings_set_in_the_session(fake, tmp_path):
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF")
    lines = ["/set spec-type lookup", "/set spec-draft-n-max 4", f"/model {other}", "hello"]
    result = run("chat", input="".join(line + "\n" for line in lines))
    assert result.exit_code == 0, result.stderr
    assert "now using" in result.stderr
    assert len(fake.made) == 4  # the start, two /set reloads, the switch
    last = fake.made[-1]
    assert last.options.speculative.kind == "lookup" and last.options.speculative.draft_max == 4
    assert last.history and "hello" in last.history[-1].prompt
    assert last.restored == []  # another model file: its cache starts empty


def test_chat_set_takes_the_draft_models_offload_and_context_too(fake, tmp_path):
    draft = tmp_path / "draft.gguf"
    draft.write_bytes(b"GGUF")
    lines = [f"/set model-draft {draft}", "/set gpu-layers-draft 0", "/set ctx-size-draft 256",
             "/set ctx-size-draft -5", "/set ctx-size-draft 0", "/set"]  # fmt: skip
    result = run("chat", input="".join(line + "\n" for line in lines))
    assert result.exit_code == 0, result.stderr
    assert "gpu-layers-draft = 0 (model reloaded)" in result.stderr
    assert "ctx-size-draft = 256 (model reloaded)" in result.stderr
    assert "ctx-size-draft must be >= 0" in result.stderr
    spec = fake.made[-1].options.speculative
    assert spec.kind == "draft" and spec.gpu_layers_draft == 0 and spec.ctx_size_draft is None


def test_readout_shows_acceptance_while_streaming():
    from llmcli.repl.readout import LiveReadout

    readout = LiveReadout(io.StringIO(), columns=120, dim=False)
    readout(Token("a", 1))  # from the prompt's pass
    readout(Token("b", 2, drafted=0, accepted=0, passes=1))  # a plain step: one token a pass
    assert "accepted 0/0 · 1.00 tok/pass" in readout.status_text()
    readout(Token("c", 9, drafted=8, accepted=6, passes=3))  # then 8 drafted, 6 kept, in two passes
    status = readout.status_text()
    assert "accepted 6/8 (75%)" in status and "2.67 tok/pass" in status


def test_session_tokens_per_pass_counts_plain_turns_as_one_a_pass():
    from llmcli.render.stats import stats_line
    from llmcli.repl.chat_session import Totals

    totals = Totals()
    totals.add(Stats(decode_tokens=12, completion_tokens=12))  # a plain turn: 12 passes
    assert "tok/pass" not in stats_line(totals.stats)  # nothing speculated yet
    turn = Stats(decode_tokens=10, completion_tokens=10, drafted_tokens=8, accepted_tokens=6, target_passes=4,
                 speculative={"type": "lookup"})  # fmt: skip
    totals.add(turn)
    assert "accepted 6/8 (75%) · 1.38 tok/pass" in stats_line(totals.stats)  # 22 tokens in 16 passes


def test_stats_line_part_from_stats():
    from llmcli.render.stats import stats_line

    s = Stats(decode_tokens=30, completion_tokens=30, drafted_tokens=40, accepted_tokens=20, target_passes=10,
              speculative={"type": "lookup"})  # fmt: skip
    assert "accepted 20/40 (50%) · 3.00 tok/pass" in stats_line(s)


def test_memory_fit_counts_the_draft_model_too(monkeypatch, tmp_path):
    from dataclasses import dataclass

    from llmcli import loader
    from llmcli.contract import EngineOptions
    from llmcli.errors import ResourceError
    from llmcli.hub import fit

    @dataclass
    class Header:
        tensor_bytes: int
        n_ctx_train: int = 2048

        def kv_cache_bytes(
            self, n_ctx: int, type_bytes: float = 2.0, value_type_bytes: float | None = None
        ) -> int:
            return n_ctx * 1000

    gib = 1 << 30
    monkeypatch.setattr(fit, "memory", lambda: fit.Memory(available=3 * gib, total=8 * gib))
    monkeypatch.setattr(loader, "_gpu_offload_supported", lambda: False)
    target, draft = Header(2 * gib), Header(2 * gib)
    opts = EngineOptions(ctx_size=1024, gpu_layers=0, speculative=SpecOptions(kind="draft", model_draft="d"))
    loader.check_memory(tmp_path / "t.gguf", target, opts)  # the target alone fits
    with pytest.raises(ResourceError, match="draft model 2.0 GiB") as caught:
        loader.check_memory(tmp_path / "t.gguf", target, opts, draft)
    assert caught.value.hint.startswith("use a smaller --ctx-size or quantization")
    # a draft context of its own that is the larger part: the hint names -cd
    big = SpecOptions(kind="draft", model_draft="d", ctx_size_draft=4_000_000)
    small, opts = Header(1 << 20), EngineOptions(ctx_size=1024, gpu_layers=0, speculative=big)
    with pytest.raises(ResourceError, match="draft model") as caught:
        loader.check_memory(tmp_path / "t.gguf", small, opts, Header(1 << 20))
    assert caught.value.hint.startswith("use a smaller -cd/--ctx-size-draft or quantization")


def test_memory_fit_counts_the_drafts_cache_at_the_targets_kv_types(monkeypatch, tmp_path):
    """The draft's context takes the target's KV cache types, so a quantized cache that fits for
    both is let through (counting the draft's at f16 would refuse it)."""
    from dataclasses import dataclass

    from llmcli import loader
    from llmcli.contract import EngineOptions
    from llmcli.errors import ResourceError
    from llmcli.gguf_file import KV_TYPE_BYTES
    from llmcli.hub import fit

    gib = 1 << 30

    @dataclass
    class Header:
        tensor_bytes: int = gib
        n_ctx_train: int = 0

        def kv_cache_bytes(
            self, n_ctx: int, type_bytes: float = 2.0, value_type_bytes: float | None = None
        ) -> int:  # 1 GiB at f16 for this context
            per_element = (type_bytes + (type_bytes if value_type_bytes is None else value_type_bytes)) / 4
            return int(n_ctx * 1000 * per_element)

    monkeypatch.setattr(fit, "memory", lambda: fit.Memory(available=3 * gib, total=8 * gib))
    monkeypatch.setattr(loader, "_gpu_offload_supported", lambda: False)
    spec = SpecOptions(kind="draft", model_draft="d")
    n_ctx = gib // 1000
    assert KV_TYPE_BYTES["q4_0"] < 0.6
    quantized = EngineOptions(ctx_size=n_ctx, gpu_layers=0, type_k="q4_0", type_v="q4_0", speculative=spec)
    loader.check_memory(tmp_path / "t.gguf", Header(), quantized, Header())  # 2 GiB + 2 x 0.28 GiB
    f16 = EngineOptions(ctx_size=n_ctx, gpu_layers=0, speculative=spec)
    with pytest.raises(ResourceError, match="draft model 2.0 GiB"):
        loader.check_memory(tmp_path / "t.gguf", Header(), f16, Header())


def test_a_notice_says_when_exactness_left_nothing_to_verify():
    from llmcli.contract import Stats
    from llmcli.request.spec_notices import exact_limit_notice

    settings = {"type": "lookup", "exact": True, "exact_positions": {"short": 3, "long": 1},
                "exact_blocked": 39}  # fmt: skip
    s = Stats(decode_tokens=40, drafted_tokens=0, speculative=settings)
    assert "drafted nothing" in exact_limit_notice(s) and "--no-spec-exact" in exact_limit_notice(s)
    assert exact_limit_notice(Stats(decode_tokens=40, drafted_tokens=12, speculative=settings)) is None
    free = {**settings, "exact": False}
    assert exact_limit_notice(Stats(decode_tokens=40, speculative=free)) is None
    # a short context, where batches were allowed and nothing matched: no notice, whatever the
    # limit at long contexts
    unmatched = {**settings, "exact_blocked": 0}
    assert exact_limit_notice(Stats(decode_tokens=40, speculative=unmatched)) is None
    assert exact_limit_notice(Stats(decode_tokens=40)) is None  # no speculation asked for


def test_the_notice_names_the_bf16_and_q8_0_caches_only_where_they_would_help():
    from llmcli.contract import ModelInfo, Stats
    from llmcli.request.spec_notices import exact_limit_notice

    settings = {"type": "lookup", "exact": True, "exact_positions": {"short": 9, "long": 1},
                "exact_blocked": 39}  # fmt: skip
    s = Stats(decode_tokens=40, speculative=settings)

    def info(k: str, v: str, backend: str = "CPU") -> ModelInfo:
        return ModelInfo("m.gguf", "llama", "Q4_1", 1, 1, 1, 1, 1, None, backend=backend, type_k=k, type_v=v)

    notice = exact_limit_notice(s, info("f16", "f16"))
    assert "a bf16 or q8_0 KV cache (-ctk bf16 -ctv bf16, or q8_0)" in notice
    assert "-ctk bf16" in exact_limit_notice(s, info("f32", "f32"))
    for k, v in (("q8_0", "q8_0"), ("bf16", "bf16")):  # already there: the split is not what blocked it
        assert "-ctk bf16" not in exact_limit_notice(s, info(k, v))
    assert "-ctk bf16" not in exact_limit_notice(s, info("f16", "f16", backend="CUDA"))  # CPU kernels only
    assert "-ctk bf16" not in exact_limit_notice(s)


def _fake_with(monkeypatch, tmp_path, **kwargs):
    from helpers import use_engine

    from llmcli.engine.fake import FakeEngine

    model = tmp_path / "fake.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setenv("LLMCLI_MODEL", str(model))
    return use_engine(FakeEngine.factory(**kwargs))


def test_chat_says_once_when_exactness_left_nothing_to_verify_in_set_words(monkeypatch, tmp_path):
    factory = _fake_with(monkeypatch, tmp_path, replies=["one two three"] * 4, spec_exact_blocked=True)
    result = run("chat", "--spec-type", "lookup", "--spec-exact",
                 input="first\nsecond\n/set spec-draft-n-max 4\nthird\n")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if "speculative decoding drafted nothing" in line]
    assert len(notes) == 2  # once for the first model, once after the reload, not at every turn
    assert "/set spec-exact off verifies in any batch" in notes[0] and "--no-spec-exact" not in notes[0]
    assert "(/set cache-type-k bf16 and /set cache-type-v bf16, or q8_0)" in notes[0]  # the fake is CPU, f16
    assert len(factory.made) == 2


def test_chat_says_nothing_where_exactness_did_not_block(monkeypatch, tmp_path):
    _fake_with(monkeypatch, tmp_path, replies=["one two three"])
    result = run("chat", "--spec-type", "lookup", input="first\n")
    assert result.exit_code == 0, result.stderr
    assert "drafted nothing" not in result.stderr


def test_generate_says_it_in_its_flags_words(monkeypatch, tmp_path):
    _fake_with(monkeypatch, tmp_path, replies=["one two three"], spec_exact_blocked=True)
    result = run("generate", "hi", "--spec-type", "lookup", "--spec-exact")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("one two three")  # the text, on stdout; the note on stderr
    (note,) = [line for line in result.stderr.splitlines() if "drafted nothing" in line]
    assert "--no-spec-exact verifies in any batch" in note and "(-ctk bf16 -ctv bf16, or q8_0)" in note


def _decisions(policy: KPolicy, timings: random.Random) -> list[int]:
    """The k chosen over a fixed sequence of proposals and outcomes, while batches take whatever
    `timings` says (a machine that is busy at random moments)."""
    outcomes = random.Random(3)
    ks = []
    for step in range(300):
        k = policy.choose("src", policy.k_max)
        ks.append(k)
        policy.observe_batch(k + 1, (1.0 + 0.5 * k) * timings.uniform(0.3, 3.0))
        kept = 0
        while kept < k and outcomes.random() < (0.9 if step < 150 else 0.05):  # copying, then not
            kept += 1
        if k:
            policy.observe_draft("src", k, kept)
        policy.tokens_emitted(kept + 1)
    return ks


def test_policy_with_a_calibrated_table_decides_by_it_alone_not_by_this_runs_timing():
    table = {1: 1.0, 2: 1.4, 3: 1.8, 5: 2.6, 9: 4.2, 17: 7.5}
    runs = [_decisions(KPolicy(k_max=16, table=dict(table)), random.Random(seed)) for seed in range(4)]
    assert all(run == runs[0] for run in runs[1:])  # same tokens, same table: the same k every step
    assert sum(runs[0][100:150]) > 200 and runs[0][-50:].count(0) > 40  # it does decide
    # without the table (costs measured in flight) the timings steer it: this test can tell
    live = [_decisions(KPolicy(k_max=16), random.Random(seed)) for seed in range(4)]
    assert any(run != live[0] for run in live[1:])


def test_policy_table_interpolates_between_measured_sizes_and_extends_the_last_slope():
    p = KPolicy(k_max=16, table={1: 1.0, 3: 2.0, 9: 5.0, 17: 9.0})
    assert p.cost(3) == 2.0 and p.cost(2) == pytest.approx(1.5) and p.cost(5) == pytest.approx(3.0)
    assert p.cost(21) == pytest.approx(11.0)
    assert p.known_cost(12)  # nothing is tried just to measure it


def test_policy_with_a_table_does_not_draft_a_draft_model_that_could_never_pay():
    p = KPolicy(k_max=4, table={1: 1.0, 2: 1.6, 3: 2.1, 5: 3.0})
    assert p.choose("draft", 4, draft_cost=0.9) == 0  # every proposal accepted would still lose
    for _ in range(300):
        p.tokens_emitted(1)
        assert p.choose("draft", 4, draft_cost=0.9) == 0
    assert p.choose("draft", 4, draft_cost=0.05) > 0  # a cheap draft is tried


def test_a_draft_model_that_pays_only_at_implausible_acceptance_is_never_probed():
    """The Qwen2.5-Coder pair on two CPU cores, as measured: every proposal accepted at k=16 would
    pay 1.37x, but at 90% acceptance no k pays; no probe is made (each would cost a catch-up of the
    draft), while a draft that pays at 90% is probed."""
    pair = {1: 1.0, 2: 1.533, 3: 1.917, 5: 2.728, 9: 3.601, 13: 3.601, 17: 4.82}
    p = KPolicy(k_max=16, table=dict(pair))
    assert 17 / (p.cost(17) + 16 * 0.477) > 1.3  # perfect acceptance would pay
    for _ in range(500):
        assert p.choose("draft", 16, draft_cost=0.477) == 0
        p.tokens_emitted(1)
    assert KPolicy(k_max=16, table=dict(pair)).choose("draft", 16, draft_cost=0.1) > 0
