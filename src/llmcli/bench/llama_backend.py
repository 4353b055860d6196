"""The benchmark backend on llama.cpp's low-level API (the same calls llama-bench makes).

Model parameters and context parameters start from llama.cpp's defaults, as llama-bench's do, with
only the swept settings changed. The timed loop is a handful of ctypes calls per batch or token:
`llama_decode` on a prebuilt `llama_batch_get_one` batch, then `llama_synchronize`.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmcli.bench import load
from llmcli.bench.results import ModelSummary
from llmcli.bench.runner import Interrupted
from llmcli.bench.sweep import ContextSpec, TestSpec
from llmcli.bench.traffic import weight_bytes_per_token
from llmcli.errors import InvalidModelError, LlmcliError


class LlamaBackend:
    """Loads models and creates contexts; `interrupt()` aborts the decode in progress from any thread."""

    def __init__(self, debug: bool = False) -> None:
        import llama_cpp

        from llmcli.engine.llama import silence_logs

        self.L = llama_cpp
        self.debug = debug
        if not debug:
            silence_logs(llama_cpp)
        llama_cpp.llama_backend_init()
        self.clock = time.perf_counter_ns
        self.live: list[Any] = []  # contexts and chat engines that interrupt() must reach

    def environment(self) -> dict[str, Any]:
        from llmcli.bench.environment import collect

        return collect()

    def inspect(self, path: str, ref: str) -> ModelSummary:
        """Validate the GGUF header (before llama.cpp sees the file) and summarise the model."""
        from llmcli import gguf_file

        header = gguf_file.read_header(path)
        return ModelSummary(
            ref=ref,
            path=str(path),
            filename=Path(path).name,
            file_size=header.file_size,
            model_size=header.tensor_bytes,
            n_params=header.n_params,
            architecture=header.architecture,
            quantization=header.quantization,
            size_label=header.size_label,
            n_layers=header.n_layers or 0,
            n_ctx_train=header.n_ctx_train or 0,
            weight_bytes_per_token=weight_bytes_per_token(header),
        )

    def load(self, model: ModelSummary, n_gpu_layers: int) -> LlamaModel:
        return LlamaModel(self, model, n_gpu_layers)

    def chat_engine(self, model: ModelSummary, options: Any) -> Any:
        from llmcli.engine.llama import LlamaEngine

        engine = LlamaEngine(model.path, options, debug=self.debug)
        self.live.append(engine)
        return engine

    def release(self, thing: Any) -> None:
        if thing in self.live:
            self.live.remove(thing)

    def interrupt(self) -> None:
        for thing in list(self.live):
            thing.interrupt()

    def load_snapshot(self) -> Any:
        return load.snapshot()

    def other_load(self, before: Any, after: Any) -> float | None:
        return load.other_share(before, after)


class LlamaModel:
    """One loaded model (per model file and GPU layer count)."""

    def __init__(self, backend: LlamaBackend, summary: ModelSummary, n_gpu_layers: int) -> None:
        L = self.L = backend.L
        self.backend = backend
        params = L.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        self.model = L.llama_model_load_from_file(summary.path.encode(), params)
        if not self.model:
            raise InvalidModelError(
                f"llama.cpp could not load {summary.path}",
                hint="the architecture may be unsupported by this llama.cpp build; run with --debug",
            )
        vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(vocab)
        self.bos = L.llama_vocab_bos(vocab) if L.llama_vocab_get_add_bos(vocab) else None
        n_layers = L.llama_model_n_layer(self.model)
        offload = L.llama_supports_gpu_offload()
        self.gpu_layers_offloaded = max(0, min(n_gpu_layers, n_layers + 1)) if offload else 0

    def new_context(self, spec: ContextSpec, n_ctx: int) -> LlamaContext:
        return LlamaContext(self, spec, n_ctx)

    def close(self) -> None:
        if self.model:
            self.L.llama_model_free(self.model)
            self.model = None


@dataclass
class Prepared:
    """Batches built before the clock starts; the arrays are kept alive alongside their batches."""

    prompt: list[tuple[Any, Any]] = field(default_factory=list)
    gen: list[tuple[Any, Any]] = field(default_factory=list)
    n_tokens: int = 0


class LlamaContext:
    """A llama.cpp context and its KV cache, positioned token by token as the runner asks."""

    def __init__(self, model: LlamaModel, spec: ContextSpec, n_ctx: int) -> None:
        from llmcli.engine.llama import AbortFlag

        L = self.L = model.L
        self.model = model
        self.ctx = L.llama_init_from_model(model.model, self._params(spec, n_ctx))
        if not self.ctx:
            raise LlmcliError(
                f"llama.cpp could not create a context of {n_ctx} tokens (threads {spec.n_threads}, batch "
                f"{spec.n_batch}, flash attention {spec.flash_attn_label}, KV {spec.type_k}/{spec.type_v})",
                hint="run with --debug for llama.cpp's reason",
            )
        self.abort = AbortFlag(L)
        L.llama_set_abort_callback(self.ctx, self.abort.callback, self.abort.data)
        self.mem = L.llama_get_memory(self.ctx)
        self.n_batch = min(spec.n_batch, L.llama_n_batch(self.ctx))
        self.n_cached = 0
        L.llama_memory_clear(self.mem, False)
        model.backend.live.append(self)

    def _params(self, spec: ContextSpec, n_ctx: int):
        from llmcli.engine.llama import ggml_type

        L = self.L
        params = L.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = spec.n_batch
        params.n_ubatch = spec.n_ubatch
        params.n_threads = spec.n_threads
        params.n_threads_batch = spec.n_threads
        params.flash_attn_type = {
            None: L.LLAMA_FLASH_ATTN_TYPE_AUTO,
            True: L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
            False: L.LLAMA_FLASH_ATTN_TYPE_DISABLED,
        }[spec.flash_attn]
        params.type_k = ggml_type(L, spec.type_k)
        params.type_v = ggml_type(L, spec.type_v)
        return params

    def interrupt(self) -> None:
        self.abort.set()

    # -- KV cache position -----------------------------------------------------------------

    def set_depth(self, depth: int, rng: random.Random) -> None:
        """Trim the cache to `depth` tokens with llama_memory_seq_rm, or fill it up to `depth` (untimed)."""
        L = self.L
        if self.n_cached > depth and not (depth > 0 and L.llama_memory_seq_rm(self.mem, 0, depth, -1)):
            L.llama_memory_clear(self.mem, False)
            self.n_cached = 0
        self.n_cached = min(self.n_cached, depth)
        if self.n_cached < depth:
            self.run(Prepared(prompt=self._batches(self._tokens(depth - self.n_cached, rng, self.n_cached)),
                              n_tokens=depth - self.n_cached))  # fmt: skip

    def prepare(self, test: TestSpec, rng: random.Random) -> Prepared:
        start = self.n_cached
        prompt = self._batches(self._tokens(test.n_prompt, rng, start))
        gen = [self._batch([t]) for t in self._tokens(test.n_gen, rng, start + test.n_prompt)]
        return Prepared(prompt, gen, test.n_tokens)

    def _tokens(self, n: int, rng: random.Random, position: int) -> list[int]:
        """Random token ids, as llama-bench draws them; BOS first when the sequence starts here."""
        tokens = [rng.randrange(self.model.n_vocab) for _ in range(n)]
        if tokens and position == 0 and self.model.bos is not None:
            tokens[0] = self.model.bos
        return tokens

    def _batches(self, tokens: list[int]) -> list[tuple[Any, Any]]:
        return [self._batch(tokens[i : i + self.n_batch]) for i in range(0, len(tokens), self.n_batch)]

    def _batch(self, tokens: list[int]) -> tuple[Any, Any]:
        array = (self.L.llama_token * len(tokens))(*tokens)
        return array, self.L.llama_batch_get_one(array, len(tokens))

    # -- the timed part --------------------------------------------------------------------

    def run(self, prepared: Prepared) -> None:
        decode, sync, ctx = self.L.llama_decode, self.L.llama_synchronize, self.ctx
        for _, batch in prepared.prompt:
            rc = decode(ctx, batch)
            if rc:
                self._failed(rc)
        if prepared.prompt:
            sync(ctx)
        for _, batch in prepared.gen:
            rc = decode(ctx, batch)
            if rc:
                self._failed(rc)
            sync(ctx)
        self.n_cached += prepared.n_tokens

    def _failed(self, rc: int) -> None:
        if rc == 2 or self.abort.is_set():
            raise Interrupted
        raise LlmcliError(
            f"llama_decode failed with status {rc} ({self.n_cached} tokens in the cache)",
            hint="run with --debug for llama.cpp's log",
        )

    def close(self) -> None:
        self.model.backend.release(self)
        if self.ctx:
            self.L.llama_free(self.ctx)
            self.ctx = None
