"""Flag values to benchmark cases: comma lists, `first-last+step` / `first-last*mult` ranges, cross products.

Every list-valued flag sweeps, and the cases are the cross product of all of them, ordered so that
cases sharing a loaded model and a llama.cpp context are adjacent (model, GPU layers, context
settings, depth, test). Defaults are llama-bench's, so that the same command line measures the same
thing in both tools.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

from llmcli.contract import EngineOptions, SpecOptions
from llmcli.errors import UsageError
from llmcli.gguf_file import v_cache_refused
from llmcli.settings import SETTINGS
from llmcli.values import BOOL_WORDS, dedupe, int_list, items, setting_list, word_list

DEFAULT_N_PROMPT = [512]
DEFAULT_N_GEN = [128]
DEFAULT_DEPTH = [0]
DEFAULT_N_BATCH = [2048]
DEFAULT_N_UBATCH = [512]
DEFAULT_GPU_LAYERS = [99]
DEFAULT_FLASH_ATTN: list[bool | None] = [False]
DEFAULT_CACHE_TYPE = ["f16"]


@dataclass(frozen=True)
class ContextSpec:
    """The llama.cpp context settings of a case (one context serves every case that shares them)."""

    n_threads: int
    n_batch: int
    n_ubatch: int
    flash_attn: bool | None  # None: llama.cpp decides ("auto")
    type_k: str = "f16"
    type_v: str = "f16"
    # weights in llama.cpp's extra (repacked) CPU buffers, as llama-bench's --repack; a model-load
    # setting: the tests scenario loads the model again for each value. None: the build's default
    # (`engine.backend.weight_repack`), resolved by `run.plan` before anything runs.
    repack: bool | None = None

    @property
    def flash_attn_label(self) -> str:
        return {None: "auto", True: "1", False: "0"}[self.flash_attn]

    def engine_options(self, n_gpu_layers: int, ctx_size: int | None,
                       speculative: SpecOptions | None = None) -> EngineOptions:  # fmt: skip
        """The options an engine (or the memory check) gets for a case in this context: bench's one
        engine-options builder, for every scenario. `ctx_size` None: the model's trained context
        (capped, as generate's)."""
        return EngineOptions(
            ctx_size=ctx_size, gpu_layers=n_gpu_layers, threads=self.n_threads, batch_size=self.n_batch,
            ubatch_size=self.n_ubatch, flash_attn=self.flash_attn, type_k=self.type_k, type_v=self.type_v,
            repack=self.repack, speculative=speculative if speculative is not None else SpecOptions(),
        )  # fmt: skip


@dataclass(frozen=True)
class TestSpec:
    """One llama-bench test: a prefill of `n_prompt` tokens, then `n_gen` single-token decodes."""

    n_prompt: int
    n_gen: int
    n_depth: int = 0

    @property
    def n_tokens(self) -> int:
        return self.n_prompt + self.n_gen

    @property
    def kind(self) -> str:
        if self.n_prompt and self.n_gen:
            return "pg"
        return "pp" if self.n_prompt else "tg"

    @property
    def name(self) -> str:
        """llama-bench's test name: pp512, tg128, pp512+tg128, with " @ d4096" at depth."""
        if self.kind == "pg":
            name = f"pp{self.n_prompt}+tg{self.n_gen}"
        else:
            name = f"pp{self.n_prompt}" if self.n_prompt else f"tg{self.n_gen}"
        return f"{name} @ d{self.n_depth}" if self.n_depth else name

    @property
    def context_needed(self) -> int:
        return self.n_depth + self.n_prompt + self.n_gen


@dataclass(frozen=True)
class Case:
    model: str  # the model reference as the user gave it (resolved by the caller)
    n_gpu_layers: int
    context: ContextSpec
    test: TestSpec


@dataclass
class Sweep:
    """Parsed values of every list-valued flag."""

    models: list[str | None] = field(default_factory=lambda: [None])
    n_prompt: list[int] = field(default_factory=lambda: list(DEFAULT_N_PROMPT))
    n_gen: list[int] = field(default_factory=lambda: list(DEFAULT_N_GEN))
    pg: list[tuple[int, int]] = field(default_factory=list)
    depth: list[int] = field(default_factory=lambda: list(DEFAULT_DEPTH))
    threads: list[int] = field(default_factory=lambda: [1])
    gpu_layers: list[int] = field(default_factory=lambda: list(DEFAULT_GPU_LAYERS))
    n_batch: list[int] = field(default_factory=lambda: list(DEFAULT_N_BATCH))
    n_ubatch: list[int] = field(default_factory=lambda: list(DEFAULT_N_UBATCH))
    flash_attn: list[bool | None] = field(default_factory=lambda: list(DEFAULT_FLASH_ATTN))
    type_k: list[str] = field(default_factory=lambda: list(DEFAULT_CACHE_TYPE))
    type_v: list[str] = field(default_factory=lambda: list(DEFAULT_CACHE_TYPE))
    repack: list[bool | None] = field(default_factory=lambda: [None])

    def tests(self) -> list[TestSpec]:
        """The tests at one depth, in llama-bench's order: every pp, every tg, every pg."""
        tests = [TestSpec(p, 0) for p in self.n_prompt if p > 0]
        tests += [TestSpec(0, n) for n in self.n_gen if n > 0]
        tests += [TestSpec(p, n) for p, n in self.pg]
        if not tests:
            raise UsageError(
                "nothing to measure: -p and -n are 0 and there is no -pg",
                hint="give a prompt size (-p 512), a generation length (-n 128) or both (-pg 512,128)",
            )
        return tests

    def contexts(self) -> list[ContextSpec]:
        """Every combination, those of one weight layout adjacent (one model load serves them)."""
        combos = itertools.product(
            self.repack, self.threads, self.n_batch, self.n_ubatch, self.flash_attn, self.type_k, self.type_v
        )
        return dedupe([ContextSpec(t, b, min(ub, b), fa, tk, tv, r) for r, t, b, ub, fa, tk, tv in combos])


def expand(sweep: Sweep) -> list[Case]:
    """The cross product of every flag, adjacent where a model load or a context can be shared.

    `sweep.models` must hold resolved model keys by now. Context settings llama.cpp refuses
    (see `drop_unsupported`) are left out; the caller warns about them.
    """
    tests = sweep.tests()
    contexts, _ = drop_unsupported(sweep.contexts())
    if not contexts:
        raise UsageError("a quantized V cache (-ctv) needs flash attention", hint="add -fa 1")
    cases = []
    for model in sweep.models:
        for ngl in sweep.gpu_layers:
            for context in contexts:
                for depth in sweep.depth:
                    cases += [
                        Case(str(model), ngl, context, TestSpec(t.n_prompt, t.n_gen, depth)) for t in tests
                    ]
    return cases


# -- parsing ---------------------------------------------------------------------------------


def parse_ints(flag: str, values: list[str] | None, default: list[int], *, minimum: int = 0) -> list[int]:
    """`-p 128,256 -p 512-2048*2` -> [128, 256, 512, 1024, 2048]; repeated flags add to the list."""
    if not values:
        return list(default)
    return int_list(flag, values, minimum)


def parse_pairs(flag: str, values: list[str] | None) -> list[tuple[int, int]]:
    """`-pg 512,128 -pg 1024,256` -> [(512, 128), (1024, 256)]; each value is one prompt,gen pair."""
    pairs = []
    for value in values or []:
        parts = [p.strip() for p in value.split(",")]
        if len(parts) != 2 or not all(re.fullmatch(r"-?\d+", p) for p in parts):
            raise UsageError(
                f"{flag}: malformed value {value!r}", hint=f"use {flag} PROMPT,GEN, e.g. {flag} 512,128"
            )
        p, n = int(parts[0]), int(parts[1])
        if p < 1 or n < 1:
            raise UsageError(f"{flag}: both sizes must be >= 1, got {value}")
        pairs.append((p, n))
    return dedupe(pairs)


_FLASH_ATTN: dict[str, bool | None] = {**BOOL_WORDS, "auto": None}  # the config's words, and llama.cpp's auto


def parse_flash_attn(flag: str, values: list[str] | None) -> list[bool | None]:
    if not values:
        return list(DEFAULT_FLASH_ATTN)
    return word_list(flag, values, _FLASH_ATTN, "0, 1 or auto")


def parse_repack(flag: str, values: list[str] | None) -> list[bool | None]:
    """`--repack 0,1` (llama-bench's values, or the config's words); none given: the build's default."""
    if not values:
        return [None]
    return word_list(flag, values, dict(BOOL_WORDS), "0 or 1")


def parse_cache_types(flag: str, values: list[str] | None) -> list[str]:
    """`-ctk q8_0,f16`: KV cache types, parsed as the cache_type_k setting is."""
    if not values:
        return list(DEFAULT_CACHE_TYPE)
    return setting_list(SETTINGS["cache_type_k"], flag, values)


def parse_models(values: list[str] | None) -> list[str | None]:
    """`-m a.gguf,b.gguf -m c.gguf`; no -m means the configured default model."""
    if not values:
        return [None]
    return dedupe(items("-m", values))


def drop_unsupported(contexts: list[ContextSpec]) -> tuple[list[ContextSpec], list[ContextSpec]]:
    """llama.cpp quantizes the V cache only with flash attention: (kept, dropped)."""
    kept = [c for c in contexts if not v_cache_refused(c.type_v, c.flash_attn)]
    return kept, [c for c in contexts if c not in kept]


def answer_settings(sweep: Sweep, scenario: str) -> tuple[list[int], list[ContextSpec]]:
    """The answer lengths (-n) and the context settings llama.cpp accepts, for a scenario that
    generates answers (chat, spec); a usage error when either is empty."""
    lengths = [n for n in sweep.n_gen if n > 0]
    if not lengths:
        raise UsageError(f"--scenario {scenario} needs an answer length: -n must be >= 1")
    contexts, _ = drop_unsupported(sweep.contexts())
    if not contexts:
        raise UsageError("a quantized V cache (-ctv) needs flash attention", hint="add -fa 1")
    return lengths, contexts
