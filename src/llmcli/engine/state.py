"""The KV state file: one sequence's keys and values, saved so another process can resume warm.

Layout (all integers little-endian):

    magic       8 bytes  b"LLMCLIKV"
    format      u32      FORMAT
    header_len  u32      length of the JSON header
    header_sha  32 bytes SHA-256 of the header
    payload_sha 32 bytes SHA-256 of the payload
    header      JSON     identity (model, llama.cpp build, cache-shaping settings), tokens,
                         payload_size
    payload     bytes    what `llama_state_seq_get_data` wrote for sequence 0

Nothing in a file is trusted until everything checks: the magic and format, the exact file
size, the header's checksum, the identity against the engine that would load it
(`Engine.state_identity`), and the payload's checksum, before a single byte reaches llama.cpp.
A file that fails any check raises `StateRejected`; the caller re-prefills. The engine-specific
parts are two calls (`state_payload`, `load_state_payload`); the rest is shared by every engine.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAGIC = b"LLMCLIKV"
FORMAT = 1
_FIXED = struct.Struct("<8sII32s32s")  # magic, format, header_len, header and payload SHA-256
MAX_HEADER = 64 << 20  # a header larger than this is not ours
_ENDS = 1 << 20  # model identity: the size and a hash of the first and last MiB


class StateRejected(Exception):
    """A state file that is not used; `corrupt` when it is damaged rather than merely stale."""

    def __init__(self, reason: str, *, corrupt: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.corrupt = corrupt


@dataclass
class Header:
    identity: dict[str, Any]
    tokens: list[int]
    payload_size: int
    payload_offset: int
    payload_sha256: bytes


def model_identity(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Cheap and safe to compute: the size, and SHA-256 over the first and last MiB (the GGUF
    header, the tensor index and the last tensors' data)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        digest.update(f.read(_ENDS))
        if size > _ENDS:
            f.seek(max(_ENDS, size - _ENDS))
            digest.update(f.read(_ENDS))
    return {"size": size, "sha256_ends": digest.hexdigest()}


def encode_header(identity: dict[str, Any], tokens: list[int], payload_size: int) -> bytes:
    doc = {"identity": identity, "payload_size": payload_size, "tokens": tokens}
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode("utf-8")


def file_parts(identity: dict[str, Any], tokens: list[int], payload) -> list:
    """The file's bytes as parts to write in order (the payload is not copied)."""
    view = memoryview(payload).cast("B")
    header = encode_header(identity, tokens, view.nbytes)
    fixed = _FIXED.pack(
        MAGIC, FORMAT, len(header), hashlib.sha256(header).digest(), hashlib.sha256(view).digest()
    )
    return [fixed, header, view]


def read_header(f: io.BufferedReader) -> Header:
    """The header of an open state file, checked for shape and size (not yet the checksum)."""
    size = os.fstat(f.fileno()).st_size
    fixed = f.read(_FIXED.size)
    if len(fixed) < _FIXED.size:
        raise StateRejected("the file is truncated (no header)", corrupt=True)
    magic, fmt, header_len, header_sha, payload_sha = _FIXED.unpack(fixed)
    if magic != MAGIC:
        raise StateRejected("not an llmcli KV state file", corrupt=True)
    if fmt != FORMAT:
        raise StateRejected(f"state format {fmt}, this llmcli reads format {FORMAT}")
    if header_len > min(MAX_HEADER, size - _FIXED.size):
        raise StateRejected("the file is truncated (header)", corrupt=True)
    header_bytes = f.read(header_len)
    if hashlib.sha256(header_bytes).digest() != header_sha:
        raise StateRejected("checksum mismatch in the header (the file is damaged)", corrupt=True)
    try:
        doc = json.loads(header_bytes.decode("utf-8"))
        identity, tokens, payload_size = doc["identity"], doc["tokens"], doc["payload_size"]
        if not (isinstance(identity, dict) and isinstance(tokens, list) and isinstance(payload_size, int)):
            raise TypeError
        if not all(type(t) is int for t in tokens):
            raise TypeError
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise StateRejected("the header is damaged", corrupt=True) from None
    offset = _FIXED.size + header_len
    if size != offset + payload_size:
        what = "truncated" if size < offset + payload_size else "longer than its header says"
        raise StateRejected(f"the file is {what}", corrupt=True)
    return Header(identity, tokens, payload_size, offset, payload_sha)


