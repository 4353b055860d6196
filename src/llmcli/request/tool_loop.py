"""The tool loop of one answer: while the model calls tools, run the calls (each approved, with a
timeout), send the results back as tool messages and drive the request again; repeated calls are
answered from the earlier result and the tools are withdrawn after a repeat or the last round.
Call ids are made unique within the conversation, and every call gets a record (`tool_calls`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from llmcli import render, signals, tools
from llmcli.contract import Done, Prepared, Request, Stats, Token, ToolCall
from llmcli.errors import UsageError
from llmcli.log.rows import Logged
from llmcli.request.drive import drive
from llmcli.request.log import log_request


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
        repeated = _run_round(calls, done.text, answered, loop, round_no, turn, total)
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


def _run_round(calls: list[ToolCall], text: str, answered: dict[str, dict], loop: ToolLoop, round_no: int,
               turn: ToolTurn, total: Stats) -> bool:  # fmt: skip
    """One round's calls: each new one run (its record kept in `answered`, its time added to
    `total.tool_ms`) and added to the turn's messages after the assistant message that made it; a
    call already answered in this answer is recorded as not run. True where one was repeated."""
    fresh: list[ToolCall] = []
    repeated: list[ToolCall] = []
    seen = set(answered)
    for call in calls:
        (repeated if _same_call(call) in seen else fresh).append(call)
        seen.add(_same_call(call))
    if fresh:
        assistant = {"role": "assistant", "content": text,
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
    return bool(repeated)


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
