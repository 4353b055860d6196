"""One batch run: the input checked whole before anything is generated, the ids already written
skipped, then every item made the request `generate` would make and answered through
`Engine.respond_many`, up to N at a time (a local model: sequences of one llama.cpp context,
engine/batched.py; a served one: requests side by side, which its server batches); each finished
item is one line of `{"id", "record"}` (docs/batch.schema.json)."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from llmcli import record
from llmcli.batch import each, inputs
from llmcli.batch.inputs import BadLine, Item
from llmcli.batch.output import Sink
from llmcli.contract import Answered, Done, Many, Request, SamplingParams
from llmcli.errors import LlmcliError, UsageError
from llmcli.loader import Loaded
from llmcli.media.fragment import Placed, TextFile, compose

if TYPE_CHECKING:
    from llmcli.runspec import RunSpec


@dataclass
class Plan:
    """What the check of the input found: items to answer, and what is skipped."""

    total: int = 0  # items in the file
    todo: int = 0  # to answer in this run
    done_before: int = 0  # ids already in -o FILE
    bad: int = 0  # bad lines skipped (--skip-bad)


@dataclass
class Tally:
    """What the run did, for the progress bar and the summary."""

    done: int = 0
    failed: int = 0
    tokens: int = 0
    prompt_tokens: int = 0  # of the items answered
    reused: int = 0  # of those, the tokens a shared prefix's cells gave (not prefilled again)
    started: float = 0.0

    def wall_s(self) -> float:
        return time.perf_counter() - self.started

    def tok_s(self) -> float:
        wall = self.wall_s()
        return self.tokens / wall if wall > 0 else 0.0


@dataclass
class Source:
    """Where a run's items come from: one input file, or `--each`'s files (one item each); and the
    template each prompt is put into, if any."""

    path: str | None = None
    files: list[str] | None = None
    template: each.Template | None = None

    @property
    def label(self) -> str:
        return self.path if self.path is not None else "--each"

    def read(self) -> Iterator[Item | BadLine]:
        if self.files is not None:
            return each.read(self.files)
        assert self.path is not None
        return inputs.read(self.path)


def check(source: Source, *, skip_bad: bool, written: set[str]) -> Plan:
    """Read the whole input once (streamed) before anything is generated: a bad line stops the
    run here unless `skip_bad`; count what is to do. The ids the input gives itself (JSON lines)
    are kept to refuse one used twice; line numbers and --each's paths are unique already."""
    plan = Plan()
    seen: set[str] = set()
    for item in source.read():
        if isinstance(item, Item) and (why := _constraint_error(item)):
            item = BadLine(source.label, item.line, why, whole_file=source.files is not None)
        if isinstance(item, BadLine):
            if not skip_bad:
                raise item
            plan.bad += 1
            continue
        if item.keyed:
            if item.id in seen:
                raise UsageError(f"{source.label} line {item.line}: the id {item.id!r} is used twice",
                                 hint="each item needs its own id for -o to resume by")  # fmt: skip
            seen.add(item.id)
        plan.total += 1
        if item.id in written:
            plan.done_before += 1
        else:
            plan.todo += 1
    if plan.total == 0 and plan.bad == 0:
        raise UsageError(f"{source.label} holds no prompt: it is empty")
    if plan.total == 0:
        raise UsageError(f"{source.label}: all {plan.bad} item(s) are bad, none is left to answer")
    return plan


def items_to_do(source: Source, written: set[str], sink: Sink) -> Iterator[tuple[int, Item]]:
    """(order, item) of each item to answer, in the template if any; the others are passed to
    `sink` as skipped."""
    order = 0
    for item in source.read():
        if isinstance(item, BadLine) or _constraint_error(item):
            continue
        if item.id in written:
            sink.skip(order)
        else:
            yield order, source.template.apply_to(item) if source.template is not None else item
        order += 1


def _constraint_error(item: Item) -> str | None:
    """Why an item's JSON schema cannot be used (the converter refuses it), else None."""
    schema = item.options.get("json_schema")
    if schema is None:
        return None
    try:
        schema_grammar(schema)
    except UsageError as exc:
        return exc.message
    return None


