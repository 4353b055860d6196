"""Options shared by the commands that run a model (generate, chat, bench).

Each is declared once here. Settings-backed options default to None so that the precedence
flag > LLMCLI_* variable > config file > built-in default is resolved in one place
(`llmcli.settings`), and each shows its environment variable in `--help`.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from llmcli import defaults

if TYPE_CHECKING:  # imported where used: `--help` need not build the engine's dataclasses
    from llmcli.contract import EngineOptions, SamplingParams, SpecOptions

MODEL_PANEL = "Model"
SAMPLING_PANEL = "Sampling"
SPEC_PANEL = "Speculative decoding"
TOOLS_PANEL = "Tools"


def _complete_models(incomplete: str) -> list[str]:
    """Local model names and aliases for shell completion; never loads llama.cpp."""
    try:
        from llmcli.hub import store

        names = store.completion_names()
    except Exception:
        names = []
    return [n for n in names if n.startswith(incomplete)]


Model = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="Model: a .gguf path, org/repo[:QUANT][@REV], org/repo/file.gguf, or an alias. "
        "Default: the configured model, else the bundled SmolLM2-135M-Instruct (smollm2-135m).",
        envvar="LLMCLI_MODEL",
        rich_help_panel=MODEL_PANEL,
        autocompletion=_complete_models,
        show_default=False,
    ),
]
Timeout = Annotated[
    float | None,
    typer.Option(
        "--timeout", metavar="SECONDS", min=0.001, envvar="LLMCLI_TIMEOUT", rich_help_panel=MODEL_PANEL,
        show_default=False,
        help="A served model: seconds its server may stay silent (connecting, or mid-stream) before "
        "the request fails as stalled (default 120).",
    ),
]  # fmt: skip
Offline = Annotated[
    bool,
    typer.Option(
        "--offline",
        help="Never touch the network; use only models already downloaded.",
        rich_help_panel=MODEL_PANEL,
    ),
]
Force = Annotated[
    bool,
    typer.Option(
        "--force", help="Load even when the weights and KV cache look too big for the free memory.",
        rich_help_panel=MODEL_PANEL,
    ),
]  # fmt: skip
FallbackTemplate = Annotated[
    bool,
    typer.Option(
        "--fallback-template",
        help="Use the architecture's fallback turn format even for a base model (one with no chat "
        "template and no instruct fine-tune), which otherwise gets plain continuation (generate) or "
        "is refused (chat).",
        rich_help_panel=MODEL_PANEL,
    ),
]
CtxSize = Annotated[
    int | None,
    typer.Option(
        "--ctx-size",
        "-c",
        help=f"Context size in tokens (default: the model's trained context, capped at {defaults.CTX_CAP}; "
        "rounded up to 256).",
        envvar="LLMCLI_CTX_SIZE",
        rich_help_panel=MODEL_PANEL,
        show_default=False,
        min=0,
    ),
]
GpuLayers = Annotated[
    int | None,
    typer.Option(
        "--gpu-layers",
        "--n-gpu-layers",
        "-ngl",
        help="Layers to offload to the GPU (default: all when this build can offload, else 0).",
        envvar="LLMCLI_GPU_LAYERS",
        rich_help_panel=MODEL_PANEL,
        show_default=False,
    ),
]
Threads = Annotated[
    int | None,
    typer.Option(
        "--threads",
        "-t",
        help="CPU threads, fixed (default: adaptive, up to the physical cores; see doctor).",
        envvar="LLMCLI_THREADS",
        rich_help_panel=MODEL_PANEL,
        show_default=False,
        min=0,
    ),
]
BatchSize = Annotated[
    int | None,
    typer.Option(
        "--batch-size",
        "-b",
        help=f"Prompt tokens evaluated per batch (default {defaults.BATCH_SIZE}).",
        envvar="LLMCLI_BATCH_SIZE",
        rich_help_panel=MODEL_PANEL,
        show_default=False,
        min=1,
    ),
]
FlashAttn = Annotated[
    bool | None,
    typer.Option(
        "--flash-attn/--no-flash-attn",
        "-fa/-nfa",
        help="Flash attention (default: auto, on where the backend supports it).",
        rich_help_panel=MODEL_PANEL,
        show_default=False,
    ),
]
CacheTypeK = Annotated[
    str | None,
    typer.Option(
        "--cache-type-k",
        "-ctk",
        help="KV cache type of the keys: f16 (default), f32, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1.",
        envvar="LLMCLI_CACHE_TYPE_K",
        rich_help_panel=MODEL_PANEL,
        show_default=False,
    ),
]
CacheTypeV = Annotated[
    str | None,
    typer.Option(
        "--cache-type-v",
        "-ctv",
        help="KV cache type of the values, as -ctk (default f16); a quantized type needs flash attention.",
        envvar="LLMCLI_CACHE_TYPE_V",
        rich_help_panel=MODEL_PANEL,
        show_default=False,
    ),
]
Repack = Annotated[
    bool | None,
    typer.Option(
        "--repack/--no-repack",
        help="Repack weights for the CPU's matmul kernels, llama.cpp's extra buffer types "
        "(default: on, except where llama.cpp would use its AMX kernels; see doctor).",
        rich_help_panel=MODEL_PANEL,
        show_default=False,
    ),
]
Temperature = Annotated[
    float | None,
    typer.Option(
        "--temperature", "--temp",
        help=f"Sampling temperature; 0 is greedy (default {defaults.TEMPERATURE}).",
        envvar="LLMCLI_TEMPERATURE", rich_help_panel=SAMPLING_PANEL, show_default=False,
    ),
]  # fmt: skip
TopK = Annotated[
    int | None,
    typer.Option("--top-k", help=f"Top-k; 0 disables (default {defaults.TOP_K}).", envvar="LLMCLI_TOP_K",
                 rich_help_panel=SAMPLING_PANEL, show_default=False),
]  # fmt: skip
TopP = Annotated[
    float | None,
    typer.Option("--top-p", help=f"Nucleus sampling, in (0, 1] (default {defaults.TOP_P}).",
                 envvar="LLMCLI_TOP_P", rich_help_panel=SAMPLING_PANEL, show_default=False),
]  # fmt: skip
MinP = Annotated[
    float | None,
    typer.Option("--min-p", help=f"Min-p, in [0, 1] (default {defaults.MIN_P}).", envvar="LLMCLI_MIN_P",
                 rich_help_panel=SAMPLING_PANEL, show_default=False),
]  # fmt: skip
RepeatPenalty = Annotated[
    float | None,
    typer.Option("--repeat-penalty",
                 help=f"Repetition penalty; 1.0 disables (default {defaults.REPEAT_PENALTY}).",
                 envvar="LLMCLI_REPEAT_PENALTY", rich_help_panel=SAMPLING_PANEL, show_default=False),
]  # fmt: skip
Seed = Annotated[
    int | None,
    typer.Option("--seed", "-s", help="Random seed; the same seed and settings give the same text "
                 "(default: random, and reported).", rich_help_panel=SAMPLING_PANEL, show_default=False),
]  # fmt: skip
MaxTokens = Annotated[
    int | None,
    typer.Option("--max-tokens", "-n", help="Generate at most N tokens; 0 means until the end or a full "
                 f"context (default {defaults.MAX_TOKENS}).", envvar="LLMCLI_MAX_TOKENS",
                 rich_help_panel=SAMPLING_PANEL, show_default=False),
]  # fmt: skip
Stop = Annotated[
    list[str] | None,
    typer.Option("--stop", help="Stop when this text appears (not included in the output); repeatable.",
                 rich_help_panel=SAMPLING_PANEL, show_default=False),
]  # fmt: skip
GrammarFile = Annotated[
    Path | None,
    typer.Option("--grammar-file", help="Constrain the output with a GBNF grammar file.",
                 rich_help_panel=SAMPLING_PANEL, show_default=False, dir_okay=False),
]  # fmt: skip
JsonSchema = Annotated[
    str | None,
    typer.Option("--json-schema", help="Constrain the output to JSON matching this schema (a file or "
                 "inline JSON).", rich_help_panel=SAMPLING_PANEL, show_default=False),
]  # fmt: skip

Think = Annotated[
    bool | None,
    typer.Option(
        "--think/--no-think",
        help="A reasoning model's thinking, on or off through its template's switch (enable_thinking; "
        "a served model's server gets it as chat_template_kwargs). Default: LLMCLI_THINK or the "
        "config's think (on, off, auto), else the template's.",
        rich_help_panel=SAMPLING_PANEL,
        show_default=False,
    ),
]
ReasoningBudget = Annotated[
    int | None,
    typer.Option(
        "--reasoning-budget",
        envvar="LLMCLI_REASONING_BUDGET",
        help="A reasoning model's budget in tokens: once spent, its block is closed for it and the "
        "answer follows (0: no thinking; -1: no limit). [default: -1]",
        rich_help_panel=SAMPLING_PANEL,
        show_default=False,
    ),
]
ReasoningBudgetMessage = Annotated[
    str | None,
    typer.Option(
        "--reasoning-budget-message",
        envvar="LLMCLI_REASONING_BUDGET_MESSAGE",
        help="Text written into the reasoning before the closing tag a spent --reasoning-budget forces "
        '(for example "Time to answer.").',
        rich_help_panel=SAMPLING_PANEL,
        show_default=False,
    ),
]
LogFlag = Annotated[
    bool | None,
    typer.Option(
        "--log/--no-log",
        help="Write this request (each chat turn) to the conversation log, or not (default: config "
        "`log`, on; see `llmcli logs`).",
        envvar="LLMCLI_LOG",
        show_default=False,
    ),
]
Continue = Annotated[
    bool,
    typer.Option(
        "--continue",
        "-C",
        help="Continue the last logged conversation (its model, unless -m; its system prompt, unless "
        "--system). -c is --ctx-size, as in llama.cpp.",
    ),
]
Cid = Annotated[
    str | None,
    typer.Option("--cid", help="Continue the logged conversation with this id (`llmcli logs`).",
                 show_default=False),
]  # fmt: skip
SpecType = Annotated[
    str | None,
    typer.Option("--spec-type", help="Speculative decoding: none, lookup (prompt lookup: copy n-grams "
                 "from the prompt and answer) or draft (a draft model, -md). Lossless: the target "
                 "verifies every proposal. Default: none, or draft when -md is given.",
                 envvar="LLMCLI_SPEC_TYPE", rich_help_panel=SPEC_PANEL, show_default=False),
]  # fmt: skip
SpecDraftNMax = Annotated[
    int | None,
    typer.Option("--spec-draft-n-max", help="Most tokens proposed per verification batch, 0-64 "
                 f"(default {defaults.SPEC_DRAFT_N_MAX}).", envvar="LLMCLI_SPEC_DRAFT_N_MAX",
                 rich_help_panel=SPEC_PANEL, show_default=False),
]  # fmt: skip
SpecDraftNMin = Annotated[
    int | None,
    typer.Option("--spec-draft-n-min", help="Fewest tokens worth a verification batch, at most "
                 f"--spec-draft-n-max (default {defaults.SPEC_DRAFT_N_MIN}).",
                 envvar="LLMCLI_SPEC_DRAFT_N_MIN", rich_help_panel=SPEC_PANEL, show_default=False),
]  # fmt: skip
SpecNgramMax = Annotated[
    int | None,
    typer.Option("--spec-ngram-max", help="Prompt lookup: longest n-gram matched, 1-16 "
                 f"(default {defaults.SPEC_NGRAM_MAX}).", envvar="LLMCLI_SPEC_NGRAM_MAX",
                 rich_help_panel=SPEC_PANEL, show_default=False),
]  # fmt: skip
SpecNgramMin = Annotated[
    int | None,
    typer.Option("--spec-ngram-min", help="Prompt lookup: shortest n-gram matched, 1 to "
                 f"--spec-ngram-max (default {defaults.SPEC_NGRAM_MIN}).", envvar="LLMCLI_SPEC_NGRAM_MIN",
                 rich_help_panel=SPEC_PANEL, show_default=False),
]  # fmt: skip
SpecAdaptive = Annotated[
    bool | None,
    typer.Option("--spec-adaptive/--no-spec-adaptive", help="Choose how many tokens to draft (down to "
                 "none) from measured batch costs and acceptance (default: on); off: always "
                 "--spec-draft-n-max.", envvar="LLMCLI_SPEC_ADAPTIVE", rich_help_panel=SPEC_PANEL,
                 show_default=False),
]  # fmt: skip
SpecExact = Annotated[
    bool | None,
    typer.Option("--spec-exact/--no-spec-exact", help="Verify only in batch sizes whose logits are "
                 "bit-identical to plain decoding on this build and model (probed once), so temperature 0 "
                 "gives exactly the plain text (default: off: any size that pays; the same distribution "
                 "and the same text run after run, but batched kernels may round near-ties differently "
                 "from plain decoding).", envvar="LLMCLI_SPEC_EXACT",
                 rich_help_panel=SPEC_PANEL,
                 show_default=False),
]  # fmt: skip
ModelDraft = Annotated[
    str | None,
    typer.Option("--model-draft", "--spec-draft-model", "-md",
                 help="Draft model for speculative decoding (a path, hub reference or alias, like -m); "
                 "it must share the target's vocabulary.",
                 envvar="LLMCLI_MODEL_DRAFT", rich_help_panel=SPEC_PANEL, autocompletion=_complete_models,
                 show_default=False),
]  # fmt: skip
GpuLayersDraft = Annotated[
    int | None,
    typer.Option("--gpu-layers-draft", "--spec-draft-ngl", "--n-gpu-layers-draft", "-ngld",
                 help="Draft model layers to offload to the GPU (default: "
                 "all when this build can offload, else 0).", envvar="LLMCLI_GPU_LAYERS_DRAFT",
                 rich_help_panel=SPEC_PANEL, show_default=False),
]  # fmt: skip
CtxSizeDraft = Annotated[
    int | None,
    typer.Option("--ctx-size-draft", "-cd", help="Draft model context size (0 or unset: the target's).",
                 envvar="LLMCLI_CTX_SIZE_DRAFT", rich_help_panel=SPEC_PANEL, show_default=False, min=0),
]  # fmt: skip
CacheTypeKDraft = Annotated[
    str | None,
    typer.Option("--cache-type-k-draft", "-ctkd", help="Draft model's KV cache type of the keys, "
                 "as -ctk (default: the target's).", envvar="LLMCLI_CACHE_TYPE_K_DRAFT",
                 rich_help_panel=SPEC_PANEL, show_default=False),
]  # fmt: skip
CacheTypeVDraft = Annotated[
    str | None,
    typer.Option("--cache-type-v-draft", "-ctvd", help="Draft model's KV cache type of the values, "
                 "as -ctv (default: the target's).", envvar="LLMCLI_CACHE_TYPE_V_DRAFT",
                 rich_help_panel=SPEC_PANEL, show_default=False),
]  # fmt: skip

Functions = Annotated[
    list[Path] | None,
    typer.Option("--functions", help="Offer the model every top-level function of this Python file as "
                 "a tool (your own code: it runs with your rights); repeatable.", metavar="FILE.py",
                 rich_help_panel=TOOLS_PANEL, show_default=False, dir_okay=False),
]  # fmt: skip
ToolName = Annotated[
    list[str] | None,
    typer.Option("--tool", help="Offer a built-in tool (current_time, arithmetic); repeatable.",
                 metavar="NAME", rich_help_panel=TOOLS_PANEL, show_default=False),
]  # fmt: skip
Mcp = Annotated[
    list[str] | None,
    typer.Option("--mcp", help="Offer the tools of an MCP server started over stdio by this command "
                 "line (your own choice of program: it runs with your rights); repeatable.",
                 metavar="'COMMAND ARGS'", rich_help_panel=TOOLS_PANEL, show_default=False),
]  # fmt: skip
ApproveTools = Annotated[
    bool | None,
    typer.Option("--approve-tools", help="Run the model's tool calls without asking (chat); without it "
                 "generate refuses to run any.", envvar="LLMCLI_APPROVE_TOOLS",
                 rich_help_panel=TOOLS_PANEL, show_default=False),
]  # fmt: skip
ShowTools = Annotated[
    bool,
    typer.Option("--show-tools", help="Print each tool call and its result on stderr.",
                 rich_help_panel=TOOLS_PANEL),
]  # fmt: skip
ToolRounds = Annotated[
    int | None,
    typer.Option("--tool-rounds", help="Most rounds of tool calls in one answer (default 5).", min=0,
                 envvar="LLMCLI_TOOL_ROUNDS", rich_help_panel=TOOLS_PANEL, show_default=False),
]  # fmt: skip
ToolTimeout = Annotated[
    float | None,
    typer.Option("--tool-timeout", help="Seconds one tool call may run (default 30).", min=0.001,
                 metavar="SECONDS", envvar="LLMCLI_TOOL_TIMEOUT", rich_help_panel=TOOLS_PANEL,
                 show_default=False),
]  # fmt: skip


def build_toolset(functions: list[Path] | None, names: list[str] | None, mcp: list[str] | None):
    """The tools of --functions, --tool and --mcp (MCP servers started here; close the set after)."""
    import functools

    from llmcli import tools
    from llmcli.tools.mcp import connect

    servers = [functools.partial(connect, command) for command in mcp or []]
    return tools.build(functions, names, servers)


def spec_options(
    spec_type: str | None = None,
    draft_max: int | None = None,
    draft_min: int | None = None,
    ngram_max: int | None = None,
    ngram_min: int | None = None,
    adaptive: bool | None = None,
    exact: bool | None = None,
    model_draft: str | None = None,
    gpu_layers_draft: int | None = None,
    ctx_size_draft: int | None = None,
    ctx: typer.Context | None = None,
    cache_type_k_draft: str | None = None,
    cache_type_v_draft: str | None = None,
) -> SpecOptions:
    """Speculative decoding's settings, resolved (flag > env > config > default) and checked. The
    draft model reference is resolved to a file by the loader, like -m."""
    from llmcli import settings
    from llmcli.contract import SpecOptions
    from llmcli.engine.speculation.proposal import kind_of
    from llmcli.errors import UsageError

    draft_ref, draft_source = settings.resolve_with_source("model_draft", model_draft)
    draft_ref = draft_ref or None
    kind_value, kind_source = settings.resolve_with_source("spec_type", spec_type)
    try:
        kind = kind_of(kind_value)
    except ValueError as exc:
        hint = _came_from("spec_type", kind_value, kind_source, spec_type, ctx)
        raise UsageError(str(exc), hint=hint) from None
    if draft_ref and (
        kind_source == "default"
        or (_typed(model_draft, "model_draft", ctx) and not _typed(spec_type, "spec_type", ctx))
    ):
        kind = "draft"  # -md alone turns the draft model on, as in llama.cpp (over a configured type)
    if kind != "draft" and _typed(model_draft, "model_draft", ctx):
        raise UsageError(f"-md/--model-draft is given but --spec-type is {kind}",
                         hint="use --spec-type draft, or leave out -md")  # fmt: skip
    draft_flags = {"gpu_layers_draft": gpu_layers_draft, "ctx_size_draft": ctx_size_draft,
                   "cache_type_k_draft": cache_type_k_draft,
                   "cache_type_v_draft": cache_type_v_draft}  # fmt: skip
    if kind != "draft" and any(_typed(value, key, ctx) for key, value in draft_flags.items()):
        raise UsageError("-ngld, -cd, -ctkd and -ctvd set up the draft model: give it with -md/--model-draft")
    gpu = settings.resolve("gpu_layers_draft", gpu_layers_draft)
    draft_from = _came_from("model_draft", draft_ref, draft_source, model_draft, ctx)
    counts = {"spec_draft_n_max": draft_max, "spec_draft_n_min": draft_min,
              "spec_ngram_max": ngram_max, "spec_ngram_min": ngram_min}  # fmt: skip
    resolved = {key: settings.resolve_with_source(key, flag) for key, flag in counts.items()}
    spec = SpecOptions(
        kind=kind,
        draft_max=resolved["spec_draft_n_max"][0],
        draft_min=resolved["spec_draft_n_min"][0],
        ngram_max=resolved["spec_ngram_max"][0],
        ngram_min=resolved["spec_ngram_min"][0],
        adaptive=settings.resolve("spec_adaptive", adaptive),
        exact=settings.resolve("spec_exact", exact),
        model_draft_ref=draft_ref if kind == "draft" else None,
        model_draft=draft_ref if kind == "draft" else None,
        model_draft_from=draft_from if kind == "draft" else None,
        gpu_layers_draft=None if gpu is None or gpu < 0 else gpu,
        ctx_size_draft=settings.resolve("ctx_size_draft", ctx_size_draft) or None,
        type_k_draft=_cache_type("k_draft", cache_type_k_draft, "-ctkd/--cache-type-k-draft") or None,
        type_v_draft=_cache_type("v_draft", cache_type_v_draft, "-ctvd/--cache-type-v-draft") or None,
    )
    try:
        spec.validate()
    except UsageError as exc:  # the flags' names, but a value may come from the config or the environment
        given = []
        for key, (value, source) in {**resolved, "spec_type": (kind_value, kind_source)}.items():
            if "--" + key.removeprefix("spec_").replace("_", "-") in exc.message.replace("--spec-", "--"):
                given.append(
                    _came_from(key, value, source, spec_type if key == "spec_type" else counts[key], ctx)
                )
        if any(given) and exc.hint is None:
            exc.hint = "; ".join(g for g in given if g)
        raise
    return spec


def _came_from(key: str, value: object, source: str, flag: object, ctx: typer.Context | None) -> str | None:
    """Where a setting that was not typed on the command line came from, for an error's hint:
    `$LLMCLI_SPEC_TYPE = bogus` or `spec_draft_n_min = 9 in the config file`; None when typed."""
    import json
    import os

    from llmcli import settings

    if source == "config":  # as TOML writes it
        shown = json.dumps(value) if isinstance(value, (str, bool)) else value
        return f"{key} = {shown} in the config file"
    if source == "env" or (source == "flag" and not _typed(flag, key, ctx)):
        return f"${settings.SETTINGS[key].env} = {os.environ.get(settings.SETTINGS[key].env, value)}"
    return None


def _typed(value: object, key: str, ctx: typer.Context | None = None) -> bool:
    """Whether a flag's value was typed on this command line: Typer hands over an environment
    variable's value as the flag's, and a variable, like the config file, is a default that a
    flag may contradict without an error. The command's context records where each value came
    from; without one (a direct call) the value is compared with the variable's."""
    import os

    from llmcli import settings

    if value is None:
        return False
    env = settings.SETTINGS[key].env
    if ctx is not None:
        for param in ctx.command.params:
            if param.name and getattr(param, "envvar", None) == env:
                source = ctx.get_parameter_source(param.name)
                return source is not None and source.name == "COMMANDLINE"
    return str(value) != os.environ.get(env)


