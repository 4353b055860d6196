"""One batch run: the input checked whole before anything is generated, the ids already written
skipped, then every item answered, up to `parallel` at a time: on a local model as sequences of
one llama.cpp context (engine/batched.py), on a served one as requests side by side (the server
batches them); each finished item is one line of `{"id", "record"}` (docs/batch.schema.json)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path

from llmcli import record
from llmcli.batch.inputs import BadLine, Item, read
from llmcli.batch.output import Sink
from llmcli.contract import Done, Prepared, Request, SamplingParams
from llmcli.errors import LlmcliError, UsageError
from llmcli.loader import Loaded


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
    started: float = 0.0

    def wall_s(self) -> float:
        return time.perf_counter() - self.started

    def tok_s(self) -> float:
        wall = self.wall_s()
        return self.tokens / wall if wall > 0 else 0.0


def check(path: Path | str, *, skip_bad: bool, written: set[str]) -> Plan:
    """Read the whole input once (streamed) before anything is generated: a bad line stops the
    run here unless `skip_bad`; count what is to do."""
    plan = Plan()
    seen: set[str] = set()
    for item in read(path):
        if isinstance(item, BadLine):
            if not skip_bad:
                raise item
            plan.bad += 1
            continue
        if item.id in seen:
            raise UsageError(f"{path} line {item.line}: the id {item.id!r} is used twice",
                             hint="each item needs its own id for -o to resume by")  # fmt: skip
        seen.add(item.id)
        plan.total += 1
        if item.id in written:
            plan.done_before += 1
        else:
            plan.todo += 1
    if plan.total == 0 and plan.bad == 0:
        raise UsageError(f"{path} holds no prompt: it is empty")
    return plan


def items_to_do(path: Path | str, written: set[str], sink: Sink) -> Iterator[tuple[int, Item]]:
    """(order, item) of each item to answer; the others are passed to `sink` as skipped."""
    order = 0
    for item in read(path):
        if isinstance(item, BadLine):
            continue
        if item.id in written:
            sink.skip(order)
        else:
            yield order, item
        order += 1


def request_for(item: Item, params: SamplingParams, system: str | None) -> Request:
    options = dict(item.options)
    item_params = replace(params, **options) if options else params
    if item.messages is not None:
        messages = list(item.messages)
    else:
        messages = [{"role": "user", "content": item.prompt or ""}]
    if system and not any(m["role"] == "system" for m in messages):
        messages = [{"role": "system", "content": system}, *messages]
    return Request(item_params, messages=messages)


def line(item: Item, loaded: Loaded, params: SamplingParams, done: Done | None, fmt: str | None,
         error: str | None = None) -> dict:  # fmt: skip
    rec = record.build(ref=loaded.ref, info=loaded.engine.info, params=params, done=done,
                       prompt_format=fmt, error=error)  # fmt: skip
    return {"id": item.id, "record": rec}


Finished = Callable[[int, Item, Request, Done | None, str | None, str | None], None]


def answer_local(decoder, loaded: Loaded, work: Iterator[tuple[int, Item]], params: SamplingParams,
                 system: str | None, finished: Finished) -> None:  # fmt: skip
    """Every item through the batch decoder; `finished` as each ends."""
    from llmcli.engine import local
    from llmcli.engine.batched import BatchItem

    engine = loaded.engine
    requests: dict[int, tuple[Item, Request, str]] = {}

    def feed() -> Iterator[BatchItem]:
        for order, item in work:
            request = request_for(item, params, system)
            request.params.validate()
            try:
                tokens, prepared = local.prompt_tokens(engine, request)
            except LlmcliError as exc:
                finished(order, item, request, None, None, exc.message)
                continue
            requests[order] = (item, request, prepared.prompt_format)
            yield BatchItem(order, tokens, request.params)

    for result in decoder.run(feed()):
        order = result.key
        assert isinstance(order, int)
        item, request, fmt = requests.pop(order)
        finished(order, item, request, result.done, fmt, result.error)


def answer_side_by_side(loaded: Loaded, work: Iterator[tuple[int, Item]], params: SamplingParams,
                        system: str | None, parallel: int, finished: Finished) -> None:  # fmt: skip
    """Every item as its own request, `parallel` at a time (a served model: its server batches)."""

    def one(request: Request) -> tuple[Done | None, str | None, str | None]:
        done, fmt = None, None
        try:
            for event in loaded.engine.respond(request):
                if isinstance(event, Prepared):
                    fmt = event.prompt_format
                elif isinstance(event, Done):
                    done = event
        except LlmcliError as exc:
            return None, fmt, exc.message
        return done, fmt, None

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        running: dict[Future, tuple[int, Item, Request]] = {}
        source = iter(work)
        while True:
            while len(running) < parallel:
                nxt = next(source, None)
                if nxt is None:
                    break
                request = request_for(nxt[1], params, system)
                request.params.validate()
                running[pool.submit(one, request)] = (nxt[0], nxt[1], request)
            if not running:
                return
            ended, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in ended:
                order, item, request = running.pop(future)
                done, fmt, error = future.result()
                finished(order, item, request, done, fmt, error)
