"""Read and validate the header of a GGUF model file, safely, without loading the model.

This module is responsible for turning the first part of a `.gguf` file (magic, version, metadata
key/values and tensor descriptions) into a `GGUFHeader`, and for rejecting anything malformed or
hostile with a one-line `InvalidModelError` *before* llama.cpp ever sees the file.

Design rules:

* Plain buffered file I/O and `struct` only; tensor data is never read and nothing is memory-mapped.
* Every length or count read from the file is checked against the bytes that remain in the file
  (and against fixed sanity limits) before anything is allocated or read, so a corrupt file cannot
  make us allocate gigabytes or loop for minutes.
* Long metadata arrays (the tokenizer vocabulary, merges, scores) are skipped, not materialised:
  they are stored as `ArraySummary(type, length)`.

Byte layout (little-endian, versions 2 and 3)::

    magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
    n_kv x (string key | u32 value_type | value)
    n_tensors x (string name | u32 n_dims | n_dims x u64 dim | u32 ggml_type | u64 offset)
    padding to `general.alignment` | tensor data

where a string is `u64 length | bytes` and an array value is `u32 element_type | u64 count | elements`.
"""

from __future__ import annotations

import os
import stat
import struct
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, BinaryIO

from llmcli.errors import InvalidModelError, LlmcliError, ModelNotFoundError, UsageError

__all__ = ["ArraySummary", "GGMLType", "GGML_TYPES", "GGUFHeader", "TensorInfo", "read_header"]

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
HEADER_SIZE = 24  # magic + version + tensor count + kv count

MAX_TENSORS = 100_000  # real models have a few thousand; bounds the time to reject a crafted file
MAX_KV = 1_000_000
MAX_ARRAY_DEPTH = 3  # llama.cpp itself rejects nested arrays; we tolerate a little nesting
MAX_INLINE_ARRAY = 64  # longer arrays are summarised, not materialised
MAX_KEY_BYTES = 65_536
MAX_STRING_BYTES = 64 << 20  # one metadata string (embedded tokenizer.json files reach ~35 MB)
MAX_MATERIALISED_BYTES = 256 << 20  # all strings we keep, together
MAX_ITERATED_STRINGS = 1 << 24  # strings in arrays, walked one by one (a big vocabulary is ~300k)
MAX_NESTED_ARRAYS = 1 << 16  # arrays inside arrays (llama.cpp itself supports none)
MAX_TENSOR_NAME_BYTES = 63  # GGML_MAX_NAME is 64 including the terminating NUL
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ELEMENTS = 1 << 62
MAX_ALIGNMENT = 1 << 30

_CHUNK = 1 << 20
_REFETCH = "the download is probably incomplete or damaged; fetch the file again"

# GGUF metadata value types.
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32 = range(7)
T_BOOL, T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = range(7, 13)

VALUE_TYPE_NAMES = {
    T_UINT8: "uint8",
    T_INT8: "int8",
    T_UINT16: "uint16",
    T_INT16: "int16",
    T_UINT32: "uint32",
    T_INT32: "int32",
    T_FLOAT32: "float32",
    T_BOOL: "bool",
    T_STRING: "string",
    T_ARRAY: "array",
    T_UINT64: "uint64",
    T_INT64: "int64",
    T_FLOAT64: "float64",
}

# struct format character of each fixed-size value type (all little-endian).
_SCALAR_FORMATS = {
    T_UINT8: "B",
    T_INT8: "b",
    T_UINT16: "H",
    T_INT16: "h",
    T_UINT32: "I",
    T_INT32: "i",
    T_FLOAT32: "f",
    T_BOOL: "B",
    T_UINT64: "Q",
    T_INT64: "q",
    T_FLOAT64: "d",
}
_SCALAR_STRUCTS = {t: struct.Struct("<" + c) for t, c in _SCALAR_FORMATS.items()}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_HEADER = struct.Struct("<4sIQQ")
_STRING_MIN = 8  # u64 length of an empty string
_ARRAY_MIN = 12  # u32 element type + u64 count of an empty array
_KV_MIN = 8 + 4 + 1  # empty key, value type, one-byte value
_TENSOR_MIN = 8 + 4 + 8 + 4 + 8  # empty name, n_dims, one dim, ggml type, offset