def engine_options(
    ctx_size: int | None,
    gpu_layers: int | None,
    threads: int | None,
    batch_size: int | None,
    flash_attn: bool | None = None,
    speculative: SpecOptions | None = None,
    repack: bool | None = None,
    cache_type_k: str | None = None,
    cache_type_v: str | None = None,
) -> EngineOptions:
    from llmcli import settings
    from llmcli.contract import EngineOptions, SpecOptions
    from llmcli.errors import UsageError
    from llmcli.gguf_file import v_cache_refused

    gpu = settings.resolve("gpu_layers", gpu_layers)
    type_k, type_v = _cache_type("k", cache_type_k), _cache_type("v", cache_type_v)
    draft_v = speculative.type_v_draft if speculative is not None else None
    for v, flag in ((type_v, "-ctv"), (draft_v, "-ctvd")):  # the target's V cache, the draft's
        if v_cache_refused(v, flash_attn):
            raise UsageError(
                f"a quantized V cache ({v}) needs flash attention, and -nfa turns it off",
                hint=f"drop -nfa/--no-flash-attn, or use {flag} f16",
            )
    return EngineOptions(
        ctx_size=settings.resolve("ctx_size", ctx_size) or None,
        gpu_layers=None if gpu is None or gpu < 0 else gpu,
        threads=settings.resolve("threads", threads) or None,
        batch_size=settings.resolve("batch_size", batch_size),
        flash_attn=flash_attn,
        type_k=None if type_k == "f16" else type_k,
        type_v=None if type_v == "f16" else type_v,
        repack=repack,
        speculative=speculative or SpecOptions(),
    )


