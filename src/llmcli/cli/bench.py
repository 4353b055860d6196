"""`llmcli bench`: llama-bench style tokens-per-second reports, the chat scenario, and `bench compare`.

Thin: flags become a `llmcli.bench.run.Request` (or, for served models, a `llmcli.bench.serve.Request`);
progress goes to stderr and the results table (or CSV / JSON / JSON lines) to stdout, both drawn by
`llmcli.render.bench`. Measurement lives in `llmcli.bench`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from llmcli import defaults
from llmcli.cli import options as o
from llmcli.cli.helptext import ReadableArgs
from llmcli.errors import ExitCode, UsageError

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
        "plain decoding, tokens drafted and accepted, for every --spec-* setting.",
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
                 rich_help_panel=SPEC_PANEL, help="Read the prompt from FILE (UTF-8), as generate -f."),
]  # fmt: skip

SERVE_PANEL = "Served model (bench -m URL#MODEL or NAME/MODEL: the serving benchmark)"
Concurrency = Annotated[
    list[str] | None,
    typer.Option(
        "--concurrency", "-c", metavar="LIST", show_default=False, rich_help_panel=SERVE_PANEL,
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
        "-c, at most that many in flight; without, no cap.",
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

bench_app = typer.Typer(
    name="bench",
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")


@bench_app.callback(invoke_without_command=True)
def bench(
    ctx: typer.Context,
    model: Models = None,
    n_prompt: NPrompt = None,
    n_gen: NGen = None,
    pg: PromptGen = None,
    depth: Depth = None,
    threads: Threads = None,
    gpu_layers: GpuLayers = None,
    batch_size: Batch = None,
    ubatch_size: UBatch = None,
    flash_attn: FlashAttn = None,
    cache_type_k: CacheK = None,
    cache_type_v: CacheV = None,
    repack: BenchRepack = None,
    no_repack: NoRepack = False,
    repetitions: Reps = 5,
    no_warmup: NoWarmup = False,
    output: Output = "md",
    scenario: Scenario = "tests",
    roofline: Roofline = False,
    ctx_size: CtxSize = None,
    delay: Delay = 0.0,
    seed: Seed = 1234,
    busy: Busy = 0,
    concurrency: Concurrency = None,
    requests: Requests = None,
    request_rate: RequestRate = None,
    burstiness: Burstiness = 1.0,
    ramp_up: RampUp = 0.0,
    goodput: Goodput = None,
    percentiles: Percentiles = None,
    dataset: Dataset = "random",
    range_ratio: RangeRatio = 0.0,
    sweep_rate: SweepRate = False,
    goodput_target: GoodputTarget = 0.9,
    spec_type: SpecTypes = None,
    spec_draft_n_max: SpecDraftNMax = None,
    spec_draft_n_min: SpecDraftNMin = None,
    spec_ngram_max: SpecNgramMax = None,
    spec_ngram_min: SpecNgramMin = None,
    spec_adaptive: SpecAdaptive = None,
    no_spec_adaptive: NoSpecAdaptive = False,
    spec_exact: SpecExact = None,
    no_spec_exact: NoSpecExact = False,
    model_draft: BenchModelDraft = None,
    gpu_layers_draft: BenchGpuLayersDraft = None,
    ctx_size_draft: BenchCtxSizeDraft = None,
    cache_type_k_draft: BenchCacheTypeKDraft = None,
    cache_type_v_draft: BenchCacheTypeVDraft = None,
    prompt: SpecPrompt = None,
    prompt_file: SpecPromptFile = None,
    timeout: o.Timeout = None,
    offline: o.Offline = False,
    force: o.Force = False,
) -> None:
    """Measure prefill (pp) and decode (tg) speed, as llama-bench does: mean ± sd over repetitions.

    Example: llmcli bench -p 512 -n 128 -t 1-4 -d 0,4096 -o json > run.json

    Speculative decoding: llmcli bench --scenario spec -n 128 --spec-draft-n-max 2,4,8 --spec-exact 0,1
    """
    if ctx.invoked_subcommand is not None:
        return
    spec_flags = {"--spec-type": spec_type, "--spec-draft-n-max": spec_draft_n_max,
                  "--spec-draft-n-min": spec_draft_n_min, "--spec-ngram-max": spec_ngram_max,
                  "--spec-ngram-min": spec_ngram_min, "--spec-adaptive": spec_adaptive,
                  "--no-spec-adaptive": no_spec_adaptive or None, "--spec-exact": spec_exact,
                  "--no-spec-exact": no_spec_exact or None, "-md": model_draft, "-ngld": gpu_layers_draft,
                  "-cd": ctx_size_draft, "-ctkd": cache_type_k_draft, "-ctvd": cache_type_v_draft,
                  "--prompt": prompt, "-f/--file": prompt_file}  # fmt: skip
    spec_given = [flag for flag, value in spec_flags.items() if value is not None]
    from llmcli import render
    from llmcli.bench import run as session
    from llmcli.bench import serve
    from llmcli.bench import sweep as s
    from llmcli.gguf_file import QUANTIZED_V, v_cache_refused
    from llmcli.render import bench as formats

    _check_choice("--output", output, formats.FORMATS)
    _check_choice("--scenario", scenario, tuple(session.SCENARIOS))
    served = serve.served_endpoints(s.parse_models(model), timeout)
    if served:
        local_only = {"-pg": pg, "-d": depth, "-t": threads, "-ngl": gpu_layers, "-b": batch_size,
                      "-ub": ubatch_size, "-fa": flash_attn, "-ctk": cache_type_k, "-ctv": cache_type_v,
                      "--repack": repack, "--no-repack": no_repack or None, "--roofline": roofline or None,
                      "--busy": busy or None, "--ctx-size": ctx_size,
                      "--scenario": None if scenario == session.DEFAULT_SCENARIO else scenario}  # fmt: skip
        given = [flag for flag, value in local_only.items() if value] + spec_given
        if given:
            raise UsageError(f"{', '.join(given)}: not for a served model (the serving benchmark takes "
                             "-p, -n, -c, --requests, the --request-rate and --goodput family, --dataset, "
                             "-r, --no-warmup, --delay, --seed and -o)")  # fmt: skip
        load = serve.Load(
            burstiness=burstiness, ramp_up_s=ramp_up, slo_ms=serve.parse_goodput(goodput) if goodput else {},
            percentiles=serve.parse_percentiles(percentiles), range_ratio=range_ratio,
        )  # fmt: skip
        return _bench_served(served, n_prompt, n_gen, concurrency, requests, repetitions, not no_warmup,
                             output, seed, delay, request_rate, load, dataset, sweep_rate,
                             goodput_target)  # fmt: skip
    serve_only = {"-c/--concurrency": concurrency, "--requests": requests, "--request-rate": request_rate,
                  "--burstiness": burstiness != 1.0 or None, "--ramp-up": ramp_up or None,
                  "--goodput": goodput,
                  "--percentiles": percentiles, "--dataset": None if dataset == "random" else dataset,
                  "--range-ratio": range_ratio or None, "--sweep-rate": sweep_rate or None,
                  "--goodput-target": goodput_target != 0.9 or None}  # fmt: skip
    if given_serve := [flag for flag, value in serve_only.items() if value]:
        raise UsageError(
            f"{', '.join(given_serve)}: for a served model (the serving benchmark)",
            hint="a local model's context size is --ctx-size",
        )
    sweep = _sweep(model, n_prompt, n_gen, pg, depth, threads, gpu_layers, batch_size, ubatch_size,
                   flash_attn, cache_type_k, cache_type_v)  # fmt: skip
    sweep.repack = _repack(repack, no_repack)
    kind = session.SCENARIOS[scenario]
    if kind.own_prompts and (n_prompt or pg or depth):
        raise UsageError(f"-p, -pg and -d do not apply to --scenario {scenario} ({kind.own_prompts})")
    if not kind.takes_spec and spec_given:
        raise UsageError(f"{', '.join(spec_given)}: only for --scenario spec (speculative decoding)")
    request = session.Request(
        sweep, scenario, repetitions, not no_warmup, roofline, ctx_size, delay, seed, offline, busy,
        force=force,
    )  # fmt: skip
    if kind.takes_spec:
        request.spec = _spec_sweep(
            spec_type, spec_draft_n_max, spec_draft_n_min, spec_ngram_max, spec_ngram_min,
            _bools("--spec-adaptive", spec_adaptive, no_spec_adaptive),
            _bools("--spec-exact", spec_exact, no_spec_exact, default=False), model_draft, gpu_layers_draft,
            ctx_size_draft, cache_type_k_draft, cache_type_v_draft,
        )  # fmt: skip
        draft_v = request.spec.type_v_draft
        if False in sweep.flash_attn and v_cache_refused(draft_v, False):
            raise UsageError(f"-ctvd {draft_v}: {QUANTIZED_V}, and -fa lists 0")
        request.prompt, request.prompt_source = _spec_prompt(prompt, prompt_file)
    from llmcli import environment
    from llmcli.bench.llama_backend import LlamaBackend
    from llmcli.bench.runner import Backend

    backend: Backend = (environment.current().bench_backend or LlamaBackend)(debug=render.debug())
    if True in sweep.repack and backend.weight_repack(None) is False:
        render.warn(o.AMX_REPACK_WARNING)
    plan = session.plan(request, backend)
    _warn_dropped(plan.dropped)
    if roofline:
        render.info("llmcli bench: measuring memory bandwidth ...")
    run = session.execute(request, plan, backend, formats.Progress(), on_record=_streamer(output))
    _write_results(run, output)
    if run.error is not None:
        render.warn(
            f"stopped: {len(run.results)} of {run.planned} results finished; they are marked incomplete"
        )
        raise run.error
    _exit_if_interrupted(run)


@bench_app.command("compare")
def compare(
    old: Annotated[
        Path, typer.Argument(help="The baseline: llmcli bench -o json/jsonl, or llama-bench -o json.")
    ],
    new: Annotated[Path, typer.Argument(help="The run to compare against it.")],
    alpha: Annotated[
        float, typer.Option("--alpha", metavar="P", help="Significance level of the t-test.")
    ] = 0.05,
    output: Annotated[
        str, typer.Option("--output", "-o", metavar="FORMAT", help="Output format: md or json.")
    ] = "md",
) -> None:
    """Per test: new/old speed ratio, and whether the difference is larger than the noise (Welch's t-test).

    Example: llmcli bench compare before.json after.json
    """
    from llmcli import render
    from llmcli.bench import compare as cmp
    from llmcli.render.bench import comparison

    _check_choice("--output", output, ("md", "json"))
    result = cmp.compare(old, new, alpha)
    for side in (result.old, result.new):
        if not side.complete:
            render.warn(f"{side.path} is from a run that did not finish")
    if output == "json":
        render.out_json(result.document(), schema="bench-compare")
    else:
        sys.stdout.write(comparison(result))


@bench_app.command("plot", cls=ReadableArgs)
def plot(
    results: Annotated[
        list[Path],
        typer.Argument(
            help="Result files (llmcli bench -o json or jsonl); several are overlaid.", metavar="RESULTS"
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            show_default=False,
            help="Write the chart as an image here: PNG, SVG or PDF by the suffix (default: a chart on "
            "the terminal).",
        ),
    ] = None,  # fmt: skip
    metric: Annotated[
        str,
        typer.Option(
            "--metric", metavar="NAME", help="Serving runs: the latency drawn: ttft, tpot, itl or e2el."
        ),
    ] = "ttft",
) -> None:
    """Draw results: a serving run's latency percentiles against throughput (SLO line, goodput knee),
    a local run's tokens/s per test kind against the setting it swept (error bars: the spread of
    the repetitions); several files overlaid. Needs the plot extra: pip install 'llmcli[plot]'.

    Example: llmcli bench plot sweep.json -o sweep.png
    """
    from llmcli import render
    from llmcli.render import charts
    from llmcli.render import plot as draw

    if out is not None:
        draw.check_format(out)
    files = [(path.stem, *charts.load(path)) for path in results]
    chart = charts.bench_chart(files, metric)
    if out is None:
        sys.stdout.write(draw.terminal(chart, colour=render.color_enabled(sys.stdout)))
    else:
        draw.save(chart, out)


def _bench_served(found, n_prompt, n_gen, concurrency, requests, reps, warmup, output, seed, delay,
                  request_rate, load, dataset, sweep_rate, goodput_target) -> None:  # fmt: skip
    """The serving benchmark (llmcli.bench.serve): every -p, -n, -c and --request-rate combination,
    per endpoint, or the rate sweep."""
    from pathlib import Path

    from llmcli import render
    from llmcli.bench import serve
    from llmcli.bench import sweep as s
    from llmcli.render import bench as formats

    rates = serve.parse_rates(request_rate)
    open_loop = request_rate is not None or sweep_rate
    pairs: tuple = ()
    if dataset != "random":
        if load.range_ratio:
            raise UsageError("--range-ratio is for --dataset random (a file's lengths are its own)")
        if n_prompt:
            raise UsageError(f"-p: --dataset {dataset} has its own prompts")
        pairs = serve.load_conversations(dataset)
    if (load.burstiness != 1.0 or load.ramp_up_s) and not open_loop:
        raise UsageError("--burstiness and --ramp-up shape arrivals at a --request-rate")
    if load.ramp_up_s and any(r == float("inf") for r in rates) and not sweep_rate:
        raise UsageError("--ramp-up needs a finite --request-rate to rise to")
    caps: list[int | None] = list(s.parse_ints("-c", concurrency, [1], minimum=1))
    if open_loop and not concurrency:
        caps = [None]  # an open loop: no cap unless -c sets one
    if sweep_rate:
        if not load.slo_ms:
            raise UsageError("--sweep-rate needs SLOs to hold: --goodput ttft:MS,tpot:MS,e2el:MS")
        if len(caps) > 1 or len(rates) > 1 or len(n_prompt or []) > 1 or len(n_gen or []) > 1:
            raise UsageError("--sweep-rate sweeps the rate alone: give one -p, -n, -c and --request-rate")
    request = serve.Request(
        found,
        s.parse_ints("-p", n_prompt, s.DEFAULT_N_PROMPT, minimum=1),
        s.parse_ints("-n", n_gen, [] if pairs else s.DEFAULT_N_GEN, minimum=1),
        caps, requests, reps, warmup, seed, delay, rates, load,
        Path(dataset).name if pairs else "random", sweep_rate, goodput_target, pairs,
    )  # fmt: skip
    run = serve.execute(request, formats.ServeProgress(), _streamer(output), debug=render.debug())
    _write_results(run, output)
    answer = run.settings.get("sweep_rate")
    if answer is not None:
        render.info(formats.sweep_answer(answer))
    _exit_if_interrupted(run)


def _exit_if_interrupted(run) -> None:
    from llmcli import render

    if run.interrupted:
        render.warn(
            f"interrupted: {len(run.results)} of {run.planned} results finished; they are marked incomplete"
        )
        raise typer.Exit(int(ExitCode.INTERRUPTED))


def _streamer(output: str):
    """`-o jsonl` writes each record to stdout as its result finishes (as llama-bench does), so a
    long sweep can be followed (`| jq`), and what finished survives a run that dies on the way."""
    if output != "jsonl":
        return None
    from llmcli.render import bench as formats

    def write(record: dict) -> None:
        sys.stdout.write(formats.jsonl_line(record))
        sys.stdout.flush()

    return write


def _write_results(run, output: str) -> None:
    """The other formats, written once the run is over (JSON lines are already out)."""
    if output != "jsonl":
        from llmcli.render import bench as formats

        sys.stdout.write(formats.render(run, output))
        sys.stdout.flush()


def _check_choice(flag: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UsageError(f"{flag} must be one of {', '.join(choices)}, got {value!r}")


def _sweep(model, n_prompt, n_gen, pg, depth, threads, gpu_layers, batch, ubatch, fa, ctk, ctv):
    from llmcli.bench import sweep as s
    from llmcli.engine.llama import physical_cores

    return s.Sweep(
        models=s.parse_models(model),
        n_prompt=s.parse_ints("-p", n_prompt, s.DEFAULT_N_PROMPT),
        n_gen=s.parse_ints("-n", n_gen, s.DEFAULT_N_GEN),
        pg=s.parse_pairs("-pg", pg),
        depth=s.parse_ints("-d", depth, s.DEFAULT_DEPTH),
        threads=s.parse_ints("-t", threads, [physical_cores()], minimum=1),
        gpu_layers=s.parse_ints("-ngl", gpu_layers, s.DEFAULT_GPU_LAYERS),
        n_batch=s.parse_ints("-b", batch, s.DEFAULT_N_BATCH, minimum=1),
        n_ubatch=s.parse_ints("-ub", ubatch, s.DEFAULT_N_UBATCH, minimum=1),
        flash_attn=s.parse_flash_attn("-fa", fa),
        type_k=s.parse_cache_types("-ctk", ctk),
        type_v=s.parse_cache_types("-ctv", ctv),
    )


def _repack(values: list[str] | None, no_repack: bool) -> list[bool | None]:
    from llmcli.bench import sweep as s

    if no_repack and values:
        raise UsageError("--repack and --no-repack: give one", hint="--repack 0,1 measures both")
    return [False] if no_repack else s.parse_repack("--repack", values)


def _spec_sweep(kinds, k, k_min, ngram_max, ngram_min, adaptive, exact, draft, ngld, cd, ctkd, ctvd):
    from llmcli.bench import spec
    from llmcli.bench import sweep as s
    from llmcli.engine.speculation.proposal import kind_of

    names: list[str] = []
    for item in s._items("--spec-type", kinds) if kinds else []:
        try:
            names.append(kind_of(item))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if not names:
        names = ["none", "draft" if draft else "lookup"]
    if "draft" in names and not draft:
        raise UsageError("--spec-type draft needs a draft model: -md/--model-draft REF")
    if draft and "draft" not in names:
        raise UsageError(
            "-md/--model-draft is given but --spec-type lists no draft", hint="add draft to --spec-type"
        )
    if any(v is not None for v in (ngld, cd, ctkd, ctvd)) and not draft:
        raise UsageError("-ngld, -cd, -ctkd and -ctvd set up the draft model: give it with -md/--model-draft")
    if cd is not None and cd < 0:
        raise UsageError(f"-cd/--ctx-size-draft must be >= 0 (0: the target's), got {cd}")
    sweep = spec.SpecSweep(
        kinds=s._dedupe(["none", *names]),
        draft_max=s.parse_ints("--spec-draft-n-max", k, [defaults.SPEC_DRAFT_N_MAX]),
        draft_min=s.parse_ints("--spec-draft-n-min", k_min, [defaults.SPEC_DRAFT_N_MIN]),
        ngram_max=s.parse_ints("--spec-ngram-max", ngram_max, [defaults.SPEC_NGRAM_MAX], minimum=1),
        ngram_min=s.parse_ints("--spec-ngram-min", ngram_min, [defaults.SPEC_NGRAM_MIN], minimum=1),
        adaptive=adaptive, exact=exact, model_draft=draft,
        gpu_layers_draft=None if ngld is None or ngld < 0 else ngld, ctx_size_draft=cd or None,
        type_k_draft=_one_cache_type("-ctkd", ctkd), type_v_draft=_one_cache_type("-ctvd", ctvd),
    )  # fmt: skip
    drafting = [k for k in sweep.draft_max if k > 0]
    if too_big := [m for m in sweep.draft_min if drafting and all(m > k for k in drafting)]:
        # a smaller k than n-min runs with n-min = k (a sweep over k); above every k it is a mistake
        raise UsageError(f"--spec-draft-n-min {too_big[0]} exceeds every --spec-draft-n-max "
                         f"({', '.join(map(str, drafting))})")  # fmt: skip
    if "lookup" in names and not any(b <= a for a in sweep.ngram_max for b in sweep.ngram_min):
        raise UsageError("--spec-ngram-min must not exceed --spec-ngram-max (in at least one combination)")
    sweep.points()  # every setting checked (k at most 64, n-gram lengths at most 16) before anything runs
    return sweep


def _one_cache_type(flag: str, value: str | None) -> str | None:
    """-ctkd/-ctvd: one KV cache type for the draft model (not swept), or None for the target's."""
    from llmcli.bench import sweep as s

    if value is None:
        return None
    types = s.parse_cache_types(flag, [value])
    if len(types) != 1:
        raise UsageError(f"{flag} takes one KV cache type, got {value!r}")
    return types[0]


