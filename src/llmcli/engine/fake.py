"""A scripted engine for tests: no model, deterministic, same events and stop logic as the real one.

Tokens are characters (code points), so counts are easy to reason about. Replies are taken from
a queue (`enqueue`), else echo the last line of the prompt. Every request is recorded in
`history`, and a KV cache is simulated so prefix reuse can be asserted.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from llmcli.engine.base import (
    Done,
    EngineOptions,
    Event,
    ModelInfo,
    PrefillProgress,
    SamplingParams,
    Stats,
    Token,
    check_prompt,
)

BOS = 0x10FFFF  # a code point no test text uses


@dataclass
class FakeRequest:
    prompt: str
    params: SamplingParams
    cached_tokens: int


@dataclass
class FakeEngine:
    n_ctx: int = 2048
    replies: list[str] = field(default_factory=list)
    history: list[FakeRequest] = field(default_factory=list)
    chat_template: str | None = None
    architecture: str = "gemma3"
    model_type: str = "instruct"  # "base": a model with no chat template and no instruct fine-tune
    sampling: dict = field(default_factory=dict)  # what the model's metadata recommends
    interrupt_after: int | None = None  # simulate Ctrl-C after this many tokens
    ms_per_token: float = 10.0

    def __post_init__(self) -> None:
        self.info = ModelInfo(
            path="/fake/model.gguf", architecture=self.architecture, quantization="Q4_K_M", size_bytes=1000,
            n_params=1000, n_layers=2, n_ctx_train=self.n_ctx, n_vocab=256, chat_template=self.chat_template,
            name="fake", backend="CPU", model_type=self.model_type,
            sampling=dict(self.sampling),
        )  # fmt: skip
        self._cached: list[int] = []
        self._interrupted = False
        self.load_ms = 1.0
        self.threads = 1
        self.n_batch = 512

    @classmethod
    def factory(cls, **kwargs):
        """An `engine_factory` for llmcli.loader that builds one FakeEngine and remembers it."""
        made: list[FakeEngine] = []

        def build(path, options: EngineOptions, debug: bool) -> FakeEngine:
            engine = cls(**kwargs)
            engine.options = options
            made.append(engine)
            return engine

        build.made = made  # type: ignore[attr-defined]
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

    def interrupt(self) -> None:
        self._interrupted = True

    @contextmanager
    def interrupt_on_sigint(self):
        yield

    def close(self) -> None:
        pass

    def stream(self, prompt: str | list[int], params: SamplingParams) -> Iterator[Event]:
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

    def _decode(self, reply: str, params: SamplingParams, stats: Stats) -> Iterator[Event]:
        out: list[str] = []
        reason = "stop"
        ended = True  # the reply ran out: the fake's end of generation
        limit = params.max_tokens or 1 << 62
        for i, ch in enumerate(reply):
            if self._interrupted or (self.interrupt_after is not None and i >= self.interrupt_after):
                reason, ended = "interrupted", False
                break
            if i >= limit or len(self._cached) >= self.n_ctx:
                reason, ended = "length", False
                break
            candidate = "".join(out) + ch
            if any(s in candidate for s in params.stop):
                cut = min(candidate.find(s) for s in params.stop if s in candidate)
                stats.completion_tokens = i + 1
                self._cached.append(ord(ch))
                text = candidate[:cut]
                if len(text) > len("".join(out)):
                    yield Token(text[len("".join(out)) :], i + 1)
                out = [text]
                ended = False
                break
            out.append(ch)
            self._cached.append(ord(ch))
            stats.completion_tokens = i + 1
            yield Token(ch, i + 1)
        stats.decode_tokens = stats.completion_tokens
        stats.decode_ms = stats.completion_tokens * self.ms_per_token
        stats.total_ms = stats.prefill_ms + stats.decode_ms
        stats.context_used = len(self._cached)
        # Like llama.cpp's grammar sampler, a scripted reply is taken to satisfy the grammar exactly
        # when it runs to its end (the end-of-generation token is allowed only there).
        complete = ended if params.grammar else None
        yield Done(
            "".join(out), reason, stats, params.seed if params.seed is not None else 1234, [], complete
        )