@dataclass(frozen=True)
class GGMLType:
    """A ggml tensor element type: `block_size` elements are stored in `type_size` bytes."""

    id: int
    name: str
    block_size: int
    type_size: int


def _ggml_types(*rows: tuple[int, str, int, int]) -> dict[int, GGMLType]:
    return {row[0]: GGMLType(*row) for row in rows}


# Ids and sizes as in ggml.h / gguf-py's GGML_QUANT_SIZES (a test checks they agree).
# Ids 4, 5 (Q4_2, Q4_3), 31-33 (Q4_0_4_4 ...) and 36-38 (IQ4_NL_4_4 ...) were removed from ggml.
GGML_TYPES: dict[int, GGMLType] = _ggml_types(
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 40),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
    (40, "NVFP4", 64, 36),
    (41, "Q1_0", 128, 18),
)

# llama_ftype numbering, as stored in `general.file_type`.
FILE_TYPE_NAMES: dict[int, str] = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4",
    39: "NVFP4",
    40: "Q1_0",
}


@dataclass(frozen=True)
class ArraySummary:
    """Stands in for a metadata array too long to keep (e.g. `tokenizer.ggml.tokens`)."""

    type: int  # element value type (T_STRING, T_FLOAT32, ...)
    length: int

    def __len__(self) -> int:
        return self.length

    @property
    def type_name(self) -> str:
        return VALUE_TYPE_NAMES.get(self.type, str(self.type))


