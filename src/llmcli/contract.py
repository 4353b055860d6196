"""The engine contract: the request a front end sends an engine, its options, and the events back.

Inference is one loop: prefill the prompt, then decode one token at a time. `Engine.stream`
yields `PrefillProgress` while the prompt is evaluated, `Token` for each piece of text, and one
final `Done` carrying exact per-phase figures. `generate`, `chat` and `bench --scenario chat`
all consume this one stream; non-streaming output is the joined stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from llmcli.media.fragment import Placed
from llmcli.media.image import Image
from llmcli.params import EngineOptions as EngineOptions  # the options: llmcli.params, re-exported
from llmcli.params import SamplingParams as SamplingParams
from llmcli.params import SpecOptions as SpecOptions
from llmcli.params import flag_name as flag_name
from llmcli.reasoning import ReasoningFormat

# "no_answer": the model stopped without an answer: nothing after its reasoning or its tool calls,
# or nothing at all (set above the engines, by request.drive; an engine says "stop")
FinishReason = Literal["stop", "length", "interrupted", "no_answer"]


@dataclass(frozen=True)
class CallFormat:
    """How a model writes a tool call, read from its chat template (llmcli.tools.calls.detect)."""

    kind: str  # "hermes", "llama3" or "mistral"

    def describe(self) -> str:
        return {"hermes": "<tool_call>{json}</tool_call> (Hermes/Qwen)",
                "llama3": "a JSON object as the answer (Llama 3.x)",
                "mistral": "[TOOL_CALLS][json] (Mistral)"}[self.kind]  # fmt: skip


@dataclass(frozen=True)
class CallGrammar:
    """How a call's JSON is constrained while the model writes it: once the answer's text ends with
    `trigger`, the decode loop samples through `grammar` (GBNF: whitespace, then one call object
    whose name is one of the tools and whose arguments fit that tool's schema) until the grammar is
    complete; the model then closes the markup itself."""

    trigger: str
    grammar: str
    # a call may also begin the answer as bare JSON, without its markup (small models drop the
    # tags; the parser reads such an answer as a call too)
    bare: bool = True


@dataclass
class PrefillProgress:
    done: int
    total: int
    elapsed_ms: float
    # images, a third phase (engine/mtmd.py): positions encoding now (0: none); tokens, ms so far
    encoding: int = 0
    image_tokens: int = 0
    image_ms: float = 0.0


@dataclass
class Token:
    text: str
    n_tokens: int  # tokens decoded so far in this answer
    # Speculative decoding, running totals of this answer (all 0 without it): tokens proposed and
    # verified, proposals accepted, and decode passes of the target model.
    drafted: int = 0
    accepted: int = 0
    passes: int = 0


@dataclass
class Stats:
    """Exact figures for one request, from llama.cpp's own counters where they exist."""

    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens reused from the KV cache (not evaluated)
    prefill_tokens: int = 0  # prompt tokens evaluated in this request
    prefill_ms: float = 0.0
    completion_tokens: int = 0
    decode_tokens: int = 0
    decode_ms: float = 0.0
    ttft_ms: float = 0.0
    load_ms: float = 0.0
    total_ms: float = 0.0
    context_size: int = 0
    context_used: int = 0
    # Thread counts: {"adaptive": bool, "decode": {...}, "prefill": {...}} (see engine/threads.py)
    threads: dict = field(default_factory=dict)
    # A served model (engine/served.py): where each figure came from, for those not measured by
    # llama.cpp in this process ({"completion_tokens": "usage" | "chunks", ...}), and the server's
    # own figures (llama-server's `timings`). Both empty for a local engine.
    sources: dict = field(default_factory=dict)
    server: dict = field(default_factory=dict)

    # Speculative decoding: tokens proposed and verified, proposals the target accepted, decode
    # passes of the target (a verification batch or a plain step), and the proposer's settings
    # with what the adaptive k chose ({} when it was off).
    reasoning_tokens: int = 0  # of completion_tokens, those decoded inside the reasoning block
    # A reasoning model's answer, timed apart (wall clock, from the request's start; None where that
    # part never came): the first token of each, and how long each part took from its first token
    reasoning_ttft_ms: float | None = None
    answer_ttft_ms: float | None = None
    reasoning_ms: float = 0.0
    answer_ms: float = 0.0
    # Tool calling (request/tool_loop.py): the time the calls ran, apart from prefill and decode
    tool_ms: float = 0.0
    # Images (engine/mtmd.py): their positions in the prompt and the time encoding them took, apart
    # from prefill; one dict per image (name, media_type, bytes, sha256, tokens, encode_ms, cached)
    image_tokens: int = 0
    image_ms: float = 0.0
    images: list[dict] = field(default_factory=list)
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    target_passes: int = 0
    speculative: dict = field(default_factory=dict)

    @property
    def acceptance(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    @property
    def passes(self) -> int:
        """Passes of the target model over the answer: verification batches and steps counted by
        speculation, else one a decoded token."""
        return self.target_passes if self.speculative or self.target_passes else self.decode_tokens

    @property
    def tokens_per_pass(self) -> float:
        return self.decode_tokens / self.target_passes if self.target_passes else 0.0

    @property
    def prefill_tps(self) -> float:
        return self.prefill_tokens / self.prefill_ms * 1000 if self.prefill_ms > 0 else 0.0

    @property
    def decode_tps(self) -> float:
        return self.decode_tokens / self.decode_ms * 1000 if self.decode_ms > 0 else 0.0

    @property
    def decode_measured(self) -> bool:
        """Whether `decode_tps` measures anything: tokens decoded over a time that passed (not an
        answer of one token, nor a served answer whose text came in one chunk). Shown as unknown
        where not, never as 0 tok/s."""
        return self.decode_tokens > 0 and self.decode_ms > 0


@dataclass
class Done:
    text: str
    finish_reason: FinishReason
    stats: Stats
    seed: int
    tokens: list[int] = field(default_factory=list)
    # With a grammar or JSON schema: whether the grammar accepts exactly the text returned (False
    # when --max-tokens, a full context, a stop string or Ctrl-C cut it short). None: unconstrained.
    constraint_complete: bool | None = None
    # A reasoning model: its reasoning, apart from `text` (the answer), without the tags
    reasoning: str = ""
    # The output ended inside the reasoning block (the token cap or the context came first): there
    # is no answer, and `text` is empty
    reasoning_open: bool = False
    # The tools the model called in this answer (their markup is in neither text)
    tool_calls: list[ToolCall] = field(default_factory=list)


@dataclass
class Fit:
    """How a local engine fits a long conversation into its context (chat): room kept for the answer,
    and the overflow policy ("drop-oldest" drops the oldest exchanges, "error" refuses)."""

    reserve: int
    policy: str = "drop-oldest"


@dataclass
class Request:
    """One request, as every front end sends it: a conversation (chat, a templated `generate`) or
    plain text to continue (`--raw`), and how to sample.

    Beneath `Engine.respond` a local engine renders the model's chat template (or its fallback),
    tokenizes, fits the history (`fit`) and prefills; a served engine sends the messages and its
    server does all of that. Callers never ask which."""

    params: SamplingParams
    # system (optional) first, ending with the user's turn or tool results; an assistant message may
    # carry `tool_calls` ([{"id", "type": "function", "function": {"name", "arguments": dict}}]) and a
    # "tool" message a `tool_call_id`
    messages: list[dict[str, Any]] | None = None
    text: str | None = None  # plain text to continue, with no template
    fit: Fit | None = None  # None: a conversation longer than the context is refused
    # A reasoning model's switch (`enable_thinking` in its template, or the server's): None leaves
    # it at the template's default
    think: bool | None = None
    # Tools the model may call (OpenAI-style definitions: {"type": "function", "function": {"name",
    # "description", "parameters"}}): rendered into the template, or sent to the server
    tools: list[dict] | None = None
    # The tools were offered earlier in this answer and are no longer (the tool loop's last round):
    # calls the model writes anyway are still read out of its text, never shown as its answer
    calls_withdrawn: bool = False
    # Called by an engine that prefills here, with the prompt's tokens, before the prefill: the
    # caller may load a saved KV state for them (kvstore). Returns the ms it took, which count toward
    # the time to the first token. An engine whose cache lives elsewhere (a server) never calls it.
    before_prefill: Callable[[list[int]], float] | None = None
    # Images for the last user message (media.image.Image): a local engine puts them through its
    # projector (engine/mtmd.py), a served one sends them as content parts
    images: tuple[Image, ...] = ()
    # Images of earlier user messages, by their index in `messages` (a chat's history): the prompt
    # holds them where they were, so a later turn about the same image reuses its cached positions
    # (media.placed gives every image by its message)
    history_images: dict[int, tuple[Image, ...]] = field(default_factory=dict)
    # Text attachments (media.fragment.Placed): already in their user message's content (or the
    # text), so no engine reads this; the record and the log list them, the log keeps each once
    fragments: tuple[Placed, ...] = ()

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.text is None):
            raise ValueError("a request is either messages or text")

    @property
    def reads_calls(self) -> bool:
        """Tool calls are read out of the answer: tools are offered, or were earlier in it."""
        return self.text is None and (bool(self.tools) or self.calls_withdrawn)


@dataclass
class Prepared:
    """The first event of `Engine.respond`: how the prompt was built. `prompt_format` is "raw", the
    template's source ("model", "fallback:NAME") or "server" (the server applied its own);
    `dropped_*`: what the overflow policy took out of the conversation's oldest turns."""

    prompt_format: str
    dropped_messages: int = 0
    dropped_tokens: int = 0


@dataclass
class Reasoning:
    """Reasoning text (a thinking model's thoughts), streamed apart from the answer's `Token`s.
    `n_tokens`: tokens decoded so far in this answer, as `Token`'s."""

    text: str
    n_tokens: int = 0


@dataclass
class ToolCall:
    """A call of a tool the model asked for, parsed from its output (or a server's `tool_calls`).
    `error`: the call's markup could not be read (not JSON, no name): why, for the model to read."""

    id: str
    name: str
    arguments: dict
    error: str | None = None


@dataclass
class ThreadsChanged:
    """The adaptive thread policy changed a phase's thread count (see engine/threads.py)."""

    phase: str  # "decode" or "prefill"
    threads: int
    reason: str  # "probe", "drift", "recheck" (measuring) or "settled" (the choice)


Event = Prepared | PrefillProgress | Token | Reasoning | ToolCall | ThreadsChanged | Done


@dataclass
class ModelInfo:
    path: str
    architecture: str
    quantization: str
    size_bytes: int
    n_params: int
    n_layers: int
    n_ctx_train: int
    n_vocab: int
    chat_template: str | None
    name: str = ""
    gpu_layers: int = 0
    backend: str = "CPU"
    repack: bool = True  # weights in llama.cpp's extra (repacked) CPU buffers
    type_k: str = "f16"  # the KV cache's types
    type_v: str = "f16"
    model_type: str = "instruct"  # or "base": see templates.model_type
    sampling: dict = field(default_factory=dict)  # recommended settings from general.sampling.*
    server: str | None = None  # a served model: the engine serving it ("llama-server", "vLLM", ...)
    # a reasoning model's tags and switch, read from its chat template at load (reasoning.detect);
    # None: no reasoning shown, or a served model (the server's template is not known)
    reasoning: ReasoningFormat | None = None


def check_prompt(tokens: list[int], n_ctx: int) -> None:
    """Every engine refuses the same way: an empty prompt, or one with no room for an answer."""
    from llmcli.errors import ContextOverflowError, UsageError

    if not tokens:
        raise UsageError("the prompt is empty")
    if len(tokens) + 1 > n_ctx:
        raise ContextOverflowError(
            f"the prompt is {len(tokens)} tokens but the context holds {n_ctx}",
            hint="shorten the prompt or raise --ctx-size",
        )


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do, which the layers above ask instead of which engine it is (the loader
    decides that, once). A local engine (LlamaEngine, FakeEngine) does all of it in this process;
    a served one (llmcli.served) none of it: its server applies the template, keeps the KV cache,
    drafts, and sets its own context, threads and layers."""

    # It renders the chat template here: the template, its think switch and its tools can be
    # shown and checked, and `/context` counts the prompt (False: the server renders its own).
    template: bool = True
    # Its KV cache can be saved, loaded and handed to another engine (kvstore: --prompt-cache, a
    # session's state, a warm --continue; chat's reload after `/set`).
    kv_state: bool = True
    # Speculative decoding runs here (the spec flags and `/set spec-*`, their measured costs).
    speculation: bool = True
    # The context size, threads, GPU layers, KV cache types and weight repacking are set here, by
    # the flags and `/set` (False: flags for them are ignored, and said to be).
    load_options: bool = True
    # It reads the images of a `Request`: through a projector in this process (`prepare_images`
    # loads it), or by sending them to its server as content parts (False: refused in one line).
    images: bool = True
    # `respond_many` decodes many sequences in one context here (the batch decoder; False: it sends
    # the requests side by side, and a server or nothing batches them).
    parallel: bool = True


@dataclass
class Answered:
    """One request of `Engine.respond_many`, finished: the caller's `key`, the request, and its
    `Done` (None when it failed: `error` says why, in one line); `prompt_format` as `Prepared`'s."""

    key: Any
    request: Request
    done: Done | None
    prompt_format: str | None = None
    error: str | None = None


class Many(Protocol):
    """Many requests at once on one engine (`Engine.respond_many`): `n` of them decode together,
    chosen as `how` says; `respond` answers them in the order they finish."""

    n: int
    how: str

    def respond(self, requests: Iterable[tuple[Any, Request]]) -> Iterator[Answered]:
        """Each (key, request) answered, `n` at a time, yielded as it finishes."""
        ...

    def close(self) -> None:
        """Free what answering many took (a local engine's second context)."""
        ...


class Embedder(Protocol):
    """An embedding model, as `loader.load_embedder` hands it out: a local embedding context
    (engine/embedding.py) or a server's `/v1/embeddings` (served/embeddings.py). `tokenizes`: texts
    are tokenized here (counted, cut to the context or refused by it: `tokenize`, `fit`, `embed` of
    token sequences); else the server takes the texts (`embed` of texts) and counts them itself."""

    ref: str
    pooling: str
    n_ctx: int  # 0: the server's
    tokenizes: bool

    def close(self) -> None: ...


class Reranker(Protocol):
    """A reranking model (a cross-encoder), as `loader.load_reranker` hands it out: a local GGUF
    under llama.cpp's rank pooling (engine/rerank.py) or a server's `/v1/rerank` (served/rerank.py).
    `rerank` gives one score per document, in order; higher is more relevant to `query`."""

    ref: str
    cut: int  # documents the last `rerank` cut to fit the model's context (0: none, or a server's)

    def rerank(self, query: str, documents: list[str]) -> list[float]: ...

    def close(self) -> None: ...


class Measured(Protocol):
    """What `Engine.calibrate` measured (engine/exact.py's cost table), for `--debug` to show."""

    def report(self) -> dict: ...


class Engine(Protocol):
    """A loaded model with one KV cache: the contract every caller uses and every engine implements
    (LlamaEngine, FakeEngine; checked by mypy through `engine/__init__.py`).

    It is small on purpose. Prompt building (`llmcli.prompting`), signal handling
    (`llmcli.signals`) and presentation live above it; the text path every engine shares is
    `engine.text`."""

    info: ModelInfo
    n_ctx: int  # the context window in tokens
    can: Capabilities  # what it can do (the layers above ask this, never which engine it is)
    # The options it was loaded with; an engine without options of its own (`can.load_options`
    # False) has the defaults, none of which apply to it.
    options: EngineOptions

    @property
    def add_bos(self) -> bool:
        """Whether the model expects a BOS token before a raw prompt."""
        ...

    def tokenize(self, text: str, *, special: bool = True, add_bos: bool = False) -> list[int]:
        """Tokens of `text`; `special` parses control tokens such as <start_of_turn>."""
        ...

    def count(self, text: str) -> int:
        """How many tokens `text` is (with special tokens parsed)."""
        ...

    def bos_text(self) -> str:
        """The BOS control token's text, for chat templates ("" when there is none)."""
        ...

    def eos_text(self) -> str:
        """The EOS control token's text, for chat templates ("" when there is none)."""
        ...

    def respond(self, request: Request) -> Iterator[Event]:
        """The request-level entry every front end uses: Prepared, then what `stream` yields.
        A local engine builds the prompt when called (so a context overflow raises here); closing
        the iterator early stops the request and leaves the engine usable."""
        ...

    def respond_many(self, parallel: int | None, *, items: int, room: int | None = None,
                     context: int | None = None) -> Many:
        """Many requests at once: up to `parallel` (None: chosen here, by measuring where the engine
        can) of `items` requests; `room`: sequences whose KV cache the free memory holds (None:
        unknown); `context`: tokens each request needs at most, prompt and answer (None: the
        engine's context). A local engine decodes them as sequences of one context; a served one
        sends them side by side and its server batches them."""
        ...

    def prepare_images(self) -> None:
        """Make ready for images now (a local model loads its projector, refused in one line without
        one); a served model's server answers for itself."""
        ...

    def stream(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        reasoning: str | None = None,
        calls: CallGrammar | None = None,
        media: Any = None,
    ) -> Iterator[Event]:
        """Prefill `prompt` (reusing the cached prefix), then decode: PrefillProgress, Token..., one
        Done. Closing the generator early leaves the cache consistent with what was evaluated.
        The token level beneath `respond` (and bench's): text or token ids, no template.
        `reasoning`: where the prompt leaves a reasoning model ("start", "reasoning", "answer"; see
        `reasoning.prompt_state`), for its budget and a grammar on the answer alone; None: plain text."""
        ...

    def interrupt(self) -> None:
        """Ask the running `stream` to stop soon (safe to call from a signal handler or a thread)."""
        ...

    def reset(self) -> None:
        """Forget the KV cache."""
        ...

    def state_identity(self) -> dict:
        """What a saved KV state must match to be loaded by this engine (engine/state.py)."""
        ...

    def state_payload(self) -> tuple[list[int], memoryview]:
        """The tokens in the cache and the bytes of their keys and values, to save."""
        ...

    def load_state_payload(self, tokens: list[int], payload: bytearray | memoryview) -> bool:
        """Load a checked payload (a file's bytes, or another engine's `state_payload`) into an
        empty cache; False (cache left empty) when refused."""
        ...

    def call_format(self) -> CallFormat:
        """How the model writes a tool call: read from its chat template, where a template that
        takes no tools is refused in one line (chat checks before its first turn); a server's
        template is its own, and the format is what it shows of it, else the most common one."""
        ...

    def describe(self) -> list[tuple[str, str]]:
        """Where and how the model runs, as `/show` says it: (label, text) rows for its file or
        endpoint, its context, and its cache (or whose template applies)."""
        ...

    @property
    def costs_pending(self) -> bool:
        """Speculation decided by assumed costs, which `calibrate` would measure and store (False
        where nothing speculates here)."""
        ...

    def calibrate(self) -> Measured | None:
        """Measure speculation's costs on this machine and store them (None: nothing measured)."""
        ...

    def close(self) -> None:
        """Free the model and its context; the engine is unusable afterwards."""
        ...
