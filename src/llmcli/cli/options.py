"""Options shared by the commands that run a model (generate, chat, bench).

Each is declared once here. Settings-backed options default to None so that the precedence
flag > LLMCLI_* variable > config file > built-in default is resolved in one place
(`llmcli.settings`), and each shows its environment variable in `--help`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from llmcli import defaults
from llmcli.cli.resolve import build_toolset, warn_amx_repack, warn_local_only, warn_think

if TYPE_CHECKING:  # imported where used: `--help` need not build the engine's dataclasses
    from llmcli.contract import EngineOptions, SamplingParams
    from llmcli.runspec import RunSpec

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


@dataclass
class ModelFlags:
    """The flags of every command that runs a model (generate, chat, batch), declared once: how the
    model is loaded and how it samples. `RunFlags` adds what a conversation has (continuing a logged
    one, speculative decoding, tools). `spec` resolves them into the run's `RunSpec`."""

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

    def _speculative(self, ctx: typer.Context | None):
        return None

    def spec(self, ctx: typer.Context | None, *, speculative: bool = True, **template) -> RunSpec:
        """The run specification (`llmcli.runspec`): these flags with `template`'s (system, raw,
        fallback_template), each resolved flag > LLMCLI_* > config > default, and checked."""
        from llmcli.runspec import resolve_run

        return resolve_run({**self._values(), **template}, ctx=ctx,
                           speculative=self._speculative(ctx) if speculative else None)  # fmt: skip

    def _values(self) -> dict:
        from dataclasses import fields

        return {f.name: getattr(self, f.name) for f in fields(ModelFlags)}

    def sampling(self) -> SamplingParams:
        """Sampling settings resolved (flag > LLMCLI_* > config > default) and checked."""
        from llmcli.runspec import resolve_sampling

        return resolve_sampling(self._values())

    def engine(self, ctx: typer.Context) -> EngineOptions:
        """How the model is loaded, speculative decoding included, resolved and checked."""
        from llmcli.runspec import resolve_engine

        return resolve_engine(self._values(), self._speculative(ctx))

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

    def logged(self, ref: str, command: str, history=None, **extra):
        """What the request path logs each request with (log.rows.Logged), or None under --no-log."""
        from llmcli.log import rows, writer

        if not writer.enabled(self.log):
            return None
        if history is not None:
            extra.setdefault("cid", history.cid)
        extra.setdefault("deferred", command == "generate")  # one-shot: no database opened
        return rows.Logged(ref, command, **extra)

    def after_load(self, loaded) -> None:
        """What the loaded model makes of the flags: a warning for --repack on an AMX build, and one
        for the flags a served model ignores."""
        warn_amx_repack(self.repack, loaded)
        if self.think is not None and loaded.engine.can.template:
            warn_think(self.think, loaded.engine.info.reasoning)
        if not loaded.engine.can.load_options:
            warn_local_only(ctx_size=self.ctx_size, gpu_layers=self.gpu_layers, threads=self.threads,
                            batch_size=self.batch_size, flash_attn=self.flash_attn, repack=self.repack,
                            cache_type_k=self.cache_type_k, cache_type_v=self.cache_type_v)  # fmt: skip


@dataclass
class RunFlags(ModelFlags):
    """The flags of a conversation (generate, chat): the model's (`ModelFlags`), then continuing a
    logged conversation, speculative decoding and tools. `run_flags` adds them to a command, in this
    order, where it takes `flags: RunFlags`."""

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

    def _speculative(self, ctx: typer.Context | None):
        from llmcli.runspec.speculative import spec_options

        return spec_options(
            self.spec_type, self.spec_draft_n_max, self.spec_draft_n_min, self.spec_ngram_max,
            self.spec_ngram_min, self.spec_adaptive, self.spec_exact, self.model_draft,
            self.gpu_layers_draft, self.ctx_size_draft, ctx, self.cache_type_k_draft, self.cache_type_v_draft,
        )  # fmt: skip

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

    def continued(self):
        """The logged conversation `--continue` / `--cid` name (log.queries.History), or None."""
        if not self.continue_last and not self.cid:
            return None
        from llmcli.errors import UsageError
        from llmcli.log import queries

        if self.continue_last and self.cid:
            raise UsageError("--continue and --cid both name a conversation: give one")
        return queries.history(self.cid)


def run_flags(command: Callable) -> Callable:
    """Give `command` the flags of `RunFlags` in place of its `flags` parameter (so `--help`, the man
    page and the completions list them where it is), and call it with them as one `RunFlags`."""
    from llmcli.cli.flagset import with_flags

    return with_flags(RunFlags)(command)


def model_flags(command: Callable) -> Callable:
    """As `run_flags`, with `ModelFlags` (batch: no conversation to continue, no speculation, no tools)."""
    from llmcli.cli.flagset import with_flags

    return with_flags(ModelFlags)(command)
