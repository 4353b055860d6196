"""What identifies an item's work, written on its output line as `work`, so a rerun with the same
`-o FILE` skips an id only where the same prompt went to the same model under the same settings.

- `prompt`: the SHA-256 of the rendered request's inputs (its messages or raw text, content parts
  such as images included, and any images the request carries).
- `model`: its ref as given, and `file`: a cheap identity of the weights. A local GGUF is named by
  its size and the SHA-256 of its header (metadata and tensor descriptions: architecture,
  tokenizer, chat template, quantization, every tensor's shape and offset) and of the first and
  last 64 KiB of its tensor data: a few MB read rather than the whole file (1 GB and more read
  on every rerun would cost more than the check is worth), yet a file that differs in anything
  but the middle of its weights is told apart, and a copy of the same file matches. A served
  model is named by its endpoint and the name its server gives it (its file is on the server).
- `settings`: what changes the text beside the prompt: every sampling setting (the seed as asked:
  null where each item draws its own), the stop strings, the grammar or JSON schema (by hash), the
  response format, the system prompt (by hash) and the template mode (chat or raw text).

On the resume side, `Written` reads an existing output file once: each complete line's id and a
digest of its work (None for a line written before lines carried it), and refuses a file whose
lines are not batch output."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from llmcli.contract import Request, SamplingParams
from llmcli.errors import UsageError

SAMPLE = 64 << 10  # bytes of tensor data hashed at each end of a GGUF


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str).encode()


@lru_cache(maxsize=8)
def file_identity(path: str, size: int, mtime_ns: int) -> str:
    """`gguf:SIZE:SHA256` of a model file (the module's docstring says what is hashed); a file
    that is not a readable GGUF (a test's stand-in) by its first 1 MiB instead."""
    from llmcli import gguf_file

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        try:
            header = gguf_file.read_header(path, validate_tensors=False)
        except Exception:  # not a GGUF we can parse: its first MiB names it well enough
            digest.update(f.read(1 << 20))
        else:
            digest.update(f.read(header.data_offset))
            digest.update(f.read(SAMPLE))
            f.seek(max(header.data_offset, size - SAMPLE))
            digest.update(f.read(SAMPLE))
    return f"gguf:{size}:{digest.hexdigest()}"


def model_identity(ref: str, path: Path | None, info: Any) -> dict[str, str | None]:
    """The `model` part of `work`: `ref` as the user named it, and what the weights are."""
    if path is None:  # served: the endpoint and the server's name for the model
        return {"ref": ref, "file": None, "served": f"{info.path} {info.name}"}
    st = Path(path).stat()
    return {"ref": ref, "file": file_identity(str(path), st.st_size, st.st_mtime_ns), "served": None}


def prompt_digest(request: Request) -> str:
    images = [image.sha256 for image in request.images]
    return _sha(_canonical({"messages": request.messages, "text": request.text, "images": images}))


def settings(params: SamplingParams, *, system: str | None, raw: bool, response_format: str | None) -> dict:
    """The settings that change an answer's text, as `work.settings` records them."""
    kept = params.as_dict()
    kept["grammar"] = _sha(params.grammar.encode())[:16] if params.grammar else None
    schema = params.json_schema
    kept["json_schema"] = _sha(_canonical(schema))[:16] if schema is not None else None
    kept["response_format"] = response_format
    kept["system"] = _sha(system.encode())[:16] if system else None
    kept["template"] = "raw" if raw else "chat"
    return kept


def digest(done: dict) -> str:
    """What two `work` records are compared by: the model's ref is a name, not the weights."""
    model = {k: v for k, v in (done.get("model") or {}).items() if k != "ref"}
    kept = {"prompt": done.get("prompt"), "model": model, "settings": done.get("settings")}
    return _sha(_canonical(kept))[:32]


def difference(was: dict, now: dict) -> str:
    """What differs between a line's `work` and this run's for the same id, in a few words."""
    was_model, now_model = was.get("model") or {}, now["model"]
    if any(was_model.get(k) != now_model.get(k) for k in ("file", "served")):
        return f"another model ({was_model.get('ref')}, now {now_model['ref']})"
    a, b = was.get("settings") or {}, now["settings"]
    changed = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    if changed:
        k = changed[0]
        return f"other settings ({k} {json.dumps(a.get(k))}, now {json.dumps(b.get(k))})"
    return "another prompt (the input changed)"


@dataclass
class Written:
    """An existing `-o FILE`: the id of each complete line, with its work's digest (None: a line
    that carries no `work`, written before lines did), and whether they are OpenAI batch lines."""

    path: Path | None = None
    ids: dict[str, str | None] = field(default_factory=dict)
    openai: bool | None = None  # None: no line yet

    @property
    def unchecked(self) -> int:
        return sum(1 for d in self.ids.values() if d is None)

    @classmethod
    def read(cls, path: Path) -> Written:
        """The complete lines of `path` (a last line a kill cut short is not one); a line that is
        not a batch output line: UsageError, before anything else is done."""
        written = cls(path)
        if not path.exists():
            return written
        with open(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                if not raw.endswith(b"\n"):
                    break
                if not raw.strip():
                    continue
                doc = _loads(raw)
                key, openai = _line_id(doc)
                if key is None:
                    raise UsageError(f"-o {path}: line {n} is not a line of `llmcli batch`'s output: "
                                     "write to another file, or --overwrite to replace this one")  # fmt: skip
                if written.openai is not None and openai != written.openai:
                    raise UsageError(f"-o {path}: line {n} mixes OpenAI batch lines and llmcli's")
                written.openai = openai
                work_ = (doc.get("llmcli") or {}).get("work") if openai else doc.get("work")
                written.ids[key] = digest(work_) if isinstance(work_, dict) and "settings" in work_ else None
        return written

    def work_of(self, key: str) -> dict | None:
        """The `work` recorded for `key` (read again: only digests are kept in memory)."""
        assert self.path is not None
        with open(self.path, "rb") as f:
            for raw in f:
                doc = _loads(raw) if raw.endswith(b"\n") and raw.strip() else None
                key_, openai = _line_id(doc)
                if key_ == key and doc is not None:
                    return (doc.get("llmcli") or {}).get("work") if openai else doc.get("work")
        return None


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _line_id(doc: Any) -> tuple[str | None, bool]:
    """A batch output line's id (as a string, as inputs are matched) and whether it is an OpenAI
    batch line; (None, False) for anything else."""
    if not isinstance(doc, dict):
        return None, False
    if "custom_id" in doc and "response" in doc and isinstance(doc["custom_id"], (str, int)):
        return str(doc["custom_id"]), True
    if "id" in doc and "record" in doc and isinstance(doc["id"], (str, int)):
        return str(doc["id"]), False
    return None, False
