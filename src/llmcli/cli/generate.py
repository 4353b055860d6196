"""`llmcli generate`: one prompt in, the model's text out on stdout, made for shell pipelines."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmcli.cli import ask as a
from llmcli.cli import options as o


@o.run_flags
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
    flags: o.RunFlags = None,  # type: ignore[assignment]  # run_flags: ctx_size ... cache_type_v_draft
    hide_thinking: Annotated[
        bool,
        typer.Option(
            "--hide-thinking",
            help="A reasoning model's reasoning is not shown (it goes to stderr otherwise; stdout "
            "has the answer alone either way).",
        ),
    ] = False,
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
    attach: Annotated[
        list[str] | None,
        typer.Option("--attach", "-a", help="An image (PNG, JPEG, WebP, GIF) or a text file (Markdown, "
                     "code, JSON, CSV, ...) for the prompt: a file, an http(s) URL, or '-' (stdin); "
                     "repeatable.", metavar="FILE|URL", show_default=False),
    ] = None,
    mmproj: Annotated[
        str | None,
        typer.Option("--mmproj", help="The model's image projector (else an mmproj*.gguf beside the model).",
                     metavar="FILE", show_default=False),
    ] = None,
    from_: a.From = None,
    search: a.Search = "hybrid",
    passages: a.Passages = a.PASSAGES,
    rerank: a.Rerank = None,
    min_score: a.MinScore = a.MIN_SCORE,
    always_answer: a.AlwaysAnswer = False,
    embed_model: a.EmbedModel = "",
    timeout: o.Timeout = None,
    offline: o.Offline = False,
    force: o.Force = False,
) -> None:
    """Generate text from a prompt; the text alone goes to stdout.

    Example: cat notes.txt | llmcli generate "Summarize:" --max-tokens 200
    """
    from llmcli.cli.generate_run import Generate, run

    how = a.settings(from_, search, passages, rerank, min_score, always_answer, embed_model)
    run(ctx, flags, Generate(prompt, file, model, system, raw, fallback_template, hide_thinking, stats,
                             as_json, prompt_cache, prompt_cache_ro, timeout, offline, force,
                             attach or [], mmproj, ask=how))  # fmt: skip
