"""`ServedEngine`: a model on an OpenAI-compatible server (llama-server, vLLM, Ollama, LM Studio, a
hosted API), the second real engine behind the contract in `contract.py`.

The server owns the model, its chat template and its KV cache, so this engine sends what the user
meant, not tokens: `stream_messages` posts the conversation to `/chat/completions` (the whole
history every turn, with `cache_prompt` so llama-server reuses the common prefix), `stream` posts
plain text to `/completions`. Both stream over server-sent events and yield the same `Token` and
`Done` events as the local engine, so the readout, the `--stats` line and the `--json` record are
the same.

Figures and where they come from (`Stats.sources`; the record repeats it):
- time to first token and decode speed are measured here, on the monotonic clock: from sending the
  request to the first text, and from the first text to the last;
- token counts come from the server's `usage` (asked for with `stream_options.include_usage`);
  a server that sends none (llama-cpp-python's own) gets the number of text chunks as an
  estimate of the answer's tokens, and the prompt's count is unknown;
- reused prompt tokens come from `usage.prompt_tokens_details.cached_tokens`, else llama-server's
  `timings.cache_n`; llama-server's own `timings` (prompt_n, prompt_ms, predicted_per_second, ...)
  are kept as reported (`Stats.server`).

Faults become one error each (see `_refusal` and `_transport_error`): connection refused, DNS,
TLS (verified by default), 401/403, 404, 429/503 (retried a bounded number of times, honouring
Retry-After, and never once text has arrived), a stream that breaks off (`StreamBrokenError`,
carrying the partial text), malformed events, and a stream silent for longer than the `timeout`
setting. `interrupt()` (Ctrl-C, from the signal watcher's thread) shuts the socket down, which
ends the blocked read at once.

httpx is imported here only, when a served model is used: `--help` never loads it.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections.abc import Iterator
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from llmcli import reporting
from llmcli.contract import (
    CallGrammar,
    Done,
    Event,
    ModelInfo,
    Prepared,
    Reasoning,
    Request,
    SamplingParams,
    Stats,
    Token,
    ToolCall,
)
from llmcli.endpoint_config import stall_timeout
from llmcli.endpoints import Endpoint
from llmcli.engine.local import Clock, split_calls
from llmcli.errors import (
    ContextOverflowError,
    LlmcliError,
    ModelNotFoundError,
    NetworkError,
    RequestRefusedError,
    StreamBrokenError,
    UsageError,
)
from llmcli.tools.calls import CallFormat, Parser, detect

if TYPE_CHECKING:
    import httpx

MAX_RETRIES = 3  # for 429 and 503, before any text arrived
MAX_RETRY_WAIT_S = 30.0  # a Retry-After longer than this is not waited for
CONNECT_TIMEOUT_S = 10.0
FLAVOURS = ("llama-server", "llama-cpp-python", "vllm", "openai-compatible")
_OWNERS = {"llamacpp": "llama-server", "me": "llama-cpp-python", "vllm": "vllm"}


class Client:
    """One endpoint's HTTP connection pool, with the fault handling every request shares."""

    def __init__(self, endpoint: Endpoint, *, connections: int = 4, debug: bool = False) -> None:
        import httpx

        self.endpoint = endpoint
        self.debug = debug
        self.stall_s = stall_timeout(endpoint)
        key, self.key_source = endpoint.api_key()
        headers = {"Accept": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._http = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(self.stall_s, connect=min(CONNECT_TIMEOUT_S, self.stall_s)),
            verify=_verify(endpoint.verify),
            limits=httpx.Limits(
                max_connections=max(1, connections), max_keepalive_connections=max(1, connections)
            ),
            trust_env=True,
            follow_redirects=False,
        )

    def url(self, path: str, *, root: bool = False) -> str:
        return (self.endpoint.server_root if root else self.endpoint.url) + path

    def get_json(self, path: str, *, root: bool = False, quiet: bool = False) -> Any:
        """GET a JSON document; with `quiet`, None instead of an error (optional probes)."""
        import httpx

        url = self.url(path, root=root)
        try:
            response = self._http.get(url)
        except httpx.HTTPError as exc:
            if quiet:
                return None
            raise _transport_error(exc, url, self.stall_s) from None
        if response.status_code >= 400:
            if quiet:
                return None
            raise _refusal(response.status_code, _body_message(response.text), url, self.key_source)
        try:
            return response.json()
        except ValueError:
            if quiet:
                return None
            raise NetworkError(f"{url} answered with something that is not JSON") from None

    def post_json(self, path: str, body: dict, *, root: bool = False) -> Any:
        import httpx

        url = self.url(path, root=root)
        try:
            response = self._http.post(url, json=body)
        except httpx.HTTPError as exc:
            raise _transport_error(exc, url, self.stall_s) from None
        if response.status_code >= 400:
            raise _refusal(response.status_code, _body_message(response.text), url, self.key_source)
        return response.json()

    def open_stream(self, path: str, body: dict, cancel: threading.Event) -> httpx.Response | None:
        """POST `body` and return the streaming response once the server accepted it (None when
        `cancel` was set first). 429 and 503 are retried up to MAX_RETRIES times, waiting as the
        server's Retry-After says (interruptibly), else 0.5 s, 1 s, 2 s."""
        import httpx

        url = self.url(path)
        if self.debug:
            reporting.debug(f"POST {url} {json.dumps(_loggable(body))[:2000]}")
        for attempt in range(MAX_RETRIES + 1):
            request = self._http.build_request(
                "POST", url, json=body, headers={"Accept": "text/event-stream"}
            )
            try:
                response = self._http.send(request, stream=True)
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
                if cancel.is_set():
                    return None
                try:  # a kept-alive connection the server had closed (a chat idle for a while): once more
                    response = self._http.send(request, stream=True)
                except httpx.HTTPError:
                    raise _transport_error(exc, url, self.stall_s) from None
            except httpx.HTTPError as exc:
                if cancel.is_set():
                    return None
                raise _transport_error(exc, url, self.stall_s) from None
            if response.status_code < 400:
                return response
            try:
                text = response.read().decode("utf-8", "replace")
            except httpx.HTTPError:
                text = ""
            response.close()
            status = response.status_code
            if status in (429, 503) and attempt < MAX_RETRIES:
                wait = _retry_after(response.headers.get("retry-after"))
                if wait is None:
                    wait = 0.5 * 2**attempt
                if wait > MAX_RETRY_WAIT_S:
                    raise NetworkError(
                        f"{url}: HTTP {status} ({_reason(status)}); the server asks to retry in {wait:.0f} s",
                        hint="try again later",
                    )
                reporting.debug(
                    f"HTTP {status} from {url}; retry {attempt + 1}/{MAX_RETRIES} in {wait:.1f} s"
                )
                if cancel.wait(wait):
                    return None
                continue
            raise _refusal(status, _body_message(text), url, self.key_source, retried=attempt)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._http.close()