def _cache_type(which: str, flag: str | None, name: str | None = None) -> str:
    """-ctk/-ctv (`which` "k", "v") or -ctkd/-ctvd ("k_draft", "v_draft") resolved (flag,
    $LLMCLI_CACHE_TYPE_*, config, default: f16, or "" for the target's) and checked, lowercased."""
    from llmcli import settings
    from llmcli.errors import UsageError

    key = f"cache_type_{which}"
    value, source = settings.resolve_with_source(key, flag)
    if source != "flag":
        return value
    try:
        return settings.coerce(settings.SETTINGS[key], value, text=True)
    except ValueError:
        where = (name or f"--cache-type-{which}") if _typed(flag, key) else f"${settings.SETTINGS[key].env}"
        raise UsageError(
            f"{where}: unknown KV cache type {value!r}",
            hint="one of " + ", ".join(c for c in settings.SETTINGS[key].choices if c),
        ) from None


def sampling_params(
    temperature: float | None,
    top_k: int | None,
    top_p: float | None,
    min_p: float | None,
    repeat_penalty: float | None,
    seed: int | None,
    max_tokens: int | None,
    stop: list[str] | None,
    grammar_file: Path | None = None,
    json_schema: str | None = None,
) -> SamplingParams:
    """Sampling settings resolved and validated, with the grammar text loaded."""
    from llmcli import settings
    from llmcli.contract import SamplingParams

    flags = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p,
             "repeat_penalty": repeat_penalty, "max_tokens": max_tokens}  # fmt: skip
    resolved = {key: settings.resolve_with_source(key, flag) for key, flag in flags.items()}
    params = SamplingParams(
        **{key: value for key, (value, _) in resolved.items()},
        seed=seed,
        stop=list(stop or []),
        defaulted=frozenset(
            {k for k, (_, source) in resolved.items() if source == "default"} | {"repeat_last_n"}
        ),
    )
    params.validate()
    params.grammar = load_grammar(grammar_file, json_schema)
    if json_schema is not None:
        params.json_schema = read_schema(json_schema)  # a served model sends the schema itself
    return params