@dataclass
class TensorInfo:
    """One tensor description. `shape` is in ggml order (ne[0], the row length, first)."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # absolute file offset of the tensor's data
    n_bytes: int

    @property
    def type_name(self) -> str:
        known = GGML_TYPES.get(self.ggml_type)
        return known.name if known else f"type{self.ggml_type}"

    @property
    def n_elements(self) -> int:
        return _product(self.shape)


def _product(values: tuple[int, ...] | list[int]) -> int:
    total = 1
    for value in values:
        total *= value
    return total


def _fmt_count(n: int) -> str:
    """Show big powers of two as 2^k, anything else in plain digits."""
    if n >= 1 << 16 and n & (n - 1) == 0:
        return f"2^{n.bit_length() - 1}"
    return str(n)


def _short(value: Any, limit: int = 60) -> str:
    """A one-line repr for error messages, cut to about `limit` characters."""
    text = repr(value[:limit] if isinstance(value, (str, bytes)) else value)
    if len(text) > limit or (isinstance(value, (str, bytes)) and len(value) > limit):
        text = text[:limit] + "..."
    return text


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class GGUFHeader:
    """Everything in a GGUF file except the tensor data, plus convenience accessors."""

    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    data_offset: int
    alignment: int
    file_size: int

    # -- typed metadata access -------------------------------------------------------------
    def get_int(self, key: str) -> int | None:
        value = self.metadata.get(key)
        return value if _is_int(value) else None

    def get_str(self, key: str) -> str | None:
        value = self.metadata.get(key)
        return value if isinstance(value, str) else None

    def _arch_int(self, suffix: str) -> int | None:
        return self.get_int(f"{self.architecture}.{suffix}")

    def _arch_heads(self, suffix: str) -> int | list[int] | None:
        """A head count: an int, or a per-layer list of ints (some architectures store those)."""
        value = self.metadata.get(f"{self.architecture}.{suffix}")
        if _is_int(value):
            return value
        if isinstance(value, list) and value and all(_is_int(v) for v in value):
            return value
        return None

    # -- general ---------------------------------------------------------------------------
    @property
    def architecture(self) -> str:
        return self.get_str("general.architecture") or "unknown"

    @property
    def pooling(self) -> str | None:
        """An embedding model's pooling (`ARCH.pooling_type`: mean, cls, last, rank), or None for a
        model that writes text: a generative model has no pooling, an embedding one has."""
        names = {1: "mean", 2: "cls", 3: "last", 4: "rank"}
        value = self._arch_int("pooling_type")
        if value in names:
            return names[value]
        if self.metadata.get(f"{self.architecture}.attention.causal") is False:
            return "mean"  # an encoder without a pooling key: llama.cpp's default for BERT
        return None

    @property
    def is_embedding(self) -> bool:
        return self.pooling is not None

    @property
    def name(self) -> str | None:
        return self.get_str("general.name")

    @property
    def size_label(self) -> str | None:
        return self.get_str("general.size_label")

    @property
    def license(self) -> str | None:
        return self.get_str("general.license")

    @property
    def split_count(self) -> int | None:
        return self.get_int("split.count")

    # -- hyper-parameters ------------------------------------------------------------------
    @property
    def n_layers(self) -> int | None:
        return self._arch_int("block_count")

    @property
    def n_ctx_train(self) -> int | None:
        return self._arch_int("context_length")

    @property
    def n_embd(self) -> int | None:
        return self._arch_int("embedding_length")

    @property
    def n_head(self) -> int | None:
        heads = self._arch_heads("attention.head_count")
        return max(heads) if isinstance(heads, list) else heads

    @property
    def n_head_kv(self) -> int | None:
        """KV heads (the largest, if given per layer); defaults to `n_head` as in llama.cpp."""
        heads = self._arch_heads("attention.head_count_kv")
        if heads is None:
            return self.n_head
        return max(heads) if isinstance(heads, list) else heads

    @property
    def head_dim(self) -> int | None:
        key_length = self._arch_int("attention.key_length")
        if key_length is not None:
            return key_length
        n_embd, n_head = self.n_embd, self.n_head
        if n_embd is None or not n_head or n_head <= 0:
            return None
        return n_embd // n_head

    @property
    def sliding_window(self) -> int | None:
        return self._arch_int("attention.sliding_window")

    @property
    def n_vocab(self) -> int | None:
        tokens = self.metadata.get("tokenizer.ggml.tokens")
        if isinstance(tokens, (ArraySummary, list)):
            return len(tokens)
        return self._arch_int("vocab_size")

    @property
    def chat_template(self) -> str | None:
        return self.get_str("tokenizer.chat_template")

    @property
    def model_type(self) -> str:
        """ "instruct" or "base", from the chat template and the name and fine-tune metadata."""
        from llmcli import templates

        return templates.model_type(
            self.chat_template, {k: self.metadata.get(k) for k in templates.METADATA_KEYS}
        )

    # -- quantisation and size -------------------------------------------------------------
    @property
    def file_type(self) -> int | None:
        return self.get_int("general.file_type")

    @property
    def quantization(self) -> str:
        """The llama_ftype name, else the tensor type holding the most parameters, else "unknown"."""
        file_type = self.file_type
        if file_type is not None and file_type in FILE_TYPE_NAMES:
            return FILE_TYPE_NAMES[file_type]
        weights: Counter[str] = Counter()
        for tensor in self.tensors:
            weights[tensor.type_name] += tensor.n_elements
        if not weights:
            return "unknown"
        return weights.most_common(1)[0][0]

    @property
    def n_params(self) -> int:
        return sum(tensor.n_elements for tensor in self.tensors)

    @property
    def tensor_bytes(self) -> int:
        return sum(tensor.n_bytes for tensor in self.tensors)

    def kv_cache_bytes(
        self, n_ctx: int, type_bytes: float = 2.0, value_type_bytes: float | None = None
    ) -> int:
        """Estimated KV cache size for `n_ctx` tokens (all layers, full context); 0 if unknown.
        `type_bytes`: bytes per key element (and per value element unless `value_type_bytes`)."""
        n_layers, head_dim = self.n_layers, self.head_dim
        if not n_layers or n_layers <= 0 or not head_dim or head_dim <= 0 or n_ctx <= 0:
            return 0
        key_length = self._arch_int("attention.key_length") or head_dim
        value_length = self._arch_int("attention.value_length") or head_dim
        if key_length <= 0 or value_length <= 0:
            return 0
        heads = self._arch_heads("attention.head_count_kv")
        if isinstance(heads, list) and len(heads) == n_layers:
            kv_heads_all_layers = sum(heads)
        else:
            n_head_kv = self.n_head_kv
            if not n_head_kv or n_head_kv <= 0:
                return 0
            kv_heads_all_layers = n_layers * n_head_kv
        values = type_bytes if value_type_bytes is None else value_type_bytes
        per_token = kv_heads_all_layers * (key_length * type_bytes + value_length * values)
        return int(round(n_ctx * per_token))


# The KV cache types llama.cpp takes (-ctk/-ctv; bench's list of them), the one table of them:
# ggml's type number (ggml.h's `enum ggml_type`, fixed by the GGUF format; the engine uses it where
# the binding exports none) and the bytes per element (a quantized block's size over its 32).
KV_TYPES: dict[str, tuple[int, float]] = {
    "f32": (0, 4.0), "f16": (1, 2.0), "bf16": (30, 2.0), "q8_0": (8, 34 / 32), "q4_0": (2, 18 / 32),
    "q4_1": (3, 20 / 32), "iq4_nl": (20, 18 / 32), "q5_0": (6, 22 / 32), "q5_1": (7, 24 / 32),
}  # fmt: skip
KV_TYPE_BYTES = {name: size for name, (_, size) in KV_TYPES.items()}
FLOAT_KV_TYPES = ("f32", "f16", "bf16")  # the V types attention reads without flash attention
QUANTIZED_V = "a quantized V cache needs flash attention"


def v_cache_refused(type_v: str | None, flash_attn: bool | None) -> bool:
    """The one cross-option rule of the KV cache: llama.cpp quantizes the V cache only with flash
    attention, so a quantized `type_v` is refused where flash attention is off (False; None is
    auto, which turns it on for such a cache)."""
    return bool(type_v) and str(type_v).lower() not in FLOAT_KV_TYPES and flash_attn is False


# ----------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------


class _Cursor:
    """Forward-only buffered reader that refuses to go past the end of the file."""

    def __init__(self, f: BinaryIO, file_size: int) -> None:
        self._f = f
        self.file_size = file_size
        self._buf = b""
        self._base = 0  # file offset of self._buf[0]
        self._pos = 0  # read position inside self._buf
        self.where = "the header"  # what is being read, for truncation messages
        self.claim = ""  # what the header promised, for truncation messages
        self.materialised = 0  # bytes of strings kept
        self.strings = 0  # string array elements seen
        self.nested = 0  # nested arrays seen

    def tell(self) -> int:
        return self._base + self._pos

    def left(self) -> int:
        return self.file_size - self.tell()

    def truncated(self) -> InvalidModelError:
        claim = f"{self.claim} but " if self.claim else ""
        return InvalidModelError(
            f"truncated GGUF: {claim}file ends at byte {self.file_size} (while reading {self.where})",
            hint=_REFETCH,
        )

    def _fill(self, n: int) -> None:
        have = len(self._buf) - self._pos
        if have >= n:
            return
        if n > self.left():
            raise self.truncated()
        start = self.tell()
        self._f.seek(start + have)
        more = self._f.read(max(n - have, _CHUNK))
        self._buf = self._buf[self._pos :] + more
        self._base, self._pos = start, 0
        if len(self._buf) < n:  # the file shrank while we were reading it
            raise self.truncated()

    def read(self, n: int) -> bytes:
        self._fill(n)
        data = self._buf[self._pos : self._pos + n]
        self._pos += n
        return data

    def skip(self, n: int) -> None:
        if n > self.left():
            raise self.truncated()
        if n <= len(self._buf) - self._pos:
            self._pos += n
        else:
            self._base, self._buf, self._pos = self.tell() + n, b"", 0

    def unpack(self, st: struct.Struct) -> Any:
        self._fill(st.size)
        value = st.unpack_from(self._buf, self._pos)[0]
        self._pos += st.size
        return value

    def u32(self) -> int:
        return self.unpack(_U32)

    def u64(self) -> int:
        return self.unpack(_U64)

    def string_length(self, limit: int, what: str) -> int:
        """Read a string's u64 length and check it against the file and `limit`, reading nothing."""
        at = self.tell()
        n = self.u64()
        if n > self.left():
            raise InvalidModelError(
                f"corrupt or truncated GGUF: {what} at byte {at} claims {_fmt_count(n)} bytes "
                f"but only {self.left()} remain in the file",
                hint=_REFETCH,
            )
        if n > limit:
            raise InvalidModelError(
                f"GGUF {what} at byte {at} is {_fmt_count(n)} bytes long, which is absurd"
            )
        return n

    def string_bytes(self, limit: int, what: str) -> bytes:
        n = self.string_length(limit, what)
        self.materialised += n
        if self.materialised > MAX_MATERIALISED_BYTES:
            raise InvalidModelError(
                f"GGUF metadata strings exceed {MAX_MATERIALISED_BYTES >> 20} MiB in total"
            )
        return self.read(n)

    def count_elements(self, etype: int, n: int) -> None:
        """Bound the total work of walking variable-size array elements one by one."""
        if etype == T_STRING:
            self.strings += n
            if self.strings > MAX_ITERATED_STRINGS:
                raise InvalidModelError(f"GGUF metadata arrays hold more than {MAX_ITERATED_STRINGS} strings")
        elif etype == T_ARRAY:
            self.nested += n
            if self.nested > MAX_NESTED_ARRAYS:
                raise InvalidModelError(f"GGUF metadata holds more than {MAX_NESTED_ARRAYS} nested arrays")

    def skip_strings(self, count: int) -> None:
        """Skip `count` consecutive strings; a tight loop over the buffer for big vocabularies."""
        unpack = _U64.unpack_from
        while count:
            buf, pos = self._buf, self._pos
            last = len(buf) - 8  # a length field must start at or before this index
            while count and pos <= last:
                (n,) = unpack(buf, pos)
                nxt = pos + 8 + n
                if nxt > last + 8:
                    break
                pos = nxt
                count -= 1
            self._pos = pos
            if count:  # the next string crosses the buffer edge (or is corrupt): careful path
                self.skip(self.string_length(MAX_STRING_BYTES, "string in an array"))
                count -= 1


