"""Every KV cache type `-ctk`/`-ctv` offer loads on the real model: llama.cpp's own log shows the
cache at that type, and the record names it."""

from __future__ import annotations

import json

import pytest
from realmodel import llmcli

from llmcli.gguf_file import KV_TYPE_BYTES

pytestmark = pytest.mark.model


def test_every_offered_type_has_a_ggml_type_number():
    """The binding's constant where it has one (and then the table agrees), else ggml.h's number:
    llama-cpp-python 0.3.36 exports no GGML_TYPE_BF16, and -ctk bf16 was refused at load."""
    import llama_cpp

    from llmcli.engine.llama import GGML_KV_TYPES, ggml_type

    for name in KV_TYPE_BYTES:
        exported = getattr(llama_cpp, f"GGML_TYPE_{name.upper()}", None)
        assert exported is None or exported == GGML_KV_TYPES[name], name
        assert ggml_type(llama_cpp, name) == GGML_KV_TYPES[name]


@pytest.mark.parametrize("kv_type", list(KV_TYPE_BYTES))
def test_the_cache_is_made_at_the_type_asked(kv_type):
    result = llmcli("--debug", "generate", "-m", "smollm2-135m", "-ctk", kv_type, "-ctv", kv_type, "-fa",
                    "-n", "4", "--temperature", "0", "--json", "Name a color.", timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads(result.stdout)
    assert (record["model"]["cache_type_k"], record["model"]["cache_type_v"]) == (kv_type, kv_type)
    assert record["usage"]["completion_tokens"] > 0
    sizes = [line for line in result.stderr.splitlines() if "llama_kv_cache: size =" in line]
    assert sizes and all(f"K ({kv_type})" in line and f"V ({kv_type})" in line for line in sizes), sizes
