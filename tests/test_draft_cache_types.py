"""-ctkd/--cache-type-k-draft and -ctvd/--cache-type-v-draft: the draft model's KV cache types.

By default the draft's cache takes the target's types (a draft that rounds as the target does
proposes what the target samples); these set them apart, as llama.cpp's tools do."""

from __future__ import annotations

import json

import pytest
from helpers import bench_in, run

from llmcli import defaults
from llmcli.contract import EngineOptions, SpecOptions


@pytest.fixture
def draft(tmp_path):
    path = tmp_path / "draft.gguf"
    path.write_bytes(b"GGUF")
    return str(path)


def test_the_draft_follows_the_targets_types_unless_told_otherwise():
    spec = SpecOptions(kind="draft", model_draft="d")
    assert EngineOptions(speculative=spec).draft_cache_types() == ("f16", "f16")
    assert EngineOptions(type_k="q8_0", type_v="q4_0", speculative=spec).draft_cache_types() == (
        "q8_0",
        "q4_0",
    )
    apart = SpecOptions(kind="draft", model_draft="d", type_k_draft="f16", type_v_draft="q5_1")
    assert EngineOptions(type_k="q8_0", type_v="q8_0", speculative=apart).draft_cache_types() == (
        "f16",
        "q5_1",
    )


@pytest.mark.parametrize("command", ["generate", "chat"])
def test_the_flags_reach_the_engine_lowercased(fake, draft, command):
    args = ("hi",) if command == "generate" else ()
    result = run(command, *args, "-md", draft, "-ctk", "q8_0", "-ctkd", "F16", "--cache-type-v-draft", "Q4_0",
                 input="/bye\n")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    options = fake.made[0].options
    assert (options.speculative.type_k_draft, options.speculative.type_v_draft) == ("f16", "q4_0")
    assert options.draft_cache_types() == ("f16", "q4_0")  # an explicit f16 over the target's q8_0


def test_environment_and_config(fake, draft, isolated, monkeypatch):
    (isolated / "config.toml").write_text('cache_type_k_draft = "Q8_0"\n')
    assert run("generate", "hi", "-md", draft).exit_code == 0
    assert fake.made[-1].options.speculative.type_k_draft == "q8_0"
    monkeypatch.setenv("LLMCLI_CACHE_TYPE_V_DRAFT", "q5_0")
    assert run("generate", "hi", "-md", draft, "-ctkd", "bf16").exit_code == 0
    spec = fake.made[-1].options.speculative
    assert (spec.type_k_draft, spec.type_v_draft) == ("bf16", "q5_0")
    # exported for every run: no error where no draft model runs
    result = run("generate", "hi", "--spec-type", "lookup")
    assert result.exit_code == 0, result.stderr


def test_the_json_record_names_the_drafts_types(fake, draft):
    result = run("generate", "hi", "-md", draft, "-ctkd", "q8_0", "--json")
    assert result.exit_code == 0, result.stderr
    speculative = json.loads(result.stdout)["speculative"]
    assert speculative["cache_type_k_draft"] == "q8_0" and speculative["cache_type_v_draft"] is None


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (("-ctkd", "q8_0"), {}, "-ngld, -cd, -ctkd and -ctvd set up the draft model"),
        (("-md", "{draft}", "-ctkd", "q9"), {}, "-ctkd/--cache-type-k-draft: unknown KV cache type 'q9'"),
        (
            ("-md", "{draft}"),
            {"LLMCLI_CACHE_TYPE_V_DRAFT": "x"},
            "$LLMCLI_CACHE_TYPE_V_DRAFT: unknown KV cache",
        ),
        (("-md", "{draft}", "-ctvd", "q8_0", "-nfa"), {}, "a quantized V cache (q8_0) needs flash attention"),
    ],
)
def test_bad_input_is_one_line_and_nothing_loads(fake, draft, monkeypatch, args, env, words):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = run("generate", "hi", *(a.format(draft=draft) for a in args))
    assert result.exit_code == 2
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == "" and fake.made == []


def test_a_float_draft_v_cache_needs_no_flash_attention(fake, draft):
    assert run("generate", "hi", "-md", draft, "-ctvd", "f32", "-nfa").exit_code == 0
    assert fake.made[0].options.speculative.type_v_draft == "f32"


def test_chat_set_reloads_with_the_drafts_types_and_target_follows_again(fake, draft):
    lines = [f"/set model-draft {draft}", "first", "/set cache-type-k-draft Q8_0",
             "/set cache-type-v-draft q9", "/set", "/set cache-type-k-draft target", "second"]  # fmt: skip
    result = run("chat", input="".join(line + "\n" for line in lines))
    assert result.exit_code == 0, result.stderr
    # the draft's types are not the target's: the target's cache goes with the reload
    kept = fake.made[1].cached_tokens
    assert f"cache-type-k-draft = q8_0 (model reloaded; its KV cache of {kept} tokens kept)" in result.stderr
    assert "cache-type-v-draft: unknown KV cache type 'q9'" in result.stderr
    assert "  cache-type-k-draft = q8_0" in result.stderr and "  cache-type-v-draft = target" in result.stderr
    assert (
        f"cache-type-k-draft = target (model reloaded; its KV cache of {kept} tokens kept)" in result.stderr
    )
    assert len(fake.made) == 4  # the start, /set model-draft and two reloads (the refused one loads nothing)
    assert fake.made[2].options.speculative.type_k_draft == "q8_0"
    last = fake.made[-1]
    assert last.options.speculative.type_k_draft is None and last.options.speculative.model_draft
    assert "first" in last.history[-1].prompt and "second" in last.history[-1].prompt


