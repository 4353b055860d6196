"""Test helpers that write tiny GGUF files (a few KB), valid or deliberately broken.

* `write_gguf(path, ...)` writes a small, valid model-shaped file with the `gguf` package's
  GGUFWriter: llama-style metadata, an optional tokenizer vocabulary and a few zero-filled tensors.
  It cannot be run by llama.cpp (the weights are zeros and most tensors are missing), but every
  header reader accepts it.
* `build_gguf(...)` assembles GGUF bytes by hand, field by field, with no validation at all, so
  tests can produce hostile files (bad counts, bad types, misaligned or overlapping tensors).

Import from tests as `from ggufgen import write_gguf` (the tests directory is on `pythonpath`).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, GGUFWriter

Q4_K_M = 15

# Main tensor type used for each llama_ftype (general.file_type) when generating default tensors.
_FTYPE_TENSOR_TYPE = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K",
    12: "Q3_K",
    13: "Q3_K",
    14: "Q4_K",
    15: "Q4_K",
    16: "Q5_K",
    17: "Q5_K",
    18: "Q6_K",
    32: "BF16",
}


@dataclass(frozen=True)
class Tensor:
    """A tensor to write: `shape` in ggml order (row length first), `type` a ggml type name or id."""

    name: str
    shape: tuple[int, ...]
    type: str | int = "F32"


def default_tensors(file_type: int | None = Q4_K_M, n_embd: int = 64) -> list[Tensor]:
    main = _FTYPE_TENSOR_TYPE.get(file_type, "Q4_K") if file_type is not None else "F32"
    return [
        Tensor("token_embd.weight", (256, 4), main),
        Tensor("output_norm.weight", (n_embd,), "F32"),
        Tensor("output.weight", (256, 2), "Q6_K"),
    ]


def _ggml_type(value: str | int) -> GGMLQuantizationType:
    return GGMLQuantizationType[value] if isinstance(value, str) else GGMLQuantizationType(value)


def tensor_nbytes(shape: Sequence[int], ggml_type: str | int) -> int:
    block, size = GGML_QUANT_SIZES[_ggml_type(ggml_type)]
    n = 1
    for dim in shape:
        n *= dim
    return n // block * size


def _add_tensor(writer: GGUFWriter, tensor: Tensor) -> None:
    qtype = _ggml_type(tensor.type)
    block, size = GGML_QUANT_SIZES[qtype]
    row_bytes = tensor.shape[0] // block * size
    byte_shape = (*reversed(tensor.shape[1:]), row_bytes)
    writer.add_tensor(tensor.name, np.zeros(byte_shape, dtype=np.uint8), raw_dtype=qtype)


def _guess_type(value: Any) -> GGUFValueType:
    if isinstance(value, bool):
        return GGUFValueType.BOOL
    if isinstance(value, int):
        if 0 <= value < 1 << 32:
            return GGUFValueType.UINT32
        if -(1 << 31) <= value < 0:
            return GGUFValueType.INT32
        return GGUFValueType.UINT64 if value > 0 else GGUFValueType.INT64
    if isinstance(value, float):
        return GGUFValueType.FLOAT32
    if isinstance(value, (str, bytes)):
        return GGUFValueType.STRING
    if isinstance(value, (list, tuple)):
        return GGUFValueType.ARRAY
    raise TypeError(f"cannot store {value!r} in GGUF metadata")


def _add_kv(writer: GGUFWriter, key: str, value: Any) -> None:
    """Add one key; `value` is a plain Python value or a `(value, GGUFValueType)` pair."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], GGUFValueType):
        value, vtype = value
    else:
        vtype = _guess_type(value)
    if vtype == GGUFValueType.ARRAY:
        sub = _guess_type(value[0]) if value else GGUFValueType.UINT32
        writer.add_key_value(key, list(value), vtype, sub_type=sub)
    else:
        writer.add_key_value(key, value, vtype)


def vocabulary(n_vocab: int) -> list[str]:
    special = ["<unk>", "<s>", "</s>"]
    return (special + [f"tok{i}" for i in range(len(special), n_vocab)])[:n_vocab]


def model_kv(
    *,
    arch: str = "llama",
    n_layers: int = 2,
    ctx: int = 2048,
    chat_template: str | None = None,
    file_type: int | None = Q4_K_M,
    name: str | None = "tiny-test-model",
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_vocab: int | None = 32,
    size_label: str | None = None,
    license: str | None = None,
    alignment: int | None = None,
) -> dict[str, Any]:
    """The metadata `write_gguf` writes (in this order), before `extra_kv` is applied."""
    kv: dict[str, Any] = {
        "general.architecture": arch,
        "general.name": name,
        "general.size_label": size_label,
        "general.license": license,
        "general.file_type": file_type,
        "general.quantization_version": 2,
        "general.alignment": alignment,
        f"{arch}.block_count": n_layers,
        f"{arch}.context_length": ctx,
        f"{arch}.embedding_length": n_embd,
        f"{arch}.feed_forward_length": 4 * n_embd,
        f"{arch}.attention.head_count": n_head,
        f"{arch}.attention.head_count_kv": n_head_kv,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-5,
        "tokenizer.chat_template": chat_template,
    }
    if n_vocab:
        kv["tokenizer.ggml.model"] = "llama"
        kv["tokenizer.ggml.tokens"] = vocabulary(n_vocab)
        kv["tokenizer.ggml.scores"] = [0.0] * n_vocab
        kv["tokenizer.ggml.token_type"] = ([3, 3, 3] + [1] * n_vocab)[:n_vocab]
        kv["tokenizer.ggml.bos_token_id"] = 1
        kv["tokenizer.ggml.eos_token_id"] = 2
    return kv


