"""Many requests at once as requests side by side: `n` threads, each driving one `Engine.respond`
(a served model's `respond_many`, whose server batches what arrives together; an engine that cannot
decode many sequences in one context). `Engine.respond_many` hands this out; callers never build it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from llmcli.contract import Answered, Done, Prepared, Request
from llmcli.errors import LlmcliError


class SideBySide:
    """`Many` by threads: up to `n` requests of `engine` in flight, each answered as it finishes."""

    def __init__(self, engine, n: int, how: str) -> None:
        self.engine, self.n, self.how = engine, max(1, n), how

    def respond(self, requests: Iterable[tuple[Any, Request]]) -> Iterator[Answered]:
        source = iter(requests)
        with ThreadPoolExecutor(max_workers=self.n) as pool:
            running: dict[Future, tuple[Any, Request]] = {}
            while True:
                while len(running) < self.n and (nxt := next(source, None)) is not None:
                    running[pool.submit(answer, self.engine, nxt[1])] = nxt
                if not running:
                    return
                ended, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in ended:
                    key, request = running.pop(future)
                    done, fmt, error = future.result()
                    yield Answered(key, request, done, fmt, error)

    def close(self) -> None:
        pass


def answer(engine, request: Request) -> tuple[Done | None, str | None, str | None]:
    """One request through `engine.respond`: its Done, how its prompt was built, or the error."""
    done, fmt = None, None
    try:
        for event in engine.respond(request):
            if isinstance(event, Prepared):
                fmt = event.prompt_format
            elif isinstance(event, Done):
                done = event
    except LlmcliError as exc:
        return None, fmt, exc.message
    return done, fmt, None


def side_by_side_n(parallel: int | None, items: int, default: int) -> tuple[int, str]:
    """N of requests side by side: `parallel` (at most the items), else `default`."""
    if parallel is None:
        return max(1, min(default, items or default)), "auto: requests at once"
    if parallel > max(1, items):
        return max(1, items), f"set, at most the {items} items"
    return parallel, "set"
