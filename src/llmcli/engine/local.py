"""What `Engine.respond` does in an engine that runs the model in this process (llama.cpp, the
fake): render the conversation with the model's chat template (or its architecture's fallback),
or take plain text as it is; tokenize; fit a long history to the context by the request's overflow
policy; let the caller load a saved KV state for the prompt; then prefill and decode (`stream`).

A served engine does none of this: its server applies the template and keeps the cache."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from llmcli import prompting
from llmcli.contract import CallGrammar, Done, Engine, Event, Prepared, Reasoning, Request, Token, ToolCall
from llmcli.conversation import REASONING_FIELD, Conversation, Message
from llmcli.reasoning import Splitter, prompt_state
from llmcli.tools.calls import CallFormat, Parser, Piece, detect
from llmcli.tools.grammar import call_grammar, call_schema

TAIL_TOKENS = 32  # the prompt's last tokens, read for where the generation prompt leaves a reasoning model


def respond(engine: Engine, request: Request) -> Iterator[Event]:
    """`Engine.respond` for a local engine. The prompt is built when called (a context overflow
    raises here, and a Ctrl-C meanwhile stops the request at its first event); the iterator yields
    Prepared, then the stream of `engine.stream`."""
    request = thinking(engine, request)
    media = None
    if request.images or request.history_images:
        tokens, prepared, media = image_tokens(engine, request)
    else:
        tokens, prepared = prompt_tokens(engine, request)
    waited_ms = request.before_prefill(tokens) if request.before_prefill is not None else 0.0
    calls = call_constraint(engine, request)
    fmt = engine.info.reasoning
    if request.text is None and fmt is not None and fmt.open_tag and fmt.close_tag:
        state = prompt_state(fmt, engine.detokenize([t for t in tokens[-TAIL_TOKENS:] if t >= 0]))  # type: ignore[attr-defined]
        events = run(engine, tokens, request.params, prepared, waited_ms, state, calls, media)
        # after a closed block (thinking switched off) a model may still write an empty one of its
        # own: the splitter still takes a block at the start out of the answer
        events = split_reasoning(events, Splitter(fmt, "start" if state == "answer" else state))
    else:
        events = run(engine, tokens, request.params, prepared, waited_ms, calls=calls, media=media)
    if request.reads_calls:
        events = split_calls(events, Parser(call_format(engine)))
    return events


def call_constraint(engine: Engine, request: Request) -> CallGrammar | None:
    """The grammar a tool call's JSON is written under, where the model's format allows one and
    the tools' schemas convert (else None: the call is checked once written)."""
    if request.text is not None or not request.tools or request.params.grammar:
        return None
    schema = call_schema(call_format(engine), request.tools)
    if schema is None:
        return None
    from llmcli.engine.grammar import json_schema_to_gbnf

    try:
        return call_grammar(json_schema_to_gbnf(json.dumps(schema)))
    except Exception:  # a schema feature the converter lacks
        return None


def thinking(engine: Engine, request: Request) -> Request:
    """The switch and the budget as they apply to this model: a budget of 0 turns a switchable
    template's thinking off; thinking turned off where the template has no switch is a budget of 0
    (the block is closed as soon as it opens)."""
    fmt = engine.info.reasoning
    if fmt is None or request.text is not None:
        return request
    params, think = request.params, request.think
    if params.reasoning_budget == 0 and fmt.switch and think is None:
        think = False
    if think is False and not fmt.switch and fmt.close_tag:
        params = replace(params, reasoning_budget=0)
    return replace(request, params=params, think=think)


def call_format(engine: Engine) -> CallFormat:
    """How the model writes a tool call, from its chat template; a template that takes no tools
    is refused in one line."""
    from llmcli.errors import UsageError

    fmt = detect(prompting.prompt_format(engine).template)
    if fmt is None:
        raise UsageError(
            "the model's chat template takes no tools (no tool-call format in it)",
            hint="use a model whose template has tools, e.g. Qwen2.5 or Llama 3.1+ Instruct",
        )
    return fmt


