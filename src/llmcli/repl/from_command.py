"""`/from NAME QUESTION` in chat: the question answered from a collection's passages, as `llmcli
ask` answers it (request/grounding.py), as one turn of the conversation. Retrieval is a phase of
its own, said before the reply (`retrieve 0.04 s · 5 passages`), and the sources follow it."""

from __future__ import annotations

from llmcli.errors import UsageError
from llmcli.repl.commands import Repl, command


@command("/from", "/from NAME QUESTION", "Answer QUESTION from collection NAME's passages, citing them.")
def _from(repl: Repl, arg: str) -> None:
    from llmcli.request.grounding import Ask, find, fit

    name, _, question = arg.strip().partition(" ")
    if not name or not question.strip():
        raise UsageError("usage: /from NAME QUESTION (a collection: llmcli embed -i FILE --collection NAME)")
    s = repl.session
    grounded = find(Ask(name), question.strip())  # nothing found: one line, no turn
    text = fit(grounded, s.engine, s.params.max_tokens)
    repl.info(grounded.phase())
    before = len(s.conversation.messages)
    repl.run_turn(text)
    messages = s.conversation.messages
    if len(messages) > before and messages[-1].role == "assistant":
        grounded.attribute(messages[-1].content)
    for line in grounded.sources():
        repl.info(line)
