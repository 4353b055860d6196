"""What `Engine.respond` does in an engine that runs the model in this process (llama.cpp, the
fake): render the conversation with the model's chat template (or its architecture's fallback),
or take plain text as it is; tokenize; fit a long history to the context by the request's overflow
policy; let the caller load a saved KV state for the prompt; then prefill and decode (`stream`).

A served engine does none of this: its server applies the template and keeps the cache."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from llmcli import prompting
from llmcli.contract import Done, Engine, Event, Prepared, Request
from llmcli.conversation import Conversation, Message


def respond(engine: Engine, request: Request) -> Iterator[Event]:
    """`Engine.respond` for a local engine. The prompt is built when called (a context overflow
    raises here, and a Ctrl-C meanwhile stops the request at its first event); the iterator yields
    Prepared, then the stream of `engine.stream`."""
    tokens, prepared = prompt_tokens(engine, request)
    waited_ms = request.before_prefill(tokens) if request.before_prefill is not None else 0.0
    return run(engine, tokens, request.params, prepared, waited_ms)


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
        close = getattr(events, "close", None)
        if close is not None:
            close()


def prompt_tokens(engine: Engine, request: Request) -> tuple[list[int], Prepared]:
    """The prompt's tokens and how they were built."""
    if request.text is not None:
        return prompting.raw_tokens(engine, request.text), Prepared("raw")
    assert request.messages is not None
    fmt = prompting.prompt_format(engine)
    if request.fit is None:
        return prompting.chat_tokens(engine, request.messages, fmt), Prepared(fmt.source)
    conversation = _conversation(request.messages)
    fitted = conversation.fit(
        lambda messages: prompting.chat_tokens(engine, messages, fmt),
        engine.n_ctx, request.fit.reserve, request.fit.policy,
    )  # fmt: skip
    return fitted.tokens, Prepared(fmt.source, fitted.dropped_messages, fitted.dropped_tokens)


def _conversation(messages: list[dict[str, str]]) -> Conversation:
    """The messages as a `Conversation` (its system prompt apart), for the overflow policy."""
    system, turns = "", messages
    if messages and messages[0]["role"] == "system":
        system, turns = messages[0]["content"], messages[1:]
    return Conversation(system, [Message(m["role"], m["content"]) for m in turns])
