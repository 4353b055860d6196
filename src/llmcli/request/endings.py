"""An answer that ended without one, in words: what cut it (--max-tokens, the context, a stop
string, the end of the reasoning or of the tool calls) and how to give it room. `missing_answer`
is the error a request exits with then (exit 7 cut short, exit 8 stopped without an answer);
`incomplete_message` says why constrained output is not complete."""

from __future__ import annotations

from llmcli.contract import Done, SamplingParams


def unanswered_message(done: Done, params: SamplingParams) -> tuple[str, str | None]:
    """A reasoning model cut inside its reasoning: no answer, what cut it, and the two ways out."""
    n = done.stats.reasoning_tokens
    what, room = _cut_by(done, params)
    counted = f", after {n} tokens of it" if n else ""
    return (
        f"no answer: {what} ended the output inside the reasoning{counted}",
        f"{room}, or bound the thinking with --reasoning-budget N",
    )


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


def missing_answer(done: Done, answer: str, calls: int, params: SamplingParams):
    """The error that says an answer ended without one (None: it has one, or was interrupted): exit 8
    (`NoAnswerError`) where the model stopped by itself, exit 7 (`IncompleteOutputError`) where
    --max-tokens or the context cut it before any answer (inside its reasoning or a tool call).
    `answer`: the final answer's text (after tool calls, the last round's); `calls`: calls run."""
    from llmcli.errors import IncompleteOutputError, NoAnswerError

    if done.finish_reason == "interrupted" or answer.strip():
        return None
    if done.finish_reason == "length":
        if done.reasoning_open:
            return IncompleteOutputError(*unanswered_message(done, params))
        what, room = _cut_by(done, params)
        inside = "before any answer"
        if done.tool_calls:
            inside = f"inside a tool call ({len(done.tool_calls)} not run)"
        return IncompleteOutputError(f"no answer: {what} ended the output {inside}", room)
    if done.finish_reason != "no_answer":  # plain text that ended at once is an empty continuation
        return None
    if done.reasoning_open:
        return NoAnswerError("the model ended its output inside its reasoning: there is no answer",
                             "bound the thinking with --reasoning-budget N, or ask again")  # fmt: skip
    if done.reasoning.strip():
        return NoAnswerError("the model ended after its reasoning without an answer",
                             "its reasoning went to stderr (--hide-thinking hides it)")  # fmt: skip
    if calls:
        return NoAnswerError(f"the model wrote no answer after its tool calls ({calls})",
                             "--show-tools shows the calls and their results")  # fmt: skip
    return NoAnswerError("the model stopped without writing anything")


def _cut_by(done: Done, params: SamplingParams) -> tuple[str, str]:
    """What cut an output short, and how to give it room."""
    if params.max_tokens and done.stats.completion_tokens >= params.max_tokens:
        return f"--max-tokens ({params.max_tokens})", "raise -n/--max-tokens"
    return f"the context ({done.stats.context_size} tokens)", "raise -c/--ctx-size"