def describe(engine: Engine) -> list[tuple[str, str]]:
    """A local model as `/show` says it: its file, its context and GPU layers, its KV cache."""
    info = engine.info
    weights = "repacked" if info.repack else "not repacked"
    return [
        ("path", info.path),
        ("context", f"{engine.n_ctx} tokens (trained {info.n_ctx_train}); GPU layers {info.gpu_layers}"),
        ("kv cache", f"K {info.type_k}, V {info.type_v}; weights {weights}"),
    ]


def run(
    engine: Engine, tokens: list[int], params, prepared: Prepared, waited_ms: float,
    reasoning: str | None = None, calls: CallGrammar | None = None, media=None,
) -> Iterator[Event]:  # fmt: skip
    """The events of a built prompt: Prepared, then `engine.stream`'s, the wait added to the timings.
    `reasoning`: where the prompt leaves a reasoning model (`reasoning.prompt_state`); `calls`: the
    grammar of a tool call."""
    if media is not None:
        events = engine.stream(tokens, params, reasoning=reasoning, calls=calls, media=media)
    elif reasoning is None and calls is None:  # plain text: the contract's two arguments
        events = engine.stream(tokens, params)
    else:
        events = engine.stream(tokens, params, reasoning=reasoning, calls=calls)
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
    messages = template_messages(request.messages, fmt.template)
    variables = switch_variables(engine, request.think)
    if request.tools:
        call_format(engine)  # refused before anything is rendered
        variables = {**(variables or {}), "tools": request.tools}
    if request.fit is None:
        return prompting.chat_tokens(engine, messages, fmt, variables), Prepared(fmt.source)
    conversation = _conversation(messages)
    fitted = conversation.fit(
        lambda messages: prompting.chat_tokens(engine, messages, fmt, variables),
        engine.n_ctx, request.fit.reserve, request.fit.policy,
    )  # fmt: skip
    return fitted.tokens, Prepared(fmt.source, fitted.dropped_messages, fitted.dropped_tokens)


def image_tokens(engine: Engine, request: Request) -> tuple[list[int], Prepared, object]:
    """A conversation with images (the last user message's, and earlier ones' in a chat's
    history): the template rendered with one image marker per image before its message's text (as
    llama-mtmd-cli puts them), then tokenized into text and image chunks by the engine's projector.
    The whole conversation must fit: an overflow is refused, not fitted by dropping turns."""
    from llmcli import templates
    from llmcli.engine.mtmd import MARKER
    from llmcli.errors import ContextOverflowError, UsageError
    from llmcli.media.placed import placed_images

    if request.text is not None or not engine.can.images:
        raise UsageError("images need a chat prompt and a model run by llama.cpp here (not --raw)")
    vision: Any = engine  # a local engine that reads images has a projector (LlamaEngine.media_prompt)
    assert request.messages is not None
    fmt = prompting.prompt_format(engine)
    messages = list(template_messages(request.messages, fmt.template))
    images: list = []
    for i, placed in sorted(placed_images(request).items()):
        messages[i] = {**messages[i], "content": MARKER * len(placed) + str(messages[i].get("content") or "")}
        images += placed
    variables = switch_variables(engine, request.think)
    if request.tools:
        call_format(engine)  # refused before anything is rendered
        variables = {**(variables or {}), "tools": request.tools}
    text = templates.render(
        fmt, messages, bos_token=engine.bos_text(), eos_token=engine.eos_text(), variables=variables
    )
    media = vision.media_prompt(text, images)
    if request.fit is not None and len(media.tokens) + request.fit.reserve > engine.n_ctx:
        vision.free_media(media)
        raise ContextOverflowError(
            f"the conversation with its {len(images)} image(s) is {len(media.tokens)} tokens and the answer "
            f"needs {request.fit.reserve} more, but the context holds {engine.n_ctx}",
            hint="a conversation with images is not trimmed: /clear or /undo, or raise --ctx-size",
        )
    return media.tokens, Prepared(fmt.source), media


def switch_variables(engine: Engine, think: bool | None) -> dict[str, object] | None:
    """The template variables that turn a reasoning model's thinking on or off (None: none)."""
    switch = engine.info.reasoning.switch if engine.info.reasoning is not None else None
    return {switch: think} if switch and think is not None else None