def _value_type(cur: _Cursor, key: str, what: str) -> int:
    at = cur.tell()
    vtype = cur.u32()
    if vtype not in VALUE_TYPE_NAMES:
        raise InvalidModelError(f"GGUF metadata key {_short(key)} has unknown {what} {vtype} at byte {at}")
    return vtype


def _read_value(cur: _Cursor, key: str, vtype: int, depth: int = 0) -> Any:
    if vtype == T_STRING:
        return cur.string_bytes(MAX_STRING_BYTES, f"string value of {_short(key)}").decode("utf-8", "replace")
    if vtype == T_ARRAY:
        return _read_array(cur, key, depth + 1)
    value = cur.unpack(_SCALAR_STRUCTS[vtype])
    return bool(value) if vtype == T_BOOL else value


def _element_min_size(etype: int) -> int:
    if etype == T_STRING:
        return _STRING_MIN
    if etype == T_ARRAY:
        return _ARRAY_MIN
    return _SCALAR_STRUCTS[etype].size


def _read_array(cur: _Cursor, key: str, depth: int) -> list[Any] | ArraySummary:
    if depth > MAX_ARRAY_DEPTH:
        raise InvalidModelError(
            f"GGUF metadata key {_short(key)} nests arrays deeper than {MAX_ARRAY_DEPTH} levels"
        )
    etype = _value_type(cur, key, "array element type")
    at = cur.tell()
    count = cur.u64()
    need = count * _element_min_size(etype)
    if need > cur.left():
        raise InvalidModelError(
            f"corrupt or truncated GGUF: array {_short(key)} at byte {at} claims {_fmt_count(count)} "
            f"{VALUE_TYPE_NAMES[etype]} elements but only {cur.left()} bytes remain in the file",
            hint=_REFETCH,
        )
    cur.count_elements(etype, count)
    if count > MAX_INLINE_ARRAY:
        _skip_elements(cur, key, etype, count, depth)
        return ArraySummary(etype, count)
    if etype in (T_STRING, T_ARRAY):
        return [_read_value(cur, key, etype, depth) for _ in range(count)]
    fmt = _SCALAR_FORMATS[etype]
    values = list(struct.unpack(f"<{count}{fmt}", cur.read(need)))
    return [bool(v) for v in values] if etype == T_BOOL else values


