"""Run one request through an engine and collect what front ends report about it.

`run_generate` consumes the engine's event stream: text pieces go to stdout as they come, and
the final `Done` becomes a `Result` that knows how to print itself as the `--stats` line or the
`--json` record. Ctrl-C raises the engine's abort flag; what was produced is kept.
"""

from __future__ import annotations

import sys
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from llmcli import __version__, prompting, render, signals
from llmcli.contract import Done, SamplingParams, ThreadsChanged, takes_messages
from llmcli.loader import Loaded


@dataclass
class Result:
    loaded: Loaded
    done: Done
    params: SamplingParams
    prompt_format: str
    extra: dict = field(default_factory=dict)
    constraint: str | None = None  # "grammar" or "json_schema" when the output was constrained
    prompt_cache: dict | None = None  # --prompt-cache: the file, what it gave, what was written

    def stats_line(self) -> str:
        from llmcli.render.stats import stats_line

        return stats_line(self.done.stats, load=True)

    @property
    def incomplete(self) -> bool:
        """Constrained output that the grammar does not accept: cut short before it was done."""
        return self.constraint is not None and self.done.constraint_complete is False

    def incomplete_error(self):
        from llmcli.errors import IncompleteOutputError

        return IncompleteOutputError(
            *incomplete_message(self.done, self.params, self.constraint or "grammar")
        )

    def record(self) -> dict:
        """The `--json` document."""
        s, info = self.done.stats, self.loaded.engine.info
        params = self.params.as_dict()
        params["seed"] = self.done.seed
        if s.sources:  # a served model: its own record, saying where each figure came from
            return served_record(self, params)
        return {
            "text": self.done.text,
            "finish_reason": self.done.finish_reason,
            "model": {
                "ref": self.loaded.ref,
                "path": info.path,
                "name": info.name,
                "architecture": info.architecture,
                "quantization": info.quantization,
                "size_bytes": info.size_bytes,
                "parameters": info.n_params,
                "context_size": s.context_size,
                "gpu_layers": info.gpu_layers,
                "weight_repack": info.repack,
                "cache_type_k": info.type_k,
                "cache_type_v": info.type_v,
                "type": info.model_type,
            },
            "prompt_format": self.prompt_format,
            "constraint": None
            if self.constraint is None
            else {"kind": self.constraint, "complete": not self.incomplete},
            "params": params,
            "usage": {
                "prompt_tokens": s.prompt_tokens,
                "cached_tokens": s.cached_tokens,
                "prefill_tokens": s.prefill_tokens,
                "completion_tokens": s.completion_tokens,
                "decode_tokens": s.decode_tokens,
                "total_tokens": s.prompt_tokens + s.completion_tokens,
            },
            "timings": {
                "load_ms": round(s.load_ms, 3),
                "prefill_ms": round(s.prefill_ms, 3),
                "prefill_tokens_per_s": round(s.prefill_tps, 3),
                "decode_ms": round(s.decode_ms, 3),
                "decode_tokens_per_s": round(s.decode_tps, 3),
                "ttft_ms": round(s.ttft_ms, 3),
                "total_ms": round(s.total_ms, 3),
            },
            "threads": s.threads,
            "speculative": speculative_record(s),
            "prompt_cache": self.prompt_cache,
            "versions": versions(info.backend),
        }


def served_record(result: Result, params: dict) -> dict:
    """The `--json` document for a served model (engine/served.py): the endpoint instead of a file,
    unknown counts as null, `sources` naming where each figure came from ("usage": the server's
    usage; "chunks": counted streamed text chunks, an estimate; "timings": llama-server's timings;
    "client": measured here on the monotonic clock), and the server's own `server_timings`."""
    s, engine = result.done.stats, result.loaded.engine
    known = lambda name, value: None if s.sources.get(name) == "unknown" else value  # noqa: E731
    return {
        "text": result.done.text,
        "finish_reason": result.done.finish_reason,
        "model": {
            "ref": result.loaded.ref,
            "endpoint": engine.info.path,
            "name": engine.info.name,
            "server": engine.info.architecture,
            "context_size": s.context_size or None,
        },
        "prompt_format": result.prompt_format,
        "constraint": None
        if result.constraint is None
        else {"kind": result.constraint, "complete": not result.incomplete},
        "params": params,
        "usage": {
            "prompt_tokens": known("prompt_tokens", s.prompt_tokens),
            "cached_tokens": known("cached_tokens", s.cached_tokens),
            "prefill_tokens": known("prompt_tokens", s.prefill_tokens),
            "completion_tokens": s.completion_tokens,
            "decode_tokens": s.decode_tokens,
            "total_tokens": known("prompt_tokens", s.prompt_tokens + s.completion_tokens),
        },
        "timings": {
            "ttft_ms": round(s.ttft_ms, 3),
            "prefill_ms": round(s.prefill_ms, 3),
            "prefill_tokens_per_s": known("prompt_tokens", round(s.prefill_tps, 3)),
            "decode_ms": round(s.decode_ms, 3),
            "decode_tokens_per_s": round(s.decode_tps, 3),
            "total_ms": round(s.total_ms, 3),
        },
        "sources": {**s.sources, "prefill_tokens_per_s": "client", "decode_tokens_per_s": "client"},
        "server_timings": s.server or None,
        "versions": {"llmcli": __version__, "server": engine.info.architecture},
    }


