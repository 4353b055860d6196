"""The batch decoder's KV streams on the real model (SmolLM2), in process: a sequence that moves to a
lower slot when the items run out (engine/batched.py `_compact`) carries its cells with it, and a
sequence that copies another's prefix from its stream (`_copy`) gets that prefix and nothing past
it. Each is compared with the same run where nothing moves: one sequence decoding alone computes
the same batch shapes in any slot, so its tokens must be the same."""

from __future__ import annotations

import pytest

from llmcli.contract import EngineOptions, SamplingParams

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def engine():
    from llmcli.engine.llama import LlamaEngine
    from llmcli.hub.default_model import model_path

    engine = LlamaEngine(model_path("smollm2-135m"), EngineOptions(ctx_size=512, threads=2))
    yield engine
    engine.close()


def _run(engine, items, parallel: int, monkeypatch=None, traced=False):
    from llmcli.engine.batched import BatchDecoder

    decoder = BatchDecoder(engine, parallel, ctx_per_seq=256)
    decoder.trace = [] if traced else None
    try:
        results = {r.key: r.done for r in decoder.run(items)}
    finally:
        decoder.close()
    return results, decoder


def _items(engine, caps):
    from llmcli.engine.batched import BatchItem

    prompts = ["The history of the lighthouse begins", "A recipe for bread needs flour, water and"]
    out = []
    for i, cap in enumerate(caps):
        tokens = engine.tokenize(prompts[i % 2], special=False, add_bos=True)
        out.append(BatchItem(i, tokens, SamplingParams(temperature=0, max_tokens=cap, seed=1), past_eog=True))
    return out


def test_a_sequence_moved_to_a_free_slot_keeps_its_cells(engine, monkeypatch):
    from llmcli.engine import batched

    # the short one (slot 0) ends after 2 tokens: the long one (slot 1) then decodes alone, moved
    # to slot 0, or left in slot 1 when moving is switched off
    moved, decoder = _run(engine, _items(engine, [2, 40]), 2, traced=True)
    monkeypatch.setattr(batched.BatchDecoder, "_compact", lambda self, active, free: None)
    stayed, _ = _run(engine, _items(engine, [2, 40]), 2)
    assert len(moved[1].tokens) == 40
    assert moved[1].tokens == stayed[1].tokens
    assert moved[1].text == stayed[1].text and moved[1].text.strip()
    # the steps after the short one ended decoded the long one alone
    assert [n for _, n, prompt in decoder.trace if prompt == 0][-1] == 1


def test_a_copied_prefix_is_the_prefix_and_nothing_past_it(engine):
    from llmcli.engine.batched import BatchDecoder, BatchItem

    shared = engine.tokenize("Once upon a time, in a small village by the sea, there lived an old "
                             "fisherman who", special=False, add_bos=True)  # fmt: skip
    a = shared + engine.tokenize(" loved the morning tide", special=False)
    b = shared + engine.tokenize(" feared the storms", special=False)
    params = SamplingParams(temperature=0, max_tokens=16, seed=1)
    decoder = BatchDecoder(engine, 2, ctx_per_seq=256)
    try:
        items = [BatchItem("a", a, params), BatchItem("b", b, params)]
        together = {r.key: r.done for r in decoder.run(items)}
        assert decoder.reused_tokens >= len(shared) - 1  # b took a's prefix from a's stream
    finally:
        decoder.close()
    alone = {}
    for key, tokens in (("a", a), ("b", b)):
        decoder = BatchDecoder(engine, 2, ctx_per_seq=256)
        try:
            alone.update({r.key: r.done for r in decoder.run([BatchItem(key, tokens, params)])})
        finally:
            decoder.close()
    # the same prompt cells, whichever way they came: each answer reads as its own prompt asks;
    # batch shapes differ (two sequences against one), so the texts are compared by their start
    for key in ("a", "b"):
        assert together[key].text.strip() and alone[key].text.strip()
        assert together[key].tokens[:3] == alone[key].tokens[:3]


def test_the_memory_check_counts_a_stream_as_llama_cpp_sizes_it(monkeypatch):
    """A sequence's stream holds its context rounded up to 256 cells: `batch_room` counts those, so a
    short per-sequence context does not promise room for more sequences than llama.cpp can make."""
    from llmcli import gguf_file, loader
    from llmcli.engine.batched import stream_cells
    from llmcli.hub import fit
    from llmcli.hub.default_model import model_path

    path = model_path("smollm2-135m")
    header = gguf_file.read_header(path)
    gib = 1 << 30
    monkeypatch.setattr(fit, "memory", lambda: fit.Memory(available=2 * gib, total=4 * gib))
    room = loader.batch_room(path, EngineOptions(), 100)
    assert stream_cells(100) == 256 and stream_cells(256) == 256 and stream_cells(257) == 512
    assert room == (2 * gib - header.tensor_bytes - (128 << 20)) // header.kv_cache_bytes(256)
    assert room < (2 * gib - header.tensor_bytes - (128 << 20)) // header.kv_cache_bytes(100)
