"""`llmcli embed -m URL` against a real llama-server `--embeddings` on the same GGUF, and against vLLM's
pooling runner on the Hugging Face weights the GGUF was converted from: the vectors agree with the
local ones (cosine >= 0.999)."""

from __future__ import annotations

import json
import os
import signal

import minilm
import numpy as np
import pytest
from helpers import run

pytestmark = pytest.mark.served


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import llamacpp_tools
    from servers import start_llama_server

    try:
        model = minilm.path()
        running = start_llama_server(tmp_path_factory.mktemp("logs"), slots=1, ctx=512, model=model,
                                     extra=["--embeddings"])  # fmt: skip
    except (minilm.Unavailable, llamacpp_tools.ToolsUnavailable) as exc:
        pytest.skip(f"no llama-server with the embedding model here: {exc}")
    yield model, running
    running.process.terminate()
    running.process.wait(timeout=60)


def test_served_vectors_agree_with_local_ones(server, isolated):
    model, running = server
    texts = [r["text"] for r in json.loads(minilm.REFERENCE.read_text())["sentences"]]
    served = run("embed", "-m", running.url, *texts)
    local = run("embed", "-m", str(model), *texts)
    assert served.exit_code == 0 and local.exit_code == 0, served.stderr + local.stderr
    a = np.array([json.loads(line) for line in served.stdout.splitlines()])
    b = np.array([json.loads(line) for line in local.stdout.splitlines()])
    assert a.shape == b.shape == (len(texts), 384)
    cosines = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosines.min() >= 0.999, cosines


def test_generate_against_the_embeddings_only_server_is_its_refusal_not_the_network(server, isolated):
    _, running = server
    result = run("generate", "-m", running.url, "hi")
    assert result.exit_code == 1 and result.stdout == ""  # not 6: the network worked (issue 63)
    errors = [line for line in result.stderr.splitlines() if line.startswith("llmcli: ")]
    assert len(errors) == 1 and "request refused" in errors[0] and "HTTP 500" in errors[0], result.stderr
    assert "network" not in errors[0]


@pytest.fixture(scope="module")
def vllm_embedder(tmp_path_factory):
    """vLLM (its CPU build, tests/vllm_tools.py) serving all-MiniLM-L6-v2's Hugging Face folder, the
    weights the GGUF was converted from, with its pooling runner (about half a minute to start)."""
    import vllm_tools
    from servers import start_vllm_embedding

    try:
        model, folder = minilm.path(), minilm.hf_model()
        running = start_vllm_embedding(tmp_path_factory.mktemp("vllm"), folder, "minilm")
    except (minilm.Unavailable, vllm_tools.VllmUnavailable) as exc:
        pytest.skip(f"no vLLM with the embedding model here: {exc}")
    yield model, running
    running.stop()
    try:  # its engine core runs in a process of its own, in the server's session
        os.killpg(running.process.pid, signal.SIGKILL)
    except OSError:
        pass


@pytest.mark.vllm
def test_vllm_pooling_runner_vectors_agree_with_local_ones(vllm_embedder, isolated):
    model, running = vllm_embedder
    texts = [r["text"] for r in json.loads(minilm.REFERENCE.read_text())["sentences"]]
    served = run("embed", "-m", running.ref, *texts)
    local = run("embed", "-m", str(model), *texts)
    assert served.exit_code == 0 and local.exit_code == 0, served.stderr + local.stderr
    a = np.array([json.loads(line) for line in served.stdout.splitlines()])
    b = np.array([json.loads(line) for line in local.stdout.splitlines()])
    assert a.shape == b.shape == (len(texts), 384)
    cosines = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosines.min() >= 0.999, cosines