def _skip_elements(cur: _Cursor, key: str, etype: int, count: int, depth: int) -> None:
    if etype == T_STRING:
        cur.skip_strings(count)
    elif etype == T_ARRAY:
        for _ in range(count):
            _read_array_skipping(cur, key, depth + 1)
    else:
        cur.skip(count * _SCALAR_STRUCTS[etype].size)


def _read_array_skipping(cur: _Cursor, key: str, depth: int) -> None:
    """Validate and skip one nested array without keeping any of it."""
    if depth > MAX_ARRAY_DEPTH:
        raise InvalidModelError(
            f"GGUF metadata key {_short(key)} nests arrays deeper than {MAX_ARRAY_DEPTH} levels"
        )
    etype = _value_type(cur, key, "array element type")
    at = cur.tell()
    count = cur.u64()
    if count * _element_min_size(etype) > cur.left():
        raise InvalidModelError(
            f"corrupt or truncated GGUF: nested array in {_short(key)} at byte {at} claims "
            f"{_fmt_count(count)} elements but only {cur.left()} bytes remain in the file",
            hint=_REFETCH,
        )
    cur.count_elements(etype, count)
    _skip_elements(cur, key, etype, count, depth)


def _read_key(cur: _Cursor) -> str:
    at = cur.tell()
    raw = cur.string_bytes(MAX_KEY_BYTES, "metadata key")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidModelError(f"GGUF metadata key at byte {at} is not valid UTF-8: {raw[:32]!r}") from None


