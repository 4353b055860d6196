"""Images in a local prompt, through llama.cpp's multimodal library (`mtmd`, llama-cpp-python's
`mtmd_cpp`): the projector loaded beside the model, the rendered prompt and its images tokenized
into text and image chunks, and an image chunk encoded (its own timing) and its embeddings put into
the KV cache. Nothing here decodes or projects an image by hand.

In the token list the decode loop and the KV cache keep, an image's positions hold a placeholder
id derived from the image's SHA-256 (negative, never a vocabulary token): a later prompt with the
same image shares that prefix, so the cache keeps the image and it is not encoded again."""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from pathlib import Path

from llmcli.errors import LlmcliError, UsageError
from llmcli.media import projector, webp
from llmcli.media.image import Image


@dataclass
class Span:
    """An image's positions [start, end) in the prompt and its chunk."""

    start: int
    end: int
    chunk: int  # mtmd_input_chunk pointer, alive while the prompt's chunks are
    image: Image


@dataclass
class MediaPrompt:
    """A prompt with images: its token list (placeholders at image positions) and image spans."""

    tokens: list[int]
    spans: list[Span]
    chunks: int  # the mtmd_input_chunks pointer, freed by `Vision.free`
    encoded: dict[str, tuple[int, float]] = field(default_factory=dict)  # sha256 -> (tokens, encode ms)

    def span_at(self, position: int) -> Span | None:
        for span in self.spans:
            if span.start <= position < span.end:
                return span
        return None


MARKER = "<__media__>"  # mtmd's default marker, where an image goes in the rendered prompt


def load_vision(llama_cpp, model, model_path, mmproj: str | None, n_threads: int, debug: bool) -> Vision:
    """The projector (`--mmproj`, else an mmproj*.gguf beside the model); one line when there is none."""
    found = projector.find(str(model_path), mmproj)
    if found is None:
        raise projector.missing(Path(model_path).name)
    what = f"--mmproj {found}" if mmproj else f"the projector beside the model ({found})"
    return Vision(llama_cpp, model, str(found), n_threads, debug, what)


def placeholder(image: Image) -> int:
    return -1 - int(image.sha256[:7], 16)


class Vision:
    """The projector of one model: an mtmd context over the engine's model."""

    def __init__(self, llama_cpp, model, path: str, n_threads: int, debug: bool, what: str = "") -> None:
        from llmcli.engine.backend import binding

        mtmd_cpp = binding("mtmd_cpp")

        self.M = mtmd_cpp
        self.path = path
        if not debug:
            from llmcli.engine import native

            if native._log_callback is not None:
                mtmd_cpp.mtmd_log_set(native._log_callback, ctypes.c_void_p(0))
                mtmd_cpp.mtmd_helper_log_set(native._log_callback, ctypes.c_void_p(0))
        params = mtmd_cpp.mtmd_context_params_default()
        params.use_gpu = False
        params.print_timings = False
        params.n_threads = n_threads
        params.warmup = False
        self.ctx = mtmd_cpp.mtmd_init_from_file(path.encode(), model, params)
        if not self.ctx:
            n_embd = llama_cpp.llama_model_n_embd(model)
            raise UsageError(
                f"{what or path}: not a projector for this model (llama.cpp refused it; "
                f"the model's embedding width is {n_embd})"
            )
        if not mtmd_cpp.mtmd_support_vision(self.ctx):
            self.close()
            raise UsageError(f"{what or path}: this projector takes no images")
        self.marker = mtmd_cpp.mtmd_default_marker().decode()

    def prompt(self, text: str, images: list[Image]) -> MediaPrompt:
        """Tokenize rendered text holding one marker per image into text and image chunks."""
        M = self.M
        bitmaps = (M.mtmd_bitmap_p_ctypes * len(images))()
        try:
            for i, image in enumerate(images):
                data = webp.as_png(image.name, image.data) if image.media_type == "image/webp" else image.data
                buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
                bitmap = M.mtmd_helper_bitmap_init_from_buf(self.ctx, buf, len(data), False)
                if not bitmap:
                    raise UsageError(f"{image.name}: the {image.media_type} could not be decoded (damaged?)")
                M.mtmd_bitmap_set_id(bitmap, image.sha256.encode())
                bitmaps[i] = bitmap
            encoded = text.encode()
            inp = M.mtmd_input_text(encoded, len(encoded), False, True)
            chunks = M.mtmd_input_chunks_init()
            rc = M.mtmd_tokenize(self.ctx, chunks, ctypes.byref(inp), bitmaps, len(images))
            if rc != 0:
                M.mtmd_input_chunks_free(chunks)
                raise UsageError(
                    f"the prompt's {len(images)} image(s) could not be tokenized (mtmd status {rc})"
                )
        finally:
            for bitmap in bitmaps:
                if bitmap:
                    M.mtmd_bitmap_free(bitmap)
        return self._layout(chunks, images)

    def _layout(self, chunks, images: list[Image]) -> MediaPrompt:
        M = self.M
        tokens: list[int] = []
        spans: list[Span] = []
        images_left = list(images)
        for i in range(M.mtmd_input_chunks_size(chunks)):
            chunk = M.mtmd_input_chunks_get(chunks, i)
            if M.mtmd_input_chunk_get_type(chunk) == M.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ctypes.c_size_t(0)
                ids = M.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                tokens.extend(ids[j] for j in range(n.value))
                continue
            image = images_left.pop(0)
            n_pos = M.mtmd_input_chunk_get_n_pos(chunk)
            spans.append(Span(len(tokens), len(tokens) + n_pos, chunk, image))
            tokens.extend([placeholder(image)] * n_pos)
        return MediaPrompt(tokens, spans, chunks)

    def evaluate(self, lctx, span: Span, n_past: int, n_batch: int) -> float:
        """Encode one image chunk and decode its embeddings at n_past; returns the encode ms."""
        M = self.M
        started = time.perf_counter()
        if M.mtmd_encode_chunk(self.ctx, span.chunk) != 0:
            raise LlmcliError(f"{span.image.name}: the projector failed to encode the image")
        encode_ms = (time.perf_counter() - started) * 1000
        embd = M.mtmd_get_output_embd(self.ctx)
        new_n_past = M.llama_cpp.llama_pos(0)
        no_callback = M.mtmd_helper_post_decode_callback()
        rc = M.mtmd_helper_decode_image_chunk(
            self.ctx, lctx, span.chunk, embd, n_past, 0, n_batch, ctypes.byref(new_n_past), no_callback, None
        )
        if rc != 0:
            raise LlmcliError(f"{span.image.name}: its embeddings could not be decoded (status {rc})")
        return encode_ms

    def free(self, prompt: MediaPrompt) -> None:
        if prompt.chunks:
            self.M.mtmd_input_chunks_free(prompt.chunks)
            prompt.chunks = 0

    def close(self) -> None:
        if self.ctx:
            self.M.mtmd_free(self.ctx)
            self.ctx = None
