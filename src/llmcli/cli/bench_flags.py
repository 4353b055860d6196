"""`llmcli bench`'s flags, declared once: the sweep lists, the run, speculative decoding (--scenario
spec) and the serving benchmark (a served model). `BenchFlags` holds them all, in `--help`'s order;
`llmcli.cli.bench` hands the command one of them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from llmcli import defaults
from llmcli.cli import options as o

SWEEP_PANEL = "Sweep (comma lists and first-last+step / first-last*mult ranges; every list sweeps)"
RUN_PANEL = "Run"


def _list_option(*names: str, help: str, panel: str = SWEEP_PANEL):
    return typer.Option(*names, help=help, rich_help_panel=panel, show_default=False, metavar="LIST")


Models = Annotated[
    list[str] | None,
    typer.Option(
        "--model", "-m",
        help="Model(s) to measure: .gguf paths, org/repo[:QUANT], or aliases; comma list or repeated. "
        "Default: the configured model, else the bundled SmolLM2-135M-Instruct (smollm2-135m).",
        envvar="LLMCLI_MODEL", rich_help_panel=o.MODEL_PANEL, autocompletion=o._complete_models,
        show_default=False, metavar="MODEL",
    ),
]  # fmt: skip
NPrompt = Annotated[
    list[str] | None, _list_option("--n-prompt", "-p", help="Prompt sizes for pp tests (default 512).")
]
NGen = Annotated[
    list[str] | None,
    _list_option("--n-gen", "-n", help="Generation lengths for tg tests, answer lengths for the chat "
                 "and spec scenarios (default 128)."),
]  # fmt: skip
PromptGen = Annotated[
    list[str] | None,
    _list_option("--pg", "-pg", help="Prefill then generate in one test: PROMPT,GEN; repeatable."),
]
Depth = Annotated[
    list[str] | None, _list_option("--n-depth", "-d", help="Tokens already in the KV cache (default 0).")
]
Threads = Annotated[
    list[str] | None, _list_option("--threads", "-t", help="CPU threads (default: physical cores).")
]
GpuLayers = Annotated[
    list[str] | None,
    _list_option("--n-gpu-layers", "-ngl", help="Layers to offload to the GPU (default 99)."),
]
Batch = Annotated[
    list[str] | None, _list_option("--batch-size", "-b", help="Logical batch size (default 2048).")
]
UBatch = Annotated[
    list[str] | None, _list_option("--ubatch-size", "-ub", help="Physical batch size (default 512).")
]
FlashAttn = Annotated[
    list[str] | None, _list_option("--flash-attn", "-fa", help="Flash attention: 0, 1 or auto (default 0).")
]
CacheK = Annotated[
    list[str] | None, _list_option("--cache-type-k", "-ctk", help="K cache type (default f16).")
]
CacheV = Annotated[
    list[str] | None,
    _list_option("--cache-type-v", "-ctv", help="V cache type (default f16; quantized types need -fa 1)."),
]
BenchRepack = Annotated[
    list[str] | None,
    _list_option("--repack", help="Weights repacked for the CPU's matmul kernels (llama.cpp's extra buffer "
                 "types): 1, 0, or 0,1 to measure both; the model is loaded for each (default: 1, except "
                 "where llama.cpp would use its AMX kernels; see doctor)."),
]  # fmt: skip
NoRepack = Annotated[
    bool, typer.Option("--no-repack", help="The same as --repack 0.", rich_help_panel=SWEEP_PANEL)
]
Reps = Annotated[
    int,
    typer.Option(
        "--repetitions", "-r", min=1, metavar="N", help="Timed runs per test.", rich_help_panel=RUN_PANEL
    ),
]
NoWarmup = Annotated[
    bool, typer.Option("--no-warmup", help="Skip the untimed warm-up run.", rich_help_panel=RUN_PANEL)
]
Output = Annotated[
    str,
    typer.Option(
        "--output",
        "-o",
        metavar="FORMAT",
        help="Output format: md, csv, json or jsonl (one record per line, written as each result finishes).",
        rich_help_panel=RUN_PANEL,
    ),
]
Scenario = Annotated[
    str,
    typer.Option(
        "--scenario", metavar="NAME",
        help="tests: llama-bench's pp/tg/pg tests; chat: a scripted conversation through the chat "
        "template, time to first token and decode speed per turn, KV cache reused and not; spec: "
        "speculative decoding of a prompt (greedy, as generate), effective decode speed against "
        "plain decoding, tokens drafted and accepted, for every --spec-* setting; embed: an embedding "
        "model's texts/s and tokens/s over --texts generated sentences or -f FILE's lines; batch: N "
        "sequences decoded together as llmcli batch does, aggregate and per-sequence decode speed "
        "against N (--parallel).",
        rich_help_panel=RUN_PANEL,
    ),
]  # fmt: skip
Roofline = Annotated[
    bool,
    typer.Option(
        "--roofline",
        help="Measure this machine's memory bandwidth and show decode traffic as a fraction of it.",
        rich_help_panel=RUN_PANEL,
    ),
]  # fmt: skip
CtxSize = Annotated[
    int | None,
    typer.Option(
        "--ctx-size", min=1, show_default=False, rich_help_panel=RUN_PANEL, metavar="TOKENS",
        help="Context size; a test that does not fit is an error (default: sized to fit each test; "
        f"for --scenario chat and spec the model's trained context, capped at {defaults.CTX_CAP}).",
    ),
]  # fmt: skip
Delay = Annotated[
    float,
    typer.Option(
        "--delay", min=0, metavar="SECONDS", help="Seconds to pause between tests.", rich_help_panel=RUN_PANEL
    ),
]
Busy = Annotated[
    int,
    typer.Option(
        "--busy", min=0, max=256, metavar="N", rich_help_panel=RUN_PANEL,
        help="Start N busy processes (each keeps a core busy) for the run and stop them after: decode "
        "and prefill next to other work, at the thread counts given.",
    ),
]  # fmt: skip
Parallel = Annotated[
    list[str] | None,
    _list_option("--parallel", "-np", panel=RUN_PANEL,
                 help="--scenario batch: sequences decoded together, swept (default 1,2,4,8,16,32,64); "
                      "each has a prompt of -p random tokens (default 32) and answers -n."),
]  # fmt: skip
Seed = Annotated[
    int,
    typer.Option("--seed", metavar="N", help="Seed of the synthetic token ids.", rich_help_panel=RUN_PANEL),
]

SPEC_PANEL = "Speculative decoding (--scenario spec; comma lists and ranges sweep, generate's flag names)"
SpecTypes = Annotated[
    list[str] | None,
    _list_option("--spec-type", panel=SPEC_PANEL, help="Proposers: none, lookup, draft (default none,lookup; "
                 "none,draft with -md). The plain case (none) is always measured, as the baseline."),
]  # fmt: skip
SpecDraftNMax = Annotated[
    list[str] | None,
    _list_option("--spec-draft-n-max", panel=SPEC_PANEL,
                 help=f"k: most tokens proposed per verification batch (default {defaults.SPEC_DRAFT_N_MAX}; "
                 "0 is the plain case)."),
]  # fmt: skip
SpecDraftNMin = Annotated[
    list[str] | None,
    _list_option("--spec-draft-n-min", panel=SPEC_PANEL,
                 help=f"Fewest tokens worth a verification batch (default {defaults.SPEC_DRAFT_N_MIN})."),
]  # fmt: skip
SpecNgramMax = Annotated[
    list[str] | None,
    _list_option("--spec-ngram-max", panel=SPEC_PANEL,
                 help=f"Prompt lookup: longest n-gram matched (default {defaults.SPEC_NGRAM_MAX})."),
]  # fmt: skip
SpecNgramMin = Annotated[
    list[str] | None,
    _list_option("--spec-ngram-min", panel=SPEC_PANEL,
                 help=f"Prompt lookup: shortest n-gram matched (default {defaults.SPEC_NGRAM_MIN})."),
]  # fmt: skip
SpecAdaptive = Annotated[
    list[str] | None,
    _list_option("--spec-adaptive", panel=SPEC_PANEL,
                 help="Adaptive k: 1 (the default: k chosen from measured costs and acceptance), 0 (always "
                 "k), or 0,1 to measure both."),
]  # fmt: skip
NoSpecAdaptive = Annotated[
    bool,
    typer.Option("--no-spec-adaptive", help="The same as --spec-adaptive 0.", rich_help_panel=SPEC_PANEL),
]
SpecExact = Annotated[
    list[str] | None,
    _list_option("--spec-exact", panel=SPEC_PANEL,
                 help="1: verify only in batch sizes bit-identical to plain decoding on this build; 0 (the "
                 "default): any size that pays; 0,1: both."),
]  # fmt: skip
NoSpecExact = Annotated[
    bool,
    typer.Option("--no-spec-exact", help="The same as --spec-exact 0.", rich_help_panel=SPEC_PANEL),
]
BenchModelDraft = Annotated[
    str | None,
    typer.Option("--model-draft", "--spec-draft-model", "-md", metavar="MODEL", show_default=False,
                 rich_help_panel=SPEC_PANEL,
                 autocompletion=o._complete_models,
                 help="Draft model (a path, hub reference or alias, like -m); it must share the vocabulary "
                 "of every -m model. Alone it makes the default --spec-type none,draft."),
]  # fmt: skip
BenchGpuLayersDraft = Annotated[
    int | None,
    typer.Option("--gpu-layers-draft", "--spec-draft-ngl", "--n-gpu-layers-draft", "-ngld",
                 metavar="N", show_default=False, rich_help_panel=SPEC_PANEL,
                 help="Draft model layers to offload to the GPU (default: all when this build can offload)."),
]  # fmt: skip
BenchCtxSizeDraft = Annotated[
    int | None,
    typer.Option("--ctx-size-draft", "-cd", metavar="TOKENS", show_default=False,
                 rich_help_panel=SPEC_PANEL, help="Draft model context size (0 or unset: the target's)."),
]  # fmt: skip
BenchCacheTypeKDraft = Annotated[
    str | None,
    typer.Option("--cache-type-k-draft", "-ctkd", metavar="TYPE", show_default=False,
                 rich_help_panel=SPEC_PANEL,
                 help="Draft model's KV cache type of the keys (default: the target's)."),
]  # fmt: skip
BenchCacheTypeVDraft = Annotated[
    str | None,
    typer.Option("--cache-type-v-draft", "-ctvd", metavar="TYPE", show_default=False,
                 rich_help_panel=SPEC_PANEL,
                 help="Draft model's KV cache type of the values (default: the target's)."),
]  # fmt: skip
SpecPrompt = Annotated[
    str | None,
    typer.Option("--prompt", metavar="TEXT", show_default=False, rich_help_panel=SPEC_PANEL,
                 help="The prompt to generate from (default: a short source file and \"The same file again, "
                 "unchanged:\", a copy-heavy prompt)."),
]  # fmt: skip
SpecPromptFile = Annotated[
    Path | None,
    typer.Option("--file", "-f", "--prompt-file", metavar="FILE", show_default=False,
                 rich_help_panel=SPEC_PANEL, help="Read the prompt from FILE (UTF-8), as generate -f; "
                 "--scenario embed: the texts to embed, one per line."),
]  # fmt: skip

Texts = Annotated[
    int | None,
    typer.Option("--texts", min=1, metavar="N", show_default=False, rich_help_panel=RUN_PANEL,
                 help="--scenario embed: embed N generated sentences (default 1000; -f FILE embeds its "
                 "lines instead)."),
]  # fmt: skip

SERVE_PANEL = "Served model (bench -m URL#MODEL or NAME/MODEL: the serving benchmark)"
Concurrency = Annotated[
    list[str] | None,
    typer.Option(
        "--concurrency", metavar="LIST", show_default=False, rich_help_panel=SERVE_PANEL,
        help="Requests in flight at once, swept like the other lists (default 1); served models only.",
    ),
]  # fmt: skip
Requests = Annotated[
    int | None,
    typer.Option(
        "--requests", min=1, metavar="N", show_default=False, rich_help_panel=SERVE_PANEL,
        help="Requests per repetition (default: 4 per unit of concurrency, at least 8).",
    ),
]  # fmt: skip

RequestRate = Annotated[
    list[str] | None,
    typer.Option(
        "--request-rate", metavar="LIST", show_default=False, rich_help_panel=SERVE_PANEL,
        help="Open loop: requests per second, arriving at random (Poisson; see --burstiness) whether or "
        "not earlier ones finished; a comma list sweeps; inf sends them all at once (default inf). With "
        "--concurrency, at most that many in flight; without, no cap.",
    ),
]  # fmt: skip
Burstiness = Annotated[
    float,
    typer.Option(
        "--burstiness", min=0.001, metavar="B", rich_help_panel=SERVE_PANEL,
        help="Arrivals' gamma shape with --request-rate: 1 is Poisson, below 1 burstier, above 1 steadier.",
    ),
]  # fmt: skip
RampUp = Annotated[
    float,
    typer.Option(
        "--ramp-up", min=0, metavar="SECONDS", rich_help_panel=SERVE_PANEL,
        help="With --request-rate: the rate rises linearly from 0 to it over these seconds.",
    ),
]  # fmt: skip
Goodput = Annotated[
    str | None,
    typer.Option(
        "--goodput", metavar="SLOS", show_default=False, rich_help_panel=SERVE_PANEL,
        help="SLOs as ttft:MS,tpot:MS,e2el:MS (any of them): report the rate (req/s) and share of "
        "requests that met every one.",
    ),
]  # fmt: skip
Percentiles = Annotated[
    str | None,
    typer.Option(
        "--percentiles", metavar="LIST", show_default=False, rich_help_panel=SERVE_PANEL,
        help="Percentiles of TTFT, TPOT, ITL and latency to report besides mean and median (default 90,99).",
    ),
]  # fmt: skip
Dataset = Annotated[
    str,
    typer.Option(
        "--dataset", metavar="NAME|FILE", rich_help_panel=SERVE_PANEL,
        help="random: synthetic prompts of -p tokens asking -n (see --range-ratio); or a ShareGPT-format "
        "JSON file: each conversation's first human turn is a prompt, its reply's length the answer's "
        "(-n overrides); drawn with --seed.",
    ),
]  # fmt: skip
RangeRatio = Annotated[
    float,
    typer.Option(
        "--range-ratio", min=0, max=0.999, metavar="R", rich_help_panel=SERVE_PANEL,
        help="--dataset random: each request's prompt and answer lengths drawn from [L(1-R), L(1+R)].",
    ),
]  # fmt: skip
SweepRate = Annotated[
    bool,
    typer.Option(
        "--sweep-rate", rich_help_panel=SERVE_PANEL,
        help="Find the highest --request-rate that still meets --goodput: from the first --request-rate "
        "(default: one request at a time's rate) doubling, then narrowing; a rate whose queue grows "
        "without bound stops early.",
    ),
]  # fmt: skip
GoodputTarget = Annotated[
    float,
    typer.Option(
        "--goodput-target", min=0.01, max=1.0, metavar="SHARE", rich_help_panel=SERVE_PANEL,
        help="--sweep-rate: the share of requests that must meet every SLO for a rate to hold.",
    ),
]  # fmt: skip


@dataclass
class BenchFlags:
    """Every flag of `llmcli bench` (the order is `--help`'s), as the command hands them down."""

    model: Models = None
    n_prompt: NPrompt = None
    n_gen: NGen = None
    pg: PromptGen = None
    depth: Depth = None
    threads: Threads = None
    gpu_layers: GpuLayers = None
    batch_size: Batch = None
    ubatch_size: UBatch = None
    flash_attn: FlashAttn = None
    cache_type_k: CacheK = None
    cache_type_v: CacheV = None
    repack: BenchRepack = None
    no_repack: NoRepack = False
    repetitions: Reps = 5
    no_warmup: NoWarmup = False
    output: Output = "md"
    scenario: Scenario = "tests"
    roofline: Roofline = False
    ctx_size: CtxSize = None
    delay: Delay = 0.0
    seed: Seed = 1234
    parallel: Parallel = None
    busy: Busy = 0
    texts: Texts = None
    concurrency: Concurrency = None
    requests: Requests = None
    request_rate: RequestRate = None
    burstiness: Burstiness = 1.0
    ramp_up: RampUp = 0.0
    goodput: Goodput = None
    percentiles: Percentiles = None
    dataset: Dataset = "random"
    range_ratio: RangeRatio = 0.0
    sweep_rate: SweepRate = False
    goodput_target: GoodputTarget = 0.9
    spec_type: SpecTypes = None
    spec_draft_n_max: SpecDraftNMax = None
    spec_draft_n_min: SpecDraftNMin = None
    spec_ngram_max: SpecNgramMax = None
    spec_ngram_min: SpecNgramMin = None
    spec_adaptive: SpecAdaptive = None
    no_spec_adaptive: NoSpecAdaptive = False
    spec_exact: SpecExact = None
    no_spec_exact: NoSpecExact = False
    model_draft: BenchModelDraft = None
    gpu_layers_draft: BenchGpuLayersDraft = None
    ctx_size_draft: BenchCtxSizeDraft = None
    cache_type_k_draft: BenchCacheTypeKDraft = None
    cache_type_v_draft: BenchCacheTypeVDraft = None
    prompt: SpecPrompt = None
    prompt_file: SpecPromptFile = None
    timeout: o.Timeout = None
    offline: o.Offline = False
    force: o.Force = False

    def not_for(self, run: str) -> list[str]:
        """The flags given that `run` ("local": a local model's scenarios, "serve": the serving
        benchmark, "embed": --scenario embed) does not take, as errors name them, in --help's order:
        the one table of which run takes which flag."""
        local, serve, embed = {"local"}, {"serve"}, {"embed"}
        table = [
            ("-p", self.n_prompt, local | serve), ("-n", self.n_gen, local | serve), ("-pg", self.pg, local),
            ("-d", self.depth, local), ("-t", self.threads, local | embed), ("-ngl", self.gpu_layers, local),
            ("-b", self.batch_size, local | embed), ("-ub", self.ubatch_size, local),
            ("-fa", self.flash_attn, local), ("-ctk", self.cache_type_k, local),
            ("-ctv", self.cache_type_v, local), ("--repack", self.repack, local),
            ("--no-repack", self.no_repack, local), ("--roofline", self.roofline, local),
            ("--busy", self.busy, local), ("--ctx-size", self.ctx_size, local),
            ("--scenario", self.scenario not in ("tests", "embed"), local),
            ("--parallel", self.parallel, local),
            ("--concurrency", self.concurrency, serve), ("--requests", self.requests, serve),
            ("--request-rate", self.request_rate, serve), ("--burstiness", self.burstiness != 1.0, serve),
            ("--ramp-up", self.ramp_up, serve), ("--goodput", self.goodput, serve),
            ("--percentiles", self.percentiles, serve), ("--dataset", self.dataset != "random", serve),
            ("--range-ratio", self.range_ratio, serve), ("--sweep-rate", self.sweep_rate, serve),
            ("--goodput-target", self.goodput_target != 0.9, serve),
        ]  # fmt: skip
        given = [flag for flag, value, runs in table if value and run not in runs]
        spec = self.spec_given
        if run == "embed":  # -f FILE: the texts to embed
            spec = [flag for flag in spec if flag != "-f/--file"]
        return given + (spec if run != "local" else [])

    @property
    def spec_given(self) -> list[str]:
        """The --scenario spec flags given, as they are named in errors."""
        spec_flags = {"--spec-type": self.spec_type, "--spec-draft-n-max": self.spec_draft_n_max,
                      "--spec-draft-n-min": self.spec_draft_n_min, "--spec-ngram-max": self.spec_ngram_max,
                      "--spec-ngram-min": self.spec_ngram_min, "--spec-adaptive": self.spec_adaptive,
                      "--no-spec-adaptive": self.no_spec_adaptive or None, "--spec-exact": self.spec_exact,
                      "--no-spec-exact": self.no_spec_exact or None, "-md": self.model_draft,
                      "-ngld": self.gpu_layers_draft, "-cd": self.ctx_size_draft,
                      "-ctkd": self.cache_type_k_draft, "-ctvd": self.cache_type_v_draft,
                      "--prompt": self.prompt, "-f/--file": self.prompt_file}  # fmt: skip
        return [flag for flag, value in spec_flags.items() if value is not None]
