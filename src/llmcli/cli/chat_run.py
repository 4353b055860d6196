"""`llmcli chat`'s run: the conversation to continue (a saved session, a logged conversation), the
model loaded with the session's settings, a `ChatSession` and its `Repl` made, run, and saved."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import typer

from llmcli.cli import options as o


@dataclass
class Chat:
    """chat's own flags (the run flags are `o.RunFlags`), as the command hands them down."""

    model: str | None
    system: str | None
    session: str | None
    resume: bool
    on_overflow: str | None
    kv_cache_max_mb: int | None
    hide_thinking: bool
    fallback_template: bool
    timeout: float | None
    offline: bool
    force: bool
    attach: list[str]
    mmproj: str | None


def run(ctx: typer.Context, flags: o.RunFlags, c: Chat) -> None:
    """What to continue, the model loaded, the session made; then the REPL (`_converse`)."""
    from llmcli import environment, render, settings
    from llmcli.conversation import OVERFLOW_POLICIES
    from llmcli.errors import UsageError
    from llmcli.loader import load_engine
    from llmcli.repl.chat_session import ChatSession

    policy = settings.resolve("on_overflow", c.on_overflow)
    if policy not in OVERFLOW_POLICIES:
        raise UsageError(f"--on-overflow must be one of {', '.join(OVERFLOW_POLICIES)}, got {policy!r}")
    params = flags.sampling()
    images = _first_images(c.attach, c.offline)  # checked (or fetched) before anything loads
    history = flags.continued()  # --continue / --cid: a logged conversation
    if history is not None and (c.session or c.resume):
        raise UsageError("--continue/--cid and --session/--resume both name a conversation: give one")
    model, fallback_template = c.model, c.fallback_template
    if history is not None and model is None:
        model = history.model
    name, saved = _session_to_continue(c.session, c.resume)
    if saved and model is None:
        model = saved.get("model")
    if saved and model == saved.get("model") and saved.get("fallback_template") is True:
        fallback_template = True  # the session's own model, chatted with in its fallback turn format
    engine_opts = _engine_options(ctx, flags, saved)
    if c.mmproj is not None:
        from dataclasses import replace

        engine_opts = replace(engine_opts, mmproj=c.mmproj)

    def load(ref: str | None, speculative=None, speculation_optional: bool = False, **kv: str | None):
        from dataclasses import replace

        changes = kv if speculative is None else {**kv, "speculative": speculative}
        opts = replace(engine_opts, **changes)
        env = environment.current()
        return load_engine(ref, opts, offline=c.offline, force=c.force, debug=render.debug(),
                           timeout=c.timeout, factory=env.engine_factory,
                           check_files=env.checks_model_files,
                           speculation_optional=speculation_optional)  # fmt: skip

    toolset = flags.toolset()  # a bad functions file, an MCP server that does not start: before the load
    if toolset is not None:
        ctx.call_on_close(toolset.close)  # its MCP servers stop when the chat ends, however it ends
    loaded = load(model)
    flags.after_load(loaded)
    constraint = flags.constraint
    chat_session = ChatSession(loaded, params, on_overflow=policy, session_name=name, load_model=load,
                               allow_base=fallback_template, constraint=constraint,
                               kv_cap_mb=c.kv_cache_max_mb, think=flags.thinking(),
                               think_given=flags.think_given())  # fmt: skip
    try:
        chat_session.check_model(loaded)
        if toolset is not None:  # a template that takes no tools: refused now (a server's is its own)
            loaded.engine.call_format()
        from llmcli.media.image import Image

        if any(isinstance(a, Image) for a in images):  # no projector: refused now, naming --mmproj
            from llmcli.loader import ready_for_images

            ready_for_images(loaded.engine)
        chat_session.pending = images
    except UsageError:
        loaded.engine.close()
        raise
    if applied := chat_session.apply_recommended():
        render.debug_log(f"the model's recommended sampling: {applied}")
    _continue(chat_session, flags, name, saved, history)
    _converse(chat_session, flags, c, toolset, name, saved, history)


