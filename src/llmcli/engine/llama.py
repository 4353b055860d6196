"""The llama.cpp engine (only the `llmcli.engine` package imports llama_cpp): `LlamaEngine` loads a
GGUF model and its context, keeps the thread counts, answers the contract's calls, and runs each
request through `engine/decoding.py`.

It drives llama.cpp's low-level API directly (model, context, sampler chain, batches) rather
than `llama_cpp.Llama`, for three reasons measured on the default model:
- `Llama` keeps an n_batch x n_vocab float32 score array (512 MB for a 262,144-token vocabulary);
- `Llama.create_completion` re-detokenizes the whole answer on every token (quadratic cost);
- we need the abort callback, exact perf counters and explicit KV-cache prefix reuse.

All llama.cpp calls of a request run on the calling thread, inside the generator it iterates: a
per-token hand-off to a worker thread cost about 9% of decode speed on a two-core machine (a third
runnable thread competes with llama.cpp's compute threads). Ctrl-C still stops a long prompt batch
in the middle of `llama_decode`: `llmcli.signals.interrupt_on_sigint` has CPython's C-level signal
handler write to a pipe (`signal.set_wakeup_fd`), and a helper thread that sleeps on that pipe calls
`interrupt()`, which raises the abort flag that llama.cpp polls between graph nodes.

The engine's parts, each in its own module, get what they use passed in (public attributes and
methods, or the object itself): `loading` (the model, the context's parameters, `ModelInfo`),
`kvcache.KVCache` (the cache: decode, verify, trim, reuse, time, bytes), `vocab.Tokenizer`,
`sampler` (the chain, the pick, the grammar probe), `decoding.Generation` (one request),
`speculation/` (`run.Speculation` and `draft.DraftModel` propose; `exact` is --spec-exact's probe
and the store of what speculation measured), `native` (the llama.cpp glue they share).
"""

from __future__ import annotations

import ctypes
import secrets
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from llmcli import reporting
from llmcli.contract import (
    CallGrammar,
    Capabilities,
    EngineOptions,
    Event,
    Many,
    ModelInfo,
    Request,
    SamplingParams,
    SpecOptions,
    check_prompt,
)
from llmcli.engine import local
from llmcli.engine.backend import llama_cpp_version, weight_repack
from llmcli.engine.decoding import MIN_PREFILL_SAMPLE, Generation
from llmcli.engine.kvcache import KVCache
from llmcli.engine.loading import (
    DEFAULT_CTX_CAP,
    context_params,
    gpu_layers_requested,
    load_model,
    model_info,
)
from llmcli.engine.mtmd import MediaPrompt, Vision, load_vision
from llmcli.engine.native import (
    GGML_KV_TYPES,
    AbortFlag,
    deferred_signals,
    ggml_type,
    raise_for,
    set_attention,
    silence_logs,
)
from llmcli.engine.sampler import build_chain, grammar_error
from llmcli.engine.speculation.costs import SpeculationCosts
from llmcli.engine.speculation.draft import (
    SPEC_VOCAB_MAX_DIFFERENCE,
    DraftModel,
    check_draft_vocab,
    vocab_difference,
)
from llmcli.engine.speculation.exact import (
    CostTable,
    ExactLimits,
    MeasuredStore,
)
from llmcli.engine.speculation.proposal import KPolicy
from llmcli.engine.speculation.run import Speculation
from llmcli.engine.threads import physical_cores
from llmcli.engine.vocab import Tokenizer
from llmcli.errors import LlmcliError, UsageError
from llmcli.media.image import Image
from llmcli.reasoning import tracker_for
from llmcli.tools.calls import CallFormat

__all__ = [  # the engine, and the names other modules, tests and benchmarks import from here
    "DEFAULT_CTX_CAP", "GGML_KV_TYPES", "MIN_PREFILL_SAMPLE", "SPEC_VOCAB_MAX_DIFFERENCE", "AbortFlag",
    "LlamaEngine", "check_draft_vocab", "ggml_type", "grammar_error", "physical_cores", "set_attention",
    "silence_logs", "vocab_difference",
]  # fmt: skip

