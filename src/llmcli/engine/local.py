"""What `Engine.respond` does in an engine that runs the model in this process (llama.cpp, the
fake): render the conversation with the model's chat template (or its architecture's fallback),
or take plain text as it is; tokenize; fit a long history to the context by the request's overflow
policy; let the caller load a saved KV state for the prompt; then prefill and decode (`stream`).

A served engine does none of this: its server applies the template and keeps the cache."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace

from llmcli import prompting, toolcalls
from llmcli.contract import Done, Engine, Event, Prepared, Reasoning, Request, Token, ToolCall
from llmcli.conversation import Conversation, Message
from llmcli.reasoning import Splitter


def respond(engine: Engine, request: Request) -> Iterator[Event]:
    """`Engine.respond` for a local engine. The prompt is built when called (a context overflow
    raises here, and a Ctrl-C meanwhile stops the request at its first event); the iterator yields
    Prepared, then the stream of `engine.stream`."""
    tokens, prepared = prompt_tokens(engine, request)
    waited_ms = request.before_prefill(tokens) if request.before_prefill is not None else 0.0
    events = run(engine, tokens, request.params, prepared, waited_ms)
    fmt = engine.info.reasoning
    if request.text is None and fmt is not None and fmt.open_tag and fmt.close_tag:
        events = split_reasoning(events, Splitter(fmt))
    if request.text is None and request.tools:
        events = split_calls(events, toolcalls.Parser(call_format(engine)))
    return events


def call_format(engine: Engine) -> toolcalls.CallFormat:
    """How the model writes a tool call, from its chat template; a template that takes no tools
    is refused in one line."""
    from llmcli.errors import UsageError

    fmt = toolcalls.detect(prompting.prompt_format(engine).template)
    if fmt is None:
        raise UsageError(
            "the model's chat template takes no tools (no tool-call format in it)",
            hint="use a model whose template has tools, e.g. Qwen2.5 or Llama 3.1+ Instruct",
        )
    return fmt


def run(engine: Engine, tokens: list[int], params, prepared: Prepared, waited_ms: float) -> Iterator[Event]:
    """The events of a built prompt: Prepared, then `engine.stream`'s, the wait added to the timings."""
    events = engine.stream(tokens, params)
    try:
        # Prepared comes first, but after the stream has begun: a request clears the engine's
        # interrupt flag as it starts, and a Ctrl-C pressed before that is raised at the first event.
        first = next(events)
        yield prepared
        for event in itertools.chain((first,), events):
            if isinstance(event, Done) and waited_ms:  # the wait for the first token includes the load
                event.stats.ttft_ms += waited_ms
                event.stats.total_ms += waited_ms
            yield event
    finally:  # closed early (Ctrl-C, a consumer that stopped): the stream leaves its cache consistent
        _close(events)


def prompt_tokens(engine: Engine, request: Request) -> tuple[list[int], Prepared]:
    """The prompt's tokens and how they were built."""
    if request.text is not None:
        return prompting.raw_tokens(engine, request.text), Prepared("raw")
    assert request.messages is not None
    fmt = prompting.prompt_format(engine)
    switch = engine.info.reasoning.switch if engine.info.reasoning is not None else None
    variables: dict[str, object] | None = None
    if switch and request.think is not None:
        variables = {switch: request.think}
    if request.tools:
        call_format(engine)  # refused before anything is rendered
        variables = {**(variables or {}), "tools": request.tools}
    if request.fit is None:
        return prompting.chat_tokens(engine, request.messages, fmt, variables), Prepared(fmt.source)
    conversation = _conversation(request.messages)
    fitted = conversation.fit(
        lambda messages: prompting.chat_tokens(engine, messages, fmt, variables),
        engine.n_ctx, request.fit.reserve, request.fit.policy,
    )  # fmt: skip
    return fitted.tokens, Prepared(fmt.source, fitted.dropped_messages, fitted.dropped_tokens)


def _conversation(messages: list[dict]) -> Conversation:
    """The messages as a `Conversation` (its system prompt apart), for the overflow policy."""
    system, turns = "", messages
    if messages and messages[0]["role"] == "system":
        system, turns = messages[0]["content"], messages[1:]
    return Conversation(system, [Message.from_template(m) for m in turns])


def split_reasoning(events: Iterator[Event], splitter: Splitter) -> Iterator[Event]:
    """A reasoning model's events: its reasoning as `Reasoning`, the answer as `Token`, the tags in
    neither; `Done` carries both texts and the count of tokens decoded inside the block."""
    answer: list[str] = []
    thought: list[str] = []
    counted = reasoning_tokens = 0
    try:
        for event in events:
            if isinstance(event, Token):
                inside = splitter.in_reasoning
                reasoning, text = splitter.feed(event.text)
                if inside or splitter.in_reasoning or reasoning:
                    reasoning_tokens += event.n_tokens - counted
                counted = event.n_tokens
                if reasoning:
                    thought.append(reasoning)
                    yield Reasoning(reasoning, event.n_tokens)
                if text:
                    answer.append(text)
                    yield replace(event, text=text)
            elif isinstance(event, Done):
                reasoning, text = splitter.finish()
                if reasoning:
                    thought.append(reasoning)
                    yield Reasoning(reasoning, counted)
                if text:
                    answer.append(text)
                    yield Token(text, counted)
                event.text, event.reasoning = "".join(answer), "".join(thought)
                event.stats.reasoning_tokens = reasoning_tokens
                yield event
            else:
                yield event
    finally:
        _close(events)


def split_calls(events: Iterator[Event], parser: toolcalls.Parser) -> Iterator[Event]:
    """The answer's tool calls as `ToolCall` events (numbered in this answer), the text around them
    as `Token`; call markup reaches neither. `Done` carries the text and the calls."""
    answer: list[str] = []
    calls: list[ToolCall] = []
    counted = 0

    def out(pieces: list[toolcalls.Piece], n_tokens: int, like: Token | None) -> Iterator[Event]:
        for piece in pieces:
            if isinstance(piece, str):
                answer.append(piece)
                yield replace(like, text=piece) if like is not None else Token(piece, n_tokens)
            else:
                call = ToolCall(f"call{len(calls) + 1:05d}", piece.name, piece.arguments, piece.error)
                calls.append(call)
                yield call

    try:
        for event in events:
            if isinstance(event, Token):
                counted = event.n_tokens
                yield from out(parser.feed(event.text), event.n_tokens, event)
            elif isinstance(event, Done):
                yield from out(parser.finish(), counted, None)
                event.text, event.tool_calls = "".join(answer), calls
                yield event
            else:
                yield event
    finally:
        _close(events)


def _close(events: Iterator[Event]) -> None:
    """Close the stream beneath (a generator), so it stops and leaves the engine usable."""
    close = getattr(events, "close", None)
    if close is not None:
        close()