class Chunk:
    """One streamed event's JSON and when it arrived (monotonic seconds)."""

    __slots__ = ("at", "data")

    def __init__(self, at: float, data: dict) -> None:
        self.at = at
        self.data = data


def read_chunks(response: httpx.Response, url: str, stall_s: float) -> Iterator[Chunk]:
    """The JSON events of an OpenAI-style stream until `[DONE]`. Raises NetworkError for a
    malformed event, an `error` event, a stall, or a connection that breaks; a stream that simply
    ends without `[DONE]` ends the iteration (the caller decides whether the answer was finished)."""
    import httpx

    from llmcli.engine import sse

    kind = response.headers.get("content-type", "")
    if "text/event-stream" not in kind and "application/x-ndjson" not in kind:
        raise NetworkError(f"{url} did not answer with an event stream (content-type {kind or 'none'!r})")
    try:
        for _, data in sse.events(response.iter_lines()):
            if data.strip() == "[DONE]":
                return
            try:
                parsed = json.loads(data)
            except ValueError:
                raise NetworkError(f"{url} sent a malformed event: {data[:80]!r}") from None
            if not isinstance(parsed, dict):
                raise NetworkError(f"{url} sent a malformed event: {data[:80]!r}")
            if "error" in parsed and not parsed.get("choices"):
                raise NetworkError(f"the server reported an error mid-stream: {_error_text(parsed['error'])}")
            yield Chunk(time.monotonic(), parsed)
    except sse.MalformedEvent as exc:
        raise NetworkError(f"{url} sent a malformed event stream: {str(exc)[:80]!r}") from None
    except httpx.ReadTimeout:
        raise NetworkError(
            f"{url}: the stream stalled: nothing for {stall_s:g} s",
            hint="raise the timeout setting (LLMCLI_TIMEOUT) for a slow server",
        ) from None
    except httpx.HTTPError as exc:
        raise NetworkError(f"{url}: the connection broke mid-stream ({_short(exc)})") from None


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
            _shutdown(response)

    def close(self) -> None:
        with self._lock:
            response, self._response = self._response, None
        if response is not None:
            response.close()


