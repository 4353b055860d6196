"""A scripted engine for tests: no model, deterministic, same events and stop logic as the real one.

Tokens are characters (code points), so counts are easy to reason about. Replies are taken from
a queue (`enqueue`), else echo the last line of the prompt. Every request is recorded in
`history`, and a KV cache is simulated so prefix reuse can be asserted.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from llmcli import reasoning
from llmcli.contract import (
    CallGrammar,
    Capabilities,
    Done,
    EngineOptions,
    Event,
    FinishReason,
    Many,
    ModelInfo,
    PrefillProgress,
    Request,
    SamplingParams,
    Stats,
    Token,
    check_prompt,
)
from llmcli.engine import local
from llmcli.engine.text import TextStream
from llmcli.tools.calls import CallFormat

BOS = 0x10FFFF  # a code point no test text uses


@dataclass
class FakeRequest:
    prompt: str
    params: SamplingParams
    cached_tokens: int


@dataclass
class FakeEngine:
    n_ctx: int = 2048
    replies: list[str | list[bytes]] = field(default_factory=list)
    history: list[FakeRequest] = field(default_factory=list)
    chat_template: str | None = None
    architecture: str = "gemma3"
    model_type: str = "instruct"  # "base": a model with no chat template and no instruct fine-tune
    sampling: dict = field(default_factory=dict)  # what the model's metadata recommends
    interrupt_after: int | None = None  # simulate Ctrl-C after this many tokens
    ms_per_token: float = 10.0
    # With speculative options: each target pass drafts --spec-draft-n-max tokens and accepts this
    # many of them (then one more token comes from the target), so counts are easy to predict.
    spec_accept: int = 2
    # --spec-exact allows no batch at this context (a long one on an f16 cache on the CPU): nothing
    # is drafted, every step is counted in `exact_blocked`
    spec_exact_blocked: bool = False

    def __post_init__(self) -> None:
        self.info = ModelInfo(
            path="/fake/model.gguf", architecture=self.architecture, quantization="Q4_K_M", size_bytes=1000,
            n_params=1000, n_layers=2, n_ctx_train=self.n_ctx, n_vocab=256, chat_template=self.chat_template,
            name="fake", backend="CPU", model_type=self.model_type,
            sampling=dict(self.sampling), reasoning=reasoning.detect(self.chat_template),
        )  # fmt: skip
        self._cached: list[int] = []
        self._interrupted = False
        self.load_ms = 1.0
        self.threads = 1
        self.n_batch = 512
        self.options = EngineOptions()
        self.restored: list[int] = []  # token counts of each KV state loaded
        self.file = self.info.path  # the file it was loaded from (the factory's path)

    @classmethod
    def factory(cls, **kwargs):
        """An `engine_factory` for llmcli.loader that builds one FakeEngine and remembers it."""
        made: list[FakeEngine] = []

        def build(path, options: EngineOptions, debug: bool) -> FakeEngine:
            engine = cls(**kwargs)
            engine.options = options
            engine.file = str(path)
            made.append(engine)
            return engine

        build.made = made
        return build

    def enqueue(self, *replies: str) -> None:
        self.replies.extend(replies)

    # -- tokens --------------------------------------------------------------------------

    def tokenize(self, text: str, *, special: bool = True, add_bos: bool = False) -> list[int]:
        return ([BOS] if add_bos else []) + [ord(c) for c in text]

    def count(self, text: str) -> int:
        return len(text)

    def detokenize(self, tokens: list[int]) -> str:
        return "".join(chr(t) for t in tokens if t != BOS)

    add_bos = True

    def bos_text(self) -> str:
        return ""

    def eos_text(self) -> str:
        return ""

    @property
    def cached_tokens(self) -> int:
        return len(self._cached)

    # -- generation ----------------------------------------------------------------------

    def reset(self) -> None:
        self._cached = []

    # The simulated KV state: the cached tokens as little-endian u32s, then a trailer that
    # depends on the context size (so a state from another context shape is refused).

    def state_identity(self) -> dict:
        opts = self.options
        return {"engine": "fake", "model": {"path": self.file}, "llama_cpp": "fake",
                "n_ctx": self.n_ctx, "type_k": (opts.type_k or "f16").lower(),
                "type_v": (opts.type_v or "f16").lower(), "swa_full": True, "repack": True,
                "flash_attn": "auto"}  # fmt: skip

    def state_payload(self) -> tuple[list[int], memoryview]:
        import struct

        data = struct.pack(f"<{len(self._cached)}I", *self._cached) + b"KV" * 16
        return list(self._cached), memoryview(data)

    def load_state_payload(self, tokens: list[int], payload: bytearray | memoryview) -> bool:
        import struct

        self._cached = []
        n = len(tokens)
        if len(payload) != 4 * n + 32 or list(struct.unpack_from(f"<{n}I", payload)) != tokens:
            return False
        self._cached = list(tokens)
        self.restored.append(len(tokens))
        return True

    def interrupt(self) -> None:
        self._interrupted = True

    def close(self) -> None:
        pass

    can = Capabilities(images=False, parallel=False)  # a local engine's, but no projector, one context
    costs_pending = False  # its speculation decides by no measured costs

    def calibrate(self) -> None:
        return None

    def call_format(self) -> CallFormat:
        return local.call_format(self)

    def describe(self) -> list[tuple[str, str]]:
        return local.describe(self)

    def respond(self, request: Request) -> Iterator[Event]:
        return local.respond(self, request)

    def respond_many(self, parallel: int | None, *, items: int, room: int | None = None,
                     context: int | None = None) -> Many:
        """Requests one after another's turn in threads (it has no batch decoder): 4 by default."""
        from llmcli.many import SideBySide, side_by_side_n

        return SideBySide(self, *side_by_side_n(parallel, items, 4))

    def prepare_images(self) -> None:
        from llmcli.errors import UsageError

        raise UsageError("this model takes no images here (a model run by llama.cpp with a projector does)")

    def stream(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        reasoning: str | None = None,
        calls: CallGrammar | None = None,
        media: Any = None,
    ) -> Iterator[Event]:
        """The scripted reply; `reasoning` (where the prompt leaves a reasoning model) is kept for
        the tests to read, as `reasoning_state`: the scripted pieces are what they are."""
        self.reasoning_state = reasoning
        tokens = self.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        check_prompt(tokens, self.n_ctx)
        self._interrupted = False
        common = 0
        while common < min(len(self._cached), len(tokens) - 1) and self._cached[common] == tokens[common]:
            common += 1
        self._cached = tokens[:]
        self.history.append(FakeRequest(self.detokenize(tokens), params, common))
        todo = len(tokens) - common
        yield PrefillProgress(0, todo, 0.0)
        yield PrefillProgress(todo, todo, todo * 1.0)
        reply = self.replies.pop(0) if self.replies else self._echo(tokens)
        yield from self._decode(reply, params, Stats(
            prompt_tokens=len(tokens), cached_tokens=common, prefill_tokens=todo, prefill_ms=todo * 1.0,
            ttft_ms=todo * 1.0 + 1, load_ms=self.load_ms, context_size=self.n_ctx,
        ))  # fmt: skip

    def _echo(self, tokens: list[int]) -> str:
        """Echo the last line of the prompt, with the template's turn markers taken out."""
        import re

        text = re.sub(r"<start_of_turn>(user|model)\n?|<end_of_turn>", "", self.detokenize(tokens))
        lines = [line for line in text.splitlines() if line.strip()]
        return f"echo: {lines[-1] if lines else ''}"

    def _decode(self, reply: str | list[bytes], params: SamplingParams, stats: Stats) -> Iterator[Event]:
        """Decode a scripted reply: a string is one character per token, a list of bytes one piece per
        token (to split characters across tokens). The reply's end is the end-of-generation token.
        The order of checks and the text path are the real engine's, so the same cases give the
        same text, finish reason and token count on both."""
        pieces = [ch.encode() for ch in reply] if isinstance(reply, str) else list(reply)
        text = TextStream(params.stop)
        limit = params.max_tokens or 1 << 62
        reason: FinishReason = "stop"
        ended = stopped = False  # the end-of-generation token was reached / a stop string
        n = 0
        spec = self.options.speculative
        blocked = spec.enabled and spec.exact and self.spec_exact_blocked  # every step a plain one
        drafted = accepted = passes = 0
        left_in_pass = 0  # tokens still to come from the current target pass
        for i in range(len(pieces) + 1):
            if self._interrupted or (self.interrupt_after is not None and i >= self.interrupt_after):
                reason = "interrupted"
                break
            if i == len(pieces):
                ended = True
                break
            n = i + 1
            shown, stopped = text.feed(pieces[i])
            self._cached.extend(ord(c) for c in pieces[i].decode("utf-8", "replace"))
            if blocked:
                passes += 1
                yield Token(shown, n, 0, 0, passes)
            elif spec.enabled:
                if left_in_pass == 0:  # a new verification batch
                    passes += 1
                    drafted += spec.draft_max
                    took = min(self.spec_accept, spec.draft_max)
                    accepted += took
                    left_in_pass = took + 1
                left_in_pass -= 1
                yield Token(shown, n, drafted, accepted, passes)
            else:
                yield Token(shown, n)
            if stopped:
                break
            if n >= limit or len(self._cached) >= self.n_ctx:
                reason = "length"
                break
        if tail := text.finish(stopped):
            yield Token(tail, n)
        stats.completion_tokens = stats.decode_tokens = n
        stats.decode_ms = n * self.ms_per_token
        stats.total_ms = stats.prefill_ms + stats.decode_ms
        stats.context_used = len(self._cached)
        stats.threads = {"adaptive": False, "decode": {"threads": 1}, "prefill": {"threads": 1}}
        if spec.enabled:
            stats.drafted_tokens, stats.accepted_tokens, stats.target_passes = drafted, accepted, passes
            every = spec.draft_max + 1
            stats.speculative = {**spec.settings(),
                                 "exact_positions": {"short": every, "long": 1 if blocked else every},
                                 "k_chosen": {"0" if blocked else str(spec.draft_max): passes},
                                 "exact_blocked": n if blocked else 0}  # fmt: skip
        # Like llama.cpp's grammar sampler, a scripted reply satisfies the grammar exactly when it
        # runs to its end (the end-of-generation token is allowed only there) or is cut right there.
        complete = (ended or (reason == "length" and n == len(pieces))) if params.grammar else None
        seed = params.seed if params.seed is not None else 1234
        ids = [ord(p.decode("utf-8", "replace")[:1] or "\0") for p in pieces[:n]]  # a token id per piece
        yield Done(text.text, reason, stats, seed, ids, complete)
