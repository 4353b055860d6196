"""From a model reference and flags to a loaded engine: resolve, validate the header, load.

Front ends call `load_engine` with the environment's engine factory (None: llama.cpp's,
`llama_engine`), which tests replace with a fake engine so every CLI path runs without a model.
What it has to say goes to the installed reporter (`llmcli.reporting`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from llmcli import reporting
from llmcli.contract import Embedder, Engine, EngineOptions, Many, Reranker

EngineFactory = Callable[[Path, EngineOptions, bool], Engine]

if TYPE_CHECKING:
    from llmcli.served.endpoints import Endpoint


@dataclass
class Loaded:
    engine: Engine
    ref: str
    path: Path | None  # None for a served model (llmcli.served): its file is on the server

    # Whether the model runs on a server is the loader's decision alone: the layers above ask the
    # engine what it can do (`engine.can`) and how to describe itself, and these how to name it.

    @property
    def display(self) -> str:
        """The reference for a banner: a served model whose name is a file path as `FILE at URL`."""
        from llmcli.served.endpoints import display_ref

        return display_ref(self.ref)

    @property
    def name(self) -> str:
        """How `/show` names the model: a served one by its server's own name, else the reference."""
        return self.engine.info.name if self.path is None and self.engine.info.name else self.ref


def validate_file(path: Path, options: EngineOptions | None = None, *, force: bool = False) -> None:
    """Refuse files llama.cpp should never see: not GGUF, truncated, hostile headers or templates.

    The chat template is test-rendered in the sandbox before the weights load, so a template
    that reaches for Python internals fails closed here, with a clear message, at no cost.
    """
    from llmcli import gguf_file, templates
    from llmcli.errors import InvalidModelError

    try:
        header = gguf_file.read_header(path)
    except InvalidModelError as exc:  # name the file: -m may have been an alias or a default
        raise exc.about(str(path)) from None
    draft = None
    spec = options.speculative if options is not None else None
    if spec is not None and spec.enabled and spec.kind == "draft" and spec.model_draft:
        try:
            draft = gguf_file.read_header(Path(spec.model_draft))
        except InvalidModelError as exc:  # say which of the two files it is
            raise exc.about(f"draft model {spec.model_draft}") from None
    if header.is_embedding:  # generate, chat, bench: they want text from it
        from llmcli.errors import UsageError

        raise UsageError(
            f"{path.name} is an embedding model ({header.architecture}, {header.pooling} pooling): "
            "it turns text into vectors and writes no text",
            hint=f"llmcli embed -m {path} TEXT",
        )
    if options is not None and not force:
        check_memory(path, header, options, draft)
    if options is not None:
        _warn_unusual(path, header, options)
    if header.chat_template:
        templates.probe(header.chat_template)


_warned: set[str] = set()


def _warn_unusual(path: Path, header, options: EngineOptions) -> None:
    """Settings llama.cpp takes but a user rarely means: a context past the trained one, more
    threads than the CPUs this process may run on. Each is said once a process (a chat loads its
    model again for `/set spec-type` and the like)."""
    import os

    said: list[str] = []
    trained = header.n_ctx_train or 0
    if trained and (options.ctx_size or 0) > trained:
        said.append(
            f"a context of {options.ctx_size} tokens is more than the {trained} {path.name} was trained "
            f"with; past {trained} tokens its answers may degrade"
        )
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 0
    if cpus and (options.threads or 0) > cpus:
        said.append(
            f"{options.threads} threads is more than the {cpus} CPUs this process can use: the extra ones "
            "wait for a core, and decoding slows down (with no -t or `threads` setting the count adapts)"
        )
    for message in said:
        if message not in _warned:
            _warned.add(message)
            reporting.warn(message)


def check_memory(path: Path, header, options: EngineOptions, draft=None) -> None:
    """Refuse, with the numbers, a model whose weights and KV cache (and a draft model's, with
    -md) exceed the free memory.

    Skipped when the build can offload to a GPU (the weights then live in video memory).
    """
    from llmcli.errors import ResourceError
    from llmcli.hub import fit

    mem = fit.memory()
    if mem is None or (options.gpu_layers != 0 and _gpu_offload_supported()):
        return
    from llmcli.gguf_file import KV_TYPE_BYTES

    n_ctx = options.ctx_size or min(header.n_ctx_train or 4096, 4096)
    k_bytes = KV_TYPE_BYTES.get((options.type_k or "f16").lower(), 2.0)
    v_bytes = KV_TYPE_BYTES.get((options.type_v or "f16").lower(), 2.0)
    kv = header.kv_cache_bytes(n_ctx, k_bytes, v_bytes)
    need = header.tensor_bytes + kv + (128 << 20)
    gib = 1 << 30
    what = f"weights {header.tensor_bytes / gib:.1f} GiB, KV cache for {n_ctx} tokens {kv / gib:.1f} GiB"
    smaller = "--ctx-size"
    if draft is not None:
        d_ctx = options.speculative.ctx_size_draft or n_ctx
        # the target's types, or -ctkd/-ctvd
        dk, dv = (KV_TYPE_BYTES.get(t, 2.0) for t in options.draft_cache_types())
        d_kv = draft.kv_cache_bytes(d_ctx, dk, dv)
        need += draft.tensor_bytes + d_kv + (64 << 20)
        what += f", draft model {(draft.tensor_bytes + d_kv) / gib:.1f} GiB with its KV cache"
        if options.speculative.ctx_size_draft:  # its own context size: name the flag that set it
            smaller = "-cd/--ctx-size-draft" if d_kv > kv else "--ctx-size or -cd/--ctx-size-draft"
    if need > mem.available:
        raise ResourceError(
            f"{path.name} needs about {need / gib:.1f} GiB ({what}) but {mem.available / gib:.1f} GiB "
            "is available",
            hint=f"use a smaller {smaller} or quantization, or --force to load anyway",
        )