class ServedEngine:
    """A served model: the `Engine` contract over an OpenAI-compatible HTTP API. `respond` sends the
    conversation to `/chat/completions` (`stream_messages`) and plain text to `/completions`."""

    def __init__(self, endpoint: Endpoint, *, connections: int = 4, debug: bool = False) -> None:
        self.endpoint = endpoint
        self.client = Client(endpoint, connections=connections, debug=debug)
        self._cancel = threading.Event()
        self._exchange: Exchange | None = None
        self._lock = threading.Lock()
        try:
            self.model, self.flavour, listed = probe(self.client, endpoint)
            self.props = (
                self.client.get_json("/props", root=True, quiet=True)
                if self.flavour == "llama-server"
                else None
            )
        except BaseException:
            self.client.close()
            raise
        meta = listed.get("meta") or {}
        self.n_ctx = served_context(listed, self.props) or 0
        self.info = ModelInfo(
            path=endpoint.url,
            architecture=self.flavour,
            quantization="",
            size_bytes=int(meta.get("size") or 0),
            n_params=int(meta.get("n_params") or 0),
            n_layers=0,
            n_ctx_train=int(meta.get("n_ctx_train") or 0),
            n_vocab=int(meta.get("n_vocab") or 0),
            chat_template=None,
            name=self.model,
            backend="server",
            server=self.flavour,
        )

    # -- the contract -----------------------------------------------------------------------

    @property
    def add_bos(self) -> bool:
        return False  # the server adds what its model needs

    def tokenize(self, text: str, *, special: bool = True, add_bos: bool = False) -> list[int]:
        if self.flavour == "vllm":  # vLLM's /tokenize: the model's tokenizer, prompt in, ids out
            body = {"model": self.model, "prompt": text, "add_special_tokens": add_bos}
            data = self.client.post_json("/tokenize", body, root=True)
            return [int(t) for t in data.get("tokens", [])]
        if self.flavour != "llama-server":
            raise UsageError(f"{self.endpoint.ref}: this server does not tokenize for clients")
        data = self.client.post_json(
            "/tokenize", {"content": text, "add_special": add_bos, "parse_special": special}, root=True
        )
        return [int(t) for t in data.get("tokens", [])]

    def count(self, text: str) -> int:
        return len(self.tokenize(text))

    def bos_text(self) -> str:
        return ""

    def eos_text(self) -> str:
        return ""

    def stream(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        reasoning: str | None = None,
        calls: CallGrammar | None = None,
    ) -> Iterator[Event]:
        """A plain-text completion (`/completions`): the prompt as text, or token ids (which
        llama-server and vLLM take)."""
        return self._run(self.completion(prompt, params), params)

    def respond(self, request: Request) -> Iterator[Event]:
        """The conversation goes to `/chat/completions` as it is, the whole history every turn (the
        server applies the template and reuses its cached prefix; a context overflow is its to
        report, exit 4); plain text to `/completions`. `request.fit` and `before_prefill` are
        the server's business: there is no client-side fitting and no cache here to load."""
        if request.text is not None:
            yield Prepared("raw")
            yield from self.stream(request.text, request.params)
            return
        assert request.messages is not None
        yield Prepared("server")
        events = self.stream_messages(request.messages, request.params, think=request.think,
                                      tools=request.tools)  # fmt: skip
        if request.tools or request.calls_withdrawn:  # calls the server left in the text (a small model)
            events = split_calls(events, Parser(self.call_format()))
        yield from events

    def call_format(self) -> CallFormat:
        """How the model writes a call the server did not parse: from its template where the server
        shows it (llama-server's /props), else the Hermes/Qwen format, the most common one."""
        template = (self.props or {}).get("chat_template")
        return detect(template if isinstance(template, str) else None) or CallFormat(
            "hermes"
        )

    def stream_messages(
        self,
        messages: list[dict[str, Any]],
        params: SamplingParams,
        *,
        think: bool | None = None,
        tools: list[dict] | None = None,
    ) -> Iterator[Event]:
        """A chat completion of `messages` (`/chat/completions`): Token..., the model's ToolCalls,
        one Done. `think`: a reasoning model's switch, as llama-server and vLLM take it
        (`chat_template_kwargs`). `tools`: OpenAI tool definitions (the server renders them with its
        template and parses the calls: llama-server with `--jinja`, vLLM with a tool parser)."""
        body = request_body(params, self.model, self.flavour, chat=True)
        body["messages"] = openai_messages(messages)
        if tools:
            body["tools"] = tools
        if params.reasoning_budget == 0 and think is None:
            think = False  # no reasoning at all: the template's switch, where it has one
        if think is not None:
            body["chat_template_kwargs"] = {"enable_thinking": think}
        body.update(budget_fields(params, self.flavour))
        return self._run(Exchange(self.client, "/chat/completions", body, chat=True), params)

    def completion(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        cache_prompt: bool = True,
        ignore_eos: bool = False,
        server_defaults: bool = False,
    ) -> Exchange:
        """A `/completions` request, not yet sent: what `stream` runs, and what the serving
        benchmark runs many of at once (see `request_body` for the switches)."""
        body = request_body(
            params, self.model, self.flavour, chat=False,
            cache_prompt=cache_prompt, ignore_eos=ignore_eos, server_defaults=server_defaults,
        )  # fmt: skip
        body["prompt"] = prompt
        return Exchange(self.client, "/completions", body, chat=False)

    def interrupt(self) -> None:
        """Stop the running stream now: set the flag and shut the socket down (any thread)."""
        self._cancel.set()
        with self._lock:
            exchange = self._exchange
        if exchange is not None:
            exchange.shutdown()

    def reset(self) -> None:
        """Nothing to forget here: the server keeps its own cache (and reuses it by prefix)."""

    def state_identity(self) -> dict:
        raise UsageError("a served model's KV cache lives on its server and cannot be saved here")

    def state_payload(self) -> tuple[list[int], memoryview]:
        raise UsageError("a served model's KV cache lives on its server and cannot be saved here")

    def load_state_payload(self, tokens: list[int], payload: bytearray | memoryview) -> bool:
        return False

    def close(self) -> None:
        self.client.close()

    # -- one request ------------------------------------------------------------------------

    def _run(self, exchange: Exchange, params: SamplingParams) -> Iterator[Event]:
        self._cancel.clear()
        with self._lock:
            self._exchange = exchange  # before it opens: an interrupt() then shuts it as it opens
        try:
            opened = exchange.open(self._cancel)
        except BaseException:
            self._forget()
            raise
        seed = exchange.body["seed"]
        if not opened:
            self._forget()
            waited_ms = (time.monotonic() - exchange.reply.started) * 1000
            yield Done("", "interrupted", Stats(total_ms=waited_ms), seed)
            return
        reply, url = exchange.reply, exchange.url
        clock = Clock(reply.started, time.monotonic)
        try:
            try:
                for thought, text in exchange.pieces():
                    if thought:
                        clock.reasoned()
                        yield Reasoning(thought, reply.n_chunks)
                    if text:
                        clock.answered()
                        yield Token(text, reply.n_chunks)
            except NetworkError as exc:
                if not self._cancel.is_set():
                    if reply.pieces:
                        raise StreamBrokenError(
                            f"{exc.message}; the partial answer was kept", exc.hint, text=reply.text
                        ) from None
                    raise
                reply.finish = "interrupted"
            else:
                if self._cancel.is_set() and reply.finish is None:
                    reply.finish = "interrupted"
                elif reply.finish is None and reply.pieces:
                    raise StreamBrokenError(
                        f"{url}: the stream ended before the answer was finished; "
                        "the partial answer was kept",
                        text=reply.text,
                    )
                elif reply.finish is None:
                    raise NetworkError(f"{url}: the stream ended without an answer")
        finally:
            self._forget()
            exchange.close()
        stats = reply.stats(self.n_ctx)
        reasoning = "".join(reply.reasoning)
        if reasoning:
            clock.timings(stats)
        calls = reply.tool_calls() if reply.finish_reason != "interrupted" else []
        yield from calls
        yield Done(
            reply.text,
            reply.finish_reason,
            stats,
            seed,
            constraint_complete=_constraint_complete(reply, params),
            reasoning=reasoning,
            reasoning_open=bool(reasoning) and not reply.text and reply.finish_reason == "length",
            tool_calls=calls,
        )

    def _forget(self) -> None:
        with self._lock:
            self._exchange = None


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
        """The request's figures, each with its source (see the module's docstring)."""
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


def openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as the OpenAI API takes it. An earlier answer's reasoning is not sent back:
    the server's template would drop it or, worse, put it before the answer again (what llama-server
    and vLLM ask of their clients). A call's arguments go as a JSON string; a tool result as a
    "tool" message with its `tool_call_id`."""
    from llmcli.conversation import REASONING_FIELD

    out = []
    for message in messages:
        m = {k: v for k, v in message.items() if k != REASONING_FIELD}
        if m.get("tool_calls"):
            m["tool_calls"] = [_openai_call(call) for call in m["tool_calls"]]
        out.append(m)
    return out


def _openai_call(call: dict[str, Any]) -> dict[str, Any]:
    function = dict(call.get("function") or {})
    if not isinstance(function.get("arguments"), str):
        function["arguments"] = json.dumps(function.get("arguments") or {}, ensure_ascii=False)
    return {"id": call.get("id") or "", "type": "function", "function": function}


def server_figures(timings: dict) -> dict:
    """llama-server's `timings`, as it reported them (numbers only)."""
    return {k: timings[k] for k in _TIMINGS if isinstance(timings.get(k), int | float)}


def _constraint_complete(reply: Reply, params: SamplingParams) -> bool | None:
    if params.grammar is None and params.json_schema is None:
        return None
    if reply.finish_reason != "stop":
        return False
    if params.json_schema is not None:
        try:
            json.loads(reply.text)
        except ValueError:
            return False
    return True


