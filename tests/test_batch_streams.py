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


def test_a_copied_prefix_is_the_prefix_and_nothing_past_it(engine, monkeypatch):
    """The second sequence takes the first's prompt prefix from its stream: right after the copy
    it holds positions 0 to n-1 of the prefix and nothing past them (the first sequence's own
    tokens cut), and the first keeps all of its cells. Positions, not texts: a batch of two rounds
    differently from one, so texts are compared only where the shapes are the same."""
    from llmcli.engine import batched
    from llmcli.engine.batched import BatchDecoder, BatchItem

    shared = engine.tokenize("Once upon a time, in a small village by the sea, there lived an old "
                             "fisherman who", special=False, add_bos=True)  # fmt: skip
    a = shared + engine.tokenize(" loved the morning tide", special=False)
    b = shared + engine.tokenize(" feared the storms", special=False)
    params = SamplingParams(temperature=0, max_tokens=16, seed=1)
    seen = []
    copy = batched.BatchDecoder._copy

    def watched(self, source, seq, n):
        copy(self, source, seq, n)
        L, mem = self._L, self._memory
        own = (L.llama_memory_seq_pos_min(mem, seq.seq_id), L.llama_memory_seq_pos_max(mem, seq.seq_id))
        seen.append((n, source.n_past, *own, L.llama_memory_seq_pos_max(mem, source.seq_id)))

    monkeypatch.setattr(batched.BatchDecoder, "_copy", watched)
    decoder = BatchDecoder(engine, 2, ctx_per_seq=256)
    try:
        items = [BatchItem("a", a, params), BatchItem("b", b, params)]
        together = {r.key: r.done for r in decoder.run(items)}
    finally:
        decoder.close()
    assert len(seen) == 1
    n, source_past, low, high, source_high = seen[0]
    assert n >= len(shared) - 1 and source_past > n  # the first had prefilled past the prefix
    assert (low, high) == (0, n - 1)  # the prefix, and nothing of the first sequence's own tokens
    assert source_high == source_past - 1  # the first keeps all of its cells
    assert together["a"].text.strip() and together["b"].text.strip()
    assert together["b"].stats.cached_tokens == n and together["b"].stats.prefill_tokens == len(b) - n


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
