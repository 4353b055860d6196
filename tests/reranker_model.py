"""A small synthetic cross-encoder as a GGUF, the reranking model of the tests (see TESTING.md,
"Reranking"): all-MiniLM-L6-v2's Hugging Face folder (tests/minilm.py) loaded as
`BertForSequenceClassification` with one label (the head's weights drawn from a fixed seed), saved
and converted with llama.cpp's own `convert_hf_to_gguf.py --outtype f16`, in the vLLM venv's
interpreter as minilm.py does. Its scores mean nothing about relevance; they are the same function
under llmcli and under llama-server `--rerank`, which is what a parity test needs.

Kept under `$LLMCLI_TOOLS_CACHE`/models, named by a hash of the recipe; `path()` raises
`minilm.Unavailable` when it cannot be built here (the tests skip). `python tests/reranker_model.py`
builds it and prints the path."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import minilm
from cached import built_once

SEED = 65
# Run in the torch-bearing interpreter: the MiniLM folder as a one-label classifier, its head seeded.
MAKE = """
import sys, torch
from transformers import AutoTokenizer, BertForSequenceClassification
src, out, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.manual_seed(seed)
model = BertForSequenceClassification.from_pretrained(src, num_labels=1)
torch.manual_seed(seed)
torch.nn.init.normal_(model.classifier.weight, std=0.5)
torch.nn.init.normal_(model.classifier.bias, std=0.5)
model.save_pretrained(out, safe_serialization=True)
AutoTokenizer.from_pretrained(src).save_pretrained(out)
"""
RECIPE = hashlib.sha256(f"{minilm.PACKAGE} {SEED} {MAKE}".encode()).hexdigest()[:12]


def path() -> Path:
    """The reranker GGUF, built on first use (from the cached MiniLM folder: a few seconds)."""

    def build(work: Path) -> Path:
        folder = minilm.hf_model()
        script, interpreter, env = minilm._toolchain(work)
        hf = work / "cross-encoder"
        cmd = [str(interpreter), "-c", MAKE, str(folder), str(hf), str(SEED)]
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            raise minilm.Unavailable(f"making the cross-encoder failed: {result.stderr.strip()[-600:]}")
        out = work / "reranker.gguf"
        minilm._run([str(interpreter), str(script), str(hf), "--outtype", "f16", "--outfile", str(out)],
                    env=env, cwd=script.parent)  # fmt: skip
        return out

    return built_once(minilm.cache_dir() / f"minilm-reranker-f16-{RECIPE}.gguf", build)


if __name__ == "__main__":
    print(path())
