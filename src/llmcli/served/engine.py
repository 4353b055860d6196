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

Faults become one error each (`faults.py`): connection refused, DNS, TLS (verified by default),
401/403, 404, 429/503 (retried a bounded number of times by the `Client`, honouring Retry-After,
and never once text has arrived), a stream that breaks off (`StreamBrokenError`, carrying the
partial text), malformed events, and a stream silent for longer than the `timeout` setting.
`interrupt()` (Ctrl-C, from the signal watcher's thread) shuts the socket down, which ends the
blocked read at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from llmcli.contract import (
    CallGrammar,
    Capabilities,
    Done,
    EngineOptions,
    Event,
    Many,
    ModelInfo,
    Prepared,
    Reasoning,
    Request,
    SamplingParams,
    Stats,
    Token,
)
from llmcli.engine.local import Clock, split_calls
from llmcli.errors import ModelNotFoundError, NetworkError, StreamBrokenError, UsageError
from llmcli.media.image import Image
from llmcli.served.client import Client
from llmcli.served.endpoints import Endpoint
from llmcli.served.reply import Exchange, Reply
from llmcli.served.wire import budget_fields, openai_messages, request_body
from llmcli.tools.calls import CallFormat, Parser, detect

if TYPE_CHECKING:  # the contract, checked by mypy (tests/test_types.py)
    from llmcli.contract import Engine

SERVED_PARALLEL = 4  # requests at once by default (the server decides how it batches them)
FLAVOURS = ("llama-server", "llama-cpp-python", "vllm", "openai-compatible")
_OWNERS = {"llamacpp": "llama-server", "me": "llama-cpp-python", "vllm": "vllm"}


class ServedEngine:
    """A served model: the `Engine` contract over an OpenAI-compatible HTTP API. `respond` sends the
    conversation to `/chat/completions` (`stream_messages`) and plain text to `/completions`."""

    # its server applies the template, keeps the cache, drafts, and sets its context and threads
    can = Capabilities(template=False, kv_state=False, speculation=False, load_options=False, images=True,
                       parallel=False)  # fmt: skip
    costs_pending = False

    def __init__(self, endpoint: Endpoint, *, connections: int = 4, debug: bool = False) -> None:
        self.endpoint = endpoint
        self.options = EngineOptions()  # none of its own: its server's (`can.load_options` is False)
        self.client = Client(endpoint, connections=connections, debug=debug)
        self._connections, self._debug = connections, debug
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
        media: Any = None,
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
            if request.images:
                raise UsageError("an image needs a chat prompt: --raw cannot take one")
            yield Prepared("raw")
            yield from self.stream(request.text, request.params)
            return
        assert request.messages is not None
        yield Prepared("server")
        events = self.stream_messages(request.messages, request.params, think=request.think,
                                      tools=request.tools, images=request.images,
                                      earlier_images=request.history_images)  # fmt: skip
        if request.reads_calls:  # calls the server left in the text (a small model that drops the tags)
            events = split_calls(events, Parser(self.call_format()))
        yield from events

    def call_format(self) -> CallFormat:
        """How the model writes a call the server did not parse: from its template where the server
        shows it (llama-server's /props), else the Hermes/Qwen format, the most common one."""
        template = (self.props or {}).get("chat_template")
        return detect(template if isinstance(template, str) else None) or CallFormat("hermes")

    def stream_messages(
        self,
        messages: list[dict[str, Any]],
        params: SamplingParams,
        *,
        think: bool | None = None,
        tools: list[dict] | None = None,
        images: tuple[Image, ...] = (),
        earlier_images: dict[int, tuple[Image, ...]] | None = None,
    ) -> Iterator[Event]:
        """A chat completion of `messages` (`/chat/completions`): Token..., the model's ToolCalls,
        one Done. `think`: a reasoning model's switch, as llama-server and vLLM take it
        (`chat_template_kwargs`). `tools`: OpenAI tool definitions (the server renders them with its
        template and parses the calls: llama-server with `--jinja`, vLLM with a tool parser).
        `images`: for the last user message, sent as content parts; a server whose model takes
        none refuses them in its own words (`faults.refusal`). `earlier_images`: those of earlier
        user messages, by message index, sent again with their messages every turn."""
        body = request_body(params, self.model, self.flavour, chat=True)
        body["messages"] = openai_messages(messages, images, earlier_images)
        if tools:
            body["tools"] = tools
        if params.reasoning_budget == 0 and think is None:
            think = False  # no reasoning at all: the template's switch, where it has one
        if think is not None:
            body["chat_template_kwargs"] = {"enable_thinking": think}
        body.update(budget_fields(params, self.flavour))
        return self._run(Exchange(self.client, "/chat/completions", body, chat=True), params, images)

    @property
    def vision(self) -> bool | None:
        """Whether the served model takes images, where the server says (llama-server's /props
        `modalities`, set by its --mmproj); None where it does not say (vLLM, others)."""
        return takes_images(self.props)

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

    def respond_many(self, parallel: int | None, *, items: int, room: int | None = None,
                     context: int | None = None) -> Many:
        """Requests side by side, `parallel` at once (default 4): the server batches them."""
        from llmcli.many import SideBySide, side_by_side_n

        n, how = side_by_side_n(parallel, items, SERVED_PARALLEL)
        if parallel is None:
            how = "auto: requests at once; the server batches them"
        if n > self._connections:  # a pool as wide as the requests in flight
            old, self.client = self.client, Client(self.endpoint, connections=n, debug=self._debug)
            self._connections = n
            old.close()
        return SideBySide(self, n, how)

    def prepare_images(self) -> None:
        """Nothing to load: the server reads the images it is sent (and refuses them in its words)."""

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

    def describe(self) -> list[tuple[str, str]]:
        """What the server does not say (its KV cache, offload, template) is not guessed."""
        info = self.info
        trained = f" (trained {info.n_ctx_train})" if info.n_ctx_train else ""
        window = f"{self.n_ctx} tokens" if self.n_ctx else "the server's"
        return [("endpoint", info.path), ("context", f"{window}{trained}"),
                ("template", "the server's (chat completions)")]  # fmt: skip

    def calibrate(self) -> None:
        """Nothing to measure: the server drafts, if it does, by its own settings."""
        return None

    def close(self) -> None:
        self.client.close()

    # -- one request ------------------------------------------------------------------------

    def _run(
        self, exchange: Exchange, params: SamplingParams, images: tuple[Image, ...] = ()
    ) -> Iterator[Event]:
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
        if images:  # the server counts their tokens inside prompt_tokens and times them in its prefill
            stats.images = [_attachment(image) for image in images]
            stats.sources["image_tokens"] = "unknown"
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


def _attachment(image: Image) -> dict:
    """An image sent to a server, as the record lists it: what it was; its tokens and encode time
    are the server's and not reported (null)."""
    return {"name": image.name, "media_type": image.media_type, "bytes": image.size,
            "sha256": image.sha256, "width": image.width, "height": image.height,
            "tokens": None, "encode_ms": None, "cached": None}  # fmt: skip


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


def takes_images(props: Any) -> bool | None:
    """Whether a server's model takes images, as llama-server's /props says (`modalities.vision`,
    true when it was started with --mmproj); None where the server does not say."""
    modalities = props.get("modalities") if isinstance(props, dict) else None
    if isinstance(modalities, dict) and isinstance(modalities.get("vision"), bool):
        return modalities["vision"]
    return None


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


if TYPE_CHECKING:

    def _a_served_model_is_an_engine(served: ServedEngine) -> Engine:
        return served
