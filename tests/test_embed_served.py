"""`llmcli embed -m URL` against a real llama-server `--embeddings` on the same GGUF: its vectors
agree with the local ones (cosine >= 0.999)."""

from __future__ import annotations

import json

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
