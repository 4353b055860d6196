"""Where a model's multimodal projector is: `--mmproj FILE`, else an `mmproj*.gguf` beside the
model file (llama.cpp's naming, in the same folder or Hugging Face snapshot; `pull` puts it
there)."""

from __future__ import annotations

import re
from pathlib import Path

from llmcli.errors import UsageError


def find(model_path: str | None, explicit: str | None) -> Path | None:
    """The projector file, or None where there is none."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise UsageError(f"--mmproj {explicit}: no such file")
        return path
    if not model_path:
        return None
    folder = Path(model_path).parent
    found = sorted(p for p in folder.glob("mmproj*.gguf") if p.is_file())
    if len(found) < 2:
        return found[0] if found else None
    # several (a snapshot that pulled two quantizations): the one sharing most of the model's name
    # parts (its quantization: `pull` fetched it for that model), else F16, else the first by name
    parts = _parts(Path(model_path).name)
    return min(found, key=lambda p: (-len(parts & _parts(p.name)), "F16" not in _parts(p.name), p.name))


def _parts(name: str) -> set[str]:
    return set(re.split(r"[-.]", name.upper().removesuffix(".GGUF")))


def missing(model: str) -> UsageError:
    return UsageError(
        f"{model} has no image projector: give one with --mmproj FILE (an mmproj*.gguf made for this model)"
    )
