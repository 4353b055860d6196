"""`llmcli generate`'s run: the prompt read, the model loaded, the request run through
`llmcli.request`, and what it made written (the text or one JSON document on stdout, the
stats on stderr), with the exit code it earned."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer

from llmcli.cli import options as o
from llmcli.errors import ExitCode, UsageError
from llmcli.request.grounding import Ask


@dataclass
class Generate:
    """generate's own flags (the run flags are `o.RunFlags`), as the command hands them down."""

    prompt: str | None
    file: Path | None
    model: str | None
    system: str | None
    raw: bool
    fallback_template: bool
    hide_thinking: bool
    stats: bool
    as_json: bool
    prompt_cache: Path | None
    prompt_cache_ro: bool
    timeout: float | None
    offline: bool
    force: bool
    attach: list[str]
    mmproj: str | None
    ask: Ask | None = None  # --from NAME: answer from the collection's passages (request/grounding.py)


def run(ctx: typer.Context, flags: o.RunFlags, g: Generate) -> None:
    """The prompt, the model, the format; then the request (`_answer`)."""
    from llmcli import environment, render

    if g.prompt_cache_ro and g.prompt_cache is None:
        raise UsageError("--prompt-cache-ro needs --prompt-cache FILE")
    from dataclasses import replace

    from llmcli.media.attach import load_all

    images, texts = load_all(g.attach, offline=g.offline)  # checked before anything loads
    text = read_prompt(g.prompt, g.file, stdin_text="-" not in g.attach)
    spec = flags.spec(ctx, system=g.system, raw=g.raw, fallback_template=g.fallback_template)
    grounded = None
    if g.ask is not None:  # the passages found before the model loads: nothing found is said at once
        from llmcli.request.grounding import find

        grounded = find(g.ask, text, debug=render.debug())
    params = spec.sampling
    history = flags.continued()  # --continue / --cid: the logged conversation
    model = history.model if history is not None and g.model is None else g.model
    system = spec.system or (history.system if history is not None else None)
    from llmcli.loader import load_engine

    env = environment.current()
    options = spec.engine
    if g.mmproj is not None:
        options = replace(options, mmproj=g.mmproj)
    loaded = load_engine(
        model, options, offline=g.offline, force=g.force, debug=render.debug(), timeout=g.timeout,
        factory=env.engine_factory, check_files=env.checks_model_files,
    )  # fmt: skip
    if not loaded.engine.can.kv_state and g.prompt_cache is not None:
        raise UsageError("--prompt-cache needs a local model: a served model's cache lives on its server")
    flags.after_load(loaded)
    if applied := spec.recommend(loaded.engine.info, loaded.ref):
        render.debug_log(f"the model's recommended sampling: {applied}")

    how, notice = spec.template(loaded.engine)
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
    if grounded is not None:
        from llmcli.request.grounding import fit

        text = fit(grounded, loaded.engine, params.max_tokens)
    text, fragments = _with_texts(loaded.engine, texts, text, system, history, raw, params.max_tokens)
    if history is not None and history.raw:
        text = history.text + text
    if images and raw:
        raise UsageError("an image needs the chat template: --raw (or a base model's plain continuation) "
                         "cannot take one")  # fmt: skip
    _answer(flags, g, loaded, text, params, system, raw, history, images, fragments, grounded)


def _with_texts(engine, texts, text: str, system, history, raw: bool, max_tokens: int):
    """The prompt with the text attachments before it, and where they went (request/fragments.py)."""
    from dataclasses import replace

    from llmcli.request.fragments import attach_texts

    # a continued conversation's texts, where its messages go (after the system prompt), so the
    # log keeps them once again
    offset = 0 if raw else (1 if system else 0)
    before = tuple(replace(p, message=p.message + offset if p.message >= 0 else -1)
                   for p in (history.texts if history is not None else ()))  # fmt: skip
    if not texts:
        return text, before
    if raw:
        rest = (history.text if history is not None else "") + text
        text, placed = attach_texts(engine, texts, text, rest=rest, message=-1, max_tokens=max_tokens)
        return text, before + placed
    earlier = history.messages if history is not None else []
    rest = "\n".join([system or "", *(str(m.get("content") or "") for m in earlier), text])
    message = offset + len(earlier)
    text, placed = attach_texts(engine, texts, text, rest=rest, message=message, max_tokens=max_tokens)
    return text, before + placed


def _answer(
    flags: o.RunFlags, g: Generate, loaded, text: str, params, system, raw: bool, history, images=(),
    fragments=(),
    grounded=None,
) -> None:
    """The request run (tools, the log, a warm KV state), and what it made written."""
    from llmcli import render
    from llmcli.request.generate import run_generate

    prompt_cache, prompt_cache_ro = g.prompt_cache, g.prompt_cache_ro
    constraint = flags.constraint
    log = flags.logged(loaded.ref, "generate", history, constraint=constraint)
    if log is not None and grounded is not None:
        log.retrieval = grounded.record()  # the passages it was given (which it cites: after the answer)
    if prompt_cache is None and history is not None and loaded.engine.can.kv_state:
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
            loaded, text, params, system=system, raw=raw, stream_stdout=not g.as_json, constraint=constraint,
            prompt_cache=prompt_cache, prompt_cache_ro=prompt_cache_ro, show_thinking=not g.hide_thinking,
            think=flags.thinking(), history=history.messages if history is not None and not raw else None,
            log=log, tool_loop=tool_loop(flags, toolset), images=images,
            history_images=history.images if history is not None else None, fragments=fragments,
        )  # fmt: skip
    except StreamBrokenError as exc:  # a served model broke off: the partial text was printed
        if g.as_json:
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
    if grounded is not None:
        grounded.attribute(result.done.text if result.answer is None else result.answer)
        result.retrieval = grounded.record()
    _finish(g, loaded, result, grounded)


def _finish(g: Generate, loaded, result, grounded=None) -> None:
    """The JSON document (else the sources an answer cites) and stats written, the speculation
    costs measured, and the exit code."""
    from llmcli import render

    if g.as_json:
        render.out_json(result.record(), schema="record")
    elif grounded is not None:
        for line in grounded.sources():  # stderr: stdout has the answer alone
            render.info(line)
    if g.stats:  # stderr, so with --json too
        render.err_line(result.stats_line())
    if result.done.finish_reason != "interrupted":
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


def read_prompt(prompt: str | None, file: Path | None, stdin_text: bool = True) -> str:
    """Piped stdin, then the prompt file, then the argument, joined by blank lines; `stdin_text`
    False: stdin holds an image (`--attach -`), not text."""
    from llmcli import environment

    env = environment.current()
    parts: list[str] = []
    if env.stdin_piped and stdin_text:
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
