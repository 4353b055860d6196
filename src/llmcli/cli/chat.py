"""`llmcli chat`: the interactive REPL (thin: options in, a Repl out)."""

from __future__ import annotations

from typing import Annotated

import typer

from llmcli.cli import options as o


@o.run_flags
def chat(
    ctx: typer.Context,
    model: o.Model = None,
    system: Annotated[
        str | None,
        typer.Option("--system", help="System prompt.", envvar="LLMCLI_SYSTEM", show_default=False),
    ] = None,
    session: Annotated[
        str | None,
        typer.Option(
            "--session",
            help="Save the conversation under NAME after every turn (and continue it if it exists).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    resume: Annotated[bool, typer.Option("--resume", help="Continue the most recent session.")] = False,
    on_overflow: Annotated[
        str | None,
        typer.Option(
            "--on-overflow",
            help="When the history outgrows the context: drop-oldest (default) or error.",
            envvar="LLMCLI_ON_OVERFLOW",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    kv_cache_max_mb: Annotated[
        int | None,
        typer.Option(
            "--kv-cache-max-mb",
            help="Megabytes of saved KV states (a session's warm resume) under the cache directory, "
            "oldest removed first; 0: save none.",
            envvar="LLMCLI_KV_CACHE_MAX_MB",
            min=0,
            show_default=False,
        ),
    ] = None,
    flags: o.RunFlags = None,  # type: ignore[assignment]  # run_flags: ctx_size ... cache_type_v_draft
    hide_thinking: Annotated[
        bool,
        typer.Option(
            "--hide-thinking",
            help="A reasoning model's reasoning is not streamed: on a terminal only the line it folds "
            "to when the answer starts (/think show shows it), piped nothing (it goes to stderr "
            "otherwise).",
        ),
    ] = False,
    fallback_template: o.FallbackTemplate = False,
    attach: Annotated[
        list[str] | None,
        typer.Option("--attach", "-a", help="An image (PNG, JPEG, WebP, GIF) or a text file for the first "
                     "message; repeatable (later ones: /attach PATH).", metavar="FILE", show_default=False),
    ] = None,  # fmt: skip
    mmproj: Annotated[
        str | None,
        typer.Option("--mmproj", help="The model's image projector (else an mmproj*.gguf beside the model).",
                     metavar="FILE", show_default=False),
    ] = None,  # fmt: skip
    timeout: o.Timeout = None,
    offline: o.Offline = False,
    force: o.Force = False,
) -> None:
    """Chat with a model; the whole conversation is the context of every turn.

    Example: llmcli chat -m bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M --session notes
    """
    from llmcli.cli.chat_run import Chat, run

    run(ctx, flags, Chat(model, system, session, resume, on_overflow, kv_cache_max_mb, hide_thinking,
                         fallback_template, timeout, offline, force, attach or [], mmproj))  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command("chat")(chat)
