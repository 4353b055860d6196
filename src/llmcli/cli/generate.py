"""`llmcli generate`: one prompt in, the model's text out on stdout, made for shell pipelines."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmcli.cli import options as o
from llmcli.errors import ExitCode, UsageError


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
    params = flags.sampling()
    history = flags.continued()  # --continue / --cid: the logged conversation
    if history is not None and model is None:
        model = history.model
    system = settings.resolve("system", system) or (history.system if history is not None else None)
    from llmcli.loader import load_engine

    env = environment.current()
    loaded = load_engine(
        model, flags.engine(ctx), offline=offline, force=force, debug=render.debug(), timeout=timeout,
        factory=env.engine_factory, check_files=env.checks_model_files,
    )  # fmt: skip
    if loaded.served and prompt_cache is not None:
        raise UsageError("--prompt-cache needs a local model: a served model's cache lives on its server")
    flags.after_load(loaded)
    from llmcli.request.generate import run_generate
    from llmcli.prompting import generate_format
    from llmcli.sampling import apply_recommended

    if applied := apply_recommended(params, loaded.engine.info, loaded.ref):
        render.debug_log(f"the model's recommended sampling: {applied}")

    how, notice = generate_format(loaded.engine, raw=raw, fallback_template=fallback_template)
    if notice:
        ignored = " (--system does not apply to plain text and is ignored)" if system else ""
        render.info(f"{loaded.ref}: {notice}{ignored}")
    raw = how == "raw"
    if history is not None and history.raw != raw:
        raise UsageError(
            f"conversation {history.cid} is "
            + ("plain text (--raw)" if history.raw else "a chat")
            + " and this prompt "
            + ("is plain text" if raw else "is not"),
            hint="continue it the way it began" + (" (add --raw)" if history.raw else ""),
        )
    if history is not None and history.raw:
        text = history.text + text
    constraint = flags.constraint
    log = flags.logged(loaded.ref, "generate", history, constraint=constraint)
    if prompt_cache is None and history is not None and not loaded.served:
        prompt_cache, prompt_cache_ro = _warm_state(history), True
        if log is not None and prompt_cache is not None:
            log.kv_state = str(prompt_cache)  # the state this conversation warms from next time too
    from llmcli.errors import StreamBrokenError

    if flags.wants_tools and raw:
        raise UsageError("tools need the chat template: --raw (or a base model's plain continuation) "
                         "cannot offer them")  # fmt: skip
    toolset = flags.toolset()
    try:
        result = run_generate(
            loaded, text, params, system=system, raw=raw, stream_stdout=not as_json, constraint=constraint,
            prompt_cache=prompt_cache, prompt_cache_ro=prompt_cache_ro, show_thinking=not hide_thinking,
            think=flags.thinking(), history=history.messages if history is not None and not raw else None,
            log=log, tool_loop=tool_loop(flags, toolset),
        )  # fmt: skip
    except StreamBrokenError as exc:  # a served model broke off: the partial text was printed
        if as_json:
            from llmcli import record

            failed = record.build(
                ref=loaded.ref, info=loaded.engine.info, params=params, done=None, prompt_format=None,
                error=exc.message, partial_text=exc.text,
            )  # fmt: skip
            render.out_json(failed, schema="record")
        raise
    finally:
        if toolset is not None:
            toolset.close()
    if as_json:
        render.out_json(result.record(), schema="record")
    if stats:  # stderr, so with --json too
        render.err_line(result.stats_line())
    if result.done.finish_reason != "interrupted" and not loaded.served:
        from llmcli.request.spec_notices import measure_spec_costs

        measure_spec_costs(loaded.engine)
    if result.done.finish_reason == "interrupted":
        if result.incomplete:
            render.err_line(result.incomplete_error().one_line())
        raise typer.Exit(int(ExitCode.INTERRUPTED))
    if result.incomplete:
        raise result.incomplete_error()
    missing = result.missing_answer()  # no answer: stdout stays empty, and the exit code says so
    if missing is not None:
        raise missing


def _warm_state(history) -> Path | None:
    """The saved KV state a continued conversation left (a chat session's, a --prompt-cache file),
    if it is still there: its prefix is reused where it matches (kvstore checks that it belongs)."""
    state = history.last.get("kv_state")
    return Path(state) if state and Path(state).is_file() else None


def tool_loop(flags: o.RunFlags, toolset):
    """generate's tool loop: calls run only with --approve-tools (else the first one stops the run
    before anything runs); --show-tools prints each call and its result on stderr."""
    if toolset is None:
        return None
    from llmcli import render
    from llmcli.request.tool_loop import ToolLoop, call_line, refuse_unapproved

    approve, rounds, timeout = flags.tool_settings()
    on_result = None
    if flags.show_tools:

        def on_result(record: dict) -> None:
            render.err_line(call_line(record))

    return ToolLoop(toolset, (lambda call: "yes") if approve else refuse_unapproved, rounds, timeout,
                    on_result=on_result)  # fmt: skip


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