class LlamaEngine(SpeculationCosts):
    """A GGUF model loaded through llama.cpp, with one KV cache that persists between requests."""

    can = Capabilities()  # all of it, here

    def __init__(
        self, path: str | Path, options: EngineOptions | None = None, *, debug: bool = False
    ) -> None:
        from llmcli.engine.backend import library

        self._L = llama_cpp = library()
        self.options = options or EngineOptions()
        self.path = Path(path)
        self._debug = debug
        if not debug:
            silence_logs(llama_cpp)
        llama_cpp.llama_backend_init()
        self.spec: SpecOptions = self.options.speculative
        self.repack = weight_repack(self.options.repack)  # weights in llama.cpp's extra CPU buffers
        self.draft: DraftModel | None = None
        self._vision: Vision | None = None  # the image projector, loaded by the first image
        self.k_policy: KPolicy | None = None  # speculation's, kept across requests
        self.cost_table: CostTable | None = None  # what adaptive k decides by (calibrated, stored)
        if self.spec.enabled and self.spec.kind == "draft":
            check_draft_vocab(llama_cpp, self.path, Path(str(self.spec.model_draft)))
        started = time.perf_counter()
        with deferred_signals() as hits:
            self._model = self._load_model(hits)
            if hits:
                self.close()
                raise_for(hits)
            self._vocab = llama_cpp.llama_model_get_vocab(self._model)
            self.tokenizer = Tokenizer(llama_cpp, self._vocab)
            self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
            self._ctx = self._new_context()
            if self.spec.enabled:
                self._check_spec_model()
        if hits:
            self.close()
            raise_for(hits)
        self.load_ms = (time.perf_counter() - started) * 1000
        self.n_ctx = llama_cpp.llama_n_ctx(self._ctx)
        self.n_batch = llama_cpp.llama_n_batch(self._ctx)
        self._abort = AbortFlag(llama_cpp)
        llama_cpp.llama_set_abort_callback(self._ctx, self._abort.callback, self._abort.data)
        self.cache = KVCache(llama_cpp, self._ctx, self.spec.draft_max + 1 if self.spec.enabled else 0)
        self.info = self._model_info()
        self._lock = threading.Lock()
        self.exact = ExactLimits(self.spec)
        self.measured = MeasuredStore(
            llama_cpp, self.path, self.options, gpu_layers=self._gpu_layers_requested(), repack=self.repack
        )
        if self.spec.enabled:
            self.k_policy = KPolicy(k_max=self.spec.draft_max, k_min=max(1, self.spec.draft_min),
                                    adaptive=self.spec.adaptive)  # fmt: skip
        if self.spec.enabled and self.spec.kind == "draft":
            with deferred_signals() as hits:
                self.draft = self._load_draft(hits)
                self.cache.on_clear = self.draft.reset  # a cleared cache clears the draft model's too
            if hits:
                self.close()
                raise_for(hits)
            self.load_ms = (time.perf_counter() - started) * 1000
        if self.spec.enabled and self.spec.exact:  # measured once per model, build and settings
            probing = time.perf_counter()
            self._probe_exact_limits()
            self.exact.probe_ms = (time.perf_counter() - probing) * 1000
            self.load_ms = (time.perf_counter() - started) * 1000
        if self.spec.enabled and self.spec.adaptive:  # stored, else assumed until `calibrate`
            self.cost_table = self._stored_costs()

    # -- loading ---------------------------------------------------------------------------

    def _load_model(self, hits: list[int]):
        return load_model(self._L, self.path, self._gpu_layers_requested(), self.repack, hits)

    def _gpu_layers_requested(self) -> int:
        return gpu_layers_requested(self._L, self.options.gpu_layers)

    def _new_context(self):
        L = self._L
        threads = self.options.threads or self._adaptive_start()
        params = context_params(L, self.options, L.llama_model_n_ctx_train(self._model), threads)
        n_ctx = params.n_ctx
        ctx = L.llama_init_from_model(self._model, params)
        if not ctx:
            L.llama_model_free(self._model)
            self._model = None  # freed: close() must not free it again
            raise LlmcliError(
                f"llama.cpp could not create a context of {n_ctx} tokens",
                hint="try a smaller --ctx-size, or fewer --gpu-layers",
            )
        self.threads = self.threads_batch = threads
        return ctx

    def _check_spec_model(self) -> None:
        """Verification drops rejected positions from the cache; a recurrent state cannot."""
        L = self._L
        recurrent = getattr(L, "llama_model_is_recurrent", None)
        hybrid = getattr(L, "llama_model_is_hybrid", None)
        if (recurrent and recurrent(self._model)) or (hybrid and hybrid(self._model)):
            self.close()
            raise UsageError(
                f"{self.path.name} keeps a recurrent state, which cannot drop rejected draft tokens: "
                "speculative decoding needs a transformer model",
                hint="run without --spec-type / -md",
            )

    def _load_draft(self, hits: list[int]) -> DraftModel:
        """The -md model, on this engine's context size, threads, abort flag and repacking; a
        draft that fails to load frees this engine too."""
        L = self._L
        try:
            return DraftModel(L, self.options, hits, n_ctx=self.n_ctx, n_ubatch=L.llama_n_ubatch(self._ctx),
                              threads=self.threads, abort=self._abort, repack=self.repack,
                              n_vocab_target=self.n_vocab)  # fmt: skip
        except BaseException:
            self.close()
            raise

    # -- threads -------------------------------------------------------------------------------

    def _adaptive_start(self) -> int:
        """No -t: begin where no thread waits for a busy core, and let `ThreadPolicy` adapt."""
        from llmcli.engine import threads as policy

        cores = policy.physical_cores()
        start = policy.start_for(cores, policy.busy_others(cores))
        options = policy.candidates(cores)
        if self.spec.enabled:
            # Speculative decoding's text must not depend on the machine's load: the kernels round
            # differently at another thread count (attention splits one query's keys across them),
            # so decode runs at one count, the most, chosen without looking at the load.
            start = options[0]
        # decode: measured, one token a step; prefill: from the run queue, a few big batches
        self.decode_policy = policy.ThreadPolicy(options, start, read_busy=lambda: policy.busy_others(cores))
        self.prefill_policy = policy.LoadFollower(cores)
        return start

    @property
    def adaptive(self) -> bool:
        return getattr(self, "decode_policy", None) is not None

    def observe(self, phase: str, seconds_per_token: float | None) -> tuple[int, str] | None:
        """Feed one measured step to the phase's policy (None: a new prompt begins); apply and
        return (threads, reason) when it changes the count."""
        if phase == "decode":
            policy = self.decode_policy
            before = len(policy.decisions)
            wanted = policy.observe(self.threads, seconds_per_token or 0.0)
            reason = policy.decisions[-1].reason if len(policy.decisions) > before else "settled"
            if wanted == self.threads:
                return None
            self.threads = wanted
        else:
            follower = self.prefill_policy
            wanted = follower.begin() if seconds_per_token is None else follower.observe(seconds_per_token)
            reason = "load"
            if wanted == self.threads_batch:
                return None
            self.threads_batch = wanted
        self._L.llama_set_n_threads(self._ctx, self.threads, self.threads_batch)
        return wanted, reason

    def thread_report(self) -> dict:
        """Which thread counts ran, and for adaptive ones each change: for --json and /stats."""
        if not self.adaptive:
            return {
                "adaptive": False,
                "decode": {"threads": self.threads},
                "prefill": {"threads": self.threads_batch},
            }
        return {
            "adaptive": True,
            "decode": self.decode_policy.summary(),
            "prefill": self.prefill_policy.summary(),
        }

    def pin_batch_threads(self) -> None:
        """Verification batches are decode work: they run on decode's thread count (the one their
        exactness was probed and their costs are stored at), not on the count prefill last chose."""
        if self.threads_batch != self.threads:
            self.threads_batch = self.threads
            self._L.llama_set_n_threads(self._ctx, self.threads, self.threads)

    # -- what was loaded -------------------------------------------------------------------

    def _model_info(self) -> ModelInfo:
        return model_info(self._L, self._model, self.path, self.options,
                          gpu_layers=self._gpu_layers_requested(), n_vocab=self.n_vocab,
                          repack=self.repack)  # fmt: skip

    # -- tokens (vocab.py) ------------------------------------------------------------------

    def tokenize(self, text: str, *, special: bool = True, add_bos: bool = False) -> list[int]:
        """Tokens of `text`; `special` parses control tokens such as <start_of_turn>."""
        return self.tokenizer.tokenize(text, special=special, add_bos=add_bos)

    def count(self, text: str) -> int:
        return len(self.tokenize(text))

    def token_bytes(self, token: int, buf: ctypes.Array | None = None) -> bytes:
        """The raw bytes of one token; control tokens render as nothing."""
        return self.tokenizer.token_bytes(token, buf)

    def detokenize(self, tokens: list[int]) -> str:
        return self.tokenizer.detokenize(tokens)

    @property
    def add_bos(self) -> bool:
        return self.tokenizer.add_bos

    def bos_text(self) -> str:
        return self.tokenizer.bos_text()

    def eos_text(self) -> str:
        return self.tokenizer.eos_text()

    # -- cache (kvcache.py) ---------------------------------------------------------------

    @property
    def cached_tokens(self) -> int:
        return len(self.cache.tokens)

    @property
    def _cached(self) -> list[int]:
        """The tokens in the cache (the tests compare them with what the answers left)."""
        return self.cache.tokens

    def reset(self) -> None:
        """Forget every cached token: the target's, and the draft model's (whose cache would
        otherwise spare the next request the draft's prefill, which a measured run must pay)."""
        self.cache.clear()

    def decode(self, tokens: list[int]) -> int:
        """Evaluate tokens at the end of the cache; returns llama_decode's status."""
        return self.cache.decode(tokens)

    def decode_all(self, tokens: list[int]) -> int:
        """Evaluate tokens at the end of the cache with logits at every position (a verification
        batch); returns llama_decode's status."""
        return self.cache.decode_all(tokens)

    def trim(self, length: int) -> None:
        """Drop cached positions from `length` on (rejected draft tokens)."""
        self.cache.trim(length)

    def perf_ms(self) -> float:
        """Milliseconds llama.cpp has spent evaluating tokens since the last reset."""
        return self.cache.perf_ms()

    def reset_perf(self) -> None:
        """Start this request's timings: the target's counters and the draft model's."""
        self.cache.reset_perf()
        if self.draft is not None:
            self.draft.reset_perf()

    # -- saved state (engine/state.py has the file format and its checks) ------------------------

    def state_identity(self) -> dict:
        """What a saved KV state must match to be loaded here: the model file, the llama.cpp build
        and every setting that shapes the cache's layout or contents."""
        if getattr(self, "_identity", None) is None:
            from llmcli.engine.state import model_identity

            L, opts = self._L, self.options
            self._identity = {
                "engine": "llama.cpp",
                "model": model_identity(self.path),
                "llama_cpp": llama_cpp_version(),
                "system_info": L.llama_print_system_info().decode("utf-8", "replace").strip(),
                "backend": self.info.backend,
                "gpu_layers": self.info.gpu_layers,
                "n_ctx": self.n_ctx,
                "type_k": (opts.type_k or "f16").lower(),
                "type_v": (opts.type_v or "f16").lower(),
                "swa_full": bool(opts.swa_full),
                "repack": self.repack,
                "flash_attn": {None: "auto", True: "on", False: "off"}[opts.flash_attn],
                "n_seq_max": 1,
            }
        return self._identity

    def state_payload(self) -> tuple[list[int], memoryview]:
        """The cached tokens and the KV state (`KVCache.payload`)."""
        return self.cache.payload()

    def load_state_payload(self, tokens: list[int], payload: bytearray | memoryview) -> bool:
        """Load what `state_payload` gave into an empty cache; False when llama.cpp refuses it or
        it does not hold exactly `tokens` positions (the cache is then empty)."""
        return self.cache.load_payload(tokens, payload)

    # -- generation (decoding.py) ---------------------------------------------------------

    def interrupt(self) -> None:
        """Stop the running request soon; safe from a signal handler."""
        self._abort.set()

    def respond(self, request: Request) -> Iterator[Event]:
        return local.respond(self, request)

    def respond_many(self, parallel: int | None, *, items: int, room: int | None = None,
                     context: int | None = None) -> Many:
        from llmcli.engine.batched import respond_many

        return respond_many(self, parallel, items, room=room, context=context)

    def prepare_images(self) -> None:
        self.projector()

    def call_format(self) -> CallFormat:
        return local.call_format(self)

    def describe(self) -> list[tuple[str, str]]:
        return local.describe(self)

    def stream(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        reasoning: str | None = None,
        calls: CallGrammar | None = None,
        media: MediaPrompt | None = None,
    ) -> Iterator[Event]:
        """Prefill `prompt`, then decode; yields PrefillProgress, Token..., and one Done.
        `reasoning`: where the prompt leaves a reasoning model (`reasoning.prompt_state`), for the
        budget and for a grammar that applies to the answer only; None: text is text. `calls`: the
        grammar of one tool call, applied from each call's opening to its complete JSON.

        Closing the generator early (a closed pipe, an exception in the consumer) stops the request
        and leaves the cache consistent with what was evaluated."""
        tokens = self.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        check_prompt(tokens, self.n_ctx)
        seed = params.seed if params.seed is not None else secrets.randbelow(2**32 - 1)
        tracker = tracker_for(self.info.reasoning, reasoning, params.reasoning_budget,
                              params.reasoning_budget_message, constrained=bool(params.grammar))  # fmt: skip
        with self._lock:
            answer_sampler = None
            if tracker is not None and params.grammar:  # the grammar waits for the answer
                answer_sampler = self._build_sampler(params, seed)
                sampler = self._build_sampler(replace(params, grammar=None), seed)
            else:
                sampler = self._build_sampler(params, seed)
            call_sampler = None
            if calls is not None:
                call_sampler = self._build_sampler(replace(params, grammar=calls.grammar), seed)
            self._abort.clear()
            try:
                speculate = self.spec.enabled and media is None
                spec = Speculation(self, tokens, params) if speculate else None
                if self.spec.enabled and media is not None:
                    reporting.warn("speculative decoding is off for this request: its prompt has an image")
                yield from Generation(
                    self,
                    tokens,
                    params,
                    seed,
                    sampler,
                    self._abort,
                    spec,
                    tracker,
                    answer_sampler,
                    calls,
                    call_sampler,
                    media=media,
                    vision=self._vision,
                ).run()
            finally:
                if media is not None and self._vision is not None:
                    self._vision.free(media)
                for chain in (sampler, answer_sampler, call_sampler):
                    if chain is not None:
                        self._L.llama_sampler_free(chain)

    def projector(self) -> str:
        """Load the image projector now (chat's `/attach` asks before the message is sent); its
        path. Raises UsageError in one line where the model has none."""
        if self._vision is None:
            self._vision = load_vision(self._L, self._model, self.path, self.options.mmproj,
                                       self.threads_batch, self._debug)  # fmt: skip
        return self._vision.path

    def media_prompt(self, text: str, images: list[Image]) -> MediaPrompt:
        """Rendered text with one marker per image in text and image chunks (engine/mtmd.py)."""
        self.projector()
        assert self._vision is not None
        return self._vision.prompt(text, images)

    def free_media(self, media: MediaPrompt) -> None:
        """Free a media prompt that will not be streamed (refused before its prefill)."""
        if self._vision is not None:
            self._vision.free(media)

    def _build_sampler(self, params: SamplingParams, seed: int):
        """The sampler chain (engine/sampler.py)."""
        return build_chain(self._L, self.tokenizer, self.n_vocab, params, seed, debug=self._debug)

    # -- speculative decoding's settings and limits (engine/speculation/) ---------

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Free the draft model, the context and the model. Ctrl-C and SIGTERM wait until that is
        done (one arriving between a free and forgetting the pointer would have it freed twice),
        then take effect."""
        with deferred_signals() as hits:
            self._free()
        if hits:
            raise_for(hits)

    def _free(self) -> None:
        L = self._L
        vision = getattr(self, "_vision", None)
        if vision is not None:
            vision.close()
            self._vision = None
        draft = getattr(self, "draft", None)
        if draft is not None:
            draft.close()
            self.draft = None
        if getattr(self, "cache", None) is not None:
            self.cache.close()
        if getattr(self, "_ctx", None):
            L.llama_free(self._ctx)
            self._ctx = None
        if getattr(self, "_model", None):
            L.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        """An engine nobody closed (a command returning): freed with signals held, and one that
        came meanwhile is dropped: the command is over, and from a finalizer it could only print
        a traceback. At the interpreter's exit nothing is freed: the process ends, and the system
        takes back its memory at once, where freeing a 4,096-token cache and the model alone takes
        20-30 ms."""
        if sys.is_finalizing():
            return
        try:
            with deferred_signals():
                self._free()
        except Exception:
            pass