def template_messages(messages: list[dict[str, str]], template: str) -> list[dict[str, str]]:
    """The messages as the chat template takes them: an earlier answer's reasoning stays in its
    `reasoning_content` field where the template reads that field (Qwen3's, which decides what of
    it the model sees), and is dropped where it does not; it is never put back into the content."""
    if reads_reasoning(template):
        return messages
    return [{k: v for k, v in m.items() if k != REASONING_FIELD} for m in messages]


def reads_reasoning(template: str) -> bool:
    """Whether a chat template reads an earlier answer's reasoning from its message field."""
    return REASONING_FIELD in template


def _conversation(messages: list[dict]) -> Conversation:
    """The messages as a `Conversation` (its system prompt apart), for the overflow policy; an
    answer's reasoning and tool calls go with it."""
    system, turns = "", messages
    if messages and messages[0]["role"] == "system":
        system, turns = messages[0]["content"], messages[1:]
    return Conversation(system, [Message.from_template(m) for m in turns])


def split_reasoning(events: Iterator[Event], splitter: Splitter) -> Iterator[Event]:
    """A reasoning model's events: its reasoning as `Reasoning`, the answer as `Token`, the tags in
    neither; `Done` carries both texts, the count of tokens decoded inside the block, whether the
    output ended inside it, and the two parts' timings."""
    answer: list[str] = []
    thought: list[str] = []
    counted = reasoning_tokens = 0
    clock = Clock()
    try:
        for event in events:
            if isinstance(event, Token):
                inside = splitter.in_reasoning
                reasoning, text = splitter.feed(event.text)
                if inside or splitter.in_reasoning or reasoning:
                    reasoning_tokens += event.n_tokens - counted
                    clock.reasoned()
                counted = event.n_tokens
                if reasoning:
                    thought.append(reasoning)
                    yield Reasoning(reasoning, event.n_tokens)
                if text:
                    answer.append(text)
                    clock.answered()
                    yield replace(event, text=text)
            elif isinstance(event, Done):
                reasoning_open = splitter.in_reasoning
                reasoning, text = splitter.finish()
                if reasoning:
                    thought.append(reasoning)
                    yield Reasoning(reasoning, counted)
                if text:
                    answer.append(text)
                    yield Token(text, counted)
                event.text, event.reasoning = "".join(answer), "".join(thought).strip()
                event.reasoning_open = reasoning_open and not event.text
                event.stats.reasoning_tokens = reasoning_tokens
                clock.timings(event.stats)
                yield event
            else:
                yield event
    finally:
        _close(events)


class Clock:
    """When a reasoning model's two parts began, on the wall clock from the request's start (a
    local engine: its first event, the prefill's start; a served one: the request's sending)."""

    def __init__(self, start: float | None = None, now=time.perf_counter) -> None:
        self.now = now
        self.start = start if start is not None else now()
        self.first_reasoning: float | None = None
        self.first_answer: float | None = None

    def reasoned(self) -> None:
        if self.first_reasoning is None:
            self.first_reasoning = self.now()

    def answered(self) -> None:
        if self.first_answer is None:
            self.first_answer = self.now()

    def timings(self, stats) -> None:
        """The two parts' times into `stats`: the first token of each, and each one's duration."""
        end = self.now()
        ms = lambda t: (t - self.start) * 1000  # noqa: E731
        if self.first_reasoning is not None:
            stats.reasoning_ttft_ms = ms(self.first_reasoning)
            until = self.first_answer if self.first_answer is not None else end
            stats.reasoning_ms = max(0.0, (until - self.first_reasoning) * 1000)
        if self.first_answer is not None:
            stats.answer_ttft_ms = ms(self.first_answer)
            stats.answer_ms = max(0.0, (end - self.first_answer) * 1000)


def split_calls(events: Iterator[Event], parser: Parser) -> Iterator[Event]:
    """The answer's tool calls as `ToolCall` events (numbered in this answer), the text around them
    as `Token`; call markup reaches neither. `Done` carries the text and the calls: those read
    from the text and those that came as events already (a server's `tool_calls`)."""
    answer: list[str] = []
    calls: list[ToolCall] = []
    counted = 0

    def out(pieces: list[Piece], n_tokens: int, like: Token | None) -> Iterator[Event]:
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
            elif isinstance(event, ToolCall):
                calls.append(event)
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