def reasoning_budget(budget: int | None, message: str | None) -> tuple[int | None, str]:
    """--reasoning-budget and its message, resolved (flag > LLMCLI_* > config > default) and
    checked; a budget of -1 is no limit (None)."""
    from llmcli import settings
    from llmcli.errors import UsageError

    value = settings.resolve("reasoning_budget", budget)
    if value < -1:
        raise UsageError(f"--reasoning-budget must be >= -1 (-1: no limit, 0: no thinking), got {value}")
    return (None if value == -1 else value), settings.resolve("reasoning_budget_message", message)


def load_grammar(grammar_file: Path | None, json_schema: str | None) -> str | None:
    from llmcli.errors import UsageError

    if grammar_file and json_schema:
        raise UsageError("use either --grammar-file or --json-schema, not both")
    if grammar_file:
        try:
            text = grammar_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read grammar file {grammar_file}: {_reason(exc)}") from None
        if not text.strip():
            raise UsageError(f"grammar file {grammar_file} is empty")
        return text
    if json_schema is not None:
        return schema_to_grammar(json_schema)
    return None


def schema_to_grammar(value: str) -> str:
    """A JSON schema (file path or inline JSON) converted to GBNF by llama-cpp-python's converter."""
    import json

    from llmcli.errors import UsageError

    schema = read_schema(value)
    from llmcli.engine.grammar import json_schema_to_gbnf

    try:
        return json_schema_to_gbnf(json.dumps(schema))
    except Exception as exc:  # the converter raises plain exceptions on unsupported schemas
        raise UsageError(f"--json-schema could not be converted to a grammar: {exc}") from None