def _read_metadata(cur: _Cursor, n_kv: int) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    cur.claim = f"header claims {n_kv} key/value pairs"
    for index in range(n_kv):
        cur.where = f"metadata key/value {index + 1} of {n_kv}"
        key = _read_key(cur)
        if key in metadata:
            raise InvalidModelError(f"duplicate GGUF metadata key {_short(key)}")
        cur.where = f"the value of metadata key {_short(key)}"
        metadata[key] = _read_value(cur, key, _value_type(cur, key, "value type"))
    return metadata


def _read_tensor_name(cur: _Cursor) -> str:
    at = cur.tell()
    raw = cur.string_bytes(MAX_TENSOR_NAME_BYTES, "tensor name")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidModelError(f"GGUF tensor name at byte {at} is not valid UTF-8: {raw!r}") from None


def _read_shape(cur: _Cursor, name: str) -> tuple[int, ...]:
    n_dims = cur.u32()
    if not 1 <= n_dims <= MAX_DIMS:
        raise InvalidModelError(f"GGUF tensor {name!r} has {n_dims} dimensions (must be 1 to {MAX_DIMS})")
    shape = tuple(cur.u64() for _ in range(n_dims))
    if any(dim < 1 for dim in shape):
        raise InvalidModelError(f"GGUF tensor {name!r} has an empty dimension: shape {list(shape)}")
    if _product(shape) > MAX_ELEMENTS:
        raise InvalidModelError(f"GGUF tensor {name!r} has an absurd shape {list(shape)}")
    return shape


