"""Where a model's multimodal projector is: `--mmproj FILE`, else an `mmproj*.gguf` beside the
model file (llama.cpp's naming, in the same folder or Hugging Face snapshot)."""

from __future__ import annotations

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
    return found[0] if found else None


def missing(model: str) -> UsageError:
    return UsageError(
        f"{model} has no image projector: give one with --mmproj FILE (an mmproj*.gguf made for this model)"
    )
