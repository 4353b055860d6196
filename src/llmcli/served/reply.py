"""One streamed request read into a reply: `Exchange` (opened on a `Client`, read as its text
arrives, shut from any thread) and `Reply` (the text pieces, when they came, the reasoning, the
tool calls the deltas build, usage and timings, and the request's figures with their sources).
`ServedEngine` runs one exchange per answer; the serving benchmark runs many at once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from llmcli.contract import Stats, ToolCall
from llmcli.served.client import Chunk, Client, read_chunks, shutdown

if TYPE_CHECKING:
    import httpx


class Exchange:
    """One streamed request on a `Client`: opened, read into a `Reply` as its text arrives, and shut
    from any thread. `ServedEngine` runs one per answer; the serving benchmark runs many at once
    on one engine's client, so each holds its own response rather than the engine holding one."""

    def __init__(self, client: Client, path: str, body: dict, *, chat: bool) -> None:
        self.client = client
        self.path = path
        self.body = body
        self.chat = chat
        self.url = client.url(path)
        self.reply = Reply(time.monotonic())
        self._response: httpx.Response | None = None
        self._lock = threading.Lock()

    def open(self, cancel: threading.Event) -> bool:
        """Send the request; False when `cancel` was set before the server accepted it. The reply's
        clock starts here: its time to first text counts from the request being sent."""
        self.reply = Reply(time.monotonic())
        response = self.client.open_stream(self.path, self.body, cancel)
        if response is None:
            return False
        with self._lock:
            self._response = response
        if cancel.is_set():  # interrupted while the request was being accepted
            self.shutdown()
        return True

    def pieces(self) -> Iterator[tuple[str, str]]:
        """Each chunk's (reasoning, answer) text as it arrives; chunks with neither are skipped."""
        assert self._response is not None, "open() first"
        for chunk in read_chunks(self._response, self.url, self.client.stall_s):
            text = self.reply.add(chunk, chat=self.chat)
            if text or self.reply.fresh_reasoning:
                yield self.reply.fresh_reasoning, text

    def texts(self) -> Iterator[str]:
        """Each chunk's text as it arrives (the reply keeps it, with usage, timings and arrival
        times). Raises NetworkError as `read_chunks` does."""
        assert self._response is not None, "open() first"
        for chunk in read_chunks(self._response, self.url, self.client.stall_s):
            text = self.reply.add(chunk, chat=self.chat)
            if text:
                yield text

    def shutdown(self) -> None:
        """End the blocked read now (any thread): the socket is shut down under it."""
        with self._lock:
            response = self._response
        if response is not None:
            shutdown(response)

    def close(self) -> None:
        with self._lock:
            response, self._response = self._response, None
        if response is not None:
            response.close()