def _tensor_size(name: str, shape: tuple[int, ...], type_id: int) -> int:
    ggml_type = GGML_TYPES.get(type_id)
    if ggml_type is None:
        raise InvalidModelError(f"GGUF tensor {name!r} has unknown ggml type {type_id}")
    if shape[0] % ggml_type.block_size:
        raise InvalidModelError(
            f"GGUF tensor {name!r} has rows of {shape[0]} elements, "
            f"not a multiple of the {ggml_type.name} block size {ggml_type.block_size}"
        )
    return _product(shape) // ggml_type.block_size * ggml_type.type_size


def _read_tensor_infos(cur: _Cursor, n_tensors: int) -> list[tuple[str, tuple[int, ...], int, int, int]]:
    """(name, shape, ggml type, offset relative to the data section, n_bytes) for each tensor."""
    infos = []
    names: set[str] = set()
    cur.claim = f"header claims {n_tensors} tensors"
    for index in range(n_tensors):
        cur.where = f"tensor info {index + 1} of {n_tensors}"
        name = _read_tensor_name(cur)
        if name in names:
            raise InvalidModelError(f"duplicate GGUF tensor name {name!r}")
        names.add(name)
        shape = _read_shape(cur, name)
        type_id = cur.u32()
        n_bytes = _tensor_size(name, shape, type_id)
        infos.append((name, shape, type_id, cur.u64(), n_bytes))
    return infos


def _alignment(metadata: dict[str, Any]) -> int:
    if "general.alignment" not in metadata:
        return DEFAULT_ALIGNMENT
    value = metadata["general.alignment"]
    if not _is_int(value) or value < 1 or value > MAX_ALIGNMENT or value & (value - 1):
        raise InvalidModelError(f"GGUF general.alignment {_short(value)} is not a power of two")
    return value


def _check_layout(tensors: list[TensorInfo], data_offset: int, alignment: int, file_size: int) -> None:
    """Offsets aligned, data inside the file, and no two tensors sharing bytes."""
    for tensor in tensors:
        relative = tensor.offset - data_offset
        if relative % alignment:
            raise InvalidModelError(
                f"GGUF tensor {tensor.name!r} has data offset {relative}, "
                f"not a multiple of the alignment {alignment}"
            )
        end = tensor.offset + tensor.n_bytes
        if end > file_size:
            raise InvalidModelError(
                f"truncated GGUF: tensor {tensor.name!r} data ends at byte {end} "
                f"but file ends at byte {file_size}",
                hint=_REFETCH,
            )
    ordered = sorted(tensors, key=lambda t: t.offset)
    for before, after in pairwise(ordered):
        if after.offset < before.offset + before.n_bytes:
            raise InvalidModelError(f"GGUF tensors {before.name!r} and {after.name!r} overlap")


def _check_magic(head: bytes) -> None:
    magic = head[:4]
    if (len(magic) == 4 and magic != GGUF_MAGIC) or not GGUF_MAGIC.startswith(magic):
        raise InvalidModelError(
            f'not a GGUF file (it begins with {_readable(magic)}, not "GGUF")', hint=_magic_hint(head)
        )
    if len(head) < HEADER_SIZE:
        what = "file is empty" if not head else f"file is only {len(head)} bytes"
        raise InvalidModelError(
            f"truncated GGUF: {what}; a GGUF header needs {HEADER_SIZE}",
            hint=_REFETCH,
        )


def _readable(magic: bytes) -> str:
    """A file's first bytes as a person reads them: "hell" where they are printable ASCII, else
    their hex values (bytes 50 4b 03 04)."""
    text = magic.decode("ascii", "replace")
    if magic and text.isprintable():
        return f'"{text}"'
    return "bytes " + " ".join(f"{b:02x}" for b in magic)