def _first_images(names: list[str], offline: bool) -> list:
    """`chat -a`'s images and texts (files or http(s) URLs), checked (one line each for a bad one);
    stdin holds the conversation."""
    from llmcli.errors import UsageError
    from llmcli.media.attach import load

    if "-" in names:
        raise UsageError("chat reads the conversation from stdin: give --attach a file, not '-'")
    return [load(name, offline=offline) for name in names]


def _engine_options(ctx: typer.Context, flags: o.RunFlags, saved: dict | None):
    """How the model is loaded: the flags, and a saved session's KV cache types where they set none."""
    from llmcli import render

    engine_opts = flags.engine(ctx)
    cache_type_k, cache_type_v = flags.cache_type_k, flags.cache_type_v
    if saved and (kv := _saved_cache_types(saved, engine_opts, cache_type_k, cache_type_v)):
        from dataclasses import replace

        engine_opts = replace(
            engine_opts,
            type_k=kv.get("type_k", engine_opts.type_k),
            type_v=kv.get("type_v", engine_opts.type_v),
        )
        render.debug_log(f"the session's KV cache types: {kv}")
    return engine_opts


def _continue(chat_session, flags: o.RunFlags, name: str | None, saved: dict | None, history) -> None:
    """The conversation to go on with (a saved session's, a logged one's) and how turns are logged."""
    from llmcli import render
    from llmcli.conversation import Conversation

    loaded = chat_session.loaded
    if saved:
        assert name is not None  # a saved session always has its name
        chat_session.conversation = _conversation(saved, name)
        if restored := chat_session.restore_params(saved.get("params")):
            render.debug_log(f"the session's sampling settings: {', '.join(restored)}")
        if chat_session.restore_think(saved.get("think")):
            render.debug_log(f"the session's think switch: {saved.get('think')}")
        from llmcli import kvstore

        chat_session.kv_restore = kvstore.session_state_path(name)
    if history is not None:
        from llmcli.conversation import Message

        chat_session.conversation = Conversation(
            history.system or "", [Message.from_template(m) for m in history.messages]
        )
        for index, images in history.images.items():  # re-attached from the log, where they were
            if 0 <= index < len(chat_session.conversation.messages):
                chat_session.conversation.messages[index].images = images
        for placed in history.texts:  # so are the texts (their blocks are in the content)
            if 0 <= placed.message < len(chat_session.conversation.messages):
                message = chat_session.conversation.messages[placed.message]
                message.texts = (*message.texts, placed.file)
                chat_session.text_tokens[placed.file.sha256] = placed.tokens
        state = history.last.get("kv_state")
        if state and loaded.engine.can.kv_state and Path(state).is_file():
            chat_session.kv_restore = Path(state)  # warm: kvstore uses it only where it belongs
    from llmcli import kvstore

    kv_state = str(kvstore.session_state_path(name)) if name and loaded.engine.can.kv_state else None
    chat_session.log = flags.logged(loaded.ref, "chat", history, session=name, kv_state=kv_state)
    if chat_session.log is not None:
        from llmcli.log import writer

        writer.open_writer()  # before the prompt: no turn waits for the log to open