class Reply:
    """One streamed answer as it arrives: the text pieces, when they came, usage and timings."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.pieces: list[str] = []
        self.reasoning: list[str] = []  # a reasoning model's reasoning (`reasoning_content`, `reasoning`)
        self.fresh_reasoning = ""  # what the last chunk added to it
        self.times: list[float] = []  # arrival of each text chunk (monotonic seconds)
        self.finish: str | None = None
        self.usage: dict = {}
        self.timings: dict = {}
        # the model's tool calls as the deltas build them, by their index: id, name, and the
        # arguments' JSON text in the pieces it streams in (or why a delta could not be read)
        self.calls: dict[int, dict[str, str]] = {}

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def n_chunks(self) -> int:
        return len(self.pieces)

    def add(self, chunk: Chunk, *, chat: bool) -> str:
        data = chunk.data
        if isinstance(data.get("usage"), dict):
            self.usage = data["usage"]
        if isinstance(data.get("timings"), dict):
            self.timings = data["timings"]
        text = self.fresh_reasoning = ""
        for choice in data.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            if chat:
                delta = choice.get("delta") or choice.get("message") or {}
                piece = delta.get("content") if isinstance(delta, dict) else None
                # llama-server's `reasoning_content`, vLLM's `reasoning`: the same stream apart
                thought = (
                    (delta.get("reasoning_content") or delta.get("reasoning"))
                    if isinstance(delta, dict)
                    else None
                )
                if isinstance(thought, str) and thought:
                    self.fresh_reasoning += thought
                if isinstance(delta, dict) and delta.get("tool_calls"):
                    self.add_calls(delta["tool_calls"])
            else:
                piece = choice.get("text")
            if isinstance(piece, str) and piece:
                text += piece
            if choice.get("finish_reason"):
                self.finish = str(choice["finish_reason"])
        if text:
            self.pieces.append(text)
            self.times.append(chunk.at)
        if self.fresh_reasoning:
            self.reasoning.append(self.fresh_reasoning)
        return text

    def add_calls(self, deltas: Any) -> None:
        """`tool_calls` deltas, OpenAI's shape: each with its `index`, and in its first piece the
        call's `id` and `function.name`; `function.arguments` comes in string pieces."""
        for delta in deltas if isinstance(deltas, list) else [deltas]:
            free = max(self.calls) + 1 if self.calls else 0
            if not isinstance(delta, dict):
                problem = f"the server sent a tool call that is not an object: {delta!r:.200}"
                self.calls[free] = {"id": "", "name": "", "arguments": "", "error": problem}
                continue
            index = delta.get("index")
            if not isinstance(index, int):  # a whole message's calls (no index): one call each
                index = free
            call = self.calls.setdefault(index, {"id": "", "name": "", "arguments": "", "error": ""})
            if isinstance(delta.get("id"), str) and delta["id"]:
                call["id"] = delta["id"]
            function = delta.get("function")
            if not isinstance(function, dict):
                continue
            name = function.get("name")
            if isinstance(name, str) and name != call["name"]:  # sent once; a server that repeats it
                call["name"] += name
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                call["arguments"] += arguments
            elif arguments is not None:  # an object instead of its JSON text
                call["arguments"] += json.dumps(arguments)

    def tool_calls(self) -> list[ToolCall]:
        """The calls the deltas built; one that cannot be read (no name, arguments that are not a
        JSON object) is still a call, whose error the model is told."""
        calls: list[ToolCall] = []
        for n, index in enumerate(sorted(self.calls)):
            call = self.calls[index]
            call_id, name, text = call["id"] or f"call{n + 1:05d}", call["name"], call["arguments"]
            arguments: Any = {}
            error = call["error"] or None
            if not error and not name:
                error = f"the server's tool call has no function name (arguments: {text[:200]})"
            elif not error:
                try:
                    arguments = json.loads(text) if text.strip() else {}
                except ValueError as exc:
                    error = f"the arguments are not valid JSON ({exc}): {text[:200]}"
                    arguments = {}
                if not error and not isinstance(arguments, dict):
                    error = f"the arguments must be a JSON object: {text[:200]}"
                    arguments = {}
            calls.append(ToolCall(call_id, name, arguments, error))
        return calls

    @property
    def finish_reason(self):
        if self.finish == "interrupted":
            return "interrupted"
        return "length" if self.finish == "length" else "stop"

    def stats(self, n_ctx: int) -> Stats:
        """The request's figures, each with its source (see `served/engine.py`'s docstring)."""
        now = time.monotonic()
        s = Stats(total_ms=(now - self.started) * 1000, context_size=n_ctx)
        sources: dict[str, str] = {"ttft_ms": "client", "decode_ms": "client", "prefill_ms": "client"}
        u = self.usage
        if isinstance(u.get("completion_tokens"), int):
            s.completion_tokens, sources["completion_tokens"] = u["completion_tokens"], "usage"
        else:
            s.completion_tokens, sources["completion_tokens"] = self.n_chunks, "chunks"
        if isinstance(u.get("prompt_tokens"), int):
            s.prompt_tokens, sources["prompt_tokens"] = u["prompt_tokens"], "usage"
        else:
            sources["prompt_tokens"] = "unknown"
        details = u.get("prompt_tokens_details")
        details = details if isinstance(details, dict) else {}
        if isinstance(details.get("cached_tokens"), int):
            s.cached_tokens, sources["cached_tokens"] = details["cached_tokens"], "usage"
        elif isinstance(self.timings.get("cache_n"), int):
            s.cached_tokens, sources["cached_tokens"] = self.timings["cache_n"], "timings"
        else:
            sources["cached_tokens"] = "unknown"
        s.prefill_tokens = max(0, s.prompt_tokens - s.cached_tokens)
        spent = u.get("completion_tokens_details")
        thought = spent.get("reasoning_tokens") if isinstance(spent, dict) else None
        if isinstance(thought, int):
            s.reasoning_tokens, sources["reasoning_tokens"] = thought, "usage"
        else:
            sources["reasoning_tokens"] = "unknown"
        if self.times:
            s.ttft_ms = (self.times[0] - self.started) * 1000
            s.decode_ms = (self.times[-1] - self.times[0]) * 1000
            s.decode_tokens = max(0, s.completion_tokens - 1) if s.decode_ms > 0 else 0
        s.prefill_ms = s.ttft_ms  # the client sees prefill as the wait for the first text
        s.context_used = s.prompt_tokens + s.completion_tokens
        s.sources = sources
        s.server = server_figures(self.timings)
        return s


_TIMINGS = (
    "cache_n",
    "prompt_n",
    "prompt_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_second",
    "draft_n",
    "draft_n_accepted",
)


def server_figures(timings: dict) -> dict:
    """llama-server's `timings`, as it reported them (numbers only)."""
    return {k: timings[k] for k in _TIMINGS if isinstance(timings.get(k), int | float)}
