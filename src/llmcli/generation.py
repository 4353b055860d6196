"""Run one request through an engine and collect what front ends report about it.

`run_generate` sends one `Request` and consumes the engine's events: text pieces go to stdout as
they come, and the final `Done` becomes a `Result` that knows how to print itself as the `--stats`
line or the `--json` record (llmcli.record). Ctrl-C raises the engine's abort flag; what was produced is kept.
"""

from __future__ import annotations

import sys
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from llmcli import prompting, render, signals
from llmcli.contract import Done, Prepared, Request, SamplingParams, ThreadsChanged
from llmcli.loader import Loaded
from llmcli.logdb import Logged


@dataclass
class Result:
    loaded: Loaded
    done: Done
    params: SamplingParams
    prompt_format: str
    extra: dict = field(default_factory=dict)
    constraint: str | None = None  # "grammar" or "json_schema" when the output was constrained
    prompt_cache: dict | None = None  # --prompt-cache: the file, what it gave, what was written

    def stats_line(self) -> str:
        from llmcli.render.stats import stats_line

        return stats_line(self.done.stats, load=True)

    @property
    def incomplete(self) -> bool:
        """Constrained output that the grammar does not accept, or a reasoning model's output that
        ended inside its reasoning: cut short before it was done."""
        if self.done.reasoning_open and self.done.finish_reason == "length":
            return True
        return self.constraint is not None and self.done.constraint_complete is False

    def incomplete_error(self):
        from llmcli.errors import IncompleteOutputError

        if self.done.reasoning_open:
            return IncompleteOutputError(*unanswered_message(self.done, self.params))
        return IncompleteOutputError(
            *incomplete_message(self.done, self.params, self.constraint or "grammar")
        )

    def record(self) -> dict:
        """The `--json` document (llmcli.record)."""
        from llmcli import record

        return record.build(
            ref=self.loaded.ref, info=self.loaded.engine.info, params=self.params, done=self.done,
            prompt_format=self.prompt_format, constraint=self.constraint,
            constraint_complete=not self.incomplete, prompt_cache=self.prompt_cache,
        )  # fmt: skip


def unanswered_message(done: Done, params: SamplingParams) -> tuple[str, str | None]:
    """A reasoning model cut inside its reasoning: no answer, what cut it, and the two ways out."""
    n = done.stats.reasoning_tokens
    if params.max_tokens and done.stats.completion_tokens >= params.max_tokens:
        what, room = f"--max-tokens ({params.max_tokens})", "raise -n/--max-tokens"
    else:
        what, room = f"the context ({done.stats.context_size} tokens)", "raise -c/--ctx-size"
    counted = f", after {n} tokens of it" if n else ""
    return (
        f"no answer: {what} ended the output inside the reasoning{counted}",
        f"{room}, or bound the thinking with --reasoning-budget N",
    )


def incomplete_message(done: Done, params: SamplingParams, constraint: str) -> tuple[str, str | None]:
    """What cut the constrained output, at how many tokens, and how to give it room."""
    what = "the JSON schema" if constraint == "json_schema" else "the grammar"
    n = done.stats.completion_tokens
    if done.finish_reason == "interrupted":
        return f"{what} was not satisfied: interrupted at {n} tokens", None
    if done.finish_reason == "length" and params.max_tokens and n >= params.max_tokens:
        return (
            f"{what} was not satisfied: cut by --max-tokens at {n} tokens",
            "raise -n/--max-tokens; 0 means no limit",
        )
    if done.finish_reason == "length":
        size = done.stats.context_size
        return (
            f"{what} was not satisfied: the context ({size} tokens) filled at {n} tokens",
            "raise -c/--ctx-size",
        )
    return (
        f"{what} was not satisfied: cut by a --stop string at {n} tokens",
        "choose a stop string the output cannot contain",
    )