def _bools(flag: str, values: list[str] | None, off: bool, default: bool = True) -> list[bool]:
    from llmcli.bench import sweep as s

    if off and values:
        raise UsageError(f"give {flag} or --no-{flag[2:]}, not both")
    if off:
        return [False]
    if not values:
        return [default]
    out = []
    for item in s._items(flag, values):
        value = s._BOOLS.get(item.lower())
        if value is None:
            raise UsageError(f"{flag}: expected 0 or 1 (a comma list sweeps), got {item!r}")
        out.append(value)
    return s._dedupe(out)


def _spec_prompt(prompt: str | None, file: Path | None) -> tuple[str, str]:
    """The prompt's text and where it came from, for the record."""
    from llmcli.bench.spec import DEFAULT_PROMPT

    if prompt is not None and file is not None:
        raise UsageError("give --prompt or -f/--file, not both")
    if file is not None:
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(f"{file} is not UTF-8 text (invalid byte at offset {exc.start})") from None
        except OSError as exc:
            raise UsageError(f"cannot read {file}: {exc.strerror or exc}") from None
        if not text.strip():
            raise UsageError(f"{file} is empty: no prompt to generate from")
        return text, str(file)
    if prompt is not None:
        if not prompt.strip():
            raise UsageError("--prompt is empty")
        return prompt, "--prompt"
    return DEFAULT_PROMPT, "default"


def _warn_dropped(dropped) -> None:
    from llmcli import render
    from llmcli.gguf_file import QUANTIZED_V

    for c in dropped:
        label = f"-fa {c.flash_attn_label} with -ctv {c.type_v}"
        render.warn(f"skipping {label}: {QUANTIZED_V}")
