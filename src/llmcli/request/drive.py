"""Drive one request through an engine, as generate and each chat turn run it: Ctrl-C through the
signal watcher (the engine's abort flag; what was produced is kept), every event to a sink, the
thread policy's decisions to --debug, and the request logged when it ends."""

from __future__ import annotations

from contextlib import closing

from llmcli import render, signals
from llmcli.contract import Done, Prepared, Request, ThreadsChanged
from llmcli.log.rows import Logged
from llmcli.request.log import log_request


def threads_changed(event: ThreadsChanged) -> str:
    """The --debug line for one decision of the adaptive thread policy."""
    reasons = {"probe": "measuring", "drift": "the step time changed: measuring again",
               "recheck": "re-checking", "settled": "fastest measured"}  # fmt: skip
    why = reasons.get(event.reason, event.reason)
    return f"threads: {event.phase} now {event.threads} ({why})"


def drive(engine, request: Request, sink=None, log: Logged | None = None) -> tuple[Done, Prepared]:
    """One request, as generate and each chat turn run it: Ctrl-C through the signal watcher, every
    event to `sink`, the thread policy's decisions to --debug; returns the final Done and how the
    prompt was built. With `log`, the request is written to the conversation log when it ends
    (llmcli.log), a served stream that broke off included."""
    from llmcli.errors import StreamBrokenError

    done: Done | None = None
    prepared: Prepared | None = None
    events = engine.respond(request)  # a local engine builds the prompt here, before the watcher
    try:
        with signals.interrupt_on_sigint(engine.interrupt) as pressed_before, closing(events):
            for event in events:
                if pressed_before:  # Ctrl-C before the request began: it stops now, at its first event
                    engine.interrupt()
                    pressed_before = False
                if sink is not None:
                    sink(event)
                if isinstance(event, ThreadsChanged):
                    render.debug_log(threads_changed(event))
                elif isinstance(event, Prepared):
                    prepared = event
                elif isinstance(event, Done):
                    done = event
    except StreamBrokenError as exc:
        if log is not None:
            log_request(engine, request, log, None, prepared, error=exc.message, partial=exc.text)
        raise
    assert done is not None and prepared is not None
    answered = done.text.strip() or done.tool_calls
    if done.finish_reason == "stop" and request.text is None and not answered:
        done.finish_reason = "no_answer"  # an empty answer (plain text may end at once): `missing_answer`
    if log is not None:
        log_request(engine, request, log, done, prepared)
    return done, prepared
