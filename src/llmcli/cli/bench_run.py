"""`llmcli bench` run: the flags (one `BenchFlags`) checked against the kind of run they ask for, a
local measurement (`llmcli.bench.run`) or the serving benchmark (`llmcli.bench.serve`), run, and the
results written: progress on stderr, the table (or CSV / JSON / JSON lines) on stdout."""

from __future__ import annotations

import sys

import typer

from llmcli.cli.bench_flags import BenchFlags
from llmcli.errors import ExitCode, UsageError


def run(f: BenchFlags) -> None:
    """The run the flags ask for: the serving benchmark for served models, else a local one."""
    from llmcli.bench import run as session
    from llmcli.bench import serve
    from llmcli.bench import sweep as s
    from llmcli.render import bench as formats

    check_choice("--output", f.output, formats.FORMATS)
    if f.scenario == "embed":  # an embedding model's throughput: its own flags and records
        from llmcli.cli import bench_embed

        return bench_embed.run(f)
    check_choice("--scenario", f.scenario, (*session.SCENARIOS, "embed"))
    if f.texts is not None:
        raise UsageError("--texts: only for --scenario embed")
    served = serve.served_endpoints(s.parse_models(f.model), f.timeout)
    if served:
        return _run_served(f, served)
    if given_serve := f.not_for("local"):
        raise UsageError(
            f"{', '.join(given_serve)}: for a served model (the serving benchmark)",
            hint="a local model's context size is --ctx-size",
        )
    _run_local(f)


def _run_served(f: BenchFlags, served) -> None:
    """The serving benchmark, once no flag of a local run is given."""
    from llmcli.bench import serve_load, serve_results

    if given := f.not_for("serve"):
        raise UsageError(f"{', '.join(given)}: not for a served model (the serving benchmark takes "
                         "-p, -n, --concurrency, --requests, the --request-rate and --goodput family, "
                         "--dataset, -r, --no-warmup, --delay, --seed and -o)")  # fmt: skip
    load = serve_results.Load(
        burstiness=f.burstiness, ramp_up_s=f.ramp_up,
        slo_ms=serve_load.parse_goodput(f.goodput) if f.goodput else {},
        percentiles=serve_load.parse_percentiles(f.percentiles), range_ratio=f.range_ratio,
    )  # fmt: skip
    _bench_served(served, f.n_prompt, f.n_gen, f.concurrency, f.requests, f.repetitions, not f.no_warmup,
                  f.output, f.seed, f.delay, f.request_rate, load, f.dataset, f.sweep_rate,
                  f.goodput_target)  # fmt: skip


def _local_request(f: BenchFlags):
    """The local run's request (`llmcli.bench.run.Request`), every flag parsed and checked."""
    from llmcli.bench import run as session
    from llmcli.cli.bench_spec import bools, spec_prompt, spec_sweep
    from llmcli.gguf_file import QUANTIZED_V, v_cache_refused
    from llmcli.runspec import configured

    # a load setting not given here: LLMCLI_* or the config file's, else llama-bench's default
    sweep = _sweep(f.model, f.n_prompt, f.n_gen, f.pg, f.depth, f.threads or configured("threads"),
                   f.gpu_layers or configured("gpu_layers"), f.batch_size or configured("batch_size"),
                   f.ubatch_size, f.flash_attn, f.cache_type_k or configured("cache_type_k"),
                   f.cache_type_v or configured("cache_type_v"))  # fmt: skip
    sweep.repack = _repack(f.repack, f.no_repack)
    kind = session.SCENARIOS[f.scenario]
    if kind.own_prompts and (f.n_prompt or f.pg or f.depth):
        raise UsageError(f"-p, -pg and -d do not apply to --scenario {f.scenario} ({kind.own_prompts})")
    if not kind.takes_spec and f.spec_given:
        raise UsageError(f"{', '.join(f.spec_given)}: only for --scenario spec (speculative decoding)")
    if f.parallel and f.scenario != "batch":
        raise UsageError("--parallel is for --scenario batch (sequences decoded together)")
    request = session.Request(
        sweep, f.scenario, f.repetitions, not f.no_warmup, f.roofline, f.ctx_size, f.delay, f.seed, f.offline,
        f.busy, force=f.force,
    )  # fmt: skip
    if kind.takes_spec:
        request.spec = spec_sweep(
            f.spec_type, f.spec_draft_n_max, f.spec_draft_n_min, f.spec_ngram_max, f.spec_ngram_min,
            bools("--spec-adaptive", f.spec_adaptive, f.no_spec_adaptive),
            bools("--spec-exact", f.spec_exact, f.no_spec_exact, default=False), f.model_draft,
            f.gpu_layers_draft, f.ctx_size_draft, f.cache_type_k_draft, f.cache_type_v_draft,
        )  # fmt: skip
        draft_v = request.spec.type_v_draft
        if False in sweep.flash_attn and v_cache_refused(draft_v, False):
            raise UsageError(f"-ctvd {draft_v}: {QUANTIZED_V}, and -fa lists 0")
        request.prompt, request.prompt_source = spec_prompt(f.prompt, f.prompt_file)
    if f.scenario == "batch":
        from llmcli.bench import batch

        request.parallel = batch.parse_parallel(f.parallel)
        if not f.n_prompt:
            sweep.n_prompt = [batch.DEFAULT_N_PROMPT]
    return request