def _converse(chat_session, flags: o.RunFlags, c: Chat, toolset, name, saved, history) -> None:
    """The system prompt, the REPL made and run, the session saved."""
    from llmcli import environment, render, settings
    from llmcli.conversation import Conversation
    from llmcli.repl import session_files as sessions
    from llmcli.repl.loop import Repl

    system = settings.resolve("system", c.system)
    if system:
        chat_session.conversation.system = system
    elif not saved and history is None:
        chat_session.conversation = Conversation()
    repl = Repl(chat_session, interactive=environment.current().interactive, autosave=bool(name),
                quiet=render.quiet(), show_thinking=not c.hide_thinking)  # fmt: skip
    if toolset is not None:
        approve, rounds, tool_timeout = flags.tool_settings()
        chat_session.tool_loop = repl.tool_loop(
            toolset, approve_all=approve, rounds=rounds, timeout=tool_timeout
        )
    _banner(repl, saved)
    if repl.interactive:
        repl.run_interactive()
    else:
        repl.run_piped(sys.stdin)
    if name:
        from llmcli.signals import sigint_held

        with sigint_held():  # a Ctrl-C now would only cut the save short
            sessions.keep_images(chat_session.images())  # before the session that refers to them
            sessions.save(name, chat_session.to_record())
    from llmcli.request.spec_notices import measure_spec_costs

    measure_spec_costs(chat_session.loaded.engine)  # the session's state is saved: the cache may go


def _session_to_continue(session: str | None, resume: bool) -> tuple[str | None, dict | None]:
    from llmcli.errors import UsageError
    from llmcli.repl import session_files as sessions

    if resume:
        name = session or sessions.most_recent()
        if name is None:
            raise UsageError("--resume: no saved session yet", hint="start one with --session NAME")
        return name, sessions.load(name)
    if session:
        path = sessions.session_path(session)
        return session, sessions.read(path) if path.exists() else None
    return None, None


def _saved_cache_types(saved: dict, options, flag_k: str | None, flag_v: str | None) -> dict[str, str | None]:
    """The KV cache types a saved session was left with (`/set cache-type-k` included), where the
    command line (flag, environment, config) sets none, as for its sampling settings; a value that
    is not a KV cache type, or a quantized V cache under -nfa, is skipped."""
    from llmcli import settings
    from llmcli.errors import UsageError
    from llmcli.repl.chat_settings import kv_cache_type

    kv: dict[str, str | None] = {}
    for which, flag in (("k", flag_k), ("v", flag_v)):
        value = saved.get(f"cache_type_{which}")
        if (
            not isinstance(value, str)
            or settings.resolve_with_source(f"cache_type_{which}", flag)[1] != "default"
        ):
            continue
        try:
            kv[f"type_{which}"] = kv_cache_type(f"cache-type-{which}", value, options.flash_attn)
        except UsageError:
            continue
    return {field: value for field, value in kv.items() if getattr(options, field) != value}


def _conversation(saved: dict, name: str):
    from llmcli.conversation import Conversation
    from llmcli.repl import session_files as sessions

    try:
        return Conversation.from_dict(saved, images=sessions.read_image)
    except ValueError as exc:
        raise sessions.SessionError(
            f"{sessions.session_path(name)} has a malformed conversation ({exc})",
            hint="the file was left untouched",
        ) from None


def _banner(repl, saved: dict | None) -> None:
    from llmcli import prompting

    s = repl.session
    context = f"context {s.engine.n_ctx}" if s.engine.n_ctx else "context: the server's"
    template = "template: the server's"
    if s.engine.can.template:  # the template is rendered here: which one
        fmt = s.prompt_format
        note = " (the model has no chat template: using this fallback)" if fmt.is_fallback else ""
        template = f"template {fmt.source}{note}"
        if prompting.is_base(s.engine):
            repl.warn(prompting.base_warning(s.loaded.ref))
    repl.info(f"llmcli chat · {s.loaded.display} · {context} · {template}")
    _continuing(repl, saved)
    if repl.interactive:
        repl.info('/help for commands, """ for multiline, Ctrl-C stops a reply, Ctrl-D exits')


def _continuing(repl, saved: dict | None) -> None:
    s = repl.session
    if saved:
        repl.info(f"continuing session {s.session_name!r}: {len(s.conversation.messages)} messages")
    elif s.conversation.messages and s.log is not None:
        repl.info(f"continuing conversation {s.log.cid}: {len(s.conversation.messages)} messages")
    elif s.conversation.messages:
        repl.info(f"continuing a logged conversation: {len(s.conversation.messages)} messages")
