"""GuideLLM (`pip install guidellm`), a third serving-benchmark client to hold llmcli's figures
against, in its own virtual environment cached outside the checkout beside vLLM's (tests/vllm_tools.py).

- `$LLMCLI_TOOLS_CACHE` (default `~/.cache/llmcli-tools`)/guidellm-VERSION/venv: `pip install
  guidellm==VERSION`, with a CPU build of torch where one lies among pip's find-links (GuideLLM
  needs torch only to import transformers' tokenizers; the default build pulls about 4 GB of CUDA
  libraries). A marker file is written last, so a venv left half-built is rebuilt.

Serialised with a file lock. `python tests/guidellm_tools.py` builds ahead of time and prints the
`guidellm` command."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

VERSION = "0.8.1"
CPU_TORCH = "torch==2.13.0+cpu"  # the build vLLM's CPU wheel takes; among pip's find-links on these machines
MARKER = ".llmcli-complete"


class GuidellmUnavailable(RuntimeError):
    """GuideLLM could not be installed here (no network to PyPI, no wheel for this platform)."""


def root() -> Path:
    default = os.path.join(os.path.expanduser("~"), ".cache", "llmcli-tools")
    base = os.environ.get("LLMCLI_TOOLS_CACHE") or default
    return Path(base) / f"guidellm-{VERSION}"


def _run(cmd: list[str], log: Path, check: bool = True) -> bool:
    with log.open("ab") as out:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        result = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if result.returncode != 0 and check:
        raise GuidellmUnavailable(f"{' '.join(cmd[:5])} ... failed; see {log}")
    return result.returncode == 0


def command() -> Path:
    """The `guidellm` console script of its own venv, installing it first when absent or half-built."""
    venv = root() / "venv"
    script = venv / "bin" / "guidellm"
    marker = venv / MARKER
    tag = f"{sys.version_info.major}.{sys.version_info.minor}"
    if marker.is_file() and marker.read_text().strip() == tag and script.exists():
        return script
    root().mkdir(parents=True, exist_ok=True)
    with (root() / "venv.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file() and marker.read_text().strip() == tag and script.exists():
            return script
        log = root() / "install.log"
        shutil.rmtree(venv, ignore_errors=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        _run([sys.executable, "-m", "venv", str(venv)], log)
        _run([*pip, "--upgrade", "pip"], log)
        if not _run([*pip, CPU_TORCH, f"guidellm=={VERSION}"], log, check=False):
            _run([*pip, f"guidellm=={VERSION}"], log)  # no CPU build here: the default torch
        _run([str(script), "--version"], log)
        marker.write_text(tag + "\n")
    return script


if __name__ == "__main__":
    print(command())