def _retry_after(value: str | None) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    import datetime

    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds())


def _shutdown(response: httpx.Response) -> None:
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _verify(value: bool | str):
    if isinstance(value, str):
        import ssl

        try:
            return ssl.create_default_context(cafile=value)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"cannot read the CA bundle {value}: {exc}") from None
    return value


def _loggable(body: dict) -> dict:
    """The request as --debug shows it: long prompts shortened (the key is in a header, never here)."""
    shown = dict(body)
    if isinstance(shown.get("prompt"), list) and len(shown["prompt"]) > 16:
        shown["prompt"] = f"[{len(shown['prompt'])} token ids]"
    return shown


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error.get("type") or error)[:300]
    return str(error)[:300]


def _body_message(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:200]
    if isinstance(data, dict):
        if "error" in data:
            return _error_text(data["error"])
        if "detail" in data:
            return str(data["detail"])[:300]
        if "message" in data:
            return str(data["message"])[:300]
    return " ".join(text.split())[:200]


def _reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "error"


_CONTEXT_WORDS = (
    "context length",
    "context size",
    "exceeds the available context",
    "maximum context",
    "too many tokens",
    "exceed_context_size",
)


def _refusal(status: int, message: str, url: str, key_source: str, *, retried: int = 0) -> LlmcliError:
    """The one error for an HTTP error status (the key is never part of it: only where it came from)."""
    said = f": {message}" if message else ""
    if status in (401, 403):
        hint = (
            "no API key was sent: set LLMCLI_API_KEY, or api_key_env in the endpoint's config"
            if key_source == "none"
            else f"the key from {key_source} was not accepted"
        )
        return NetworkError(f"{url}: HTTP {status} ({_reason(status)}){said}", hint=hint)
    if status == 404:
        return ModelNotFoundError(
            f"{url}: HTTP 404 ({_reason(404)}){said}",
            hint="check the URL (usually ending in /v1) and the model name",
        )
    if status in (429, 503):
        again = f" after {retried} retries" if retried else ""
        return NetworkError(f"{url}: HTTP {status} ({_reason(status)}){again}{said}", hint="try again later")
    if status in (400, 413, 422) and any(w in message.lower() for w in _CONTEXT_WORDS):
        return ContextOverflowError(
            f"the server refused the prompt{said}", hint="shorten the prompt or the history"
        )
    if 400 <= status < 500:
        return RequestRefusedError(f"{url}: HTTP {status} ({_reason(status)}){said}")
    return NetworkError(f"{url}: HTTP {status} ({_reason(status)}){said}")


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]