def batch_room(path: Path, options: EngineOptions, ctx_per_seq: int) -> int | None:
    """How many sequences of `ctx_per_seq` tokens `llmcli batch` can decode together in the free
    memory: the weights, their KV cache and the same margin `check_memory` counts must fit (None:
    unknown, or a GPU build, whose memory this does not see)."""
    from llmcli import gguf_file
    from llmcli.hub import fit

    try:
        header = gguf_file.read_header(path)
    except Exception:  # checked at load already; here only an estimate is lost
        return None
    mem = fit.memory()
    if mem is None or (options.gpu_layers != 0 and _gpu_offload_supported()):
        return None
    from llmcli.gguf_file import KV_TYPE_BYTES

    k_bytes = KV_TYPE_BYTES.get((options.type_k or "f16").lower(), 2.0)
    v_bytes = KV_TYPE_BYTES.get((options.type_v or "f16").lower(), 2.0)
    from llmcli.engine.batched import stream_cells

    # a sequence's stream, as llama.cpp sizes it
    per_seq = header.kv_cache_bytes(stream_cells(ctx_per_seq), k_bytes, v_bytes)
    if per_seq <= 0:
        return None
    return max(0, (mem.available - header.tensor_bytes - (128 << 20)) // per_seq)


def _gpu_offload_supported() -> bool:
    from llmcli.engine.backend import gpu_offload

    return gpu_offload()


def load_engine(
    ref: str | None,
    options: EngineOptions,
    *,
    offline: bool = False,
    debug: bool = False,
    force: bool = False,
    timeout: float | None = None,
    factory: EngineFactory | None = None,
    check_files: bool = True,
    speculation_optional: bool = False,
) -> Loaded:
    """The engine for `ref` (None: the configured model): a served model's, or one built by
    `factory` (None: llama.cpp's) after the file checks (`check_files`: off for a test's fake).
    A served model refuses speculative options, unless `speculation_optional` (chat's `/model`,
    which carries the session's settings to whatever model comes): then it goes without them."""
    from llmcli import settings
    from llmcli.hub.resolve import resolve_model

    text = ref or settings.resolve("model") or None
    if (endpoint := served_endpoint(text)) is not None:
        if options.speculative.enabled and not speculation_optional:
            from llmcli.errors import UsageError

            raise UsageError(
                "speculative decoding runs in llmcli's own engine; for a served model the server "
                "drafts (llama-server --model-draft, vLLM --speculative-config)"
            )
        return load_served(replace(endpoint, timeout_flag=timeout), debug=debug)
    resolved = resolve_model(text, offline=offline)
    spec = options.speculative
    if spec.enabled and spec.kind == "draft":
        from llmcli.errors import LlmcliError

        try:
            draft = resolve_model(spec.model_draft_ref or spec.model_draft, offline=offline)
        except LlmcliError as exc:  # say which of the two references it is, and where it was set
            error = exc.about("draft model")
            if spec.model_draft_from:
                error.hint = "; ".join(filter(None, [spec.model_draft_from, error.hint]))
            raise error from None
        options = replace(options, speculative=replace(spec, model_draft=str(draft.path),
                                                       model_draft_ref=draft.ref))  # fmt: skip
    if check_files:
        validate_file(resolved.path, options, force=force)
    engine = (factory or llama_engine)(resolved.path, options, debug)
    return Loaded(engine, resolved.ref, resolved.path)


def llama_engine(path: Path, options: EngineOptions, debug: bool) -> Engine:
    """The real engine factory: llama.cpp through llama-cpp-python."""
    from llmcli.engine.llama import LlamaEngine

    return LlamaEngine(path, options, debug=debug)


def served_endpoint(ref: str | None) -> Endpoint | None:
    """The endpoint `ref` (else the configured model) names, or None for a local model: the one
    place that tells a served model from a local one (a URL, `NAME/MODEL` of a config
    `[endpoints.NAME]` table, or an alias to either, before the hub's references)."""
    from dataclasses import replace

    from llmcli import settings
    from llmcli.hub import aliases
    from llmcli.served import config

    text = (ref or settings.resolve("model") or "").strip()
    found = config.lookup(text)
    if found is None and text and "/" not in text:  # an alias to a served model
        target = aliases.get(text)
        if target is not None and (found := config.lookup(target)) is not None:
            return replace(found, alias=text)
    return found


def load_served(endpoint: Endpoint, *, debug: bool = False, connections: int = 4) -> Loaded:
    """A served model: ask the server what it serves, and talk to it (llmcli.served), with a pool
    of `connections` (the serving benchmark's highest concurrency; one request at a time else)."""
    from llmcli.served.engine import ServedEngine

    engine = ServedEngine(endpoint, connections=connections, debug=debug)
    return Loaded(engine, endpoint.with_model(engine.model).ref, None)


def ready_for_images(engine: Engine) -> None:
    """Load a local model's image projector now (chat's `/attach` and `-a`, before the message is
    typed): a model without one is refused in one line naming --mmproj. A served model's server
    answers for itself; an engine that takes no images is refused."""
    from llmcli.errors import UsageError

    if not engine.can.images:
        raise UsageError("this model takes no images here (a model run by llama.cpp with a projector does)")
    engine.prepare_images()


def respond_many(loaded: Loaded, parallel: int | None, items: int, context: int | None = None) -> Many:
    """Many requests at once on `loaded` (`Engine.respond_many`), each needing at most `context`
    tokens (None: the model's context): a local model's sequences are bounded by what the free
    memory holds of their KV cache (`batch_room`)."""
    engine = loaded.engine
    room = None
    if loaded.path is not None and engine.can.parallel:
        per_seq = min(context, engine.n_ctx) if context else engine.n_ctx
        room = batch_room(loaded.path, engine.options, per_seq)
    return engine.respond_many(parallel, items=items, room=room, context=context)


def load_embedder(ref: str, *, pooling: str | None = None, threads: int | None = None,
                  batch_tokens: int | None = None, debug: bool = False) -> Embedder:  # fmt: skip
    """The embedding model `ref` names: a served one's `/v1/embeddings`, or a local GGUF in an
    embedding context of llama.cpp (refused in one line where the file is a generative model)."""
    from llmcli.errors import UsageError

    if (endpoint := served_endpoint(ref)) is not None:
        from llmcli.served.embeddings import ServedEmbedder

        if pooling:
            raise UsageError("--pooling applies to a local model; a served one pools as its server does")
        return ServedEmbedder(endpoint, debug=debug)
    from llmcli.hub.resolve import resolve_model

    path = resolve_model(ref).path
    check_embedding(path)
    from llmcli.engine.embedding import LlamaEmbedder

    return LlamaEmbedder(path, pooling=pooling, threads=threads, batch_tokens=batch_tokens, debug=debug)


def check_embedding(path: Path, *, purpose: str = "", hint: str | None = None) -> None:
    """Refuse, in one line, a file that is no embedding model (read from its header alone);
    `purpose` is said after why (", and ... measures an embedding model"), `hint` replaces the
    default one."""
    from llmcli import gguf_file
    from llmcli.errors import InvalidModelError, UsageError

    try:
        header = gguf_file.read_header(path)
    except InvalidModelError as exc:
        raise exc.about(str(path)) from None
    if not header.is_embedding:
        raise UsageError(
            f"{path.name} is a generative model ({header.architecture}): it writes text and has no pooling "
            f"for vectors{purpose}",
            hint=hint or "embed needs an embedding GGUF (BERT, nomic-bert, Qwen3-Embedding, ...)",
        )


def load_reranker(ref: str, *, threads: int | None = None, debug: bool = False) -> Reranker:
    """The reranking model `ref` names: a served one's `/v1/rerank`, or a local cross-encoder GGUF
    under llama.cpp's rank pooling (a generative or embedding-only model is refused in one line)."""
    if (endpoint := served_endpoint(ref)) is not None:
        from llmcli.served.rerank import ServedReranker

        return ServedReranker(endpoint, debug=debug)
    from llmcli.hub.resolve import resolve_model

    path = resolve_model(ref).path
    _check_reranker(path)
    from llmcli.engine.rerank import LlamaReranker

    return LlamaReranker(path, threads=threads, debug=debug)


def _check_reranker(path: Path) -> None:
    """A reranker is an encoder with a classifier head (`cls.output`) or rank pooling."""
    from llmcli import gguf_file
    from llmcli.errors import InvalidModelError, UsageError

    try:
        header = gguf_file.read_header(path)
    except InvalidModelError as exc:
        raise exc.about(str(path)) from None
    if header.pooling == "rank" or any(t.name == "cls.output.weight" for t in header.tensors):
        return
    hint = "a reranker is a cross-encoder GGUF with a classifier head: bge-reranker, jina-reranker, ..."
    if header.is_embedding:
        raise UsageError(f"{path.name} is an embedding model ({header.architecture}, {header.pooling} "
                         "pooling): it gives vectors, not relevance scores", hint=hint)  # fmt: skip
    raise UsageError(f"{path.name} is a generative model ({header.architecture}): it writes text and "
                     "scores no documents", hint=hint)  # fmt: skip
