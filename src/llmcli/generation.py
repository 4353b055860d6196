"""Run one request through an engine and collect what front ends report about it.

`run_generate` sends one `Request` and consumes the engine's events: text pieces go to stdout as
they come, and the final `Done` becomes a `Result` that knows how to print itself as the `--stats`
line or the `--json` record (llmcli.record). Ctrl-C raises the engine's abort flag; what was produced is kept.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from llmcli import prompting, render, signals, tools
from llmcli.contract import Done, Prepared, Request, SamplingParams, Stats, ThreadsChanged, Token, ToolCall
from llmcli.errors import UsageError
from llmcli.loader import Loaded
from llmcli.log.rows import Logged


@dataclass
class Result:
    loaded: Loaded
    done: Done
    params: SamplingParams
    prompt_format: str
    extra: dict = field(default_factory=dict)
    constraint: str | None = None  # "grammar" or "json_schema" when the output was constrained
    prompt_cache: dict | None = None  # --prompt-cache: the file, what it gave, what was written
    tool_calls: list[dict] | None = None  # the calls run (record field `tool_calls`), None: no tools
    answer: str | None = None  # the final answer, after tool calls the last round's (None: done.text)

    def stats_line(self) -> str:
        from llmcli.render.stats import stats_line

        return stats_line(self.done.stats, load=True)

    @property
    def incomplete(self) -> bool:
        """Constrained output that the grammar does not accept: cut short before it was done."""
        return self.constraint is not None and self.done.constraint_complete is False

    def incomplete_error(self):
        from llmcli.errors import IncompleteOutputError

        return IncompleteOutputError(
            *incomplete_message(self.done, self.params, self.constraint or "grammar")
        )

    def missing_answer(self):
        """The error to exit with when the output holds no answer (see `missing_answer`), else None."""
        answer = self.done.text if self.answer is None else self.answer
        return missing_answer(self.done, answer, len(self.tool_calls or []), self.params)

    def record(self) -> dict:
        """The `--json` document (llmcli.record)."""
        from llmcli import record

        return record.build(
            ref=self.loaded.ref, info=self.loaded.engine.info, params=self.params, done=self.done,
            prompt_format=self.prompt_format, constraint=self.constraint,
            constraint_complete=not self.incomplete, prompt_cache=self.prompt_cache,
            tool_calls=self.tool_calls,
        )  # fmt: skip


def unanswered_message(done: Done, params: SamplingParams) -> tuple[str, str | None]:
    """A reasoning model cut inside its reasoning: no answer, what cut it, and the two ways out."""
    n = done.stats.reasoning_tokens
    what, room = _cut_by(done, params)
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


def missing_answer(done: Done, answer: str, calls: int, params: SamplingParams):
    """The error that says an answer ended without one (None: it has one, or was interrupted): exit 8
    (`NoAnswerError`) where the model stopped by itself, exit 7 (`IncompleteOutputError`) where
    --max-tokens or the context cut it before any answer (inside its reasoning or a tool call).
    `answer`: the final answer's text (after tool calls, the last round's); `calls`: calls run."""
    from llmcli.errors import IncompleteOutputError, NoAnswerError

    if done.finish_reason == "interrupted" or answer.strip():
        return None
    if done.finish_reason == "length":
        if done.reasoning_open:
            return IncompleteOutputError(*unanswered_message(done, params))
        what, room = _cut_by(done, params)
        calls_cut = len(done.tool_calls)
        inside = f"inside a tool call ({calls_cut} not run)" if calls_cut else "before any answer"
        return IncompleteOutputError(f"no answer: {what} ended the output {inside}", room)
    if done.finish_reason != "no_answer":  # plain text that ended at once is an empty continuation
        return None
    if done.reasoning_open:
        return NoAnswerError("the model ended its output inside its reasoning: there is no answer",
                             "bound the thinking with --reasoning-budget N, or ask again")  # fmt: skip
    if done.reasoning.strip():
        return NoAnswerError("the model ended after its reasoning without an answer",
                             "its reasoning went to stderr (--hide-thinking hides it)")  # fmt: skip
    if calls:
        return NoAnswerError(f"the model wrote no answer after its tool calls ({calls})",
                             "--show-tools shows the calls and their results")  # fmt: skip
    return NoAnswerError("the model stopped without writing anything")


def _cut_by(done: Done, params: SamplingParams) -> tuple[str, str]:
    """What cut an output short, and how to give it room."""
    if params.max_tokens and done.stats.completion_tokens >= params.max_tokens:
        return f"--max-tokens ({params.max_tokens})", "raise -n/--max-tokens"
    return f"the context ({done.stats.context_size} tokens)", "raise -c/--ctx-size"


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
    tool_loop: ToolLoop | None = None,
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
        if tool_loop is not None:
            request.tools = tool_loop.toolset.specs()
    cache: dict | None = None
    if prompt_cache is not None:
        cache = {"path": str(prompt_cache), "restored_tokens": 0, "restore_ms": 0.0,
                 "read_only": prompt_cache_ro, "saved_bytes": 0}  # fmt: skip
        request.before_prefill = lambda tokens: _restore_prompt_cache(engine, cache, tokens)
        if log is not None:
            log.prompt_cache = cache
            log.kv_state = log.kv_state or (None if prompt_cache_ro else str(prompt_cache))
    done, prepared, turn = consume(engine, request, stream_stdout=stream_stdout, show_thinking=show_thinking,
                                   tool_loop=tool_loop, log=log)  # fmt: skip
    for notice in (exact_limit_notice(done.stats, engine.info), draft_context_notice(done.stats)):
        if notice:
            render.info(notice)
    if cache is not None and not prompt_cache_ro and done.finish_reason != "interrupted":
        from llmcli import kvstore

        saved = kvstore.save(engine, Path(cache["path"]), cap=None)
        cache.update(saved_bytes=saved.bytes, save_ms=round(saved.ms, 3))
    return Result(loaded, done, params, prepared.prompt_format,
                  constraint=constraint if params.grammar else None, prompt_cache=cache,
                  tool_calls=turn.calls if tool_loop is not None else None,
                  answer=turn.last_text)  # fmt: skip


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
    engine,
    request: Request,
    *,
    stream_stdout: bool,
    show_thinking: bool = True,
    tool_loop: ToolLoop | None = None,
    log: Logged | None = None,
) -> tuple[Done, Prepared, ToolTurn]:
    """Drive the request (and its tool calls, with `tool_loop`); print text pieces to stdout (ending
    with a newline) if asked, and a reasoning model's reasoning to stderr (dim on a terminal) unless
    `show_thinking` is off."""
    from llmcli.errors import StreamBrokenError
    from llmcli.render.stream import PlainSink

    sink = None
    if stream_stdout:
        thoughts = sys.stderr if show_thinking and not render.quiet() else None
        sink = PlainSink(sys.stdout, thoughts, dim=render.color_enabled(sys.stderr))
    try:
        done, prepared, turn = drive_tools(engine, request, sink, tool_loop, log=log)
    except (StreamBrokenError, ToolRefused):  # what was printed ends its line
        if sink is not None:
            sink.stop()
        raise
    if sink is not None:
        sink.stop()
    return done, prepared, turn


def drive(engine, request: Request, sink=None, log: Logged | None = None) -> tuple[Done, Prepared]:
    """One request, as generate and each chat turn run it: Ctrl-C through the signal watcher, every
    event to `sink`, the thread policy's decisions to --debug; returns the final Done and how the
    prompt was built. With `log`, the request is written to the conversation log when it ends
    (llmcli.log), a served stream that broke off included."""
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
    answered = done.text.strip() or done.tool_calls
    if done.finish_reason == "stop" and request.text is None and not answered:
        done.finish_reason = "no_answer"  # an empty answer (plain text may end at once): `missing_answer`
    if log is not None:
        log_request(engine, request, log, done, prepared)
    return done, prepared


def measure_spec_costs(engine) -> None:
    """After the answers: a speculating engine that decided by assumed costs (the first use of this
    model, or pair, and settings on this machine) measures them now, once, and stores them, so the
    runs after it decide by this machine's own; nothing is measured before a first token. One line
    on stderr says so (--quiet silences it); Ctrl-C skips it (the next run measures)."""
    if not engine.costs_pending:
        return
    import time

    sys.stdout.flush()  # the answer is out before the pause
    render.info("llmcli: measuring speculative decoding's costs on this machine, once (Ctrl-C skips)")
    started = time.perf_counter()
    try:
        table = engine.calibrate()
    except KeyboardInterrupt:
        render.info("llmcli: skipped; the next run measures them")
        return
    if table is None:
        render.debug_log("speculation's costs could not be measured: the next run tries again")
        return
    seconds = time.perf_counter() - started
    render.debug_log(f"speculation's costs measured in {seconds:.1f} s: {table.report()}")


def log_request(
    engine, request: Request, log: Logged, done: Done | None, prepared: Prepared | None,
    *, error: str | None = None, partial: str = "", tool_calls: list[dict] | None = None,
) -> int | None:  # fmt: skip
    """The one hook after each request: its record, prompt and conversation id to the log. Never
    raises (a log that cannot be written is one warning line, see log.writer.write); returns the row
    id (0: left for the database, `log.writer.defer`; None: not logged)."""
    from llmcli import record
    from llmcli.log import rows, writer

    if done is not None and done.finish_reason == "interrupted" and not done.text:
        return None  # stopped before its first token: the request did not happen (chat keeps nothing)
    try:
        rec = record.build(
            ref=log.ref, info=engine.info, params=request.params, done=done,
            prompt_format=prepared.prompt_format if prepared is not None else None,
            constraint=log.constraint if request.params.grammar else None,
            constraint_complete=done is not None and done.constraint_complete is not False,
            prompt_cache=log.prompt_cache, error=error, partial_text=partial, tool_calls=tool_calls,
        )  # fmt: skip
        row = rows.row_values(
            rec, cid=log.cid, command=log.command, messages=request.messages, text=request.text,
            think=request.think, grammar=request.params.grammar,
            tokens=done.tokens if done is not None else None, session=log.session, kv_state=log.kv_state,
        )  # fmt: skip
    except Exception as exc:  # a record that cannot be built is a bug, but never costs the answer
        render.warn(f"not logged: {exc}")
        return None
    if log.deferred:
        return 0 if writer.defer(row) else None
    return writer.write(row)


# -- tool calling --------------------------------------------------------------------------------


class ToolRefused(UsageError):
    """`generate` met a call it may not run (no --approve-tools): nothing ran."""

    label = "tool call refused"


@dataclass
class ToolLoop:
    """How the tool calls of a request run: the tools, who approves each call (`approve(call)` says
    "yes" or "no"; "stop" when the user stopped the answer there: that call and the rest are not
    run and the answer ends interrupted; or it raises to stop the whole request), how many rounds of
    calls, the timeout of one call, and who is told of each call (`on_call`, before it runs) and its
    record (`on_result`)."""

    toolset: tools.Toolset
    approve: Callable[[ToolCall], str]
    rounds: int = 5
    timeout: float = tools.TIMEOUT
    on_call: Callable[[ToolCall], None] | None = None
    on_result: Callable[[dict], None] | None = None


@dataclass
class ToolTurn:
    """What a request's tool loop left: each call's record (`tool_calls` of the record) and the
    messages it added after the request's own (assistant messages with their calls, tool results),
    which a chat keeps in its history before the final answer."""

    calls: list[dict] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False  # Ctrl-C during a call (or at its approval): the answer ends with `messages`
    # the text of the last round, which `messages` does not hold: the final answer ("" when the
    # answer ended on tool results, interrupted)
    last_text: str = ""


def refuse_unapproved(call: ToolCall) -> str:
    """`generate` without --approve-tools: the first call stops the run before anything runs."""
    raise ToolRefused(f"the model called {describe_call(call)}; nothing was run",
                      hint="pass --approve-tools to let calls run")  # fmt: skip


def describe_call(call: ToolCall) -> str:
    import json

    args = json.dumps(call.arguments, ensure_ascii=False)
    return f"{call.name or '?'}({args[:200] + '...' if len(args) > 200 else args})"


def drive_tools(
    engine, request: Request, sink=None, loop: ToolLoop | None = None, *, log: Logged | None = None
) -> tuple[Done, Prepared, ToolTurn]:
    """`drive`, then, while the model calls tools, run the calls (each approved, with a timeout; a
    failure becomes text the model reads), send the results back as tool messages and drive again.
    A call identical to one already answered in this answer is not run again, and the round that
    repeats one, like the round that reaches `loop.rounds`, is followed by a request without the
    tools: the model answers from the results it has (a small model given the tools again tends to
    call the same tool forever). Call ids are made unique within the conversation. The final Done
    has the text of every round joined, the figures of every round added up, and `stats.tool_ms`
    the time the calls took; its finish reason is "no_answer" when the model wrote nothing after
    its calls. With `log`, the whole answer is one entry of the conversation log, its calls
    included."""
    turn = ToolTurn()
    if loop is None or not request.tools:
        done, prepared = drive(engine, request, sink, log=log)
        turn.last_text = done.text
        return done, prepared, turn
    done, prepared = drive(engine, request, sink)
    texts = [done.text]
    total = done.stats
    ids = CallIds(request.messages)
    answered: dict[str, dict] = {}  # each call run in this answer, by name and arguments: its record
    round_no = 0
    offered: list[dict] | None = request.tools
    withdrawn = ""
    while done.tool_calls and done.finish_reason == "stop":
        round_no += 1
        calls = ids.assign(done.tool_calls)
        if not offered:  # calls written after the tools were withdrawn: recorded, never run
            for call in calls:
                _done_call(call, round_no, loop, None, f"not run: {withdrawn}", turn)
            if not done.text.strip():
                done = replace(done, finish_reason="no_answer")
            break
        fresh: list[ToolCall] = []
        repeated: list[ToolCall] = []
        seen = set(answered)
        for call in calls:
            (repeated if _same_call(call) in seen else fresh).append(call)
            seen.add(_same_call(call))
        if fresh:
            assistant = {"role": "assistant", "content": done.text,
                         "tool_calls": [_message_call(call) for call in fresh]}  # fmt: skip
            results: list[dict[str, Any]] = []
            for call in fresh:
                record = _run_call(call, loop, round_no, turn)
                answered.setdefault(_same_call(call), record)
                total.tool_ms += record["duration_ms"] or 0.0
                results.append({"role": "tool", "tool_call_id": call.id, "name": call.name,
                                "content": record["result"]})  # fmt: skip
            turn.messages += [assistant, *results]
        for call in repeated:  # the model reads the earlier result: this call is left out of the messages
            earlier = answered.get(_same_call(call))
            when = f"round {earlier['round']}" if earlier is not None else "this answer"
            _done_call(call, round_no, loop, None, f"not run: the same call was answered in {when}", turn)
        if turn.interrupted:
            done.finish_reason = "interrupted"
            break
        if repeated or round_no >= loop.rounds:
            offered = None  # answer from what you have: calls are no longer allowed
            withdrawn = "the tools were withdrawn after " + (
                "a repeated call" if repeated else f"{loop.rounds} rounds (--tool-rounds)"
            )
            render.debug_log(f"tools: {withdrawn}: the next request offers none")
        assert request.messages is not None
        follow = replace(request, messages=[*request.messages, *turn.messages], tools=offered,
                         calls_withdrawn=offered is None, before_prefill=None)  # fmt: skip
        if sink is not None and texts[-1] and not texts[-1].endswith("\n"):
            sink(Token("\n", 0))  # the next round's text on a line of its own, as in the joined text
        done, _ = drive(engine, follow, sink)
        texts.append(done.text)
        total = _add(total, done.stats)
    turn.last_text = "" if turn.interrupted else texts[-1]  # interrupted: that text is in `messages`
    total.total_ms += total.tool_ms
    done = replace(done, text="\n".join(t for t in texts if t), stats=total)
    if log is not None:
        log_request(engine, request, log, done, prepared, tool_calls=turn.calls)
    return done, prepared, turn


class CallIds:
    """Call ids unique within a conversation: an engine numbers the calls of one answer (a local
    one `call00001`, ...; a server as it likes), so a second round, or a second turn, would reuse
    them. A call keeps its id where it is new to the conversation, else takes the next free
    `callNNNNN`."""

    def __init__(self, messages: list[dict] | None) -> None:
        self.used: set[str] = set()
        for message in messages or []:
            for call in message.get("tool_calls") or []:
                if isinstance(call, dict) and call.get("id"):
                    self.used.add(str(call["id"]))
            if message.get("tool_call_id"):
                self.used.add(str(message["tool_call_id"]))

    def assign(self, calls: list[ToolCall]) -> list[ToolCall]:
        out: list[ToolCall] = []
        for call in calls:
            if not call.id or call.id in self.used:
                n = len(self.used) + 1
                while f"call{n:05d}" in self.used:
                    n += 1
                call = replace(call, id=f"call{n:05d}")
            self.used.add(call.id)
            out.append(call)
        return out


def _same_call(call: ToolCall) -> str:
    """What makes two calls the same call: the name and the arguments, key order aside."""
    import json

    return json.dumps([call.name, call.arguments], sort_keys=True, ensure_ascii=False)


def _run_call(call: ToolCall, loop: ToolLoop, round_no: int, turn: ToolTurn) -> dict:
    """One call, approved or not, run or not: its record (its result is what the model reads)."""
    if turn.interrupted:
        return _done_call(call, round_no, loop, None, "not run: the user interrupted an earlier call", turn)
    if call.error:
        return _done_call(call, round_no, loop, None, f"the call could not be read: {call.error}", turn)
    tool = loop.toolset.get(call.name)
    if tool is None:
        known = ", ".join(loop.toolset.tools) or "none"
        return _done_call(
            call, round_no, loop, None, f"no tool is named {call.name!r} (tools: {known})", turn
        )
    problem = tools.check_arguments(tool.parameters, call.arguments)
    if problem:
        return _done_call(call, round_no, loop, None,
                          f"the arguments do not fit the tool's schema: {problem}", turn)  # fmt: skip
    answer = loop.approve(call)
    if answer == "stop":
        turn.interrupted = True
        return _done_call(call, round_no, loop, None, "not run: the user stopped the answer", turn)
    if answer != "yes":
        return _done_call(call, round_no, loop, None, "the user declined this call", turn)
    if loop.on_call is not None:
        loop.on_call(call)
    try:
        with signals.sigint_raises():  # Ctrl-C stops the wait for the call, in a chat turn too
            outcome = tools.run(tool, call.arguments, loop.timeout)
    except KeyboardInterrupt:  # between the call's own checks
        outcome = tools.Outcome("error: the user interrupted this call", "the user interrupted this call",
                                0.0, interrupted=True)  # fmt: skip
    if outcome.interrupted:
        turn.interrupted = True
    return _done_call(call, round_no, loop, outcome, outcome.error, turn)


def _done_call(call: ToolCall, round_no: int, loop: ToolLoop, outcome: tools.Outcome | None,
               error: str | None, turn: ToolTurn) -> dict:  # fmt: skip
    record = _call_record(call, round_no, outcome, error)
    turn.calls.append(record)
    if loop.on_result is not None:
        loop.on_result(record)
    return record


def _call_record(call: ToolCall, round_no: int, outcome: tools.Outcome | None, error: str | None) -> dict:
    """One call in the record (`tool_calls`): what was asked, what came back, how long, which round."""
    result = outcome.result if outcome is not None else f"error: {error}"
    return {"id": call.id, "name": call.name, "arguments": call.arguments, "result": result,
            "error": error, "duration_ms": round(outcome.ms, 3) if outcome is not None else None,
            "round": round_no}  # fmt: skip


def call_line(record: dict) -> str:
    """One call as --show-tools and chat show it: `tool NAME(ARGS) -> RESULT (12 ms)`."""
    import json

    args = json.dumps(record["arguments"], ensure_ascii=False)
    result = record["result"].replace("\n", " ")
    if len(result) > 300:
        result = result[:300] + "..."
    took = f" ({record['duration_ms']:.0f} ms)" if record["duration_ms"] is not None else ""
    return f"tool {record['name'] or '?'}({args}) -> {result}{took}"


def _message_call(call: ToolCall) -> dict:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def _add(a: Stats, b: Stats) -> Stats:
    """The figures of two rounds of one answer: counts and times added (the prompt tokens of every
    round, so that reused + evaluated = prompt still holds), the context as it ends."""
    return replace(
        b,
        prompt_tokens=a.prompt_tokens + b.prompt_tokens,
        cached_tokens=a.cached_tokens + b.cached_tokens,
        prefill_tokens=a.prefill_tokens + b.prefill_tokens,
        prefill_ms=a.prefill_ms + b.prefill_ms,
        completion_tokens=a.completion_tokens + b.completion_tokens,
        decode_tokens=a.decode_tokens + b.decode_tokens,
        decode_ms=a.decode_ms + b.decode_ms,
        reasoning_tokens=a.reasoning_tokens + b.reasoning_tokens,
        ttft_ms=a.ttft_ms,
        load_ms=a.load_ms,
        total_ms=a.total_ms + b.total_ms,
        drafted_tokens=a.drafted_tokens + b.drafted_tokens,
        accepted_tokens=a.accepted_tokens + b.accepted_tokens,
        target_passes=a.target_passes + b.target_passes,
        tool_ms=a.tool_ms,
    )
