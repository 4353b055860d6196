"""The engine's measuring surface: a model and its contexts at llama.cpp's defaults, for `llmcli bench`.

`LlamaEngine` sets a model and a context up for chatting (all layers offloaded, one output row per
batch, perf counters on, prefix reuse). A benchmark needs the opposite: llama-bench's set-up, that is
llama.cpp's default model and context parameters with only the swept settings changed, and a timed
part that is nothing but `llama_decode` on batches built beforehand and `llama_synchronize`. This
module is that surface, on the engine's own pieces (`silence_logs`, `AbortFlag`, `ggml_type`), so
that nothing outside `llmcli.engine` touches llama.cpp:

- `MeasureModel(path, n_gpu_layers)`: the loaded weights and the facts bench reports;
- `MeasureContext`: `batch(tokens)` builds a batch for the next positions of the cache,
  `decode(batch)` evaluates it, `synchronize()` waits for the compute, `trim(n)` and `clear()` cut
  the KV cache, `pos_max()` says where it ends, `interrupt()` aborts a decode in progress;
- `interrupt_on_sigint(callback)`: Ctrl-C through the same wakeup-fd watcher as generate.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmcli.engine.backend import weight_repack
from llmcli.engine.native import AbortFlag, ggml_type, silence_logs
from llmcli.errors import InvalidModelError, LlmcliError


def init(debug: bool = False) -> None:
    """Load llama.cpp's backends; its log is hidden unless `debug`."""
    from llmcli.engine.backend import library

    llama_cpp = library()
    if not debug:
        silence_logs(llama_cpp)
    llama_cpp.llama_backend_init()


def interrupt_on_sigint(interrupt: Callable[[], None]):
    """A context manager: while inside, Ctrl-C calls `interrupt` as it stops generate (main thread
    only): the same wakeup-fd watcher (`llmcli.signals`), so SIGINT and SIGTERM abort even inside
    `llama_decode`; a second Ctrl-C raises KeyboardInterrupt."""
    from llmcli import signals

    return signals.interrupt_on_sigint(interrupt)


class MeasureModel:
    """One loaded model at llama.cpp's default model parameters, `n_gpu_layers` aside."""

    def __init__(self, path: str | Path, n_gpu_layers: int, repack: bool | None = None) -> None:
        from llmcli.engine.backend import library

        L = self._L = library()
        self.path = str(path)
        params = L.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        # llama.cpp's default, except where it would hand the weights to its crashing AMX kernels
        params.use_extra_bufts = self.repack = weight_repack(repack)
        self.handle = L.llama_model_load_from_file(self.path.encode(), params)  # the llama_model pointer
        if not self.handle:
            raise InvalidModelError(
                f"llama.cpp could not load {self.path}",
                hint="the architecture may be unsupported by this llama.cpp build; run with --debug",
            )
        vocab = L.llama_model_get_vocab(self.handle)
        self.n_vocab: int = L.llama_vocab_n_tokens(vocab)
        self.bos: int | None = L.llama_vocab_bos(vocab) if L.llama_vocab_get_add_bos(vocab) else None
        self.n_layers: int = L.llama_model_n_layer(self.handle)
        offload = L.llama_supports_gpu_offload()
        self.gpu_layers_offloaded = max(0, min(n_gpu_layers, self.n_layers + 1)) if offload else 0

    def new_context(
        self,
        n_ctx: int,
        *,
        n_batch: int,
        n_ubatch: int,
        n_threads: int,
        flash_attn: bool | None,
        type_k: str,
        type_v: str,
    ) -> MeasureContext:
        return MeasureContext(self, n_ctx, n_batch, n_ubatch, n_threads, flash_attn, type_k, type_v)

    def close(self) -> None:
        if self.handle:
            self._L.llama_model_free(self.handle)
            self.handle = None


class MeasureContext:
    """A context and its KV cache (sequence 0) at llama.cpp's default context parameters, with the
    given sizes, threads, flash attention and cache types; created with an empty cache."""

    def __init__(
        self,
        model: MeasureModel,
        n_ctx: int,
        n_batch: int,
        n_ubatch: int,
        n_threads: int,
        flash_attn: bool | None,
        type_k: str,
        type_v: str,
    ) -> None:
        L = self._L = model._L
        params = L.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_ubatch
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.flash_attn_type = {
            None: L.LLAMA_FLASH_ATTN_TYPE_AUTO,
            True: L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
            False: L.LLAMA_FLASH_ATTN_TYPE_DISABLED,
        }[flash_attn]
        params.type_k = ggml_type(L, type_k)
        params.type_v = ggml_type(L, type_v)
        self.handle = L.llama_init_from_model(model.handle, params)  # the llama_context pointer
        if not self.handle:
            label = {None: "auto", True: "1", False: "0"}[flash_attn]  # as -fa spells it
            raise LlmcliError(
                f"llama.cpp could not create a context of {n_ctx} tokens (threads {n_threads}, batch "
                f"{n_batch}, flash attention {label}, KV {type_k}/{type_v})",
                hint="run with --debug for llama.cpp's reason",
            )
        self._abort = AbortFlag(L)
        L.llama_set_abort_callback(self.handle, self._abort.callback, self._abort.data)
        self._mem = L.llama_get_memory(self.handle)
        self.n_batch: int = min(n_batch, L.llama_n_batch(self.handle))  # the largest batch decode takes
        self._decode, self._sync = L.llama_decode, L.llama_synchronize
        self.clear()

    # -- batches and the timed calls ---------------------------------------------------------

    def batch(self, tokens: list[int]) -> tuple[Any, Any]:
        """A batch of token ids for the positions right after the cache's end (`llama_batch_get_one`,
        as llama-bench builds them); the token array is kept alive alongside it."""
        array = (self._L.llama_token * len(tokens))(*tokens)
        return array, self._L.llama_batch_get_one(array, len(tokens))

    def decode(self, batch: tuple[Any, Any]) -> int:
        """`llama_decode` of a batch from `batch()`; returns its status (0 ok, 2 aborted)."""
        return self._decode(self.handle, batch[1])

    def synchronize(self) -> None:
        """Wait until the decoded batches are computed (`llama_synchronize`)."""
        self._sync(self.handle)

    # -- the KV cache ------------------------------------------------------------------------

    def trim(self, n: int) -> bool:
        """Drop the cache from position `n` on (`llama_memory_seq_rm`); False when llama.cpp cannot."""
        return bool(self._L.llama_memory_seq_rm(self._mem, 0, n, -1))

    def clear(self) -> None:
        self._L.llama_memory_clear(self._mem, False)

    def pos_max(self) -> int:
        """The last position in the cache; -1 when it is empty."""
        return self._L.llama_memory_seq_pos_max(self._mem, 0)

    # -- interruption ------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Abort the decode in progress (llama.cpp polls the flag between graph nodes); any thread."""
        self._abort.set()

    @property
    def interrupted(self) -> bool:
        return self._abort.is_set()

    def close(self) -> None:
        if self.handle:
            self._L.llama_free(self.handle)
            self.handle = None


def check_draft_vocab(target: str, draft: str) -> None:
    """Refuse (UsageError naming both files and the first difference) a draft model whose
    vocabulary is not the target's; only the two vocabularies are read, no weights."""
    from llmcli.engine.backend import library
    from llmcli.engine.speculation.draft import check_draft_vocab as check

    check(library(), Path(target), Path(draft))