def test_chat_show_names_the_drafts_types(fake, draft):
    k = defaults.SPEC_DRAFT_N_MAX
    result = run("chat", "-md", draft, "-ctk", "q8_0", input="/show\n/set cache-type-v-draft f32\n/show\n")
    assert result.exit_code == 0, result.stderr
    assert f"speculative draft, k up to {k}; draft {draft}, kv cache K q8_0, V f16" in result.stderr
    assert f"speculative draft, k up to {k}; draft {draft}, kv cache K q8_0, V f32" in result.stderr


def test_chat_set_refuses_a_quantized_draft_v_cache_without_flash_attention(fake, draft):
    result = run("chat", "-nfa", "-md", draft, input="/set cache-type-v-draft q8_0\nhello\n")
    assert result.exit_code == 0 and "Traceback" not in result.stderr
    assert "a quantized V cache (q8_0) needs flash attention" in result.stderr
    assert len(fake.made) == 1 and fake.made[0].history


def test_memory_fit_counts_the_drafts_cache_at_its_own_types(monkeypatch, tmp_path):
    """-ctkd/-ctvd f32 doubles the draft's cache over the target's f16: counted, so refused here."""
    from dataclasses import dataclass

    from llmcli import loader
    from llmcli.errors import ResourceError
    from llmcli.hub import fit

    gib = 1 << 30

    @dataclass
    class Header:
        tensor_bytes: int = gib // 2
        n_ctx_train: int = 0

        def kv_cache_bytes(self, n_ctx: int, k_bytes: float = 2.0, v_bytes: float | None = None) -> int:
            return int(n_ctx * 1000 * (k_bytes + (k_bytes if v_bytes is None else v_bytes)) / 4)

    monkeypatch.setattr(fit, "memory", lambda: fit.Memory(available=7 * gib // 2, total=8 * gib))
    monkeypatch.setattr(loader, "_gpu_offload_supported", lambda: False)
    n_ctx = gib // 1000  # 1 GiB of cache at f16
    follows = EngineOptions(
        ctx_size=n_ctx, gpu_layers=0, speculative=SpecOptions(kind="draft", model_draft="d")
    )
    loader.check_memory(tmp_path / "t.gguf", Header(), follows, Header())  # 2 x (0.5 + 1) GiB
    apart = SpecOptions(kind="draft", model_draft="d", type_k_draft="f32", type_v_draft="f32")
    options = EngineOptions(ctx_size=n_ctx, gpu_layers=0, speculative=apart)
    with pytest.raises(ResourceError, match="draft model 2.5 GiB"):
        loader.check_memory(tmp_path / "t.gguf", Header(), options, Header())


# -- bench --scenario spec -----------------------------------------------------------------------


@pytest.fixture
def backend(monkeypatch, tmp_path):
    from benchfake import FakeBackend, FakeClock

    return bench_in(
        tmp_path, monkeypatch, FakeBackend(clock=FakeClock(step_ns=1_000_000)), ("a.gguf", "draft.gguf")
    )


def test_bench_records_the_drafts_types(backend):
    args = ("bench", "--scenario", "spec", "-t", "1", "-n", "6", "-r", "1", "-o", "json", "-md", "draft.gguf")
    result = run(*args, "-ctk", "q8_0", "-ctvd", "F16")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    plain, drafted = doc["results"]
    assert (drafted["type_k_draft"], drafted["type_v_draft"]) == ("q8_0", "f16")  # the target's K, its own V
    assert plain["type_k_draft"] is None
    assert doc["settings"]["sweep"]["type_v_draft"] == "f16"
    assert backend.engines[-1].options.speculative.type_v_draft == "f16"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-ctkd", "q8_0"), "-ngld, -cd, -ctkd and -ctvd set up the draft model"),
        (("-md", "draft.gguf", "-ctkd", "q8_0,f16"), "-ctkd takes one KV cache type, got 'q8_0,f16'"),
        (("-md", "draft.gguf", "-ctvd", "q3"), "-ctvd: unknown KV cache type 'q3'"),
        (("-md", "draft.gguf", "-ctvd", "q8_0", "-fa", "0,1"), "-ctvd q8_0: a quantized V cache needs flash"),
    ],
)
def test_bench_refuses_bad_draft_types_before_anything_runs(backend, args, message):
    result = run("bench", "--scenario", "spec", "-t", "1", "-n", "6", "-r", "1", *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert backend.engines == []


def test_bench_tests_scenario_refuses_the_draft_flags(backend):
    result = run("bench", "-p", "8", "-n", "0", "-ctkd", "q8_0")
    assert result.exit_code == 2 and "only for --scenario spec" in result.stderr
