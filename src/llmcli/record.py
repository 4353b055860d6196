"""The one record of a request: what `generate --json` prints, and what chat keeps of each turn.

One builder for local and served models alike, with one shape: a field that does not apply to a
model (a served model's file path, a local model's server timings) is null, never absent. The shape
is published as a JSON Schema, `docs/record.schema.json`, whose `schema_version` this module writes;
the tests validate every record they produce against it. Bump `SCHEMA_VERSION` with any change
that could break a reader (a field removed, renamed or retyped); adding a field is not one.

Served models say where each figure came from (`sources`): "usage" (the server's usage), "chunks"
(streamed text chunks counted here, an estimate), "timings" (llama-server's timings), "client"
(measured here on the monotonic clock); a count the server did not report is null."""

from __future__ import annotations

from typing import Any

from llmcli import __version__
from llmcli.contract import Done, ModelInfo, SamplingParams, Stats

SCHEMA_VERSION = 1


def build(
    *,
    ref: str,
    info: ModelInfo,
    params: SamplingParams,
    done: Done | None,
    prompt_format: str | None,
    constraint: str | None = None,
    constraint_complete: bool | None = None,
    prompt_cache: dict | None = None,
    error: str | None = None,
    partial_text: str = "",
    tool_calls: list[dict] | None = None,
    fragments: tuple = (),
    retrieval: dict | None = None,
) -> dict[str, Any]:
    """The record of one request. `done` None: it failed before its end (`error` says why, and
    `partial_text` is what was streamed); its counts and timings are then unknown (null).
    `tool_calls`: each call run in the answer (request/tool_loop.py); None: no tools offered.
    `fragments`: the request's text attachments (media.fragment.Placed), after its images in
    `attachments`.
    `retrieval`: the passages an answer was given (request/grounding.py); None: none."""
    s = done.stats if done is not None else None
    used = params.as_dict()
    if done is not None:
        used["seed"] = done.seed
    served = info.server is not None
    return {
        "schema_version": SCHEMA_VERSION,
        "text": done.text if done is not None else partial_text,
        "reasoning": (done.reasoning or None) if done is not None else None,
        "finish_reason": done.finish_reason if done is not None else "error",
        "error": error,
        "model": _model(ref, info, s, served),
        "prompt_format": prompt_format,
        "constraint": None
        if constraint is None
        else {"kind": constraint, "complete": bool(constraint_complete)},
        "params": used,
        "usage": _usage(s) if s is not None else None,
        "timings": _timings(s, served) if s is not None else None,
        "threads": s.threads if s is not None and not served else None,
        "speculative": speculative(s) if s is not None else None,
        "prompt_cache": prompt_cache,
        "sources": _sources(s) if s is not None and served else None,
        "server_timings": (s.server or None) if s is not None else None,
        "tool_calls": tool_calls,
        "attachments": ([dict(a) for a in (s.images if s is not None else [])]
                        + [p.attachment() for p in fragments]) or None,
        "retrieval": retrieval,
        "versions": versions(info),
    }


def _model(ref: str, info: ModelInfo, s: Stats | None, served: bool) -> dict[str, Any]:
    local = (lambda value: None) if served else (lambda value: value)
    return {
        "ref": ref,
        "path": local(info.path),
        "endpoint": info.path if served else None,
        "server": info.server,
        "name": info.name,
        "architecture": local(info.architecture),
        "quantization": local(info.quantization),
        "size_bytes": local(info.size_bytes),
        "parameters": local(info.n_params),
        "context_size": (s.context_size or None) if s is not None else None,
        "gpu_layers": local(info.gpu_layers),
        "weight_repack": local(info.repack),
        "cache_type_k": local(info.type_k),
        "cache_type_v": local(info.type_v),
        "type": local(info.model_type),
    }


def _known(s: Stats, name: str, value: Any) -> Any:
    """`value`, or null where a served model's server did not report the count it derives from."""
    return None if s.sources.get(name) == "unknown" else value


