"""One batch run: the input checked whole before anything is generated, the ids already written
checked against this run's work (batch/identity.py) and skipped, then every item made the request
`generate` would make and answered through `Engine.respond_many`, up to N at a time (a local model:
sequences of one llama.cpp context, engine/batched.py; a served one: requests side by side, which
its server batches); each finished item is one line of `{"id", "work", "record"}`, or OpenAI's
batch output line for OpenAI input (batch/openai.py; docs/batch.schema.json)."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from llmcli import record
from llmcli.batch import each, identity, inputs
from llmcli.batch.identity import Written
from llmcli.batch.inputs import Blanks
from llmcli.batch.items import JSON_OBJECT, BadLine, Item
from llmcli.batch.output import Sink
from llmcli.contract import Answered, Done, Many, Request, SamplingParams
from llmcli.errors import LlmcliError, UsageError
from llmcli.loader import Loaded
from llmcli.media.fragment import Placed, TextFile, compose
from llmcli.media.parts import split_parts

if TYPE_CHECKING:
    from llmcli.runspec import RunSpec


@dataclass
class Plan:
    """What the check of the input found: items to answer, and what is skipped."""

    total: int = 0  # items in the file
    todo: int = 0  # to answer in this run
    done_before: int = 0  # ids already in -o FILE
    bad: int = 0  # bad lines skipped (--skip-bad)
    bad_where: list[str] = field(default_factory=list)  # the first few of them ("line 3", a path)
    blank: int = 0  # blank lines (no item)
    openai: bool = False  # OpenAI batch lines: their output lines are OpenAI's
    unknown: dict[str, int] = field(default_factory=dict)  # fields of OpenAI bodies not read: items

    SHOWN = 5  # bad lines named

    def bad_said(self) -> str:
        """The bad lines skipped, the first few named: `3 bad line(s) skipped: line 2, line 5, ...`."""
        more = f" and {self.bad - len(self.bad_where)} more" if self.bad > len(self.bad_where) else ""
        return f"{self.bad} bad line(s) skipped: {', '.join(self.bad_where)}{more}"


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

    def read(self, blanks: Blanks | None = None) -> Iterator[Item | BadLine]:
        if self.files is not None:
            return each.read(self.files)
        assert self.path is not None
        return inputs.read(self.path, blanks)

    def items(self) -> Iterator[Item]:
        """The good items, in order, each in the template if any (bad lines were said by `check`)."""
        for item in self.read():
            if isinstance(item, Item) and not _constraint_error(item):
                yield self.template.apply_to(item) if self.template is not None else item


def check(source: Source, *, skip_bad: bool, written: Written | set[str]) -> Plan:
    """Read the whole input once (streamed) before anything is generated: a bad line stops the
    run here unless `skip_bad`; count what is to do. The ids the input gives itself (JSON lines)
    are kept to refuse one used twice; line numbers and --each's paths are unique already."""
    plan, blanks = Plan(), Blanks()
    done = written.ids if isinstance(written, Written) else written
    seen: set[str] = set()
    kinds: set[bool] = set()
    for item in source.read(blanks):
        if isinstance(item, Item) and (why := _constraint_error(item)):
            item = BadLine(source.label, item.line, why, whole_file=source.files is not None)
        if isinstance(item, BadLine):
            if not skip_bad:
                raise item
            plan.bad += 1
            if len(plan.bad_where) < plan.SHOWN:
                plan.bad_where.append(item.where)
            continue
        if item.keyed:
            if item.id in seen:
                raise UsageError(f"{source.label} line {item.line}: the id {item.id!r} is used twice",
                                 hint="each item needs its own id for -o to resume by")  # fmt: skip
            seen.add(item.id)
        kinds.add(item.openai is not None)
        if len(kinds) > 1:
            raise UsageError(f"{source.label} line {item.line}: OpenAI batch lines (custom_id) and other "
                             "JSON lines are mixed: one format a file")  # fmt: skip
        for name in item.unknown:
            plan.unknown[name] = plan.unknown.get(name, 0) + 1
        plan.total += 1
        if item.id in done:
            plan.done_before += 1
        else:
            plan.todo += 1
    plan.blank, plan.openai = blanks.count, kinds == {True}
    if plan.total == 0 and plan.bad == 0:
        said = f"its {plan.blank} line(s) are all blank" if plan.blank else "it is empty"
        raise UsageError(f"{source.label} holds no prompt: {said}")
    if plan.total == 0:
        raise UsageError(f"{source.label}: all {plan.bad} item(s) are bad, none is left to answer")
    return plan


