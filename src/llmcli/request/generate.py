"""Run one `generate` request and collect what front ends report about it.

`run_generate` sends one `Request` and consumes the engine's events: text pieces go to stdout as
they come, and the final `Done` becomes a `Result` that knows how to print itself as the `--stats`
line or the `--json` record (llmcli.record). Ctrl-C raises the engine's abort flag; what was
produced is kept.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from llmcli import prompting, render
from llmcli.contract import Done, Prepared, Request, SamplingParams
from llmcli.loader import Loaded
from llmcli.log.rows import Logged
from llmcli.request.endings import incomplete_message, missing_answer
from llmcli.request.spec_notices import draft_context_notice, exact_limit_notice
from llmcli.request.tool_loop import ToolLoop, ToolRefused, ToolTurn, drive_tools


@dataclass
class Result:
    loaded: Loaded
    done: Done
    params: SamplingParams
    prompt_format: str
    extra: dict = field(default_factory=dict)
    constraint: str | None = None  # "grammar" or "json_schema" when the output was constrained
    prompt_cache: dict | None = None  # --prompt-cache: the file, what it gave, what was written
    tool_calls: list[dict] | None = None  # the calls run (record field `tool_calls`), None: no tools
    answer: str | None = None  # the final answer, after tool calls the last round's (None: done.text)
    fragments: tuple = ()  # the request's text attachments (media.fragment.Placed)
    retrieval: dict | None = None  # an answer from passages (request/grounding.py): the record's block

    def stats_line(self) -> str:
        from llmcli.render.stats import retrieval_part, stats_line

        line = stats_line(self.done.stats, load=True)
        return line if self.retrieval is None else retrieval_part(self.retrieval) + " · " + line

    @property
    def incomplete(self) -> bool:
        """Constrained output that the grammar does not accept: cut short before it was done."""
        return self.constraint is not None and self.done.constraint_complete is False

    def incomplete_error(self):
        from llmcli.errors import IncompleteOutputError

        return IncompleteOutputError(
            *incomplete_message(self.done, self.params, self.constraint or "grammar")
        )

    def missing_answer(self):
        """The error to exit with when the output holds no answer (see `missing_answer`), else None."""
        answer = self.done.text if self.answer is None else self.answer
        return missing_answer(self.done, answer, len(self.tool_calls or []), self.params)

    def record(self) -> dict:
        """The `--json` document (llmcli.record)."""
        from llmcli import record

        return record.build(
            ref=self.loaded.ref, info=self.loaded.engine.info, params=self.params, done=self.done,
            prompt_format=self.prompt_format, constraint=self.constraint,
            constraint_complete=not self.incomplete, prompt_cache=self.prompt_cache,
            tool_calls=self.tool_calls, fragments=self.fragments, retrieval=self.retrieval,
        )  # fmt: skip


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
    show_thinking: bool = True,
    think: bool | None = None,
    history: list[dict[str, str]] | None = None,
    log: Logged | None = None,
    tool_loop: ToolLoop | None = None,
    images: tuple = (),
    history_images: dict[int, tuple] | None = None,
    fragments: tuple = (),
) -> Result:
    """Run one prompt (`images`: media.image.Image for it; `history_images`: those of `history`'s
    user messages, by their index in it); `raw` continues it as plain text, else it becomes a user
    turn (the caller decides between the two with `prompting.generate_format`). With
    `prompt_cache`, the KV state in that file is reused for the longest common prefix and (unless
    `prompt_cache_ro`) the file is rewritten with this run's state afterwards. `history`: the
    messages of a conversation this prompt continues (`--continue`), between the system prompt and
    it. `log`: how the request is logged (None: it is not)."""
    engine = loaded.engine
    if raw:
        request = Request(params, text=text, fragments=fragments)
    else:
        messages = prompting.messages_for(text, system)
        if history:
            messages[-1:-1] = history
        offset = 1 if messages[0]["role"] == "system" else 0  # history goes after the system prompt
        placed = {offset + i: imgs for i, imgs in (history_images or {}).items()} if history else {}
        request = Request(params, messages=messages, think=think, images=tuple(images), history_images=placed,
                          fragments=fragments)  # fmt: skip
        if tool_loop is not None:
            request.tools = tool_loop.toolset.specs()
    cache: dict | None = None
    if prompt_cache is not None:
        cache = {"path": str(prompt_cache), "restored_tokens": 0, "restore_ms": 0.0,
                 "read_only": prompt_cache_ro, "saved_bytes": 0}  # fmt: skip
        request.before_prefill = lambda tokens: _restore_prompt_cache(engine, cache, tokens)
        if log is not None:
            log.prompt_cache = cache
            log.kv_state = log.kv_state or (None if prompt_cache_ro else str(prompt_cache))
    done, prepared, turn = consume(engine, request, stream_stdout=stream_stdout, show_thinking=show_thinking,
                                   tool_loop=tool_loop, log=log)  # fmt: skip
    for notice in (exact_limit_notice(done.stats, engine.info), draft_context_notice(done.stats)):
        if notice:
            render.info(notice)
    if cache is not None and not prompt_cache_ro and done.finish_reason != "interrupted":
        from llmcli import kvstore

        saved = kvstore.save(engine, Path(cache["path"]), cap=None)
        cache.update(saved_bytes=saved.bytes, save_ms=round(saved.ms, 3))
    return Result(loaded, done, params, prepared.prompt_format,
                  constraint=constraint if params.grammar else None, prompt_cache=cache,
                  tool_calls=turn.calls if tool_loop is not None else None,
                  answer=turn.last_text, fragments=fragments)  # fmt: skip


def _restore_prompt_cache(engine, cache: dict, tokens: list[int]) -> float:
    """--prompt-cache: load the file's KV state for the longest common prefix of `tokens`."""
    import time

    from llmcli import kvstore

    started = time.perf_counter()
    cache["restored_tokens"] = kvstore.restore(engine, Path(cache["path"]), tokens, what="--prompt-cache")
    cache["restore_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return cache["restore_ms"]


def consume(
    engine,
    request: Request,
    *,
    stream_stdout: bool,
    show_thinking: bool = True,
    tool_loop: ToolLoop | None = None,
    log: Logged | None = None,
) -> tuple[Done, Prepared, ToolTurn]:
    """Drive the request (and its tool calls, with `tool_loop`); print text pieces to stdout (ending
    with a newline) if asked, and a reasoning model's reasoning to stderr (dim on a terminal) unless
    `show_thinking` is off."""
    from llmcli.errors import StreamBrokenError
    from llmcli.render.stream import PlainSink

    sink = None
    if stream_stdout:
        thoughts = sys.stderr if show_thinking and not render.quiet() else None
        sink = PlainSink(sys.stdout, thoughts, dim=render.color_enabled(sys.stderr))
    try:
        done, prepared, turn = drive_tools(engine, request, sink, tool_loop, log=log)
    except (StreamBrokenError, ToolRefused):  # what was printed ends its line
        if sink is not None:
            sink.stop()
        raise
    if sink is not None:
        sink.stop()
    return done, prepared, turn
