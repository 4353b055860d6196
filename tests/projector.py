"""A tiny random CLIP projector for SmolLM2-135M, the image fixture of the tests (see TESTING.md).

No vision-language model is on PyPI, so the tests make a projector: a random CLIP vision tower
(hidden 64, 3 layers, 64 x 64 images in 16-pixel patches) and a LLaVA-1.5 MLP projector into
SmolLM2's embedding width (576), its second layer not zero so that different images give the
model different embeddings. llama.cpp's own legacy converter
(`tools/mtmd/legacy-models/convert_image_encoder_to_gguf.py` of the vendored tree that
`llamacpp_tools` unpacks) turns it into an `mmproj` GGUF; it runs with the vLLM venv's
interpreter (a CPU torch) and the converter's transformers, as `minilm.py` does.

The weights come from a fixed seed, so a rebuild is byte-identical; the file is kept under
`$LLMCLI_TOOLS_CACHE/models`, named by a hash of this builder's recipe, and appears only when
complete. `path()` raises `Unavailable` when it cannot be built here, and the tests skip.
`python tests/projector.py` builds it and prints the path."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from cached import built_once

sys.path.insert(0, str(Path(__file__).parent))

import minilm  # noqa: E402  the shared toolchain: converter source, interpreter, environment

Unavailable = minilm.Unavailable
WIDTH = 576  # SmolLM2-135M's embedding width

# Run by the vLLM venv's interpreter: writes the random vision tower and projector into argv[1].
BUILD = f"""
import sys, torch, transformers
torch.manual_seed(57)
out = sys.argv[1]
config = transformers.CLIPVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
    num_attention_heads=4, image_size=64, patch_size=16, projection_dim=64)
model = transformers.CLIPVisionModel(config)
model.save_pretrained(out, safe_serialization=False)
g = torch.Generator().manual_seed(58)
projector = {{
    "model.mm_projector.0.weight": torch.randn({WIDTH}, 64, generator=g) * 0.2,
    "model.mm_projector.0.bias": torch.randn({WIDTH}, generator=g) * 0.05,
    "model.mm_projector.2.weight": torch.randn({WIDTH}, {WIDTH}, generator=g) * 0.06,
    "model.mm_projector.2.bias": torch.randn({WIDTH}, generator=g) * 0.05,
}}
torch.save(projector, out + "/llava.projector")
"""


def _recipe() -> str:
    return hashlib.sha256(BUILD.encode()).hexdigest()[:12]


def path() -> Path:
    """The projector GGUF, built on first use (seconds, once the vLLM venv exists)."""
    def build(work: Path) -> Path:
        script, interpreter, env = minilm._toolchain(work)
        converter = (
            script.parent / "tools" / "mtmd" / "legacy-models" / "convert_image_encoder_to_gguf.py"
        )
        if not converter.exists():
            raise Unavailable(f"no {converter.name} in {script.parent}")
        folder = work / "clip"
        minilm._run([str(interpreter), "-c", BUILD, str(folder)], env=env)
        out = work / "out"
        minilm._run(
            [
                str(interpreter),
                str(converter),
                "-m",
                str(folder),
                "--llava-projector",
                str(folder / "llava.projector"),
                "--output-dir",
                str(out),
                "--clip-model-is-vision",
                "--projector-type",
                "mlp",
            ],  # fmt: skip
            env=env,
        )
        built = sorted(out.glob("mmproj-*.gguf"))
        if not built:
            raise Unavailable("the converter wrote no mmproj-*.gguf")
        return built[0]

    return built_once(minilm.cache_dir() / f"mmproj-smollm2-tiny-{_recipe()}.gguf", build)


if __name__ == "__main__":
    print(path())
