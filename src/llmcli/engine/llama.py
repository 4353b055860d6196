"""The llama.cpp engine (only the `llmcli.engine` package imports llama_cpp).

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
"""

from __future__ import annotations

import ctypes
import os
import secrets
import threading
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path

from llmcli import defaults
from llmcli.contract import (
    Done,
    EngineOptions,
    Event,
    FinishReason,
    ModelInfo,
    PrefillProgress,
    Request,
    SamplingParams,
    SpecOptions,
    Stats,
    ThreadsChanged,
    Token,
    check_prompt,
)
from llmcli.engine import local
from llmcli.engine.backend import backend_name, llama_cpp_version, weight_repack
from llmcli.engine.spec import KPolicy
from llmcli.engine.text import TextStream
from llmcli.errors import ContextOverflowError, InvalidModelError, LlmcliError, UsageError

DEFAULT_CTX_CAP = defaults.CTX_CAP
MIN_PREFILL_SAMPLE = 32  # prefill batches smaller than this say little about thread speed
_log_callback = None  # keeps the ctypes callback alive for the life of the process


def physical_cores() -> int:
    """Physical CPU cores (llama.cpp runs best with one thread per core), else logical CPUs."""
    try:
        cores: set[tuple[str, str]] = set()
        phys = core = ""
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "physical id":
                    phys = value.strip()
                elif key == "core id":
                    core = value.strip()
                    cores.add((phys, core))
        if cores:
            return max(1, min(len(cores), len(os.sched_getaffinity(0))))
    except (OSError, AttributeError):
        pass
    return max(1, (os.cpu_count() or 2) // 2)


def silence_logs(llama_cpp) -> None:
    """Hide llama.cpp's log output (it is shown with --debug).

    The sink is libc's `abs`, a C function that touches no memory and ignores the extra arguments,
    not a Python callback: Python code running inside llama.cpp's logging is where a signal handler
    would run, and an exception it raised there (Ctrl-C, SIGTERM) would be swallowed by ctypes.
    """
    global _log_callback
    if _log_callback is None:
        try:
            address = ctypes.cast(ctypes.CDLL(None).abs, ctypes.c_void_p).value
            _log_callback = llama_cpp.llama_log_callback(address)
        except (OSError, AttributeError, TypeError):
            _log_callback = llama_cpp.llama_log_callback(lambda level, text, data: None)
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))


@contextmanager
def _stderr_kept(printed: list[str], keep: bool = True) -> Iterator[None]:
    """Route file descriptor 2 to a temporary file around a C call that prints its errors there
    rather than through llama.cpp's log (the grammar parser), and append what it printed to
    `printed`; with `keep` false (--debug) the output goes to the terminal as it is."""
    if not keep:
        yield
        return
    import sys
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            printed.append(sink.read(4096).decode("utf-8", "replace"))


def grammar_error(grammar: str, printed: str) -> str:
    """One line for a GBNF grammar llama.cpp refused: the parser's reason where it printed one
    (its first line, without the rest of the grammar that follows "at"), else what is checked here."""
    import re

    found = re.search(r"error parsing grammar: ([^\n]*)", printed)
    if found:
        reason = found.group(1).strip()
        if len(reason) > 80:
            reason = reason[:77] + "..."
        return f"the grammar could not be parsed: {reason}"
    if not re.search(r"(?m)^\s*root\s*::=", grammar):
        return "the grammar has no `root` rule (generation starts from `root ::= ...`)"
    return "the grammar could not be used (an undefined rule or left recursion; see --debug)"