def items_to_do(source: Source, written: Written | set[str], sink: Sink) -> Iterator[tuple[int, Item]]:
    """(order, item) of each item to answer, in the template if any; the others are passed to
    `sink` as skipped."""
    done = written.ids if isinstance(written, Written) else written
    for order, item in enumerate(source.items()):
        if item.id in done:
            sink.skip(order)
        else:
            yield order, item


def verify(source: Source, written: Written, spec: RunSpec, raw: bool, model: dict) -> None:
    """Before anything is generated: each id already in `written` was answered for the same
    prompt, model and settings as this run would answer it; the first that was not stops the run
    in one line (UsageError). A line that records no work (an older llmcli's) is taken on trust."""
    if not any(written.ids.values()):
        return
    for item in source.items():
        was = written.ids.get(item.id)
        if was is None:
            continue
        try:
            request_for(item, spec, raw)
        except UsageError:  # an item this run cannot make a request of: answered differently before
            raise UsageError(f"id {json.dumps(item.output_id)} in {written.path} was answered for a request "
                             "this run cannot make: --overwrite answers every item again") from None
        assert item.work is not None
        now = {**item.work, "model": model}
        if identity.digest(now) != was:
            why = identity.difference(written.work_of(item.id) or {}, now)
            raise UsageError(f"id {json.dumps(item.output_id)} in {written.path} was answered for {why}: "
                             "--overwrite answers every item again (or write to another -o)")  # fmt: skip


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
    is raw (`--raw`, or a base model that continues text) or the item is (an OpenAI
    /v1/completions line), images of OpenAI content parts as `generate -a` sends them. What
    identifies its work is kept on the item (`work_of`), for its output line."""
    request = _request(item, spec, raw)
    item.work = work_of(item, request, spec.system, spec.fallback_template)
    return request


def work_of(item: Item, request: Request, system: str | None = None, fallback: bool = False) -> dict:
    """The prompt and settings parts of an item's `work` (batch/identity.py); the model's is the run's."""
    own = item.messages is not None and any(m["role"] == "system" for m in item.messages)
    applied = system if request.text is None and not own else None  # the run's system prompt, where used
    settings = identity.settings(request.params, system=applied, raw=request.text is not None,
                                 response_format=item.response_format)  # fmt: skip
    if fallback and request.text is None:
        settings["template"] = "fallback"
    return {"prompt": identity.prompt_digest(request), "settings": settings}


def _request(item: Item, spec: RunSpec, raw: bool) -> Request:
    options = dict(item.options)
    schema = options.pop("json_schema", None)
    if schema is not None:
        options["grammar"], options["json_schema"] = schema_grammar(schema), schema
    elif "grammar" in options:
        options["json_schema"] = None
    params = spec.item_params(options)
    texts = _texts(item)
    if raw and not item.raw and item.messages is not None:
        raise UsageError("this item's messages need a chat template, and this run is plain text "
                         "(--raw, or a base model: --fallback-template gives it one)")  # fmt: skip
    if raw or item.raw:  # the run's plain text, or an OpenAI /v1/completions item's
        return Request(params, text=compose(texts, item.prompt or ""),
                       fragments=tuple(Placed(t, -1, None) for t in texts))  # fmt: skip
    if item.messages is not None:
        messages = [dict(m) for m in item.messages]
    else:
        messages = [{"role": "user", "content": item.prompt or ""}]
    if spec.system and not any(m["role"] == "system" for m in messages):
        messages = [{"role": "system", "content": spec.system}, *messages]
    messages, images = split_parts(messages)
    fragments: tuple[Placed, ...] = ()
    if texts:
        last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
        if last_user < 0:
            raise UsageError("this item's attachments need a user message to go with")
        messages[last_user]["content"] = compose(texts, messages[last_user]["content"])
        fragments = tuple(Placed(t, last_user, None) for t in texts)  # counted by the engine, in the prompt
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    last = images.pop(users[-1], ()) if users else ()
    return Request(params, messages=messages, images=last, history_images=images, fragments=fragments)


