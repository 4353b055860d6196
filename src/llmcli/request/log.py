"""The one hook after each request: its record, prompt and conversation id written to the
conversation log (llmcli.log)."""

from __future__ import annotations

from llmcli import render
from llmcli.contract import Done, Prepared, Request
from llmcli.log.rows import Logged


def log_request(
    engine, request: Request, log: Logged, done: Done | None, prepared: Prepared | None,
    *, error: str | None = None, partial: str = "", tool_calls: list[dict] | None = None,
) -> int | None:  # fmt: skip
    """The one hook after each request: its record, prompt and conversation id to the log. Never
    raises (a log that cannot be written is one warning line, see log.writer.write); returns the row
    id (0: left for the database, `log.writer.defer`; None: not logged)."""
    from llmcli import record
    from llmcli.log import rows, writer
    from llmcli.media.placed import placed_images

    if done is not None and done.finish_reason == "interrupted" and not done.text:
        return None  # stopped before its first token: the request did not happen (chat keeps nothing)
    try:
        rec = record.build(
            ref=log.ref, info=engine.info, params=request.params, done=done,
            prompt_format=prepared.prompt_format if prepared is not None else None,
            constraint=log.constraint if request.params.grammar else None,
            constraint_complete=done is not None and done.constraint_complete is not False,
            prompt_cache=log.prompt_cache, error=error, partial_text=partial, tool_calls=tool_calls,
            fragments=request.fragments,
            retrieval=log.retrieval,
        )  # fmt: skip
        row = rows.row_values(
            rec, cid=log.cid, command=log.command, messages=request.messages, text=request.text,
            think=request.think, grammar=request.params.grammar,
            tokens=done.tokens if done is not None else None, session=log.session, kv_state=log.kv_state,
            images=rows.attachments(placed_images(request), done.stats.images if done is not None else [],
                                    request.fragments),
            fragments=request.fragments,
        )  # fmt: skip
    except Exception as exc:  # a record that cannot be built is a bug, but never costs the answer
        render.warn(f"not logged: {exc}")
        return None
    if log.deferred:
        return 0 if writer.defer(row) else None
    return writer.write(row)