def schema_grammar(schema: dict | bool) -> str:
    """GBNF for a JSON schema (the engine's converter, the one `--json-schema` uses); the same
    schema on many items is converted once."""
    try:
        return _converted(json.dumps(schema, sort_keys=True))
    except Exception as exc:  # the converter raises plain exceptions on schemas it does not support
        raise UsageError(f"the JSON schema could not be converted to a grammar: {exc}") from None


@lru_cache(maxsize=64)
def _converted(text: str) -> str:
    from llmcli.engine.grammar import json_schema_to_gbnf

    return json_schema_to_gbnf(text)


def request_for(item: Item, spec: RunSpec, raw: bool) -> Request:
    """The item's request, as `generate` makes it from the run's settings (`spec`): its own options
    over all but the flags typed (`RunSpec.item_params`; its grammar or JSON schema replace the
    run's), the system prompt before its messages unless they have one, plain text where the run
    is raw (`--raw`, or a base model that continues text)."""
    options = dict(item.options)
    schema = options.pop("json_schema", None)
    if schema is not None:
        options["grammar"], options["json_schema"] = schema_grammar(schema), schema
    elif "grammar" in options:
        options["json_schema"] = None
    params = spec.item_params(options)
    texts = _texts(item)
    if raw:
        if item.messages is not None:
            raise UsageError("this item's messages need a chat template, and this run is plain text "
                             "(--raw, or a base model: --fallback-template gives it one)")  # fmt: skip
        return Request(params, text=compose(texts, item.prompt or ""),
                       fragments=tuple(Placed(t, -1, None) for t in texts))  # fmt: skip
    if item.messages is not None:
        messages = [dict(m) for m in item.messages]
    else:
        messages = [{"role": "user", "content": item.prompt or ""}]
    if spec.system and not any(m["role"] == "system" for m in messages):
        messages = [{"role": "system", "content": spec.system}, *messages]
    fragments: tuple[Placed, ...] = ()
    if texts:
        last = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
        if last < 0:
            raise UsageError("this item's attachments need a user message to go with")
        messages[last]["content"] = compose(texts, messages[last]["content"])
        fragments = tuple(Placed(t, last, None) for t in texts)  # counted by the engine, in the prompt
    return Request(params, messages=messages, fragments=fragments)


def _texts(item: Item) -> tuple[TextFile, ...]:
    """The item's text attachments, read (a file that cannot be read, or an image, fails the item)."""
    from llmcli.media.attach import load

    found = tuple(load(name) for name in item.attachments)
    if any(not isinstance(a, TextFile) for a in found):
        raise UsageError("a batch item's attachments are text files; images go through generate or chat")
    return found  # type: ignore[return-value]


def constraint(params: SamplingParams) -> str | None:
    """The kind of constraint an item's answer was written under, as its record says."""
    return "json_schema" if params.json_schema is not None else "grammar" if params.grammar else None


def line(item: Item, loaded: Loaded, params: SamplingParams, done: Done | None, fmt: str | None,
         error: str | None = None, fragments: tuple = ()) -> dict:  # fmt: skip
    kind = constraint(params)
    complete = done is not None and done.constraint_complete is not False
    rec = record.build(ref=loaded.ref, info=loaded.engine.info, params=params, done=done, prompt_format=fmt,
                       constraint=kind, constraint_complete=complete, error=error,
                       fragments=fragments)  # fmt: skip
    return {"id": item.id, "record": rec}


def answer(many: Many, work: Iterator[tuple[int, Item]], spec: RunSpec,
           raw: bool) -> Iterator[tuple[Item, Answered]]:  # fmt: skip
    """Every item to do as its request through `many` (`Engine.respond_many`), each (item, what
    came of it) as it finishes; an item whose request cannot be made fails alone, in its line."""
    items: dict[int, Item] = {}
    refused: deque[tuple[Item, Answered]] = deque()

    def requests() -> Iterator[tuple[int, Request]]:
        for order, item in work:
            try:
                request = request_for(item, spec, raw)
            except LlmcliError as exc:
                placeholder = Request(spec.sampling, messages=list(item.messages or []))
                refused.append((item, Answered(order, placeholder, None, None, exc.message)))
                continue
            items[order] = item
            yield order, request

    for answered in many.respond(requests()):
        while refused:
            yield refused.popleft()
        yield items.pop(answered.key), answered
    while refused:
        yield refused.popleft()