def _texts(item: Item) -> tuple[TextFile, ...]:
    """The item's text attachments, read (a file that cannot be read, or an image, fails the item)."""
    from llmcli.media.attach import load

    found = tuple(load(name) for name in item.attachments)
    if any(not isinstance(a, TextFile) for a in found):
        raise UsageError("a batch item's attachments are text files; images go through generate or chat")
    return found  # type: ignore[return-value]


def _plain(item: Item, params: SamplingParams) -> Request:
    """The request an item whose own could not be made stands for, in its line's work."""
    if item.raw or item.messages is None:
        return Request(params, text=item.prompt or "") if item.raw else Request(
            params, messages=[{"role": "user", "content": item.prompt or ""}])
    return Request(params, messages=list(item.messages))


def constraint(params: SamplingParams) -> str | None:
    """The kind of constraint an item's answer was written under, as its record says: an item's
    `response_format` json_object is its own kind (any JSON object), not a schema it gave."""
    if params.json_schema is JSON_OBJECT:
        return "json_object"
    return "json_schema" if params.json_schema is not None else "grammar" if params.grammar else None


def model_of(loaded: Loaded) -> dict:
    """The `model` part of every line's `work` in this run."""
    return identity.model_identity(loaded.ref, loaded.path, loaded.engine.info)


def line(item: Item, loaded: Loaded, params: SamplingParams, done: Done | None, fmt: str | None,
         error: str | None = None, fragments: tuple = ()) -> dict:  # fmt: skip
    """An item's output line: `{"id", "work", "record"}`, or OpenAI's for an OpenAI batch line."""
    kind = constraint(params)
    complete = done is not None and done.constraint_complete is not False
    rec = record.build(ref=loaded.ref, info=loaded.engine.info, params=params, done=done, prompt_format=fmt,
                       constraint=kind, constraint_complete=complete, error=error,
                       fragments=fragments)  # fmt: skip
    parts = item.work or work_of(item, _plain(item, params))
    work = {"prompt": parts["prompt"], "model": model_of(loaded), "settings": parts["settings"]}
    if item.openai is not None:
        from llmcli.batch import openai

        return openai.output_line(item, loaded.ref, rec, work)
    return {"id": item.output_id, "work": work, "record": rec}


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


TEMPLATE_MARGIN = 256  # tokens a chat template (its turns, a default system prompt) may add to an item


def context_needed(source: Source, spec: RunSpec, written: set[str]) -> int | None:
    """Tokens the largest item to do can need, prompt and answer, so that each sequence's share of
    the batch's context is sized to the work rather than the model's whole context (a smaller KV
    cache: made sooner, more sequences in the memory). An upper bound: a token covers at least one
    byte of text, the template and the system prompt are within `TEMPLATE_MARGIN` and their bytes,
    and the answer takes at most its max_tokens. None (the model's context) where an answer has no
    cap, or an item holds images (their tokens are the projector's)."""
    caps = {spec.sampling.max_tokens}
    longest = 0
    for item in source.read():
        if isinstance(item, BadLine) or item.id in written:
            continue
        if source.template is not None:
            item = source.template.apply_to(item)
        if item.messages is not None:
            if any(isinstance(m.get("content"), list) and any(p.get("type") != "text" for p in m["content"])
                   for m in item.messages):  # fmt: skip
                return None
            size = sum(len(json.dumps(m.get("content"), ensure_ascii=False).encode()) for m in item.messages)
        else:
            size = len((item.prompt or "").encode())
        longest = max(longest, size)
        if "max_tokens" in item.options:
            caps.add(spec.item_params({"max_tokens": item.options["max_tokens"]}).max_tokens)
    if 0 in caps:
        return None
    need = longest + len((spec.system or "").encode()) + TEMPLATE_MARGIN + max(caps)
    return -(-need // 256) * 256
