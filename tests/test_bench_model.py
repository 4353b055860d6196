"""`llmcli bench` on the real Gemma 3 270M through llama.cpp, with tiny sizes (speed is not asserted)."""

from __future__ import annotations

import _thread
import json
import random
import threading
import time

import pytest
from helpers import run

pytestmark = pytest.mark.model


def _bench(*args: str) -> dict:
    if "-m" not in args:
        args = ("-m", "gemma3-270m", *args)  # Gemma, the larger model, unless a test names another
    result = run("bench", "-t", "1", "-r", "1", "-o", "json", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_pp_and_tg_on_gemma():
    doc = _bench("-p", "16", "-n", "4", "-r", "2")
    pp, tg = doc["results"]
    assert (pp["test"], tg["test"]) == ("pp16", "tg4")
    assert all(v > 0 for r in (pp, tg) for v in r["samples_ts"]) and len(tg["samples_ns"]) == 2
    assert pp["model_type"] == "gemma3 270M Q4_K_M" and pp["model_quantization"] == "Q4_K_M"
    assert pp["model_n_params"] == 268_098_176 and pp["model_size"] == 246_587_904
    assert tg["weight_bytes_per_token"] == 246_587_904  # tied embeddings: the whole table is read
    assert tg["effective_gbps"] > 0 and pp["effective_gbps"] is None
    assert pp["n_gpu_layers_offloaded"] == 0 or doc["environment"]["backends"] != "CPU"
    env = doc["environment"]
    assert env["build_commit"] and env["llama_cpp_python_version"] and env["system_info"].startswith("CPU")
    assert env["cpu_info"] and env["backends"]


def test_depth_pg_flash_attention_and_quantized_cache():
    doc = _bench("-p", "0", "-n", "0", "-pg", "8,2", "-d", "0,24", "-fa", "1", "-ctk", "q8_0", "-ctv", "q8_0")
    assert [r["test"] for r in doc["results"]] == ["pp8+tg2", "pp8+tg2 @ d24"]
    assert all(r["type_v"] == "q8_0" and r["flash_attn"] is True for r in doc["results"])


def test_both_weight_layouts_load_and_measure():
    """`--repack 0,1` loads the model in each layout. On a build that would hand repacked weights to
    llama.cpp's AMX kernels (which crash the first multi-token batch on some hosts) only one-token
    decodes run repacked."""
    from llmcli.engine.backend import amx_weights

    sizes = ("-p", "0", "-n", "2") if amx_weights() else ("-p", "8", "-n", "2")
    doc = _bench("-m", "smollm2-135m", *sizes, "--repack", "0,1")
    layouts = [r["repack"] for r in doc["results"]]
    half = len(layouts) // 2
    assert half and layouts == [False] * half + [True] * half
    assert all(v > 0 for r in doc["results"] for v in r["samples_ts"])
    assert doc["environment"]["weight_repack"] is (not amx_weights())


def test_depth_is_trimmed_with_seq_rm():
    from llmcli.bench.llama_backend import LlamaBackend
    from llmcli.bench.sweep import ContextSpec, TestSpec
    from llmcli.hub.default_model import model_path

    backend = LlamaBackend()
    model = backend.load(backend.inspect(str(model_path()), "gemma3-270m"), 0)
    context = model.new_context(ContextSpec(1, 64, 64, False), 256)
    rng = random.Random(0)
    try:
        context.set_depth(20, rng)
        context.run(context.prepare(TestSpec(8, 2), rng))
        assert context.n_cached == 30
        assert context.ctx.pos_max() == 29
        context.set_depth(20, rng)
        assert context.ctx.pos_max() == 19
        context.set_depth(0, rng)
        assert context.ctx.pos_max() == -1
    finally:
        context.close()
        model.close()


def test_chat_scenario_through_the_real_template():
    doc = _bench("--scenario", "chat", "-n", "4", "--no-warmup")
    rows = doc["results"]
    assert [(r["cache"], r["turn"]) for r in rows] == [
        (m, t) for m in ("reuse", "fresh") for t in (1, 2, 3, 4)
    ]
    reuse, fresh = rows[:4], rows[4:]
    assert all(r["samples_ttft_ns"][0] > 0 for r in rows)
    assert all(r["cached_tokens"] == [0] for r in fresh)
    assert all(r["cached_tokens"][0] > 0 for r in reuse[1:])
    assert all(r["prompt_tokens"][0] > 20 for r in rows)


def test_ctrl_c_aborts_a_long_prefill():
    from llmcli.bench import run as session
    from llmcli.bench.llama_backend import LlamaBackend
    from llmcli.bench.sweep import Sweep

    backend = LlamaBackend()
    request = session.Request(Sweep(n_prompt=[2048], n_gen=[0], threads=[1], n_batch=[2048]), reps=5)
    plan = session.plan(request, backend)
    threading.Timer(1.0, _thread.interrupt_main).start()
    started = time.perf_counter()
    result = session.execute(request, plan, backend)
    assert result.interrupted and not result.complete and result.results == []
    assert time.perf_counter() - started < 10  # a full run would take far longer on two cores


def test_spec_scenario_on_smollm2_drafts_on_the_copy_prompt():
    """Prompt lookup on the built-in copy prompt: drafting happens with any batch size
    (--spec-exact 0), the plain case drafts nothing, and with --spec-exact 1 the greedy text is
    the plain text. Properties only, no speeds. k is fixed (--no-spec-adaptive): an adaptive k
    follows costs measured on this machine, and on a loaded one may rightly choose not to draft."""
    doc = _bench("-m", "smollm2-135m", "--scenario", "spec", "-n", "24", "--no-warmup",
                 "--spec-draft-n-max", "4", "--spec-exact", "0,1", "--no-spec-adaptive")  # fmt: skip
    rows = {r["test"]: r for r in doc["results"]}
    assert list(rows) == ["spec plain tg24", "spec lookup k=4 fixed tg24", "spec lookup k=4 fixed exact tg24"]
    plain, fast, exact = rows.values()
    assert plain["drafted"] == [0] and plain["accepted"] == [0] and plain["spec_type"] == "none"
    assert fast["drafted"][0] > 0
    for r in (fast, exact):
        assert 0 <= r["accepted"][0] <= r["drafted"][0]
        assert r["acceptance"] is None or 0.0 <= r["acceptance"] <= 1.0
        assert r["target_passes"][0] >= 1 and r["tokens_per_pass"] >= 1.0
        assert r["vs_plain"] is not None and r["vs_plain"] > 0
    assert sum(fast["k_chosen"].values()) >= 1
    # --spec-exact drafts only where this CPU's batched kernels were probed bit-identical: on some
    # (seen on an AVX2 AMD EPYC, one thread) no batch of two is, in a context this short
    assert exact["exact_positions"]["short"] >= 1 and exact["text_matches_plain"] is True
    if exact["exact_positions"]["short"] > 1:
        assert sum(exact["k_chosen"].values()) >= 1
    else:
        assert exact["drafted"] == [0] and exact["k_chosen"] == {}
    assert all(r["prompt_format"] == "template" and r["prompt_tokens"][0] > 50 for r in rows.values())
    assert all(1 <= r["completion_tokens"][0] <= 24 and r["samples_ts"] for r in rows.values())


@pytest.mark.parametrize("scenario", [["-p", "512"], ["--scenario", "spec"]])
def test_a_context_larger_than_memory_is_refused_with_the_numbers_before_loading(scenario):
    """The real backend's check reads the header (no model is loaded): a KV cache of 50M tokens
    is about 1 TB for SmolLM2, far beyond any test machine's free memory."""
    result = run("bench", "-m", "smollm2-135m", *scenario, "-n", "16", "-r", "1", "--ctx-size", "50000000")
    assert result.exit_code == 1, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("llmcli: not enough memory: ") and "KV cache for 50000000 tokens" in line
    assert "GiB is available" in line and "--ctx-size" in line and "--force" in line
    assert result.stdout == ""
