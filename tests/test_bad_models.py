"""Model files that must be refused before llama.cpp sees them: one line, exit 5 (or 3/2)."""

from __future__ import annotations

import os

import pytest
from ggufgen import write_gguf
from helpers import run


def refused(path, code: int = 5, *fragments: str):
    result = run("generate", "hello", "-m", str(path))
    assert result.exit_code == code, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmcli: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert result.stdout == ""


def test_random_bytes(tmp_path):
    path = tmp_path / "random.gguf"
    path.write_bytes(os.urandom(4096))
    refused(path, 5, "GGUF")


def test_html_error_page(tmp_path):
    path = tmp_path / "page.gguf"
    path.write_text("<!DOCTYPE html><html><body>404 Not Found</body></html>")
    refused(path, 5)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.gguf"
    path.write_bytes(b"")
    refused(path, 5)


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.95])
def test_truncated(tmp_path, keep):
    good = write_gguf(tmp_path / "good.gguf")
    data = good.read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[: int(len(data) * keep)])
    refused(path, 5)


def test_absurd_counts(tmp_path):
    import struct

    path = tmp_path / "absurd.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 2**62, 2**62) + b"\0" * 64)
    refused(path, 5)


def test_hostile_chat_template(tmp_path):
    attack = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    path = write_gguf(tmp_path / "evil.gguf", chat_template=attack)
    refused(path, 5, "unsafe")


def test_missing_and_directory(tmp_path):
    refused(tmp_path / "missing.gguf", 3)
    refused(tmp_path, 2, "directory")


def test_the_memory_check_counts_the_kv_cache_at_its_type(tmp_path, monkeypatch):
    """A q8_0 or q4_0 KV cache is about a half or a quarter of an f16 one: the check counts what
    -ctk/-ctv ask for, so a context that fits only quantized is let through."""
    from llmcli import gguf_file, loader
    from llmcli.contract import EngineOptions
    from llmcli.errors import ResourceError
    from llmcli.hub import fit

    path = write_gguf(tmp_path / "m.gguf")
    header = gguf_file.read_header(path)
    n_ctx = 1 << 20
    f16 = header.kv_cache_bytes(n_ctx)
    room = header.tensor_bytes + (128 << 20) + f16 * 6 // 10  # f16 does not fit, q8_0 (0.53 of it) does
    monkeypatch.setattr(fit, "memory", lambda: fit.Memory(available=room, total=2 * room))
    monkeypatch.setattr(loader, "_gpu_offload_supported", lambda: False)
    with pytest.raises(ResourceError):
        loader.check_memory(path, header, EngineOptions(ctx_size=n_ctx, gpu_layers=0))
    loader.check_memory(
        path, header, EngineOptions(ctx_size=n_ctx, gpu_layers=0, type_k="q8_0", type_v="Q8_0")
    )
    with pytest.raises(ResourceError, match=r"KV cache for 1048576 tokens"):  # keys quantized, values f16
        loader.check_memory(path, header, EngineOptions(ctx_size=n_ctx, gpu_layers=0, type_k="q4_0"))


def test_model_too_big_for_memory_is_refused_with_numbers(tmp_path, monkeypatch):
    from llmcli.hub import fit

    monkeypatch.setattr(fit, "memory", lambda: fit.Memory(available=1 << 20, total=1 << 21))
    path = write_gguf(tmp_path / "big.gguf")
    result = run("generate", "hello", "-m", str(path), "-c", "4096")
    assert result.exit_code == 1
    line = result.stderr.strip()
    assert "not enough memory" in line and "GiB" in line and "4096 tokens" in line and "--force" in line
