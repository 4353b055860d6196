"""A call's JSON constrained while the model writes it (the hermes format, where a call is marked):
`call_schema` is the JSON schema of one call to the tools offered, `call_grammar` turns its GBNF
into the `CallGrammar` the decode loop samples through, and `CallWatch` tells the loop where a
call opens in the streamed answer."""

from __future__ import annotations

from llmcli.contract import CallGrammar
from llmcli.tools.calls import CallFormat

CALL_RULE = "llmcli-call"


class CallWatch:
    """Where a call opens in the answer as it streams: fed each token's text, `feed` is True once
    the text ends with the opening marker (whitespace after it allowed, none of the JSON yet)."""

    def __init__(self, trigger: str) -> None:
        self.trigger = trigger
        self.recent = ""  # the answer's last characters

    def feed(self, text: str) -> bool:
        self.recent = (self.recent + text)[-(len(self.trigger) + 32) :]
        at = self.recent.rfind(self.trigger)
        if at >= 0 and not self.recent[at + len(self.trigger) :].strip():
            self.recent = ""
            return True
        return False


def call_schema(fmt: CallFormat, specs: list[dict]) -> dict | None:
    """The JSON schema of one call for `specs` (OpenAI-style tool definitions): a name among the
    tools, and that tool's arguments. None for formats whose call is the whole answer (constraining
    them would constrain every answer): the call is then checked after it is written."""
    if fmt.kind != "hermes" or not specs:
        return None
    choices = []
    for spec in specs:
        function = spec.get("function", spec)
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        choices.append({
            "type": "object",
            "properties": {"name": {"const": function["name"]}, "arguments": parameters},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        })  # fmt: skip
    return choices[0] if len(choices) == 1 else {"oneOf": choices}


def call_grammar(gbnf: str) -> CallGrammar | None:
    """The call grammar from the GBNF of `call_schema` (its root becomes one rule, after optional
    whitespace); None where the GBNF has no root."""
    lines = gbnf.splitlines()
    renamed = [f"{CALL_RULE} ::={line[len('root ::=') :]}" if line.startswith("root ::=") else line
               for line in lines]  # fmt: skip
    if renamed == lines:
        return None
    return CallGrammar("<tool_call>", f"root ::= [ \\t\\n]* {CALL_RULE}\n" + "\n".join(renamed) + "\n")