def _usage(s: Stats) -> dict[str, Any]:
    return {
        "prompt_tokens": _known(s, "prompt_tokens", s.prompt_tokens),
        "cached_tokens": _known(s, "cached_tokens", s.cached_tokens),
        "prefill_tokens": _known(s, "prompt_tokens", s.prefill_tokens),
        "completion_tokens": s.completion_tokens,
        "reasoning_tokens": _known(s, "reasoning_tokens", s.reasoning_tokens),
        "decode_tokens": s.decode_tokens,
        "image_tokens": _known(s, "image_tokens", s.image_tokens) if s.images else None,
        "total_tokens": _known(s, "prompt_tokens", s.prompt_tokens + s.completion_tokens),
    }


def _timings(s: Stats, served: bool) -> dict[str, Any]:
    return {
        "load_ms": None if served else round(s.load_ms, 3),  # a server loaded its model before
        "prefill_ms": round(s.prefill_ms, 3),
        "prefill_tokens_per_s": _known(s, "prompt_tokens", round(s.prefill_tps, 3)),
        "decode_ms": round(s.decode_ms, 3),
        "decode_tokens_per_s": round(s.decode_tps, 3) if s.decode_measured else None,  # null: unmeasurable
        "ttft_ms": round(s.ttft_ms, 3),
        "total_ms": round(s.total_ms, 3),
        "tool_ms": round(s.tool_ms, 3),
        "image_ms": round(s.image_ms, 3) if s.images and not served else None,  # a server's prefill holds it
        "reasoning": _part(s.reasoning_ttft_ms, s.reasoning_ms, s.reasoning_tokens),
        "answer": _part(s.answer_ttft_ms, s.answer_ms, s.completion_tokens - s.reasoning_tokens)
        if s.reasoning_ttft_ms is not None
        else None,
    }


def _part(ttft_ms: float | None, ms: float, tokens: int) -> dict[str, Any] | None:
    """A reasoning model's reasoning or answer, timed apart (wall clock): null where it never came."""
    if ttft_ms is None:
        return None
    return {
        "ttft_ms": round(ttft_ms, 3),
        "ms": round(ms, 3),
        "tokens": tokens,
        "tokens_per_s": round(tokens / ms * 1000, 3) if ms > 0 else None,
    }


def _sources(s: Stats) -> dict[str, str]:
    return {**s.sources, "prefill_tokens_per_s": "client", "decode_tokens_per_s": "client"}


def speculative(s: Stats) -> dict | None:
    """Which proposer ran with which settings, and what it gave (None without speculation)."""
    if not s.speculative:
        return None
    return {
        **s.speculative,
        "drafted_tokens": s.drafted_tokens,
        "accepted_tokens": s.accepted_tokens,
        "acceptance": round(s.acceptance, 4) if s.drafted_tokens else None,  # nothing proposed: no rate
        "target_passes": s.target_passes,
        "tokens_per_pass": round(s.tokens_per_pass, 4),
    }


def versions(info: ModelInfo) -> dict[str, Any]:
    if info.server is not None:  # this process ran no llama.cpp for it
        return {"llmcli": __version__, "llama_cpp_python": None, "backend": None, "server": info.server}
    from llmcli.engine.backend import llama_cpp_version

    return {"llmcli": __version__, "llama_cpp_python": llama_cpp_version(), "backend": info.backend,
            "server": None}  # fmt: skip


def turn(record: dict[str, Any]) -> dict[str, Any]:
    """What a saved chat session keeps of a turn's record, beside the answer (a file format: its
    keys stay): the finish, the seed, the counts and the timings, and speculation's counts."""
    usage, timings, spec = record["usage"] or {}, record["timings"] or {}, record["speculative"]
    kept = {
        "finish_reason": record["finish_reason"],
        "seed": record["params"]["seed"],
        "prompt_tokens": usage.get("prompt_tokens"),
        "cached_tokens": usage.get("cached_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "prefill_ms": timings.get("prefill_ms"),
        "decode_ms": timings.get("decode_ms"),
        "ttft_ms": timings.get("ttft_ms"),
    }
    if record.get("tool_calls"):  # the calls themselves are messages of the history
        kept.update(tool_calls=len(record["tool_calls"]), tool_ms=timings.get("tool_ms"))
    if spec:
        kept.update(drafted_tokens=spec["drafted_tokens"], accepted_tokens=spec["accepted_tokens"],
                    target_passes=spec["target_passes"])  # fmt: skip
    return kept