def _magic_hint(head: bytes) -> str | None:
    text = head.lstrip().lower()
    if text.startswith(b"<"):
        return "this looks like an HTML page, e.g. a login or error page saved instead of the model"
    if text.startswith(b"version https://git-lfs"):
        return "this is a Git LFS pointer; fetch the real file with `git lfs pull`"
    if text.startswith((b"pk\x03\x04", b"\x80")):
        return "this looks like a PyTorch checkpoint; convert it to GGUF first"
    return None


def _check_version(version: int) -> None:
    if version in SUPPORTED_VERSIONS:
        return
    if version & 0xFFFF == 0 and struct.unpack("<I", struct.pack(">I", version))[0] in SUPPORTED_VERSIONS:
        raise InvalidModelError("big-endian GGUF files are not supported")
    hint = "re-convert the model with a current llama.cpp" if version < 2 else None
    raise InvalidModelError(f"unsupported GGUF version {version} (only 2 and 3 are supported)", hint=hint)


def _check_counts(n_tensors: int, n_kv: int, file_size: int) -> None:
    if n_kv > MAX_KV:
        raise InvalidModelError(f"GGUF key/value count {_fmt_count(n_kv)} is absurd")
    if n_tensors > MAX_TENSORS:
        raise InvalidModelError(f"GGUF tensor count {_fmt_count(n_tensors)} is absurd")
    room = file_size - HEADER_SIZE
    if n_tensors * _TENSOR_MIN > room:
        raise InvalidModelError(
            f"truncated GGUF: header claims {n_tensors} tensors but file ends at byte {file_size}",
            hint=_REFETCH,
        )
    if n_tensors * _TENSOR_MIN + n_kv * _KV_MIN > room:
        raise InvalidModelError(
            f"truncated GGUF: header claims {n_kv} key/value pairs but file ends at byte {file_size}",
            hint=_REFETCH,
        )


def _parse(f: BinaryIO, path: Path, file_size: int, validate_tensors: bool) -> GGUFHeader:
    head = f.read(HEADER_SIZE)
    _check_magic(head)
    _magic, version, n_tensors, n_kv = _HEADER.unpack(head)
    _check_version(version)
    _check_counts(n_tensors, n_kv, file_size)
    cur = _Cursor(f, file_size)
    cur.skip(HEADER_SIZE)
    metadata = _read_metadata(cur, n_kv)
    alignment = _alignment(metadata)
    infos = _read_tensor_infos(cur, n_tensors)
    end_of_infos = cur.tell()
    data_offset = -(-end_of_infos // alignment) * alignment
    tensors = [TensorInfo(name, shape, t, data_offset + off, size) for name, shape, t, off, size in infos]
    if validate_tensors:
        _check_layout(tensors, data_offset, alignment, file_size)
    return GGUFHeader(path, version, metadata, tensors, data_offset, alignment, file_size)


def _open(path: Path) -> BinaryIO:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ModelNotFoundError(f"no such file: {path}") from None
    except OSError as exc:
        raise LlmcliError(f"cannot read {path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{path} is a directory, not a GGUF file")
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{path} is not a regular file")
    try:
        return open(path, "rb")
    except OSError as exc:
        raise LlmcliError(f"cannot read {path}: {exc.strerror or exc}") from None


def read_header(path: str | Path, *, validate_tensors: bool = True) -> GGUFHeader:
    """Parse and validate the GGUF header of `path`.

    Raises ModelNotFoundError (no such file), UsageError (a directory or other non-file) or
    InvalidModelError (anything wrong with the contents). With `validate_tensors=False` the tensor
    descriptions are still parsed and checked, but not their placement in the file (alignment,
    overlap, data past the end), which is useful for reading the metadata of a partial download.
    """
    path = Path(path)
    with _open(path) as f:
        try:
            return _parse(f, path, os.fstat(f.fileno()).st_size, validate_tensors)
        except OSError as exc:
            raise LlmcliError(f"cannot read {path}: {exc.strerror or exc}") from None