def write_gguf(
    path: str | Path,
    *,
    arch: str = "llama",
    n_layers: int = 2,
    ctx: int = 2048,
    chat_template: str | None = None,
    file_type: int | None = Q4_K_M,
    name: str | None = "tiny-test-model",
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_vocab: int | None = 32,
    size_label: str | None = None,
    license: str | None = None,
    alignment: int | None = None,
    extra_kv: Mapping[str, Any] | None = None,
    tensors: Sequence[Tensor] | None = None,
) -> Path:
    """Write a tiny valid GGUF file and return its path.

    Keyword arguments set the usual llama-style keys; a None value leaves that key out.
    `extra_kv` adds or overrides keys (a None value removes one; a `(value, GGUFValueType)` pair
    forces a type). `tensors` replaces the three default tensors (`[]` for none). More than 64
    vocabulary entries make `tokenizer.ggml.tokens` a long (summarised) array.
    """
    path = Path(path)
    kv = model_kv(
        arch=arch,
        n_layers=n_layers,
        ctx=ctx,
        chat_template=chat_template,
        file_type=file_type,
        name=name,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_vocab=n_vocab,
        size_label=size_label,
        license=license,
        alignment=alignment,
    )
    kv.update(extra_kv or {})
    writer = GGUFWriter(path, arch)
    writer.kv_data[0].clear()  # GGUFWriter pre-sets general.architecture; we write our own keys
    for key, value in kv.items():
        if value is not None:
            _add_kv(writer, key, value)
    if alignment is not None:
        writer.data_alignment = alignment
    for tensor in default_tensors(file_type, n_embd) if tensors is None else tensors:
        _add_tensor(writer, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# ----------------------------------------------------------------------------------------------
# Hand-built (possibly broken) files
# ----------------------------------------------------------------------------------------------

_SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9


def pack_string(value: str | bytes) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return struct.pack("<Q", len(data)) + data


def pack_value(vtype: int, value: Any) -> bytes:
    """Encode a value without its type tag. Arrays: `value` is `(element_type, [elements])`."""
    if vtype == STRING:
        return pack_string(value)
    if vtype == ARRAY:
        etype, items = value
        return struct.pack("<IQ", etype, len(items)) + b"".join(pack_value(etype, v) for v in items)
    return struct.pack("<" + _SCALAR_FORMATS[vtype], value)


def pack_kv(key: str | bytes, vtype: int, value: Any) -> bytes:
    return pack_string(key) + struct.pack("<I", vtype) + pack_value(vtype, value)


def pack_tensor_info(name: str | bytes, shape: Sequence[int], ggml_type: int, offset: int) -> bytes:
    dims = b"".join(struct.pack("<Q", d) for d in shape)
    return pack_string(name) + struct.pack("<I", len(shape)) + dims + struct.pack("<IQ", ggml_type, offset)


def build_gguf(
    kvs: Sequence[tuple[str | bytes, int, Any] | bytes] = (),
    tensors: Sequence[tuple[str | bytes, Sequence[int], int, int] | bytes] = (),
    *,
    version: int = 3,
    n_kv: int | None = None,
    n_tensors: int | None = None,
    alignment: int = 32,
    data: bytes | int = 0,
    magic: bytes = b"GGUF",
) -> bytes:
    """GGUF bytes built exactly as told: no checks, counts overridable, raw `bytes` items allowed.

    `kvs` items are `(key, value_type, value)`; `tensors` items are `(name, shape, ggml_type,
    relative_offset)`. After the tensor infos the bytes are zero-padded to `alignment` and then
    `data` follows (bytes, or a number of zero bytes).
    """
    body = b"".join(kv if isinstance(kv, bytes) else pack_kv(*kv) for kv in kvs)
    body += b"".join(t if isinstance(t, bytes) else pack_tensor_info(*t) for t in tensors)
    head = magic + struct.pack(
        "<IQQ", version, len(tensors) if n_tensors is None else n_tensors, len(kvs) if n_kv is None else n_kv
    )
    out = head + body
    if alignment > 0:
        out += b"\0" * (-len(out) % alignment)
    return out + (bytes(data) if isinstance(data, int) else data)