def speculative_record(s) -> dict | None:
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


def versions(backend: str) -> dict:
    from llmcli.engine.backend import llama_cpp_version

    return {"llmcli": __version__, "llama_cpp_python": llama_cpp_version(), "backend": backend}


def incomplete_message(done: Done, params: SamplingParams, constraint: str) -> tuple[str, str | None]:
    """What cut the constrained output, at how many tokens, and how to give it room."""
    what = "the JSON schema" if constraint == "json_schema" else "the grammar"
    n = done.stats.completion_tokens
    if done.finish_reason == "interrupted":
        return f"{what} was not satisfied: interrupted at {n} tokens", None
    if done.finish_reason == "length" and params.max_tokens and n >= params.max_tokens:
        return (
            f"{what} was not satisfied: cut by --max-tokens at {n} tokens",
            "raise -n/--max-tokens; 0 means no limit",
        )
    if done.finish_reason == "length":
        size = done.stats.context_size
        return (
            f"{what} was not satisfied: the context ({size} tokens) filled at {n} tokens",
            "raise -c/--ctx-size",
        )
    return (
        f"{what} was not satisfied: cut by a --stop string at {n} tokens",
        "choose a stop string the output cannot contain",
    )


def run_generate(
    loaded: Loaded,
    text: str,
    params: SamplingParams,
    *,
    system: str | None = None,
    raw: bool = False,
    stream_stdout: bool = True,
    constraint: str | None = None,
    prompt_cache: Path | None = None,
    prompt_cache_ro: bool = False,
) -> Result:
    """Run one prompt; `raw` continues it as plain text, else it becomes a user turn (the caller
    decides between the two with `prompting.generate_format`). With `prompt_cache`, the KV state
    in that file is reused for the longest common prefix and (unless `prompt_cache_ro`) the file
    is rewritten with this run's state afterwards."""
    engine = loaded.engine
    if takes_messages(engine):  # a served model: the server applies the template (engine/served.py)
        messages = None if raw else prompting.messages_for(text, system)
        done = consume(engine, text, params, stream_stdout=stream_stdout, messages=messages)
        return Result(loaded, done, params, "raw" if raw else "server",
                      constraint=constraint if params.grammar else None)  # fmt: skip
    if raw:
        tokens, fmt_name = prompting.raw_tokens(engine, text), "raw"
    else:
        fmt = prompting.prompt_format(engine)
        tokens = prompting.chat_tokens(engine, prompting.messages_for(text, system), fmt)
        fmt_name = fmt.source
    cache: dict | None = None
    if prompt_cache is not None:
        import time

        from llmcli import kvstore

        started = time.perf_counter()
        restored = kvstore.restore(engine, prompt_cache, tokens, what="--prompt-cache")
        restore_ms = (time.perf_counter() - started) * 1000
        cache = {"path": str(prompt_cache), "restored_tokens": restored, "restore_ms": round(restore_ms, 3),
                 "read_only": prompt_cache_ro, "saved_bytes": 0}  # fmt: skip
    done = consume(engine, tokens, params, stream_stdout=stream_stdout)
    for notice in (exact_limit_notice(done.stats, engine.info), draft_context_notice(done.stats)):
        if notice:
            render.info(notice)
    if cache is not None:
        done.stats.ttft_ms += cache["restore_ms"]  # the wait for the first token includes the read
        done.stats.total_ms += cache["restore_ms"]
        if not prompt_cache_ro and done.finish_reason != "interrupted":
            saved = kvstore.save(engine, Path(cache["path"]), cap=None)
            cache.update(saved_bytes=saved.bytes, save_ms=round(saved.ms, 3))
    return Result(loaded, done, params, fmt_name, constraint=constraint if params.grammar else None,
                  prompt_cache=cache)  # fmt: skip


