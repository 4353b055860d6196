"""`llmcli generate`: one prompt in, the model's text out on stdout, made for shell pipelines."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmcli.cli import options as o
from llmcli.errors import ExitCode, UsageError


def generate(
    ctx: typer.Context,
    prompt: Annotated[
        str | None, typer.Argument(help="The prompt. Piped stdin comes first, then this.")
    ] = None,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="Read the prompt from a file.", dir_okay=False)
    ] = None,
    model: o.Model = None,
    system: Annotated[
        str | None,
        typer.Option("--system", help="System prompt.", envvar="LLMCLI_SYSTEM", show_default=False),
    ] = None,
    raw: Annotated[bool, typer.Option("--raw", help="Plain text completion: no chat template.")] = False,
    fallback_template: o.FallbackTemplate = False,
    ctx_size: o.CtxSize = None,
    gpu_layers: o.GpuLayers = None,
    threads: o.Threads = None,
    batch_size: o.BatchSize = None,
    flash_attn: o.FlashAttn = None,
    repack: o.Repack = None,
    cache_type_k: o.CacheTypeK = None,
    cache_type_v: o.CacheTypeV = None,
    temperature: o.Temperature = None,
    top_k: o.TopK = None,
    top_p: o.TopP = None,
    min_p: o.MinP = None,
    repeat_penalty: o.RepeatPenalty = None,
    seed: o.Seed = None,
    max_tokens: o.MaxTokens = None,
    stop: o.Stop = None,
    grammar_file: o.GrammarFile = None,
    json_schema: o.JsonSchema = None,
    spec_type: o.SpecType = None,
    spec_draft_n_max: o.SpecDraftNMax = None,
    spec_draft_n_min: o.SpecDraftNMin = None,
    spec_ngram_max: o.SpecNgramMax = None,
    spec_ngram_min: o.SpecNgramMin = None,
    spec_adaptive: o.SpecAdaptive = None,
    spec_exact: o.SpecExact = None,
    model_draft: o.ModelDraft = None,
    gpu_layers_draft: o.GpuLayersDraft = None,
    ctx_size_draft: o.CtxSizeDraft = None,
    cache_type_k_draft: o.CacheTypeKDraft = None,
    cache_type_v_draft: o.CacheTypeVDraft = None,
    stats: Annotated[
        bool, typer.Option("--stats", help="Print speed figures on stderr after the text.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON document instead of the text.")
    ] = False,
    prompt_cache: Annotated[
        Path | None,
        typer.Option(
            "--prompt-cache",
            help="Reuse the KV state saved in FILE for the longest common prompt prefix, and update "
            "FILE after the run.",
            dir_okay=False,
            metavar="FILE",
            show_default=False,
        ),
    ] = None,
    prompt_cache_ro: Annotated[
        bool, typer.Option("--prompt-cache-ro", help="Use --prompt-cache FILE but never write it.")
    ] = False,
    timeout: o.Timeout = None,
    offline: o.Offline = False,
    force: o.Force = False,
) -> None:
    """Generate text from a prompt; the text alone goes to stdout.

    Example: cat notes.txt | llmcli generate "Summarize:" --max-tokens 200
    """
    from llmcli import environment, render, settings

    if prompt_cache_ro and prompt_cache is None:
        raise UsageError("--prompt-cache-ro needs --prompt-cache FILE")
    text = read_prompt(prompt, file)
    params = o.sampling_params(
        temperature, top_k, top_p, min_p, repeat_penalty, seed, max_tokens, stop, grammar_file, json_schema
    )
    system = settings.resolve("system", system) or None
    from llmcli.loader import load_engine

    spec = o.spec_options(
        spec_type,
        spec_draft_n_max,
        spec_draft_n_min,
        spec_ngram_max,
        spec_ngram_min,
        spec_adaptive,
        spec_exact,
        model_draft,
        gpu_layers_draft,
        ctx_size_draft,
        ctx,
        cache_type_k_draft,
        cache_type_v_draft,
    )
    engine_opts = o.engine_options(
        ctx_size, gpu_layers, threads, batch_size, flash_attn, spec, repack, cache_type_k, cache_type_v
    )
    env = environment.current()
    loaded = load_engine(model, engine_opts, offline=offline, force=force, debug=render.debug(),
                         timeout=timeout, factory=env.engine_factory,
                         check_files=env.checks_model_files)  # fmt: skip
    o.warn_amx_repack(repack, loaded)
    if loaded.served:
        if prompt_cache is not None:
            raise UsageError("--prompt-cache needs a local model: a served model's cache lives on its server")
        o.warn_local_only(ctx_size=ctx_size, gpu_layers=gpu_layers, threads=threads, batch_size=batch_size,
                          flash_attn=flash_attn, repack=repack, cache_type_k=cache_type_k,
                          cache_type_v=cache_type_v)  # fmt: skip
    from llmcli.generation import run_generate
    from llmcli.prompting import generate_format
    from llmcli.sampling import apply_recommended

    if applied := apply_recommended(params, loaded.engine.info, loaded.ref):
        render.debug_log(f"the model's recommended sampling: {applied}")

    how, notice = generate_format(loaded.engine, raw=raw, fallback_template=fallback_template)
    if notice:
        ignored = " (--system does not apply to plain text and is ignored)" if system else ""
        render.info(f"{loaded.ref}: {notice}{ignored}")
    raw = how == "raw"
    constraint = "json_schema" if json_schema is not None else "grammar" if grammar_file else None
    from llmcli.errors import StreamBrokenError

    try:
        result = run_generate(
            loaded, text, params, system=system, raw=raw, stream_stdout=not as_json, constraint=constraint,
            prompt_cache=prompt_cache, prompt_cache_ro=prompt_cache_ro,
        )  # fmt: skip
    except StreamBrokenError as exc:  # a served model broke off: the partial text was printed
        if as_json:
            from llmcli import record

            render.out_json(record.build(ref=loaded.ref, info=loaded.engine.info, params=params, done=None,
                                         prompt_format=None, error=exc.message, partial_text=exc.text))  # fmt: skip
        raise
    if as_json:
        render.out_json(result.record())
    if stats:  # stderr, so with --json too
        render.err_line(result.stats_line())
    if result.done.finish_reason == "interrupted":
        if result.incomplete:
            render.err_line(result.incomplete_error().one_line())
        raise typer.Exit(int(ExitCode.INTERRUPTED))
    if result.incomplete:
        raise result.incomplete_error()


def read_prompt(prompt: str | None, file: Path | None) -> str:
    """Piped stdin, then the prompt file, then the argument, joined by blank lines."""
    from llmcli import environment

    env = environment.current()
    parts: list[str] = []
    if env.stdin_piped:
        data = env.stdin.buffer.read()
        if data:
            try:
                parts.append(data.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise UsageError(f"stdin is not UTF-8 text (invalid byte at offset {exc.start})") from None
    if file is not None:
        try:
            parts.append(file.read_text(encoding="utf-8"))
        except UnicodeDecodeError as exc:
            raise UsageError(f"{file} is not UTF-8 text (invalid byte at offset {exc.start})") from None
        except OSError as exc:
            raise UsageError(f"cannot read {file}: {exc.strerror or exc}") from None
    if prompt:
        parts.append(prompt)
    text = "\n\n".join(p.rstrip("\n") for p in parts if p.strip())
    if not text.strip():
        raise UsageError(
            "the prompt is empty", hint='pass it as an argument or on stdin: llmcli generate "..."'
        )
    return text