def read_schema(value: str) -> dict | bool:
    """The --json-schema value (a file path or inline JSON), parsed and checked."""
    import json

    from llmcli.errors import UsageError

    text = value
    path = Path(value).expanduser()
    if not value.lstrip().startswith(("{", "[")) and len(value) < 4096:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read JSON schema file {value}: {_reason(exc)}") from None
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"--json-schema is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    if not isinstance(schema, (dict, bool)):
        raise UsageError("--json-schema must be a JSON object")
    return schema


def _reason(exc: Exception) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return getattr(exc, "strerror", None) or str(exc)


def warn_amx_repack(repack: bool | None, loaded) -> None:
    """`--repack` typed on a build that hands repacked weights to llama.cpp's AMX kernels: honoured,
    with a warning, since those kernels crash some hosts (virtual machines) at the first batch."""
    if repack is not True or loaded.served:
        return
    from llmcli import render
    from llmcli.engine import backend

    if backend.amx_weights():
        render.warn(AMX_REPACK_WARNING)


AMX_REPACK_WARNING = (
    "--repack: this build hands repacked weights to llama.cpp's AMX kernels, which crash at "
    "the first batch of several tokens on some hosts (virtual machines); --no-repack avoids them"
)


def warn_think(think: bool, fmt) -> None:
    """--think/--no-think where the model's template cannot honour it: said in one line."""
    from llmcli import reasoning, render

    if note := reasoning.switch_note(think, fmt):
        render.warn(f"{'--think' if think else '--no-think'}: {note}")