def exact_limit_notice(s, info=None, chat: bool = False) -> str | None:
    """One line when speculation was asked for and `--spec-exact` let it verify nothing: on this
    build no batch of two or more positions was bit-identical to one-token steps at the context
    length the answer ran at (`exact_blocked` steps), so the answer was decoded plainly. An answer
    that drafted nothing only because nothing matched gets no notice. With an f16/f32 cache
    it names bf16 and q8_0 too: llama.cpp's CPU flash attention splits one query's keys across
    threads only for K and V both f16 or both f32, so with either a step and a batch compute alike.
    `chat`: in the REPL's words (`/set spec-exact off`, `/set cache-type-k bf16`)."""
    spec = s.speculative
    if not spec or not spec.get("exact") or s.drafted_tokens or not s.decode_tokens:
        return None
    if not spec.get("exact_blocked"):
        return None
    off, types = "--no-spec-exact", "-ctk bf16 -ctv bf16, or q8_0"
    if chat:
        off, types = "/set spec-exact off", "/set cache-type-k bf16 and /set cache-type-v bf16, or q8_0"
    return (
        "speculative decoding drafted nothing: at this context length only one-position batches are "
        f"bit-identical to plain decoding on this build (--spec-exact); {off} verifies in any "
        "batch (the same distribution, but at temperature 0 a near-tie may come out differently)"
        + (
            f"; a bf16 or q8_0 KV cache ({types}) keeps batches exact at long contexts"
            if info is not None
            and info.backend == "CPU"
            and info.type_k in ("f16", "f32")
            and info.type_k == info.type_v
            else ""
        )
    )


def draft_context_notice(s) -> str | None:
    """One line when the draft model's context (-cd) was too small for the prompt and answer at
    some steps (`draft_ctx_blocked`), which were then decoded plainly."""
    spec = s.speculative or {}
    blocked = spec.get("draft_ctx_blocked")
    if not blocked:
        return None
    what = "drafted nothing" if not s.drafted_tokens else f"did not draft at {blocked} steps"
    return (
        f"speculative decoding {what}: the draft model's context ({spec.get('n_ctx_draft')} tokens, "
        "-cd) cannot hold the prompt and answer; a larger -cd (0: the target's) lets it draft"
    )


def threads_changed(event: ThreadsChanged) -> str:
    """The --debug line for one decision of the adaptive thread policy."""
    reasons = {"probe": "measuring", "drift": "the step time changed: measuring again",
               "recheck": "re-checking", "settled": "fastest measured"}  # fmt: skip
    why = reasons.get(event.reason, event.reason)
    return f"threads: {event.phase} now {event.threads} ({why})"


def consume(
    engine, tokens: str | list[int], params: SamplingParams, *, stream_stdout: bool,
    messages: list[dict[str, str]] | None = None,
) -> Done:  # fmt: skip
    """Drive the stream; print text pieces to stdout (ending with a newline) if asked."""
    from llmcli.errors import StreamBrokenError
    from llmcli.render.stream import PlainSink

    sink = PlainSink(sys.stdout) if stream_stdout else None
    try:
        done = drive(engine, tokens, params, sink, messages=messages)
    except StreamBrokenError:  # a served model's stream broke off: its partial text ends its line
        if sink is not None:
            sink.stop()
        raise
    if sink is not None:
        sink.stop()
    return done


def drive(
    engine, tokens: str | list[int], params: SamplingParams, sink=None, *,
    messages: list[dict[str, str]] | None = None,
) -> Done:  # fmt: skip
    """One request, as generate and each chat turn run it: Ctrl-C through the signal watcher, every
    event to `sink`, the thread policy's decisions to --debug; returns the final Done. With
    `messages` (a served model, see `base.takes_messages`) the conversation is sent instead."""
    done: Done | None = None
    if messages is not None:
        stream = engine.stream_messages(messages, params)
    else:
        stream = engine.stream(tokens, params)
    with signals.interrupt_on_sigint(engine.interrupt) as pressed_before, closing(stream) as events:
        for event in events:
            if pressed_before:  # Ctrl-C before the request began: it stops now, at its first event
                engine.interrupt()
                pressed_before = False
            if sink is not None:
                sink(event)
            if isinstance(event, ThreadsChanged):
                render.debug_log(threads_changed(event))
            elif isinstance(event, Done):
                done = event
    assert done is not None
    return done