def _transport_error(exc: BaseException, url: str, stall_s: float) -> NetworkError:
    """Connection refused, DNS, TLS, timeouts: one line that says which."""
    from urllib.parse import urlsplit

    import httpx

    host = urlsplit(url).netloc
    text = _short(exc)
    low = text.lower()
    if isinstance(exc, httpx.ConnectTimeout):
        return NetworkError(
            f"cannot connect to {host}: no answer within {min(CONNECT_TIMEOUT_S, stall_s):g} s"
        )
    if isinstance(exc, httpx.TimeoutException):
        return NetworkError(
            f"{url}: no answer for {stall_s:g} s (stalled)",
            hint="raise the timeout setting (LLMCLI_TIMEOUT) for a slow server",
        )
    if "certificate" in low or "ssl" in low or "tls" in low:
        return NetworkError(
            f"TLS failure talking to {host}: {text}",
            hint="TLS is verified; trust the server's CA with the endpoint's ca_bundle",
        )
    if (
        "name or service not known" in low
        or "nodename nor servname" in low
        or "name resolution" in low
        or "getaddrinfo" in low
        or "no address associated" in low
    ):
        return NetworkError(f"cannot resolve the host name {urlsplit(url).hostname!r}", hint="check the URL")
    if "refused" in low:
        return NetworkError(f"cannot connect to {host}: connection refused", hint="is the server running?")
    if isinstance(exc, httpx.RemoteProtocolError):
        return NetworkError(f"{url}: the server closed the connection ({text})")
    return NetworkError(f"cannot reach {host}: {text}")


def probe(client: Client, endpoint: Endpoint) -> tuple[str, str, dict]:
    """Ask the server what it serves (`/models`): the model's name, the server's flavour, and the
    model's listing. A model the server does not list is refused here, with the list."""
    data = client.get_json("/models")
    listed = data.get("data") if isinstance(data, dict) else None
    if not isinstance(listed, list):
        raise NetworkError(f"{client.url('/models')} is not an OpenAI-compatible model list")
    models = [m for m in listed if isinstance(m, dict) and isinstance(m.get("id"), str)]
    names = [m["id"] for m in models]
    owners = {m.get("owned_by") for m in models}
    flavour = next((_OWNERS[o] for o in owners if o in _OWNERS), "openai-compatible")
    wanted = endpoint.model
    if wanted is None:
        if len(models) == 1:
            return names[0], flavour, models[0]
        shown = ", ".join(names[:12]) or "none"
        raise UsageError(
            f"{endpoint.ref} serves {len(models)} models; name one (served: {shown})",
            hint=f"-m {endpoint.ref}#MODEL" if not endpoint.name else f"-m {endpoint.name}/MODEL",
        )
    for m in models:
        if m["id"] == wanted:
            return wanted, flavour, m
    if flavour == "llama-server" and len(models) == 1:
        return wanted, flavour, models[0]  # llama-server answers to any model name with its one model
    shown = ", ".join(names[:12]) or "none"
    raise ModelNotFoundError(
        f"{endpoint.url} does not serve {wanted!r} (served: {shown})",
        hint=f"llmcli models list --endpoint {endpoint.name or endpoint.url}",
    )