def _run_local(f: BenchFlags) -> None:
    """A local run: planned, measured, written."""
    from llmcli import environment, render
    from llmcli.bench import run as session
    from llmcli.bench.llama_backend import LlamaBackend
    from llmcli.bench.runner import Backend
    from llmcli.cli.resolve import AMX_REPACK_WARNING
    from llmcli.render import bench as formats

    request = _local_request(f)
    backend: Backend = (environment.current().bench_backend or LlamaBackend)(debug=render.debug())
    if True in request.sweep.repack and backend.weight_repack(None) is False:
        render.warn(AMX_REPACK_WARNING)
    plan = session.plan(request, backend)
    _warn_dropped(plan.dropped)
    if f.roofline:
        render.info("llmcli bench: measuring memory bandwidth ...")
    run = session.execute(request, plan, backend, formats.Progress(), on_record=_streamer(f.output))
    _write_results(run, f.output)
    if run.error is not None:
        render.warn(
            f"stopped: {len(run.results)} of {run.planned} results finished; they are marked incomplete"
        )
        raise run.error
    _exit_if_interrupted(run)


def _bench_served(found, n_prompt, n_gen, concurrency, requests, reps, warmup, output, seed, delay,
                  request_rate, load, dataset, sweep_rate, goodput_target) -> None:  # fmt: skip
    """The serving benchmark (llmcli.bench.serve): every -p, -n, --concurrency and --request-rate combination,
    per endpoint, or the rate sweep."""
    from pathlib import Path

    from llmcli import render
    from llmcli.bench import serve, serve_load
    from llmcli.bench import sweep as s
    from llmcli.render import bench as formats

    rates = serve_load.parse_rates(request_rate)
    open_loop = request_rate is not None or sweep_rate
    pairs: tuple = ()
    if dataset != "random":
        if load.range_ratio:
            raise UsageError("--range-ratio is for --dataset random (a file's lengths are its own)")
        if n_prompt:
            raise UsageError(f"-p: --dataset {dataset} has its own prompts")
        pairs = serve_load.load_conversations(dataset)
    if (load.burstiness != 1.0 or load.ramp_up_s) and not open_loop:
        raise UsageError("--burstiness and --ramp-up shape arrivals at a --request-rate")
    if load.ramp_up_s and any(r == float("inf") for r in rates) and not sweep_rate:
        raise UsageError("--ramp-up needs a finite --request-rate to rise to")
    caps: list[int | None] = list(s.parse_ints("--concurrency", concurrency, [1], minimum=1))
    if open_loop and not concurrency:
        caps = [None]  # an open loop: no cap unless --concurrency sets one
    if sweep_rate:
        if not load.slo_ms:
            raise UsageError("--sweep-rate needs SLOs to hold: --goodput ttft:MS,tpot:MS,e2el:MS")
        if len(caps) > 1 or len(rates) > 1 or len(n_prompt or []) > 1 or len(n_gen or []) > 1:
            raise UsageError(
                "--sweep-rate sweeps the rate alone: give one -p, -n, --concurrency and --request-rate"
            )
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


def check_choice(flag: str, value: str, choices: tuple[str, ...]) -> None:
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


def _warn_dropped(dropped) -> None:
    from llmcli import render
    from llmcli.gguf_file import QUANTIZED_V

    for c in dropped:
        label = f"-fa {c.flash_attn_label} with -ctv {c.type_v}"
        render.warn(f"skipping {label}: {QUANTIZED_V}")