def run_generate(
    loaded: Loaded,
    text: str,
    params: SamplingParams,
    *,
    system: str | None = None,
    raw: bool = False,
    stream_stdout: bool = True,
    constraint: str | None = None,
    prompt_cache: Path | None = None,
    prompt_cache_ro: bool = False,
    show_thinking: bool = True,
    think: bool | None = None,
    history: list[dict[str, str]] | None = None,
    log: Logged | None = None,
) -> Result:
    """Run one prompt; `raw` continues it as plain text, else it becomes a user turn (the caller
    decides between the two with `prompting.generate_format`). With `prompt_cache`, the KV state
    in that file is reused for the longest common prefix and (unless `prompt_cache_ro`) the file
    is rewritten with this run's state afterwards. `history`: the messages of a conversation this
    prompt continues (`--continue`), between the system prompt and it. `log`: how the request is
    logged (None: it is not)."""
    engine = loaded.engine
    if raw:
        request = Request(params, text=text)
    else:
        messages = prompting.messages_for(text, system)
        if history:
            messages[-1:-1] = history
        request = Request(params, messages=messages, think=think)
    cache: dict | None = None
    if prompt_cache is not None:
        cache = {"path": str(prompt_cache), "restored_tokens": 0, "restore_ms": 0.0,
                 "read_only": prompt_cache_ro, "saved_bytes": 0}  # fmt: skip
        request.before_prefill = lambda tokens: _restore_prompt_cache(engine, cache, tokens)
        if log is not None:
            log.prompt_cache = cache
            log.kv_state = log.kv_state or (None if prompt_cache_ro else str(prompt_cache))
    done, prepared = consume(engine, request, stream_stdout=stream_stdout, show_thinking=show_thinking,
                             log=log)  # fmt: skip
    for notice in (exact_limit_notice(done.stats, engine.info), draft_context_notice(done.stats)):
        if notice:
            render.info(notice)
    if cache is not None and not prompt_cache_ro and done.finish_reason != "interrupted":
        from llmcli import kvstore

        saved = kvstore.save(engine, Path(cache["path"]), cap=None)
        cache.update(saved_bytes=saved.bytes, save_ms=round(saved.ms, 3))
    return Result(loaded, done, params, prepared.prompt_format,
                  constraint=constraint if params.grammar else None, prompt_cache=cache)  # fmt: skip