@contextmanager
def _deferred_signals():
    """Hold Ctrl-C and SIGTERM while llama.cpp loads (an exception raised inside a ctypes callback
    would be swallowed); the caller checks the list and calls `_raise_for` once it is safe."""
    import signal

    hits: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield hits
        return
    previous = {sig: signal.signal(sig, lambda signum, frame: hits.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}  # fmt: skip
    try:
        yield hits
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _raise_for(hits: list[int]) -> None:
    """What a signal held during the load turns into: Ctrl-C (exit 130) or SIGTERM (exit 143)."""
    import signal

    from llmcli.errors import TerminatedError

    if signal.SIGINT in hits:
        raise KeyboardInterrupt
    raise TerminatedError("received SIGTERM")


class AbortFlag:
    """A one-byte flag that llama.cpp polls between graph nodes without touching Python.

    The abort callback has the shape `bool f(void *data)`. libc's `strlen` on a two-byte buffer
    fits it exactly: it returns 0 while the buffer is empty and 1 once the first byte is set,
    so the compute threads poll the flag at C speed, with no GIL and no per-node Python call.
    A Python callback is used only where libc cannot be found.
    """

    def __init__(self, llama_cpp) -> None:
        self._buf = ctypes.create_string_buffer(2)
        self._py_callback = None
        try:
            libc = ctypes.CDLL(None)
            address = ctypes.cast(libc.strlen, ctypes.c_void_p).value
            self.callback = llama_cpp.ggml_abort_callback(address)
        except (OSError, AttributeError, TypeError):
            self.callback = llama_cpp.ggml_abort_callback(lambda _data: self.is_set())
        self.data = ctypes.cast(self._buf, ctypes.c_void_p)

    def set(self) -> None:
        self._buf[0] = b"\x01"

    def clear(self) -> None:
        self._buf[0] = b"\x00"

    def is_set(self) -> bool:
        return self._buf[0] != b"\x00"


class LlamaEngine:
    """A GGUF model loaded through llama.cpp, with one KV cache that persists between requests."""

    def __init__(
        self, path: str | Path, options: EngineOptions | None = None, *, debug: bool = False
    ) -> None:
        import llama_cpp

        self._L = llama_cpp
        self.options = options or EngineOptions()
        self.path = Path(path)
        self._debug = debug
        if not debug:
            silence_logs(llama_cpp)
        llama_cpp.llama_backend_init()
        self.spec: SpecOptions = self.options.speculative
        self.repack = weight_repack(self.options.repack)  # weights in llama.cpp's extra CPU buffers
        self._draft: _DraftModel | None = None
        self._spec_batch = None
        self._k_policy: KPolicy | None = None
        self._file_identity: dict | None = None  # the model file's, for the keys of cached measurements
        if self.spec.enabled and self.spec.kind == "draft":
            check_draft_vocab(llama_cpp, self.path, Path(str(self.spec.model_draft)))
        started = time.perf_counter()
        with _deferred_signals() as hits:
            self._model = self._load_model(hits)
            if hits:
                self.close()
                _raise_for(hits)
            self._vocab = llama_cpp.llama_model_get_vocab(self._model)
            self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
            self._ctx = self._new_context()
            if self.spec.enabled:
                self._check_spec_model()
        if hits:
            self.close()
            _raise_for(hits)
        self.load_ms = (time.perf_counter() - started) * 1000
        self.n_ctx = llama_cpp.llama_n_ctx(self._ctx)
        self.n_batch = llama_cpp.llama_n_batch(self._ctx)
        self._abort = AbortFlag(llama_cpp)
        llama_cpp.llama_set_abort_callback(self._ctx, self._abort.callback, self._abort.data)
        self._cached: list[int] = []  # tokens whose keys/values sit in the cache at positions 0..n-1
        self._outputs_reserved = 1  # rows of logits llama.cpp's output buffer holds (it only grows)
        self._untimed_ms = 0.0  # evaluation time llama.cpp's perf counters missed since the reset
        self.info = self._model_info()
        self._lock = threading.Lock()
        self.exact_positions = (self.spec.draft_max + 1, self.spec.draft_max + 1)
        self._exact_by_threads: dict[int, tuple[int, int]] = {}  # --spec-exact's limits per thread count
        self.exact_probe_ms = 0.0  # what finding them took at load (reading the cached ones: ~0)
        if self.spec.enabled and self.spec.kind == "draft":
            with _deferred_signals() as hits:
                self._draft = _DraftModel(self, hits)
            if hits:
                self.close()
                _raise_for(hits)
            self.load_ms = (time.perf_counter() - started) * 1000
        if self.spec.enabled:
            self._spec_batch = llama_cpp.llama_batch_init(self.spec.draft_max + 1, 0, 1)
            if self.spec.exact:  # measured once per model, build and settings: part of the load
                probing = time.perf_counter()
                self._probe_exact_limits()
                self.exact_probe_ms = (time.perf_counter() - probing) * 1000
                self.load_ms = (time.perf_counter() - started) * 1000

    # -- loading ---------------------------------------------------------------------------

    def _load_model(self, hits: list[int]):
        L = self._L
        params = L.llama_model_default_params()
        params.n_gpu_layers = self._gpu_layers_requested()
        params.use_extra_bufts = self.repack
        # returning False from the progress callback cancels a load interrupted by a signal
        progress = L.llama_progress_callback(lambda value, data: not hits)
        params.progress_callback = progress
        model = L.llama_model_load_from_file(str(self.path).encode(), params)
        if not model and hits:
            _raise_for(hits)
        if not model:
            raise InvalidModelError(
                f"llama.cpp could not load {self.path}",
                hint="the architecture may be unsupported by this llama.cpp build; run with --debug",
            )
        return model

    def _gpu_layers_requested(self) -> int:
        requested = self.options.gpu_layers
        if requested is None or requested < 0:
            return 999 if self._L.llama_supports_gpu_offload() else 0
        return requested

    def _new_context(self):
        L = self._L
        opts = self.options
        n_ctx_train = L.llama_model_n_ctx_train(self._model)
        n_ctx = opts.ctx_size or min(n_ctx_train, DEFAULT_CTX_CAP)
        n_ctx = max(256, -(-n_ctx // 256) * 256)  # llama.cpp pads to 256; ask for what we get
        threads = opts.threads or self._adaptive_start()
        params = L.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = min(opts.batch_size, n_ctx)
        params.n_ubatch = min(opts.ubatch_size or opts.batch_size, params.n_batch)
        params.n_threads = threads
        params.n_threads_batch = threads
        params.no_perf = False
        # We read logits for one position per batch. Left at 0, llama.cpp sizes its output and
        # compute buffers for n_batch rows x n_vocab: 512 MB more RSS for a 262k vocabulary.
        params.n_outputs_max = 1
        if opts.speculative.enabled:  # a verification batch reads logits at each of its positions
            params.n_outputs_max = opts.speculative.draft_max + 1
        params.swa_full = opts.swa_full
        set_attention(L, params, opts)
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

    # -- threads -------------------------------------------------------------------------------

    def _adaptive_start(self) -> int:
        """No -t: begin where no thread waits for a busy core, and let `ThreadPolicy` adapt."""
        from llmcli.engine import threads as policy

        cores = physical_cores()
        start = policy.start_for(cores, policy.busy_others(cores))
        options = policy.candidates(cores)
        # decode: measured, one token a step; prefill: from the run queue, a few big batches
        self.decode_policy = policy.ThreadPolicy(options, start, read_busy=lambda: policy.busy_others(cores))
        self.prefill_policy = policy.LoadFollower(cores)
        return start

    @property
    def adaptive(self) -> bool:
        return getattr(self, "decode_policy", None) is not None

    def _observe(self, phase: str, seconds_per_token: float | None) -> tuple[int, str] | None:
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

    def _model_info(self) -> ModelInfo:
        L = self._L
        size = self.path.stat().st_size
        n_layers = L.llama_model_n_layer(self._model)
        requested = self._gpu_layers_requested()
        offloaded = min(requested, n_layers + 1) if L.llama_supports_gpu_offload() else 0
        from llmcli import sampling, templates

        template = L.llama_model_chat_template(self._model, None)
        chat_template = template.decode("utf-8", "replace") if template else None
        metadata: dict[str, object] = {
            key: value for key in templates.METADATA_KEYS if (value := self._meta(key)) is not None
        }
        return ModelInfo(
            path=str(self.path),
            architecture=self._meta("general.architecture") or "unknown",
            quantization=_quant_name(self._meta("general.file_type")),
            size_bytes=size,
            n_params=int(L.llama_model_n_params(self._model)),
            n_layers=n_layers,
            n_ctx_train=L.llama_model_n_ctx_train(self._model),
            n_vocab=self.n_vocab,
            chat_template=chat_template,
            name=self._meta("general.name") or self.path.stem,
            gpu_layers=offloaded,
            backend=backend_name(),
            repack=self.repack,
            type_k=(self.options.type_k or "f16").lower(),
            type_v=(self.options.type_v or "f16").lower(),
            model_type=templates.model_type(chat_template, metadata),
            sampling=sampling.from_metadata(
                {key: value for key in sampling.GGUF_KEYS if (value := self._meta(key)) is not None}
            ),
        )

    def _meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(256)
        n = self._L.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            self._L.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    # -- tokens ----------------------------------------------------------------------------

    def tokenize(self, text: str, *, special: bool = True, add_bos: bool = False) -> list[int]:
        """Tokens of `text`; `special` parses control tokens such as <start_of_turn>."""
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (self._L.llama_token * cap)()
        n = self._L.llama_tokenize(self._vocab, data, len(data), buf, cap, add_bos, special)
        if n < 0:
            cap = -n
            buf = (self._L.llama_token * cap)()
            n = self._L.llama_tokenize(self._vocab, data, len(data), buf, cap, add_bos, special)
        return list(buf[:n])

    def count(self, text: str) -> int:
        return len(self.tokenize(text))

    def token_bytes(self, token: int, buf: ctypes.Array | None = None) -> bytes:
        """The raw bytes of one token; control tokens render as nothing."""
        buf = buf if buf is not None else ctypes.create_string_buffer(64)
        n = self._L.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        if n < 0:  # the piece is longer than the buffer: never truncate, ask again
            buf = ctypes.create_string_buffer(-n)
            n = self._L.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        return buf.raw[:n]

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", "replace")

    @property
    def add_bos(self) -> bool:
        return bool(self._L.llama_vocab_get_add_bos(self._vocab))

    def bos_text(self) -> str:
        return self._special_text(self._L.llama_vocab_bos(self._vocab))

    def eos_text(self) -> str:
        return self._special_text(self._L.llama_vocab_eos(self._vocab))

    def _special_text(self, token: int) -> str:
        """The text of a control token (e.g. "<bos>"), for chat templates; "" when there is none."""
        if token < 0:
            return ""
        buf = ctypes.create_string_buffer(64)
        n = self._L.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, True)
        return buf.raw[: max(n, 0)].decode("utf-8", "replace")

    # -- cache -----------------------------------------------------------------------------

    @property
    def cached_tokens(self) -> int:
        return len(self._cached)

    def reset(self) -> None:
        """Forget every cached token: the target's, and the draft model's (whose cache would
        otherwise spare the next request the draft's prefill, which a measured run must pay)."""
        self._L.llama_memory_clear(self._L.llama_get_memory(self._ctx), True)
        self._cached = []
        if self._draft is not None:
            self._draft.reset()

    def _reuse_prefix(self, prompt: list[int]) -> int:
        """Keep the longest cached prefix of `prompt` (leaving one token to evaluate); drop the rest."""
        self._sync_cache()
        common = 0
        limit = min(len(self._cached), len(prompt) - 1)
        cached = self._cached
        while common < limit and cached[common] == prompt[common]:
            common += 1
        if common < len(cached):
            mem = self._L.llama_get_memory(self._ctx)
            if not self._L.llama_memory_seq_rm(mem, 0, common, -1):
                self._L.llama_memory_clear(mem, True)
                common = 0
            del cached[common:]
        return common

    def _sync_cache(self) -> None:
        """Make `_cached` and the cache agree, after an aborted `llama_decode` (which may leave
        part of a batch, or less than we recorded) or a KeyboardInterrupt raised between a
        `llama_decode` and our bookkeeping (one batch in the cache that we did not record)."""
        mem = self._L.llama_get_memory(self._ctx)
        in_cache = self._L.llama_memory_seq_pos_max(mem, 0) + 1
        if in_cache < len(self._cached):
            del self._cached[in_cache:]
        elif in_cache > len(self._cached) and not self._L.llama_memory_seq_rm(mem, 0, len(self._cached), -1):
            self.reset()

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
        """The cached tokens and the KV state, as `llama_state_seq_get_data` writes it for seq_id -1
        (the whole cache, which here is sequence 0 alone): for seq 0 it would leave out the cells a
        sliding-window layer no longer attends to, and a prompt that shares less than all of the
        saved tokens needs them."""
        L = self._L
        self._sync_cache()
        size = L.llama_state_seq_get_size(self._ctx, -1)
        buf = (ctypes.c_uint8 * size)()
        written = L.llama_state_seq_get_data(self._ctx, buf, size, -1)
        if written == 0 and self._cached:
            raise LlmcliError("llama.cpp could not copy the KV state")
        return list(self._cached), memoryview(buf).cast("B")[:written]

    def load_state_payload(self, tokens: list[int], payload: bytearray | memoryview) -> bool:
        """Load what `state_payload` gave into sequence 0 of an empty cache; False when llama.cpp
        refuses it or it does not hold exactly `tokens` positions (the cache is then empty)."""
        L = self._L
        self.reset()
        if isinstance(payload, memoryview) and payload.readonly:
            payload = bytearray(payload)  # llama.cpp's call takes a writable buffer
        buf = (ctypes.c_uint8 * len(payload)).from_buffer(payload)
        read = L.llama_state_seq_set_data(self._ctx, buf, len(payload), -1)
        del buf  # release the export of `payload`
        in_cache = L.llama_memory_seq_pos_max(L.llama_get_memory(self._ctx), 0) + 1
        if read != len(payload) or in_cache != len(tokens):
            self.reset()
            return False
        self._cached = list(tokens)
        return True

    # -- generation ------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Stop the running request soon; safe from a signal handler."""
        self._abort.set()

    def respond(self, request: Request) -> Iterator[Event]:
        return local.respond(self, request)

    def stream(self, prompt: str | list[int], params: SamplingParams) -> Iterator[Event]:
        """Prefill `prompt`, then decode; yields PrefillProgress, Token..., and one Done.

        Closing the generator early (a closed pipe, an exception in the consumer) stops the request
        and leaves the cache consistent with what was evaluated."""
        tokens = self.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        check_prompt(tokens, self.n_ctx)
        seed = params.seed if params.seed is not None else secrets.randbelow(2**32 - 1)
        with self._lock:
            sampler = self._build_sampler(params, seed)
            self._abort.clear()
            try:
                yield from _Generation(self, tokens, params, seed, sampler).run()
            finally:
                self._L.llama_sampler_free(sampler)

    def _build_sampler(self, params: SamplingParams, seed: int):
        L = self._L
        chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        add = lambda s: L.llama_sampler_chain_add(chain, s)  # noqa: E731
        if params.grammar:
            printed: list[str] = []
            with _stderr_kept(printed, keep=not self._debug):
                grammar = L.llama_sampler_init_grammar(self._vocab, params.grammar.encode(), b"root")
            if not grammar:
                L.llama_sampler_free(chain)
                raise UsageError(grammar_error(params.grammar, "".join(printed)))
            add(grammar)
        if params.repeat_penalty != 1.0:
            add(_penalty_sampler(L, self.n_vocab, params.repeat_last_n, params.repeat_penalty))
        if params.temperature <= 0:
            add(L.llama_sampler_init_greedy())
            return chain
        if params.top_k > 0:
            add(L.llama_sampler_init_top_k(params.top_k))
        if params.top_p < 1.0:
            add(L.llama_sampler_init_top_p(params.top_p, 1))
        if params.min_p > 0:
            add(L.llama_sampler_init_min_p(params.min_p, 1))
        add(L.llama_sampler_init_temp(params.temperature))
        add(L.llama_sampler_init_dist(seed))
        return chain

    def perf_ms(self) -> float:
        """Milliseconds llama.cpp has spent evaluating tokens since the last reset."""
        return self._counted_ms() + self._untimed_ms

    def _counted_ms(self) -> float:
        data = self._L.llama_perf_context(self._ctx)
        return data.t_p_eval_ms + data.t_eval_ms

    def reset_perf(self) -> None:
        """Start this request's timings: the target's counters and the draft model's."""
        self._L.llama_perf_context_reset(self._ctx)
        self._untimed_ms = 0.0
        if self._draft is not None:
            self._draft.reset_perf()

    def decode(self, tokens: list[int]) -> int:
        """Evaluate tokens at the end of the cache; returns llama_decode's status."""
        arr = (self._L.llama_token * len(tokens))(*tokens)
        rc = self._L.llama_decode(self._ctx, self._L.llama_batch_get_one(arr, len(tokens)))
        if rc == 0:
            self._cached.extend(tokens)
        return rc

    def decode_all(self, tokens: list[int]) -> int:
        """Evaluate tokens at the end of the cache with logits at every position (a verification
        batch: `llama_sampler_sample(..., i)` then reads position i); returns llama_decode's status."""
        batch = self._spec_batch
        assert batch is not None and len(tokens) <= self.spec.draft_max + 1
        start = len(self._cached)
        for i, t in enumerate(tokens):
            batch.token[i] = t
            batch.pos[i] = start + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1
        batch.n_tokens = len(tokens)
        if len(tokens) <= self._outputs_reserved:
            rc = self._L.llama_decode(self._ctx, batch)
        else:
            rc = self._decode_growing(batch, len(tokens))
        if rc == 0:
            self._cached.extend(tokens)
        return rc

    def _decode_growing(self, batch, outputs: int) -> int:
        """llama_decode of a batch with more logit rows than any before it on this context. llama.cpp
        then grows its output buffer, and the synchronize that needs restarts its perf clock in the
        middle of the batch: the rest of the batch would count nowhere (decode speed read 2-3x too
        high in a short answer). So such a batch is timed here and the part missed is added."""
        L, ctx = self._L, self._ctx
        L.llama_synchronize(ctx)
        counted, started = self._counted_ms(), time.perf_counter()
        rc = L.llama_decode(ctx, batch)
        L.llama_synchronize(ctx)
        elapsed = (time.perf_counter() - started) * 1000
        self._untimed_ms += max(0.0, elapsed - (self._counted_ms() - counted))
        if rc == 0:
            self._outputs_reserved = outputs
        return rc

    def trim(self, length: int) -> None:
        """Drop cached positions from `length` on (rejected draft tokens)."""
        if length >= len(self._cached):
            return
        mem = self._L.llama_get_memory(self._ctx)
        if self._L.llama_memory_seq_rm(mem, 0, length, -1):
            del self._cached[length:]
        else:  # cannot happen for the models _check_spec_model lets through; stay consistent anyway
            self.reset()

    def spec_report(self) -> dict:
        if not self.spec.enabled:
            return {}
        short, long = self.exact_positions
        report = {**self.spec.settings(), "exact_positions": {"short": short, "long": long}}
        if self._draft is not None:
            report["n_ctx_draft"] = self._draft.n_ctx
            report["cache_type_k_draft"] = self._draft.type_k
            report["cache_type_v_draft"] = self._draft.type_v
        if self.spec.exact:
            report["exact_probe_ms"] = round(self.exact_probe_ms, 3)
        if len(self._exact_by_threads) > 1:
            report["exact_positions_by_threads"] = {
                str(n): {"short": a, "long": b} for n, (a, b) in sorted(self._exact_by_threads.items())
            }
        return report

    # llama.cpp's CPU attention takes another path for one query once the cache view reaches 512
    # cells (it splits the keys across threads), so exactness is probed on both sides of that.
    EXACT_SHORT_CELLS = 256

    def exact_limit(self, cached: int) -> int:
        """Most positions a verification batch starting after `cached` tokens may have, at the
        thread count now in effect (a count never probed: 1, plain steps only)."""
        if self.spec.exact:
            short, long = self._exact_by_threads.get(self.threads, (1, 1))
        else:
            short, long = self.exact_positions
        if cached + short <= self.EXACT_SHORT_CELLS:
            return short
        return max(long, min(short, self.EXACT_SHORT_CELLS - cached))

    def _probe_exact_limits(self) -> None:
        """--spec-exact's limits for every decode thread count this engine may run: the kernels'
        rounding depends on the count (one thread never splits attention's keys; two do from 512
        cells on), and the adaptive thread policy changes it while an answer streams."""
        counts = self.decode_policy.options if self.adaptive else [self.threads]
        try:
            for n in sorted(set(counts) | {self.threads}, key=lambda n: n != self.threads):
                self._L.llama_set_n_threads(self._ctx, n, n)
                self._exact_by_threads[n] = self._exact_batch_limits(n)
        finally:
            self._L.llama_set_n_threads(self._ctx, self.threads, self.threads_batch)
        self.exact_positions = self._exact_by_threads[self.threads]

    def pin_batch_threads(self) -> None:
        """Verification batches are decode work: they run on decode's thread count (the one their
        exactness was probed and their costs are stored at), not on the count prefill last chose."""
        if self.threads_batch != self.threads:
            self.threads_batch = self.threads
            self._L.llama_set_n_threads(self._ctx, self.threads, self.threads)

    def _exact_batch_limits(self, threads: int) -> tuple[int, int]:
        """The most positions a verification batch may have and still give, at every position,
        logits bit-identical to decoding the same tokens one at a time (so that temperature 0
        reproduces the plain text exactly), for a short cache and a long one. Which CPU kernel runs
        depends on the shapes: repacked K-quant weights take 4 or more rows through a GEMM that
        rounds differently from the one-row GEMV; flash attention splits the keys across threads
        for a single query over 512 or more cells. Probed once per model, build and settings on
        a fixed token sequence (kernel choice depends on shapes, not values), cached on disk."""
        import json

        top = self.spec.draft_max + 1
        key, cache = self._settings_file("spec-exact", threads, top=top, probe=3)
        try:
            short, long = json.loads(cache.read_text())["positions"]
            return int(short), int(long)
        except (OSError, ValueError, KeyError, TypeError):
            pass
        short = self._probe_exact(8, top)
        long = self._probe_exact(self.EXACT_SHORT_CELLS + 40, top) if self.n_ctx >= 400 else short
        try:
            from llmcli.atomic import write_atomic

            cache.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(cache, json.dumps({"key": json.loads(key), "positions": [short, long]}))
        except OSError:
            pass
        return short, long

    def _settings_file(self, folder: str, threads: int | None = None, **extra) -> tuple[str, Path]:
        """A key naming this model, build and settings at the current thread count, and the file
        under the cache dir that holds what was measured for it (`spec-exact`, `spec-costs`)."""
        import hashlib
        import json

        from llmcli import paths
        from llmcli.engine.state import model_identity

        L, opts = self._L, self.options
        if self._file_identity is None:
            self._file_identity = model_identity(self.path)
        key = json.dumps({"model": self._file_identity, "llama_cpp": llama_cpp_version(),
                          "system": L.llama_print_system_info().decode("utf-8", "replace"),
                          "gpu_layers": self._gpu_layers_requested(), "flash_attn": opts.flash_attn,
                          "type_k": opts.type_k, "type_v": opts.type_v, "repack": self.repack,
                          "threads": threads or self.threads, **extra}, sort_keys=True)  # fmt: skip
        name = hashlib.sha256(key.encode()).hexdigest()[:32] + ".json"
        return key, paths.cache_dir() / folder / name

    def stored_batch_costs(self, threads: int) -> dict[int, float]:
        """What earlier runs measured a verification batch of n positions to cost, relative to
        one step, on this model, build and settings (empty when nothing was, or it cannot be read)."""
        rows = _read_costs(self._settings_file("spec-costs", threads, costs=1)[1])
        stored = {n: rel for n, (rel, _) in rows.items()}
        if not all(0 < rel < 1000 for rel in stored.values()):
            return {}
        return {1: 1.0, **stored} if stored else {}

    def store_batch_costs(self, threads: int, measured: dict[int, tuple[float, int]]) -> None:
        """Add this run's relative batch costs (n -> (relative cost, batches)) to the stored ones,
        as a running mean that follows the machine (each size stands for at most 50 batches).
        Best effort: a cache that cannot be written costs only the next run's head start."""
        import json

        from llmcli.atomic import locked, write_atomic

        if not measured:
            return
        key, path = self._settings_file("spec-costs", threads, costs=1)
        try:
            with locked(path, timeout=2.0):
                old = _read_costs(path)
                for n, (rel, batches) in measured.items():
                    r, w = old.get(n, (rel, 0.0))
                    total = w + batches
                    old[n] = ((r * w + rel * batches) / total, min(total, 50.0))
                costs = {str(n): [round(r, 4), w] for n, (r, w) in sorted(old.items())}
                write_atomic(path, json.dumps({"key": json.loads(key), "costs": costs}), lock=False)
        except Exception:  # noqa: BLE001 - a lock timeout, a read-only cache: never fail the answer
            return

    def _probe_exact(self, n_prefix: int, top: int) -> int:
        L = self._L
        text = "The quick brown fox jumps over the lazy dog; def f(x): return x * 42  # 0123456789 ok. "
        base = self.tokenize(text, add_bos=False)
        seq = (base * (1 + (n_prefix + top) // max(1, len(base))))[: n_prefix + top]
        prefix, tail = seq[:n_prefix], seq[n_prefix:]
        size = self.n_vocab * 4

        def row(i: int) -> bytes:
            return ctypes.string_at(L.llama_get_logits_ith(self._ctx, i), size)

        def exact(m: int) -> bool:
            self.trim(n_prefix)  # as verification does: the rejected rest leaves the cache
            if len(self._cached) != n_prefix or self.decode_all(tail[:m]) != 0:
                return False
            return all(row(i) == singles[i] for i in range(m))

        limit = 1
        try:
            self.reset()
            step = self.n_batch
            if any(self.decode(prefix[i : i + step]) != 0 for i in range(0, len(prefix), step)):
                return 1
            singles = []
            for t in tail:
                if self.decode([t]) != 0:
                    return 1
                singles.append(row(-1))
            # The common case, every size agreeing, in two batches: the largest and the smallest
            # (the kernels change at thresholds of rows, and every size-by-size probe so far found
            # the sizes that agree to run from 2 up to a limit). Else size by size from 2.
            if len(tail) > 2 and exact(len(tail)) and exact(2):
                return len(tail)
            for m in range(2, len(tail) + 1):  # the sizes below the first that differs
                if not exact(m):
                    break
                limit = m
        finally:
            self.reset()
        return limit

    def close(self) -> None:
        """Free the draft model, the context and the model. Ctrl-C and SIGTERM wait until that is
        done (one arriving between a free and forgetting the pointer would have it freed twice),
        then take effect."""
        with _deferred_signals() as hits:
            self._free()
        if hits:
            _raise_for(hits)

    def _free(self) -> None:
        L = self._L
        draft = getattr(self, "_draft", None)
        if draft is not None:
            draft.close()
            self._draft = None
        if getattr(self, "_spec_batch", None) is not None:
            L.llama_batch_free(self._spec_batch)
            self._spec_batch = None
        if getattr(self, "_ctx", None):
            L.llama_free(self._ctx)
            self._ctx = None
        if getattr(self, "_model", None):
            L.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        """An engine nobody closed (a command returning): freed with signals held, and one that
        came meanwhile is dropped: the command is over, and from a finalizer it could only print
        a traceback."""
        try:
            with _deferred_signals():
                self._free()
        except Exception:
            pass


def _penalty_sampler(L, n_vocab: int, last_n: int, repeat: float):
    """The repetition-penalty sampler; llama.cpp builds differ on whether it takes n_vocab first."""
    try:
        return L.llama_sampler_init_penalties(n_vocab, last_n, repeat, 0.0, 0.0)
    except TypeError:  # the four-argument form of other llama.cpp versions
        return L.llama_sampler_init_penalties(last_n, repeat, 0.0, 0.0)


def _pick(L, ctx, sampler, n_vocab: int, greedy: bool):
    """`pick(i)`: the token sampled from the logits at batch position i (-1: the last).

    A chain that is only llama.cpp's greedy sampler (temperature 0, no grammar, no penalties) picks
    the first highest logit and keeps no state, so an argmax over the logits in place gives the
    same token without the chain's copy of the whole vocabulary into a candidate array: about 10
    us a position against 90 (SmolLM2's 49,152 tokens; five times that for Gemma's 262,144), which
    a verification batch pays at every position."""
    if not greedy:
        return lambda i: L.llama_sampler_sample(sampler, ctx, i)
    import numpy as np

    logits, as_array, shape = L.llama_get_logits_ith, np.ctypeslib.as_array, (n_vocab,)
    return lambda i: int(as_array(logits(ctx, i), shape=shape).argmax())


class _Generation:
    """One request's prefill-then-decode loop, as a generator of events."""

    def __init__(self, engine: LlamaEngine, tokens, params: SamplingParams, seed: int, sampler) -> None:
        self.e = engine
        self.L = engine._L
        self.tokens = tokens
        self.params = params
        self.seed = seed
        self.sampler = sampler
        self.stats = Stats(prompt_tokens=len(tokens), context_size=engine.n_ctx, load_ms=engine.load_ms)
        self.text = TextStream(params.stop)
        self.generated: list[int] = []
        self.piece_buf = ctypes.create_string_buffer(64)
        self.stopped_by_string = False
        self.target_prefill_ms = 0.0  # the target's share of prefill_ms (the draft model's is the rest)
        self.grammar = _GrammarProbe(engine, sampler) if params.grammar else None
        self.ended_by_eog = False
        self.spec = _Speculation(engine, tokens, params) if engine.spec.enabled else None
        # at temperature 0 the chain ends in the greedy sampler: alone, nothing else shapes the pick
        greedy = params.temperature <= 0 and self.L.llama_sampler_chain_n(sampler) == 1
        self.pick = _pick(self.L, engine._ctx, sampler, engine.n_vocab, greedy)

    def run(self) -> Iterator[Event]:
        L, e = self.L, self.e
        self.started = time.perf_counter()
        e.reset_perf()
        reason = yield from self.prefill()
        L.llama_synchronize(e._ctx)
        self.stats.prefill_ms = self.target_prefill_ms = e.perf_ms()
        if reason is None and self.spec is not None:
            reason = self.spec.prefill_draft()
            self.stats.prefill_ms += self.spec.draft_prefill_ms
        if reason is None:
            reason = yield from (self.decode_loop() if self.spec is None else self.decode_loop_spec())
        yield from self.finish(reason)

    def prefill(self) -> Generator[Event, None, FinishReason | None]:
        """Evaluate the prompt past the reused prefix in n_batch batches; returns None when done."""
        e, stats = self.e, self.stats
        start = e._reuse_prefix(self.tokens)
        stats.cached_tokens = start
        todo = self.tokens[start:]
        stats.prefill_tokens = len(todo)
        done = 0
        yield PrefillProgress(0, len(todo), 0.0)
        if e.adaptive and len(todo) > 1 and (changed := e._observe("prefill", None)):
            yield ThreadsChanged("prefill", *changed)
        for i in range(0, len(todo), e.n_batch):
            chunk = todo[i : i + e.n_batch]
            started = time.perf_counter()
            rc = e.decode(chunk)
            if rc == 0 and e.adaptive and len(chunk) >= MIN_PREFILL_SAMPLE:
                changed = e._observe("prefill", (time.perf_counter() - started) / len(chunk))
                if changed:
                    yield ThreadsChanged("prefill", *changed)
            if rc == 2 or e._abort.is_set():
                e._sync_cache()
                stats.prefill_tokens = max(0, len(e._cached) - start)
                return "interrupted"
            _check_decode(rc, len(e._cached), e.n_ctx)
            done += len(chunk)
            yield PrefillProgress(done, len(todo), (time.perf_counter() - self.started) * 1000)
        return None

    def decode_loop(self) -> Generator[Event, None, FinishReason]:
        L, e, params = self.L, self.e, self.params
        vocab = e._vocab
        max_tokens = params.max_tokens or 1 << 62
        adaptive = e.adaptive
        pick = self.pick
        while True:
            token = pick(-1)
            self.generated.append(token)
            if len(self.generated) == 1:
                self.stats.ttft_ms = (time.perf_counter() - self.started) * 1000
            stopped = self.ended_by_eog = bool(L.llama_vocab_is_eog(vocab, token))
            if not stopped:
                text, stopped = self.text.feed(e.token_bytes(token, self.piece_buf))
                self.stopped_by_string = stopped
                if self.grammar is not None:
                    self.grammar.note(self.text.decoded_chars, pending_bytes=self.text.mid_character)
                yield Token(text, len(self.generated))
            if len(e._cached) >= e.n_ctx:
                return "stop" if stopped else "length"
            started = time.perf_counter()
            rc = e.decode([token])
            if rc == 2 or e._abort.is_set():
                e._sync_cache()
                return "interrupted"
            _check_decode(rc, len(e._cached), e.n_ctx)
            if adaptive and (changed := e._observe("decode", time.perf_counter() - started)):
                yield ThreadsChanged("decode", *changed)
            if stopped:
                return "stop"
            if len(self.generated) >= max_tokens:
                return "length"

    def _take(self, token: int) -> Generator[Event, None, bool]:
        """One generated token through the plain loop's per-token steps (the same order and checks,
        so speculation changes nothing the user sees): record it, end on EOG, feed the text path,
        note the grammar; yields its Token and returns whether it ended the answer."""
        L, e, spec = self.L, self.e, self.spec
        self.generated.append(token)
        if len(self.generated) == 1:
            self.stats.ttft_ms = (time.perf_counter() - self.started) * 1000
        stopped = self.ended_by_eog = bool(L.llama_vocab_is_eog(e._vocab, token))
        if spec is not None:
            spec.seen(token)
        if not stopped:
            text, stopped = self.text.feed(e.token_bytes(token, self.piece_buf))
            self.stopped_by_string = stopped
            if self.grammar is not None:
                self.grammar.note(self.text.decoded_chars, pending_bytes=self.text.mid_character)
            if spec is not None:
                yield Token(text, len(self.generated), spec.drafted, spec.accepted, spec.passes)
            else:
                yield Token(text, len(self.generated))
        return stopped

    def decode_loop_spec(self) -> Generator[Event, None, FinishReason]:
        """Decode with proposals verified in batches. Invariant at the top of the loop: `pending` is
        the newest sampled token, and the cache holds everything before it.

        Each batch is [pending, d1..dk]. Position i's logits are sampled with the whole chain (so
        grammar, penalties and the random state advance exactly as in plain decoding); d(i+1) is
        kept while it equals that sample, and the first sample that differs (or the one after the
        last draft) becomes the next `pending`. Rejected positions leave the cache (and the draft
        model's, at its next proposal). The answer's end (EOG, a stop string, --max-tokens, a full
        context) is checked after every token exactly as the plain loop does, leaving the cache as
        the plain loop would; Ctrl-C after a batch keeps every token it accepted."""
        e, params, spec = self.e, self.params, self.spec
        assert spec is not None
        max_tokens = params.max_tokens or 1 << 62
        adaptive = e.adaptive
        pick = self.pick
        e.pin_batch_threads()
        pending = pick(-1)
        while True:
            stopped = yield from self._take(pending)
            n = len(e._cached)  # where `pending` goes
            if n >= e.n_ctx:
                return "stop" if stopped else "length"
            room = min(max_tokens - len(self.generated), e.n_ctx - n) - 1  # drafts that could be used
            draft = [] if stopped or room <= 0 else spec.propose(room)
            started = time.perf_counter()
            if not draft:
                rc = e.decode([pending])
                if rc == 2 or e._abort.is_set():
                    e._sync_cache()
                    return "interrupted"
                _check_decode(rc, len(e._cached), e.n_ctx)
                elapsed = time.perf_counter() - started
                spec.measured(1, elapsed)
                if adaptive and (changed := e._observe("decode", elapsed)):  # plain steps only
                    yield ThreadsChanged("decode", *changed)
                    e.pin_batch_threads()
                    spec.threads_changed()
                if stopped:
                    return "stop"
                if len(self.generated) >= max_tokens:
                    return "length"
                pending = pick(-1)
                continue
            rc = e.decode_all([pending, *draft])
            if rc == 2:
                e._sync_cache()
                e.trim(n + 1)
                return "interrupted"
            _check_decode(rc, len(e._cached), e.n_ctx)
            spec.measured(len(draft) + 1, time.perf_counter() - started)
            spec.drafted += len(draft)
            accepted = 0
            end: FinishReason | None = None
            for i, proposed in enumerate(draft):
                sample = pick(i)
                if sample != proposed:
                    pending = sample
                    break
                accepted += 1
                spec.accepted += 1
                stopped = yield from self._take(sample)
                if n + 1 + i >= e.n_ctx:  # the plain loop would not have evaluated this token
                    e.trim(n + 1 + i)
                    end = "stop" if stopped else "length"
                elif stopped:
                    end = "stop"
                elif len(self.generated) >= max_tokens:
                    end = "length"
                if end is not None:
                    break
            else:
                pending = pick(len(draft))
            spec.verified(len(draft), accepted)
            if end is not None:
                e.trim(n + 1 + accepted)
                return end
            e.trim(n + 1 + accepted)
            if e._abort.is_set():
                return "interrupted"

    def finish(self, reason: FinishReason) -> Iterator[Event]:
        if tail := self.text.finish(self.stopped_by_string):  # held back, never became a stop string
            yield Token(tail, len(self.generated))
        L, e, stats = self.L, self.e, self.stats
        L.llama_synchronize(e._ctx)
        stats.completion_tokens = len(self.generated)
        stats.decode_tokens = max(0, len(e._cached) - stats.cached_tokens - stats.prefill_tokens)
        stats.decode_ms = max(0.0, e.perf_ms() - self.target_prefill_ms)
        stats.total_ms = (time.perf_counter() - self.started) * 1000
        stats.context_used = len(e._cached)
        stats.threads = e.thread_report()
        if self.spec is not None:
            stats.decode_ms += self.spec.draft_ms() - self.spec.draft_prefill_ms
            self.spec.report(stats)
        text = self.text.text
        complete = None
        if self.grammar is not None:  # EOG is sampled only where the grammar accepts
            complete = self.ended_by_eog or self.grammar.accepted_at(len(text))
        yield Done(text, reason, stats, self.seed, list(self.generated), complete)


class _GrammarProbe:
    """Where the grammar sampler accepted: after each token, whether it would let an
    end-of-generation token through now (it does so only when the root rule is complete).

    The sampler's own state answers this for GBNF and JSON schemas alike, with the exact grammar
    llama.cpp enforced; a re-parse would need a second parser per kind and could disagree. It is
    asked with a one-candidate array, which `llama_sampler_apply` masks without changing state.
    Offsets are characters of the decoded text at token boundaries, so a text cut by a stop string
    (or inside a multi-byte character) is complete only when it ends exactly where the grammar
    accepted."""

    def __init__(self, engine: LlamaEngine, chain) -> None:
        L = self.L = engine._L
        self.sampler = L.llama_sampler_chain_get(chain, 0)  # the grammar comes first in the chain
        eog = L.llama_vocab_eos(engine._vocab)
        self.eog = eog if eog >= 0 else L.llama_vocab_eot(engine._vocab)
        self.data = (L.llama_token_data * 1)()
        self.array = L.llama_token_data_array(
            data=ctypes.cast(self.data, ctypes.POINTER(L.llama_token_data)), size=1, selected=-1, sorted=False
        )
        self.points: set[int] = set()
        self.note(0, pending_bytes=False)

    def note(self, chars: int, *, pending_bytes: bool) -> None:
        if not pending_bytes and self.eog >= 0 and self._accepts_eog():
            self.points.add(chars)

    def _accepts_eog(self) -> bool:
        self.data[0].id, self.data[0].logit, self.data[0].p = self.eog, 0.0, 0.0
        self.array.size, self.array.selected = 1, -1
        self.L.llama_sampler_apply(self.sampler, ctypes.byref(self.array))
        return self.data[0].logit != float("-inf")

    def accepted_at(self, chars: int) -> bool:
        return chars in self.points


def _check_decode(rc: int, used: int, n_ctx: int) -> None:
    if rc == 1:
        raise ContextOverflowError(f"no room left in the KV cache ({used} of {n_ctx} tokens used)")
    if rc != 0:
        raise LlmcliError(
            f"llama_decode failed with status {rc}", hint="run with --debug for llama.cpp's log"
        )


def _quant_name(file_type: str | None) -> str:
    from llmcli.gguf_file import FILE_TYPE_NAMES  # the one llama_ftype table

    try:
        return FILE_TYPE_NAMES.get(int(file_type), f"type {file_type}") if file_type else "unknown"
    except ValueError:
        return "unknown"


def set_attention(L, params, opts: EngineOptions) -> None:
    """Flash attention and the KV cache types of `opts` into llama.cpp's context parameters."""
    params.flash_attn_type = {
        None: L.LLAMA_FLASH_ATTN_TYPE_AUTO,
        True: L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
        False: L.LLAMA_FLASH_ATTN_TYPE_DISABLED,
    }[opts.flash_attn]
    for field, name in (("type_k", opts.type_k), ("type_v", opts.type_v)):
        if name:
            setattr(params, field, ggml_type(L, name))


# ggml's type numbers for the KV cache types (ggml.h's `enum ggml_type`, fixed by the GGUF format),
# for those the binding does not export: llama-cpp-python 0.3.36 has no GGML_TYPE_BF16
GGML_KV_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20,
                 "bf16": 30}  # fmt: skip


def ggml_type(L, name: str) -> int:
    value = getattr(L, f"GGML_TYPE_{name.upper()}", None)
    if value is None:
        value = GGML_KV_TYPES.get(name.lower())
    if value is None:
        raise UsageError(f"unknown KV cache type {name!r} (one of {', '.join(GGML_KV_TYPES)})")
    return value


def _read_costs(path: Path) -> dict[int, tuple[float, float]]:
    """A stored batch-costs file: positions -> (cost relative to one step, batches it stands for);
    empty when there is none or it cannot be read."""
    import json

    try:
        return {int(n): (float(r), float(w)) for n, (r, w) in json.loads(path.read_text())["costs"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


class _Speculation:
    """One request's speculative decoding: the proposer (prompt lookup or the draft model), the
    adaptive k policy, and the counts the readout and the record show."""

    def __init__(self, engine: LlamaEngine, prompt: list[int], params: SamplingParams | None = None) -> None:
        from llmcli.engine.spec import NgramProposer

        self.e = engine
        opts = engine.spec
        self.history = list(prompt)  # prompt and answer so far, the newest sampled token last
        self.n_prompt = len(prompt)
        # the target's repetition penalty, which the draft model applies too: a draft that proposes
        # what the target would pick without it is rejected wherever the penalty decides
        self.penalty: tuple[float, int] | None = None
        if params is not None and params.repeat_penalty != 1.0 and params.repeat_last_n > 0:
            self.penalty = (params.repeat_penalty, params.repeat_last_n)
        policy = engine._k_policy
        if policy is None:  # kept across requests: batch costs are the machine's
            policy = KPolicy(k_max=opts.draft_max, k_min=max(1, opts.draft_min), adaptive=opts.adaptive)
            engine._k_policy = policy
        if opts.adaptive:  # what this and earlier runs measured, read again for each request
            policy.stored = engine.stored_batch_costs(engine.threads)
            policy.stored_threads = engine.threads
        self.policy: KPolicy = policy
        self.policy.chosen = {}
        self.policy.shadows = []
        self.lookup = NgramProposer(opts.ngram_max, opts.ngram_min) if opts.kind == "lookup" else None
        if self.lookup is not None:
            self.lookup.extend(prompt)
        self.draft = engine._draft
        self.source: object = None
        self.tail: list[int] = []  # the proposed tokens past the chosen k
        self.drafted = self.accepted = self.passes = 0
        self.exact_blocked = 0  # steps at which --spec-exact allowed no batch at this context length
        self.draft_ctx_blocked = 0  # steps at which the draft model's context could not hold the history
        self.draft_prefill_ms = 0.0
        self.draft_token_s = 0.0  # measured seconds the draft model spends per proposed token

    def prefill_draft(self) -> FinishReason | None:
        """Evaluate the prompt in the draft model too (counted as prefill). Not where this answer
        can never draft: --spec-exact allows no batch past the short-context limit at any thread
        count the engine may choose, and the context only grows from here; nor where the draft
        model's context cannot hold the prompt (both are counted as blocked steps when decoding)."""
        if self.draft is None:
            return None
        if not self.draft_can_run():
            return None
        # the whole prompt, in the target's chunks: a target used as its own draft then holds
        # bit-identical keys and values (a chunk of another shape would round apart)
        ok = self.draft.sync(self.history)
        self.draft_prefill_ms = self.draft_ms()
        return None if ok or not self.e._abort.is_set() else "interrupted"

    def draft_can_run(self) -> bool:
        """Whether the draft model could still propose in this answer."""
        assert self.draft is not None
        if len(self.history) + self.policy.k_min > self.draft.n_ctx:
            return False
        e = self.e
        if not e.spec.exact or len(e._cached) < e.EXACT_SHORT_CELLS:
            return True
        return any(long > self.policy.k_min for _, long in e._exact_by_threads.values())

    def draft_ms(self) -> float:
        """The draft model's evaluation time so far (llama.cpp adds to its counters only when it
        synchronizes, which a batch with no logits read yet has not done)."""
        if self.draft is None:
            return 0.0
        self.draft.L.llama_synchronize(self.draft.ctx)
        return self.draft.perf_ms()

    def seen(self, token: int) -> None:
        self.history.append(token)
        if self.lookup is not None:
            self.lookup.append(token)
        self.policy.emitted(token)

    def propose(self, room: int) -> list[int]:
        policy = self.policy
        exact_top = self.e.exact_limit(len(self.e._cached)) - 1
        top = min(policy.k_max, room, exact_top)
        if top < policy.k_min:
            self.exact_blocked += exact_top < policy.k_min <= room
            return []
        if self.lookup is not None:
            tokens, n = self.lookup.propose(top)
            if not tokens:
                return []
            self.source = ("lookup", n)
            k = policy.choose(self.source, len(tokens), watched=True)
            policy.note_choice(k)
            if k == 0:
                policy.watch(self.source, tokens)
            self.tail = tokens[k:] if k else []  # checked after the batch if all k are accepted
            return tokens[:k]
        assert self.draft is not None
        room_draft = self.draft.n_ctx - len(self.history)  # -cd: what the draft's cache can hold
        if room_draft < policy.k_min:
            self.draft_ctx_blocked += 1
            return []
        top = min(top, room_draft)
        self.source = "draft"
        k = policy.choose(self.source, top, self.draft_token_s)
        policy.note_choice(k)
        if k == 0:
            return []
        started = time.perf_counter()
        window: list[int] | None = None
        if self.penalty is not None:  # the target's penalty sampler has seen the answer's tokens only
            window = self.history[self.n_prompt :][-self.penalty[1] :]
        tokens = self.draft.propose(self.history, k, self.e.threads, self.penalty, window)
        if tokens:
            per_token = (time.perf_counter() - started) / len(tokens)
            old = self.draft_token_s
            self.draft_token_s = per_token if old == 0 else 0.8 * old + 0.2 * per_token
        return tokens

    def measured(self, positions: int, seconds: float) -> None:
        self.passes += 1
        self.policy.observe_batch(positions, seconds)

    def verified(self, drafted: int, accepted: int) -> None:
        self.policy.observe_draft(self.source, drafted, accepted)
        if accepted == drafted and self.tail:  # the undrafted rest meets the tokens that follow
            self.policy.watch(self.source, self.tail, offset=drafted)
        self.tail = []

    def threads_changed(self) -> None:
        """Batch costs measured at the old thread count no longer hold."""
        self.remember()  # what was measured at the old count is kept for it
        self.policy.reset_costs(self.e.stored_batch_costs(self.e.threads) if self.policy.adaptive else None)
        self.policy.stored_threads = self.e.threads

    def remember(self) -> None:
        """Store what this request measured, for the thread count it was measured at."""
        if self.policy.adaptive and self.policy.stored_threads:
            self.e.store_batch_costs(self.policy.stored_threads, self.policy.remember())

    def report(self, stats: Stats) -> None:
        stats.drafted_tokens, stats.accepted_tokens = self.drafted, self.accepted
        stats.target_passes = self.passes
        stats.speculative = {**self.e.spec_report(), **self.policy.summary()}
        stats.speculative["exact_blocked"] = self.exact_blocked
        if self.draft is not None:
            stats.speculative["draft_ctx_blocked"] = self.draft_ctx_blocked
        self.remember()


class _DraftModel:
    """The draft model: a second model and context (same vocabulary, checked before loading) that
    proposes tokens greedily. Its cache follows the target's history by prefix reuse: rejected
    proposals are dropped at the next proposal, missing tokens evaluated in one batch."""

    def __init__(self, target: LlamaEngine, hits: list[int]) -> None:
        L = self.L = target._L
        opts = target.spec
        self.path = Path(str(opts.model_draft))
        params = L.llama_model_default_params()
        params.use_extra_bufts = target.repack
        gpu = opts.gpu_layers_draft
        all_layers = 999 if L.llama_supports_gpu_offload() else 0
        params.n_gpu_layers = all_layers if gpu is None or gpu < 0 else gpu
        progress = L.llama_progress_callback(lambda value, data: not hits)
        params.progress_callback = progress
        self.model = L.llama_model_load_from_file(str(self.path).encode(), params)
        self.ctx = None
        if not self.model:
            target.close()
            if hits:
                _raise_for(hits)
            raise InvalidModelError(f"llama.cpp could not load the draft model {self.path}",
                                    hint="run with --debug for llama.cpp's log")  # fmt: skip
        self.vocab = L.llama_model_get_vocab(self.model)
        cparams = L.llama_context_default_params()
        n_ctx = opts.ctx_size_draft or target.n_ctx
        cparams.n_ctx = max(256, -(-n_ctx // 256) * 256)
        cparams.n_batch = min(target.options.batch_size, cparams.n_ctx)
        cparams.n_ubatch = min(L.llama_n_ubatch(target._ctx), cparams.n_batch)
        cparams.n_threads = cparams.n_threads_batch = target.threads
        cparams.no_perf = False
        cparams.n_outputs_max = opts.draft_max + 1  # as the target's: the same graphs, the same numerics
        cparams.swa_full = True
        # the target's attention and KV cache types: a draft that rounds as the target does proposes
        # what the target samples (a self-draft on a q8_0 cache: 93-98% accepted with the draft's
        # cache left at f16, llama.cpp's default for it)
        # (-ctkd/-ctvd set them apart, as llama.cpp's tools do)
        set_attention(L, cparams, target.options)
        self.type_k, self.type_v = target.options.draft_cache_types()
        cparams.type_k, cparams.type_v = ggml_type(L, self.type_k), ggml_type(L, self.type_v)
        self.ctx = L.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            L.llama_model_free(self.model)
            self.model = None
            target.close()
            raise LlmcliError(f"llama.cpp could not create the draft model's context of {n_ctx} tokens",
                              hint="try a smaller -cd/--ctx-size-draft")  # fmt: skip
        self.n_ctx = L.llama_n_ctx(self.ctx)
        self.n_batch = L.llama_n_batch(self.ctx)
        self.threads = target.threads
        L.llama_set_abort_callback(self.ctx, target._abort.callback, target._abort.data)
        self.sampler = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        L.llama_sampler_chain_add(self.sampler, L.llama_sampler_init_greedy())
        self.pick = _pick(L, self.ctx, self.sampler, L.llama_vocab_n_tokens(self.vocab), greedy=True)
        self.n_vocab_target = target.n_vocab
        self._cached: list[int] = []
        self._penalised: tuple[tuple[float, int], object] | None = None  # (setting, sampler chain)

    def reset(self) -> None:
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)
        self._cached = []

    def reset_perf(self) -> None:
        self.L.llama_perf_context_reset(self.ctx)

    def perf_ms(self) -> float:
        data = self.L.llama_perf_context(self.ctx)
        return data.t_p_eval_ms + data.t_eval_ms

    def _decode(self, tokens: list[int]) -> bool:
        L = self.L
        arr = (L.llama_token * len(tokens))(*tokens)
        rc = L.llama_decode(self.ctx, L.llama_batch_get_one(arr, len(tokens)))
        if rc == 0:
            self._cached.extend(tokens)
            return True
        self._resync()
        return False

    def _resync(self) -> None:
        mem = self.L.llama_get_memory(self.ctx)
        in_cache = self.L.llama_memory_seq_pos_max(mem, 0) + 1
        if in_cache < len(self._cached):
            del self._cached[in_cache:]
        elif in_cache > len(self._cached) and not self.L.llama_memory_seq_rm(mem, 0, len(self._cached), -1):
            self.L.llama_memory_clear(mem, True)
            self._cached = []

    def sync(self, tokens: list[int]) -> bool:
        """Make the cache hold exactly `tokens` (at least one evaluated now, for fresh logits)."""
        L = self.L
        if len(tokens) > self.n_ctx or not tokens:
            return False
        common, cached = 0, self._cached
        limit = min(len(cached), len(tokens) - 1)
        while common < limit and cached[common] == tokens[common]:
            common += 1
        if common < len(cached):
            mem = L.llama_get_memory(self.ctx)
            if not L.llama_memory_seq_rm(mem, 0, common, -1):
                L.llama_memory_clear(mem, True)
                common = 0
            del cached[common:]
        for i in range(common, len(tokens), self.n_batch):
            if not self._decode(tokens[i : i + self.n_batch]):
                return False
        return True

    def propose(
        self, history: list[int], k: int, threads: int, penalty: tuple[float, int] | None = None,
        window: list[int] | None = None,
    ) -> list[int]:  # fmt: skip
        """Up to `k` greedy tokens after `history`; stops after an end-of-generation token. With
        `penalty` (the target's repeat penalty and window), the pick is llama.cpp's penalty sampler
        then greedy, primed with the tokens in `window`, as the target's chain has seen them."""
        L = self.L
        if threads != self.threads:
            L.llama_set_n_threads(self.ctx, threads, threads)
            self.threads = threads
        if len(history) + k > self.n_ctx or not self.sync(history):
            return []
        out: list[int] = []
        pick = self.pick if penalty is None else self._penalised_pick(penalty, window or [])
        while True:
            token = pick(-1)
            if token >= self.n_vocab_target:  # a token the target's vocabulary does not have
                break
            out.append(token)
            if len(out) >= k or L.llama_vocab_is_eog(self.vocab, token):
                break
            if not self._decode([token]):
                break
        return out

    def _penalised_pick(self, penalty: tuple[float, int], window: list[int]):
        """A pick through a chain of llama.cpp's penalty sampler and greedy (made once per setting),
        reset and fed `window`; each pick is then accepted into it, as a proposal goes on."""
        L = self.L
        if self._penalised is None or self._penalised[0] != penalty:
            self._free_penalised()
            chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
            repeat, last_n = penalty
            n_vocab = L.llama_vocab_n_tokens(self.vocab)
            L.llama_sampler_chain_add(chain, _penalty_sampler(L, n_vocab, last_n, repeat))
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_greedy())
            self._penalised = (penalty, chain)
        chain = self._penalised[1]
        L.llama_sampler_reset(chain)
        for token in window:
            L.llama_sampler_accept(chain, token)
        return lambda i: L.llama_sampler_sample(chain, self.ctx, i)  # accepts what it picks

    def _free_penalised(self) -> None:
        if (made := getattr(self, "_penalised", None)) is not None:
            self.L.llama_sampler_free(made[1])
        self._penalised = None

    def close(self) -> None:
        L = self.L
        self._free_penalised()
        if getattr(self, "sampler", None):
            L.llama_sampler_free(self.sampler)
            self.sampler = None
        if self.ctx:
            L.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            L.llama_model_free(self.model)
            self.model = None


SPEC_VOCAB_MAX_DIFFERENCE = 128  # as llama.cpp: padding rows a draft and target may differ by


def check_draft_vocab(L, target: Path, draft: Path) -> None:
    """Refuse a draft model whose vocabulary is not the target's, before either model's weights
    load (both vocabularies are read alone): naming both files and the first difference."""
    from llmcli.errors import UsageError

    def load(path: Path):
        params = L.llama_model_default_params()
        params.vocab_only = True
        params.n_gpu_layers = 0
        model = L.llama_model_load_from_file(str(path).encode(), params)
        if not model:
            raise InvalidModelError(f"llama.cpp could not read the vocabulary of {path}")
        return model

    m_t = load(target)
    try:
        m_d = load(draft)
    except BaseException:
        L.llama_model_free(m_t)
        raise
    try:
        problem = vocab_difference(L, L.llama_model_get_vocab(m_d), L.llama_model_get_vocab(m_t),
                                   draft.name, target.name)  # fmt: skip
    finally:
        L.llama_model_free(m_d)
        L.llama_model_free(m_t)
    if problem:
        raise UsageError(
            f"the draft model {draft.name} does not share the vocabulary of {target.name}: {problem}",
            hint="-md/--model-draft needs a model with the same tokenizer (usually the same family)",
        )


def vocab_difference(L, vd, vt, d: str = "the draft", t: str = "the target") -> str | None:
    """Where the draft vocabulary `vd` differs from the target's `vt` (named `d` and `t`); None
    when a draft from one may be verified by the other."""
    names = {0: "none", 1: "SPM", 2: "BPE", 3: "WPM", 4: "UGM", 5: "RWKV", 6: "PLaMo-2"}
    td, tt = L.llama_vocab_type(vd), L.llama_vocab_type(vt)
    if tt != td:
        return f"its tokenizer is {names.get(td, td)}, {t}'s is {names.get(tt, tt)}"
    nd, nt = L.llama_vocab_n_tokens(vd), L.llama_vocab_n_tokens(vt)
    if abs(nt - nd) > SPEC_VOCAB_MAX_DIFFERENCE:
        return f"{d} has {nd} tokens, {t} {nt}"
    for what, fn in (("BOS", L.llama_vocab_bos), ("EOS", L.llama_vocab_eos), ("EOT", L.llama_vocab_eot)):
        if fn(vt) != fn(vd):
            return f"the {what} token is {fn(vd)} in {d}, {fn(vt)} in {t}"
    if bool(L.llama_vocab_get_add_bos(vt)) != bool(L.llama_vocab_get_add_bos(vd)):
        return f"{d} and {t} disagree on adding a BOS token"
    for i in range(min(nt, nd)):
        a, b = L.llama_vocab_get_text(vd, i), L.llama_vocab_get_text(vt, i)
        if a != b:
            show = lambda raw: (raw or b"").decode("utf-8", "replace")  # noqa: E731
            return f"token {i} is {show(a)!r} in {d}, {show(b)!r} in {t}"
    return None
