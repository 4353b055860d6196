"""Loading a GGUF model and sizing its context through llama.cpp, and what was loaded: the
`ModelInfo` read from the model's metadata. `LlamaEngine` calls these once, while it loads."""

from __future__ import annotations

import ctypes
from pathlib import Path

from llmcli import defaults
from llmcli.contract import EngineOptions, ModelInfo
from llmcli.engine.backend import backend_name
from llmcli.engine.native import raise_for, set_attention
from llmcli.errors import InvalidModelError

DEFAULT_CTX_CAP = defaults.CTX_CAP


def gpu_layers_requested(L, requested: int | None) -> int:
    """The layers to offload: -ngl as given; unset or negative, all of them where llama.cpp can."""
    if requested is None or requested < 0:
        return 999 if L.llama_supports_gpu_offload() else 0
    return requested


def load_model(L, path: Path, gpu_layers: int, repack: bool, hits: list[int]):
    """The model's weights; a signal in `hits` (Ctrl-C, SIGTERM) cancels the load."""
    params = L.llama_model_default_params()
    params.n_gpu_layers = gpu_layers
    params.use_extra_bufts = repack
    # returning False from the progress callback cancels a load interrupted by a signal
    progress = L.llama_progress_callback(lambda value, data: not hits)
    params.progress_callback = progress
    model = L.llama_model_load_from_file(str(path).encode(), params)
    if not model and hits:
        raise_for(hits)
    if not model:
        raise InvalidModelError(
            f"llama.cpp could not load {path}",
            hint="the architecture may be unsupported by this llama.cpp build; run with --debug",
        )
    return model


def context_params(L, opts: EngineOptions, n_ctx_train: int, threads: int):
    """The context's parameters: its size (the model's trained length, capped; a multiple of 256),
    batch sizes, threads, outputs and attention."""
    n_ctx = opts.ctx_size or min(n_ctx_train, DEFAULT_CTX_CAP)
    n_ctx = max(256, -(-n_ctx // 256) * 256)  # llama.cpp pads to 256; ask for what we get
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
    return params


def model_info(L, model, path: Path, opts: EngineOptions, *, gpu_layers: int, n_vocab: int,
               repack: bool) -> ModelInfo:  # fmt: skip
    """What was loaded, from the model and its metadata."""
    size = path.stat().st_size
    n_layers = L.llama_model_n_layer(model)
    offloaded = min(gpu_layers, n_layers + 1) if L.llama_supports_gpu_offload() else 0
    from llmcli import reasoning, sampling, templates

    def meta(key: str) -> str | None:
        return meta_value(L, model, key)

    template = L.llama_model_chat_template(model, None)
    chat_template = template.decode("utf-8", "replace") if template else None
    metadata: dict[str, object] = {
        key: value for key in templates.METADATA_KEYS if (value := meta(key)) is not None
    }
    return ModelInfo(
        path=str(path),
        architecture=meta("general.architecture") or "unknown",
        quantization=quant_name(meta("general.file_type")),
        size_bytes=size,
        n_params=int(L.llama_model_n_params(model)),
        n_layers=n_layers,
        n_ctx_train=L.llama_model_n_ctx_train(model),
        n_vocab=n_vocab,
        chat_template=chat_template,
        name=meta("general.name") or path.stem,
        gpu_layers=offloaded,
        backend=backend_name(),
        repack=repack,
        type_k=(opts.type_k or "f16").lower(),
        type_v=(opts.type_v or "f16").lower(),
        model_type=templates.model_type(chat_template, metadata),
        reasoning=reasoning.detect(chat_template),
        sampling=sampling.from_metadata(
            {key: value for key in sampling.GGUF_KEYS if (value := meta(key)) is not None}
        ),
    )


def meta_value(L, model, key: str) -> str | None:
    """One metadata value of the model, as text; None where it has no such key."""
    buf = ctypes.create_string_buffer(256)
    n = L.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    if n < 0:
        return None
    if n >= len(buf):
        buf = ctypes.create_string_buffer(n + 1)
        L.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", "replace")


def quant_name(file_type: str | None) -> str:
    from llmcli.gguf_file import FILE_TYPE_NAMES  # the one llama_ftype table

    try:
        return FILE_TYPE_NAMES.get(int(file_type), f"type {file_type}") if file_type else "unknown"
    except ValueError:
        return "unknown"
