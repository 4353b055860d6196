"""The benchmark backend on the engine's measuring surface (`llmcli.engine.measure`).

Model parameters and context parameters start from llama.cpp's defaults, as llama-bench's do, with
only the swept settings changed. The timed loop is a handful of calls per batch or token, each one
ctypes call: `decode` (`llama_decode`) of a prebuilt `llama_batch_get_one` batch, then `synchronize`
(`llama_synchronize`). Nothing here imports llama_cpp.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmcli.bench.results import ModelSummary
from llmcli.bench.runner import Interrupted
from llmcli.bench.sweep import ContextSpec, TestSpec
from llmcli.bench.traffic import weight_bytes_per_token
from llmcli.engine import cpu_load as load
from llmcli.errors import LlmcliError


class LlamaBackend:
    """Loads models and creates contexts; `interrupt()` aborts the decode in progress from any thread."""

    def __init__(self, debug: bool = False) -> None:
        from llmcli.engine import measure

        self.debug = debug
        measure.init(debug)
        self.clock = time.perf_counter_ns
        self.live: list[Any] = []  # contexts and chat engines that interrupt() must reach

    def environment(self) -> dict[str, Any]:
        from llmcli.bench.machine import collect

        return collect()

    def inspect(self, path: str, ref: str) -> ModelSummary:
        """Validate the GGUF header (before llama.cpp sees the file) and summarise the model."""
        from llmcli import gguf_file
        from llmcli.errors import InvalidModelError

        try:
            header = gguf_file.read_header(path)
        except InvalidModelError as exc:  # name the file, as generate does
            raise exc.about(str(path)) from None
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
            pooling=header.pooling,
        )

    def load(self, model: ModelSummary, n_gpu_layers: int, repack: bool | None = None) -> LlamaModel:
        return LlamaModel(self, model, n_gpu_layers, repack)

    def weight_repack(self, requested: bool | None) -> bool:
        from llmcli.engine.backend import weight_repack

        return weight_repack(requested)

    def chat_engine(self, model: ModelSummary, options: Any) -> Any:
        from llmcli.engine.llama import LlamaEngine

        engine = LlamaEngine(model.path, options, debug=self.debug)
        self.live.append(engine)
        return engine

    def check_draft(self, target: str, draft: str) -> None:
        from llmcli.engine.measure import check_draft_vocab

        check_draft_vocab(target, draft)

    def check_memory(self, model: ModelSummary, options: Any) -> None:
        """generate's memory-fit check (loader.check_memory), on the header read again here."""
        from llmcli import gguf_file, loader

        spec = options.speculative
        draft = None
        if spec.enabled and spec.kind == "draft" and spec.model_draft:
            draft = gguf_file.read_header(spec.model_draft)
        header = gguf_file.read_header(model.path)
        loader.check_memory(Path(model.path), header, options, draft)

    def release(self, thing: Any) -> None:
        if thing in self.live:
            self.live.remove(thing)

    def interrupt(self) -> None:
        for thing in list(self.live):
            thing.interrupt()

    def interrupt_on_sigint(self, interrupt):
        """Ctrl-C calls `interrupt` through the engine's wakeup-fd watcher, as in generate."""
        from llmcli.engine.measure import interrupt_on_sigint

        return interrupt_on_sigint(interrupt)

    def load_snapshot(self) -> Any:
        return load.snapshot()

    def other_load(self, before: Any, after: Any) -> float | None:
        return load.other_share(before, after)


class LlamaModel:
    """One loaded model (per model file, GPU layer count and weight repacking)."""

    def __init__(
        self, backend: LlamaBackend, summary: ModelSummary, n_gpu_layers: int, repack: bool | None = None
    ) -> None:
        from llmcli.engine.measure import MeasureModel

        self.backend = backend
        self.model = MeasureModel(summary.path, n_gpu_layers, repack)
        self.gpu_layers_offloaded = self.model.gpu_layers_offloaded

    def new_context(self, spec: ContextSpec, n_ctx: int) -> LlamaContext:
        return LlamaContext(self, spec, n_ctx)

    def close(self) -> None:
        self.model.close()


@dataclass
class Prepared:
    """Batches built before the clock starts; the arrays are kept alive alongside their batches."""

    prompt: list[tuple[Any, Any]] = field(default_factory=list)
    gen: list[tuple[Any, Any]] = field(default_factory=list)
    n_tokens: int = 0


class LlamaContext:
    """A llama.cpp context and its KV cache, positioned token by token as the runner asks."""

    def __init__(self, model: LlamaModel, spec: ContextSpec, n_ctx: int) -> None:
        self.model = model
        self.ctx = model.model.new_context(
            n_ctx, n_batch=spec.n_batch, n_ubatch=spec.n_ubatch, n_threads=spec.n_threads,
            flash_attn=spec.flash_attn, type_k=spec.type_k, type_v=spec.type_v,
        )  # fmt: skip
        self.n_batch = self.ctx.n_batch
        self.n_cached = 0
        model.backend.live.append(self)

    def interrupt(self) -> None:
        self.ctx.interrupt()

    # -- KV cache position -----------------------------------------------------------------

    def set_depth(self, depth: int, rng: random.Random) -> None:
        """Trim the cache to `depth` tokens with llama_memory_seq_rm, or fill it up to `depth` (untimed)."""
        if self.n_cached > depth and not (depth > 0 and self.ctx.trim(depth)):
            self.ctx.clear()
            self.n_cached = 0
        self.n_cached = min(self.n_cached, depth)
        if self.n_cached < depth:
            self.run(Prepared(prompt=self._batches(self._tokens(depth - self.n_cached, rng, self.n_cached)),
                              n_tokens=depth - self.n_cached))  # fmt: skip

    def prepare(self, test: TestSpec, rng: random.Random) -> Prepared:
        start = self.n_cached
        prompt = self._batches(self._tokens(test.n_prompt, rng, start))
        gen = [self.ctx.batch([t]) for t in self._tokens(test.n_gen, rng, start + test.n_prompt)]
        return Prepared(prompt, gen, test.n_tokens)

    def _tokens(self, n: int, rng: random.Random, position: int) -> list[int]:
        """Random token ids, as llama-bench draws them; BOS first when the sequence starts here."""
        model = self.model.model
        tokens = [rng.randrange(model.n_vocab) for _ in range(n)]
        if tokens and position == 0 and model.bos is not None:
            tokens[0] = model.bos
        return tokens

    def _batches(self, tokens: list[int]) -> list[tuple[Any, Any]]:
        return [self.ctx.batch(tokens[i : i + self.n_batch]) for i in range(0, len(tokens), self.n_batch)]

    # -- the timed part --------------------------------------------------------------------

    def run(self, prepared: Prepared) -> None:
        decode, sync = self.ctx.decode, self.ctx.synchronize
        for batch in prepared.prompt:
            rc = decode(batch)
            if rc:
                self._failed(rc)
        if prepared.prompt:
            sync()
        for batch in prepared.gen:
            rc = decode(batch)
            if rc:
                self._failed(rc)
            sync()
        self.n_cached += prepared.n_tokens

    def _failed(self, rc: int) -> None:
        if rc == 2 or self.ctx.interrupted:
            raise Interrupted
        raise LlmcliError(
            f"llama_decode failed with status {rc} ({self.n_cached} tokens in the cache)",
            hint="run with --debug for llama.cpp's log",
        )

    def close(self) -> None:
        self.model.backend.release(self)
        self.ctx.close()