def served_context(listed: dict, props: dict | None) -> int | None:
    """The context the server gives a request, as it says: vLLM's `max_model_len` (in its model
    listing), llama-server's per-slot `n_ctx` (`/props`, which `-c` and `-np` set); None where it
    says neither (the model's trained context is not the served one)."""
    props = props if isinstance(props, dict) else {}
    settings = props.get("default_generation_settings")
    settings = settings if isinstance(settings, dict) else {}
    for value in (listed.get("max_model_len"), settings.get("n_ctx"), props.get("n_ctx")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def budget_fields(params: SamplingParams, flavour: str) -> dict[str, Any]:
    """A reasoning budget as the server takes it per request: llama-server's
    `reasoning_budget_tokens` (and its message; it enforces it for templates whose thinking tags it
    knows), vLLM's `thinking_token_budget` (it enforces it
    where it was started with a reasoning configuration). A server that takes none: refused."""
    budget, message = params.reasoning_budget, params.reasoning_budget_message
    if budget is None:
        return {}
    if flavour == "llama-server":
        return {
            "reasoning_budget_tokens": budget,
            **({"reasoning_budget_message": message} if message else {}),
        }
    if flavour == "vllm":
        if message:
            raise UsageError("vLLM takes a reasoning budget but no message: drop --reasoning-budget-message")
        return {"thinking_token_budget": budget}
    raise UsageError(
        f"this server ({flavour}) takes no reasoning budget: --reasoning-budget works with local "
        "models, llama-server and vLLM",
        hint="use --no-think where the model's template has a switch",
    )


def request_body(
    params: SamplingParams,
    model: str,
    flavour: str,
    *,
    chat: bool,
    cache_prompt: bool = True,
    ignore_eos: bool = False,
    server_defaults: bool = False,
) -> dict:
    """The sampling settings as the API takes them. Standard fields always; llama.cpp's own
    (top_k, min_p, repeat_penalty, grammar) to servers known to take them, and to other servers
    only when the user set them (an unknown field the server refuses is then its clear error);
    a setting that cannot be expressed is an error, never dropped.

    `cache_prompt=False` asks llama-server to prefill the whole prompt (as for a distinct user);
    `ignore_eos` asks the servers that take it (llama-server, vLLM) for exactly `max_tokens`;
    `server_defaults` leaves out the settings in `params.defaulted` (top_p, top_k, min_p,
    repeat_penalty, repeat_last_n), so the server's own defaults apply (the serving benchmark)."""
    seed = params.seed if params.seed is not None else random.randint(0, 2**31 - 1)
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": params.temperature,
        "seed": seed,
    }
    set_by_user = lambda name: name not in params.defaulted  # noqa: E731
    sent = set_by_user if server_defaults else (lambda name: True)
    if sent("top_p"):
        body["top_p"] = params.top_p
    if params.max_tokens:
        body["max_tokens"] = params.max_tokens
    if params.stop:
        body["stop"] = list(params.stop)
    llama_like = flavour in ("llama-server", "llama-cpp-python")
    for name in ("top_k", "min_p", "repeat_penalty"):
        if (llama_like or set_by_user(name)) and sent(name):
            key = "repetition_penalty" if (name == "repeat_penalty" and flavour == "vllm") else name
            body[key] = getattr(params, name)
    if ignore_eos and flavour in ("llama-server", "vllm"):
        body["ignore_eos"] = True
    if flavour == "llama-server":
        if sent("repeat_last_n"):
            body["repeat_last_n"] = params.repeat_last_n
        body["cache_prompt"] = cache_prompt
        body["timings_per_token"] = False
    if params.json_schema is not None:
        schema = params.json_schema if isinstance(params.json_schema, dict) else {}
        if flavour == "llama-cpp-python":
            body["response_format"] = {"type": "json_object", "schema": schema}
        elif chat or flavour == "llama-server":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": schema, "strict": True},
            }
        elif flavour == "vllm":
            body["guided_json"] = schema
        else:
            raise UsageError(
                "--json-schema with --raw needs a server that constrains completions "
                "(llama-server, vLLM); this one takes a schema in chat only"
            )
    elif params.grammar is not None:
        if llama_like:
            body["grammar"] = params.grammar
        elif flavour == "vllm":
            body["guided_grammar"] = params.grammar
        else:
            raise UsageError(
                "this server does not take a GBNF grammar (--grammar-file): llama-server, "
                "llama-cpp-python and vLLM do",
                hint="use --json-schema, which OpenAI-compatible servers take",
            )
    return body