def mismatch(saved: dict[str, Any], current: dict[str, Any]) -> str | None:
    """Why a state saved under `saved` cannot be loaded by an engine with `current`, or None."""
    labels = {"model": "another model file", "llama_cpp": "another llama.cpp version",
              "system_info": "another llama.cpp build", "n_ctx": "context size",
              "type_k": "KV key type", "type_v": "KV value type", "swa_full": "swa_full",
              "repack": "weight repacking", "flash_attn": "flash attention", "gpu_layers": "GPU layers",
              "backend": "backend", "engine": "another engine"}  # fmt: skip
    for key in sorted(set(saved) | set(current)):
        if saved.get(key) != current.get(key):
            label = labels.get(key, key)
            if key in ("model", "system_info", "engine"):
                return f"saved by {label}"
            if key == "llama_cpp":
                return f"saved by {label} ({saved.get(key)}; this is {current.get(key)})"
            return f"saved with {label} {saved.get(key)}, this run uses {current.get(key)}"
    return None


def common_prefix(a: list[int], b: list[int]) -> int:
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


@dataclass
class Restored:
    tokens: int  # cache positions reused from the file (0: nothing loaded)
    saved: int  # tokens the file held


def save(engine, path: Path, *, reload: bool = False) -> tuple[int, int]:
    """Write `engine`'s cache to `path` atomically (under its lock); returns the bytes written and
    the tokens saved.

    `reload` then loads the saved state back into `engine`: llama.cpp restores cells in order,
    while a cache that lived through several turns has them where earlier turns left room, and
    the order changes the float rounding of attention. After a reload the running process holds
    exactly what a process resuming from the file will hold, so both answer the next turn alike."""
    from llmcli.atomic import write_atomic

    tokens, payload = engine.state_payload()
    parts = file_parts(engine.state_identity(), tokens, payload)
    write_atomic(path, parts)
    if reload and not engine.load_state_payload(tokens, payload):
        engine.reset()  # the next turn prefills from scratch: slower, never wrong
    return sum(memoryview(p).nbytes for p in parts), len(tokens)


@contextmanager
def _open(path: Path) -> Iterator[io.BufferedReader]:
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StateRejected(f"cannot read it: {exc.strerror or exc}") from None
    with f:
        yield f


def peek(path: Path) -> Header:
    """The checked header of a state file (for listings); raises StateRejected or OSError."""
    with _open(path) as f:
        return read_header(f)


def restore(engine, path: Path, prompt: list[int]) -> Restored:
    """Load the state in `path` into `engine` when it provably belongs and shares a prefix with
    `prompt`; raises StateRejected (the engine's cache is then empty) or FileNotFoundError.

    Memory: the payload is read once into one buffer that llama.cpp copies from (file + KV)."""
    with _open(path) as f:
        header = read_header(f)
        why = mismatch(header.identity, engine.state_identity())
        if why:
            raise StateRejected(why)
        # the engine always evaluates the prompt's last token (for its logits)
        common = common_prefix(header.tokens, prompt[:-1])
        if common == 0:
            raise StateRejected("its tokens do not begin this prompt")
        payload = bytearray(header.payload_size)
        if f.readinto(payload) != header.payload_size:
            raise StateRejected("the file is truncated", corrupt=True)
    if hashlib.sha256(payload).digest() != header.payload_sha256:
        raise StateRejected("checksum mismatch (the file is damaged)", corrupt=True)
    engine.reset()
    if not engine.load_state_payload(header.tokens, payload):
        engine.reset()
        raise StateRejected("llama.cpp refused the state", corrupt=True)
    return Restored(common, len(header.tokens))