def warn_local_only(**flags) -> None:
    """A served model has no local context, threads or layers: flags for them are said to be ignored."""
    from llmcli import render

    given = ["--" + name.replace("_", "-") for name, value in flags.items() if value is not None]
    if given:
        render.warn(f"{', '.join(given)}: ignored for a served model (its server decides)")


@dataclass
class RunFlags:
    """The flags of every command that runs a model (generate, chat), declared once: how the model is
    loaded, how it samples, and speculative decoding. `run_flags` adds them to a command, in this
    order, where it takes `flags: RunFlags`; `resolve` turns them into what the request runs with."""

    ctx_size: CtxSize = None
    gpu_layers: GpuLayers = None
    threads: Threads = None
    batch_size: BatchSize = None
    flash_attn: FlashAttn = None
    repack: Repack = None
    cache_type_k: CacheTypeK = None
    cache_type_v: CacheTypeV = None
    temperature: Temperature = None
    top_k: TopK = None
    top_p: TopP = None
    min_p: MinP = None
    repeat_penalty: RepeatPenalty = None
    seed: Seed = None
    max_tokens: MaxTokens = None
    stop: Stop = None
    grammar_file: GrammarFile = None
    json_schema: JsonSchema = None
    think: Think = None
    reasoning_budget: ReasoningBudget = None
    reasoning_budget_message: ReasoningBudgetMessage = None
    log: LogFlag = None
    continue_last: Continue = False
    cid: Cid = None
    spec_type: SpecType = None
    spec_draft_n_max: SpecDraftNMax = None
    spec_draft_n_min: SpecDraftNMin = None
    spec_ngram_max: SpecNgramMax = None
    spec_ngram_min: SpecNgramMin = None
    spec_adaptive: SpecAdaptive = None
    spec_exact: SpecExact = None
    model_draft: ModelDraft = None
    gpu_layers_draft: GpuLayersDraft = None
    ctx_size_draft: CtxSizeDraft = None
    cache_type_k_draft: CacheTypeKDraft = None
    cache_type_v_draft: CacheTypeVDraft = None
    functions: Functions = None
    tool: ToolName = None
    mcp: Mcp = None
    approve_tools: ApproveTools = None
    show_tools: ShowTools = False
    tool_rounds: ToolRounds = None
    tool_timeout: ToolTimeout = None

    @property
    def wants_tools(self) -> bool:
        return bool(self.functions or self.tool or self.mcp)

    def toolset(self):
        """The tools the flags name (None: none); the caller closes it (MCP servers)."""
        if not self.wants_tools:
            return None
        return build_toolset(self.functions, self.tool, self.mcp)

    def tool_settings(self) -> tuple[bool, int, float]:
        """(approve without asking, rounds, timeout), each flag > LLMCLI_* > config > default."""
        from llmcli import settings

        return (bool(settings.resolve("approve_tools", self.approve_tools)),
                int(settings.resolve("tool_rounds", self.tool_rounds)),
                float(settings.resolve("tool_timeout", self.tool_timeout)))  # fmt: skip

    def sampling(self) -> SamplingParams:
        """Sampling settings resolved (flag > LLMCLI_* > config > default) and checked."""
        params = sampling_params(
            self.temperature, self.top_k, self.top_p, self.min_p, self.repeat_penalty, self.seed,
            self.max_tokens, self.stop, self.grammar_file, self.json_schema,
        )  # fmt: skip
        params.reasoning_budget, params.reasoning_budget_message = reasoning_budget(
            self.reasoning_budget, self.reasoning_budget_message
        )
        return params

    def engine(self, ctx: typer.Context) -> EngineOptions:
        """How the model is loaded, speculative decoding included, resolved and checked."""
        spec = spec_options(
            self.spec_type, self.spec_draft_n_max, self.spec_draft_n_min, self.spec_ngram_max,
            self.spec_ngram_min, self.spec_adaptive, self.spec_exact, self.model_draft,
            self.gpu_layers_draft, self.ctx_size_draft, ctx, self.cache_type_k_draft, self.cache_type_v_draft,
        )  # fmt: skip
        return engine_options(self.ctx_size, self.gpu_layers, self.threads, self.batch_size, self.flash_attn,
                              spec, self.repack, self.cache_type_k, self.cache_type_v)  # fmt: skip

    def thinking(self) -> bool | None:
        """--think/--no-think, else LLMCLI_THINK or the config's `think`; None: the template's default."""
        from llmcli import settings

        return settings.think(self.think)

    def think_given(self) -> bool:
        """Whether the flag, LLMCLI_THINK or the config set `think` (a saved session's does not count)."""
        from llmcli import settings

        return self.think is not None or settings.resolve_with_source("think")[1] != "default"

    @property
    def constraint(self) -> str | None:
        """ "json_schema" or "grammar" when the answer is constrained, else None."""
        return "json_schema" if self.json_schema is not None else "grammar" if self.grammar_file else None

    def continued(self):
        """The logged conversation `--continue` / `--cid` name (logdb.History), or None."""
        if not self.continue_last and not self.cid:
            return None
        from llmcli import logdb
        from llmcli.errors import UsageError

        if self.continue_last and self.cid:
            raise UsageError("--continue and --cid both name a conversation: give one")
        return logdb.history(self.cid)

    def logged(self, ref: str, command: str, history=None, **extra):
        """What the request path logs each request with (logdb.Logged), or None under --no-log."""
        from llmcli import logdb

        if not logdb.enabled(self.log):
            return None
        if history is not None:
            extra.setdefault("cid", history.cid)
        extra.setdefault("deferred", command == "generate")  # one-shot: no database opened
        return logdb.Logged(ref, command, **extra)

    def after_load(self, loaded) -> None:
        """What the loaded model makes of the flags: a warning for --repack on an AMX build, and one
        for the flags a served model ignores."""
        warn_amx_repack(self.repack, loaded)
        if self.think is not None and not loaded.served:
            warn_think(self.think, loaded.engine.info.reasoning)
        if loaded.served:
            warn_local_only(ctx_size=self.ctx_size, gpu_layers=self.gpu_layers, threads=self.threads,
                            batch_size=self.batch_size, flash_attn=self.flash_attn, repack=self.repack,
                            cache_type_k=self.cache_type_k, cache_type_v=self.cache_type_v)  # fmt: skip


def run_flags(command: Callable) -> Callable:
    """Give `command` the flags of `RunFlags` in place of its `flags` parameter (so `--help`, the man
    page and the completions list them where it is), and call it with them as one `RunFlags`."""
    hints = typing.get_type_hints(RunFlags, include_extras=True)
    own = typing.get_type_hints(command, include_extras=True)  # resolved in the command's module
    names = [f.name for f in fields(RunFlags)]
    signature = inspect.signature(command)
    parameters: list[inspect.Parameter] = []
    for parameter in signature.parameters.values():
        if parameter.name != "flags":
            parameters.append(parameter.replace(annotation=own[parameter.name]))
            continue
        parameters += [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                         annotation=hints[name]) for name in names]  # fmt: skip

    @functools.wraps(command)
    def with_flags(*args, **kwargs):
        flags = RunFlags(**{name: kwargs.pop(name) for name in names})
        return command(*args, flags=flags, **kwargs)

    with_flags.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    with_flags.__annotations__ = {**{k: v for k, v in own.items() if k != "flags"},
                                  **{name: hints[name] for name in names}}  # fmt: skip
    return with_flags