def _restore_prompt_cache(engine, cache: dict, tokens: list[int]) -> float:
    """--prompt-cache: load the file's KV state for the longest common prefix of `tokens`."""
    import time

    from llmcli import kvstore

    started = time.perf_counter()
    cache["restored_tokens"] = kvstore.restore(engine, Path(cache["path"]), tokens, what="--prompt-cache")
    cache["restore_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return cache["restore_ms"]


def exact_limit_notice(s, info=None, chat: bool = False) -> str | None:
    """One line when speculation was asked for and `--spec-exact` let it verify nothing: on this
    build no batch of two or more positions was bit-identical to one-token steps at the context
    length the answer ran at (`exact_blocked` steps), so the answer was decoded plainly. An answer
    that drafted nothing only because nothing matched gets no notice. With an f16/f32 cache
    it names bf16 and q8_0 too: llama.cpp's CPU flash attention splits one query's keys across
    threads only for K and V both f16 or both f32, so with either a step and a batch compute alike.
    `chat`: in the REPL's words (`/set spec-exact off`, `/set cache-type-k bf16`)."""
    spec = s.speculative
    if not spec or not spec.get("exact") or s.drafted_tokens or not s.decode_tokens:
        return None
    if not spec.get("exact_blocked"):
        return None
    off, types = "--no-spec-exact", "-ctk bf16 -ctv bf16, or q8_0"
    if chat:
        off, types = "/set spec-exact off", "/set cache-type-k bf16 and /set cache-type-v bf16, or q8_0"
    return (
        "speculative decoding drafted nothing: at this context length only one-position batches are "
        f"bit-identical to plain decoding on this build (--spec-exact); {off} verifies in any "
        "batch (the same distribution, but at temperature 0 a near-tie may come out differently)"
        + (
            f"; a bf16 or q8_0 KV cache ({types}) keeps batches exact at long contexts"
            if info is not None
            and info.backend == "CPU"
            and info.type_k in ("f16", "f32")
            and info.type_k == info.type_v
            else ""
        )
    )


def draft_context_notice(s) -> str | None:
    """One line when the draft model's context (-cd) was too small for the prompt and answer at
    some steps (`draft_ctx_blocked`), which were then decoded plainly."""
    spec = s.speculative or {}
    blocked = spec.get("draft_ctx_blocked")
    if not blocked:
        return None
    what = "drafted nothing" if not s.drafted_tokens else f"did not draft at {blocked} steps"
    return (
        f"speculative decoding {what}: the draft model's context ({spec.get('n_ctx_draft')} tokens, "
        "-cd) cannot hold the prompt and answer; a larger -cd (0: the target's) lets it draft"
    )


def threads_changed(event: ThreadsChanged) -> str:
    """The --debug line for one decision of the adaptive thread policy."""
    reasons = {"probe": "measuring", "drift": "the step time changed: measuring again",
               "recheck": "re-checking", "settled": "fastest measured"}  # fmt: skip
    why = reasons.get(event.reason, event.reason)
    return f"threads: {event.phase} now {event.threads} ({why})"


def consume(
    engine, request: Request, *, stream_stdout: bool, show_thinking: bool = True, log: Logged | None = None
) -> tuple[Done, Prepared]:
    """Drive the request; print text pieces to stdout (ending with a newline) if asked, and a
    reasoning model's reasoning to stderr (dim on a terminal) unless `show_thinking` is off."""
    from llmcli.errors import StreamBrokenError
    from llmcli.render.stream import PlainSink

    sink = None
    if stream_stdout:
        thoughts = sys.stderr if show_thinking and not render.quiet() else None
        sink = PlainSink(sys.stdout, thoughts, dim=render.color_enabled(sys.stderr))
    try:
        done, prepared = drive(engine, request, sink, log=log)
    except StreamBrokenError:  # a served model's stream broke off: its partial text ends its line
        if sink is not None:
            sink.stop()
        raise
    if sink is not None:
        sink.stop()
    return done, prepared


def drive(engine, request: Request, sink=None, log: Logged | None = None) -> tuple[Done, Prepared]:
    """One request, as generate and each chat turn run it: Ctrl-C through the signal watcher, every
    event to `sink`, the thread policy's decisions to --debug; returns the final Done and how the
    prompt was built. With `log`, the request is written to the conversation log when it ends
    (llmcli.logdb), a served stream that broke off included."""
    from llmcli.errors import StreamBrokenError

    done: Done | None = None
    prepared: Prepared | None = None
    events = engine.respond(request)  # a local engine builds the prompt here, before the watcher
    try:
        with signals.interrupt_on_sigint(engine.interrupt) as pressed_before, closing(events):
            for event in events:
                if pressed_before:  # Ctrl-C before the request began: it stops now, at its first event
                    engine.interrupt()
                    pressed_before = False
                if sink is not None:
                    sink(event)
                if isinstance(event, ThreadsChanged):
                    render.debug_log(threads_changed(event))
                elif isinstance(event, Prepared):
                    prepared = event
                elif isinstance(event, Done):
                    done = event
    except StreamBrokenError as exc:
        if log is not None:
            log_request(engine, request, log, None, prepared, error=exc.message, partial=exc.text)
        raise
    assert done is not None and prepared is not None
    if log is not None:
        log_request(engine, request, log, done, prepared)
    return done, prepared


def log_request(
    engine, request: Request, log: Logged, done: Done | None, prepared: Prepared | None,
    *, error: str | None = None, partial: str = "",
) -> int | None:  # fmt: skip
    """The one hook after each request: its record, prompt and conversation id to the log. Never
    raises (a log that cannot be written is one warning line, see logdb.write); returns the row id."""
    from llmcli import logdb, record

    if done is not None and done.finish_reason == "interrupted" and not done.text:
        return None  # stopped before its first token: the request did not happen (chat keeps nothing)
    try:
        rec = record.build(
            ref=log.ref, info=engine.info, params=request.params, done=done,
            prompt_format=prepared.prompt_format if prepared is not None else None,
            constraint=log.constraint if request.params.grammar else None,
            constraint_complete=done is not None and done.constraint_complete is not False,
            prompt_cache=log.prompt_cache, error=error, partial_text=partial,
        )  # fmt: skip
        row = logdb.row_values(
            rec, cid=log.cid, command=log.command, messages=request.messages, text=request.text,
            think=request.think, grammar=request.params.grammar,
            tokens=done.tokens if done is not None else None, session=log.session, kv_state=log.kv_state,
        )  # fmt: skip
    except Exception as exc:  # a record that cannot be built is a bug, but never costs the answer
        render.warn(f"not logged: {exc}")
        return None
    return logdb.write(row)
