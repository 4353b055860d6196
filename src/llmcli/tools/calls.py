"""Tool calls in a model's own format, recognised from its chat template, and read from its text.

Everything comes from the template text, never from a list of model names:

- "hermes": the template shows `<tool_call>` (Qwen2.5, Qwen3, Hermes 2/3 and many fine-tunes): each
  call is `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, anywhere in the answer.
- "llama3": the template asks for `{"name": function name, "parameters": ...}` (Llama 3.1, 3.2,
  3.3 Instruct): the whole answer is the call (JSON objects, after an optional `<|python_tag|>`).
- "mistral": the template shows `[TOOL_CALLS]`: a JSON list of calls after that marker.

`Parser` reads the answer as it streams: text around calls comes out as it is safe to show, each
call as a `Call` (name and arguments, or why its markup could not be read), and the markup never
reaches the text. A call that cannot be read is still a call: the model is told what was wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from llmcli.contract import CallFormat
from llmcli.tags import partial_tail

# The markers of every format: where a vocabulary has one as a control token, the engine shows it
# in the text (control tokens are otherwise not shown), for the parser to find and take out.
MARKUP = ("<tool_call>", "</tool_call>", "<|python_tag|>", "[TOOL_CALLS]")


def detect(template: str | None) -> CallFormat | None:
    """The call format a chat template shows, or None where it takes no tools."""
    if not template or "tools" not in template:
        return None
    if "<tool_call>" in template:
        return CallFormat("hermes")
    if "[TOOL_CALLS]" in template:
        return CallFormat("mistral")
    if '"parameters": dictionary of argument name' in template or "<|python_tag|>" in template:
        return CallFormat("llama3")
    return None


@dataclass
class Call:
    name: str
    arguments: dict
    error: str | None = None  # the markup could not be read as a call: why


def parse_call(text: str) -> Call:
    """One call's JSON, `{"name": ..., "arguments" (or "parameters"): {...}}`."""
    text = text.strip()
    if text.startswith("```"):  # a fenced block inside the tags
        text = text.strip("`").removeprefix("json").strip()
    try:
        value = json.loads(text)
    except ValueError as exc:
        return Call("", {}, f"the call is not valid JSON ({exc}): {text[:200]}")
    return _call(value, text)


def _call(value: Any, text: str) -> Call:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return Call("", {}, f'the call must be a JSON object with "name" and "arguments": {text[:200]}')
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return Call(value["name"], {}, f"the arguments are not valid JSON: {arguments[:200]}")
    if not isinstance(arguments, dict):
        return Call(value["name"], {}, f"the arguments must be a JSON object: {json.dumps(arguments)[:200]}")
    return Call(value["name"], arguments)


Piece = str | Call


class Parser:
    """The answer's text as it streams, told apart into text and calls (see the module docstring).
    Whitespace right before and after a call is dropped with its markup."""

    def __init__(self, fmt: CallFormat) -> None:
        self.kind = fmt.kind
        self.open: str
        self.close: str | None
        if fmt.kind == "hermes":
            self.open, self.close = "<tool_call>", "</tool_call>"
        elif fmt.kind == "mistral":
            self.open, self.close = "[TOOL_CALLS]", None
        else:
            self.open, self.close = "<|python_tag|>", None
        self.state = "start"  # start, text, call (inside markup), json (llama3: the answer is held)
        self.held = ""  # text that may be the start of markup, or trailing whitespace
        self.after_call = False

    def feed(self, text: str) -> list[Piece]:
        out: list[Piece] = []
        buf, self.held = self.held + text, ""
        while buf:
            if self.state == "start":
                # An answer that starts as a call: the marker (which a vocabulary may not show), or
                # bare JSON (small models drop the tags): held to the end, then read (`finish`)
                stripped = buf.lstrip()
                bare = {"llama3": ("{",), "mistral": ("[{",), "hermes": ("{", "```")}[self.kind]
                if stripped.startswith(self.open) and self.kind != "hermes":
                    self.state, self.held = "json", stripped.removeprefix(self.open)
                    return out
                if stripped.startswith(bare):
                    self.state, self.held = "json", stripped
                    return out
                if (
                    not stripped
                    or any(b.startswith(stripped) for b in bare)
                    or (self.kind != "hermes" and self.open.startswith(stripped))
                ):
                    self.held = buf
                    return out
                self.state = "text"
            if self.state in ("start", "text"):
                self.state = "text"
                if self.after_call:
                    buf = buf.lstrip()
                    if not buf:
                        return out
                    self.after_call = False
                if self.kind == "llama3":  # an answer that did not start as a call is all text
                    out.append(buf)
                    return out
                at = buf.find(self.open)
                if at >= 0:
                    if buf[:at].rstrip():
                        out.append(buf[:at].rstrip())
                    buf, self.state = buf[at + len(self.open) :], "call" if self.close else "json"
                    continue
                keep = partial_tail(buf, self.open)
                body = buf[: len(buf) - keep]
                trailing = len(body) - len(body.rstrip())  # held until text follows
                if body.rstrip():
                    out.append(body.rstrip())
                self.held = body[len(body) - trailing :] + buf[len(buf) - keep :]
                return out
            if self.state == "call":
                assert self.close is not None
                end = buf.find(self.close)
                if end < 0:
                    self.held = buf
                    return out
                out.append(parse_call(buf[:end]))
                buf, self.state, self.after_call = buf[end + len(self.close) :], "text", True
                continue
            self.held = buf  # json: everything to the end is the call
            return out
        return out

    def finish(self) -> list[Piece]:
        """What is still held when the answer ends."""
        held, self.held = self.held, ""
        if self.state == "call":  # an unclosed call: read what there is
            return [parse_call(held)] if held.strip() else []
        if self.state == "json":
            return self._json_calls(held)
        if self.state == "start":
            return [held.strip()] if held.strip() else []
        return []

    def _json_calls(self, text: str) -> list[Piece]:
        """The held answer as calls (llama3, mistral, bare JSON in hermes); an answer in JSON that
        is not a call is text, except after a mistral marker."""
        original = text
        text = text.strip().removeprefix(self.open).strip()
        if text.startswith("```"):
            text = text.strip("`").strip().removeprefix("json").strip()
        marked = self.kind == "mistral" and original.strip().startswith(self.open)
        values: list[Any] = []
        decoder = json.JSONDecoder()
        at, problem = 0, None
        while at < len(text):
            try:
                value, at = decoder.raw_decode(text, at)
            except ValueError as exc:  # what follows is cut or not JSON
                problem = exc
                break
            values += value if isinstance(value, list) else [value]
            while at < len(text) and text[at] in " \t\r\n;,":
                at += 1
        calls: list[Piece] = []
        for value in values:  # the calls it begins with; a small model may repeat one until cut
            if not (marked or _looks_like_call(value)):
                break
            call = _call(value, json.dumps(value))
            if not any(isinstance(c, Call) and (c.name, c.arguments) == (call.name, call.arguments)
                       for c in calls):  # fmt: skip
                calls.append(call)
        if calls:
            return calls
        if marked:
            why = f"not valid JSON ({problem})" if problem else "no call"
            return [Call("", {}, f"the calls are {why}: {text[:200]}")]
        return [original.strip()]  # an answer in JSON, not a call


def _looks_like_call(value: Any) -> bool:
    """An unmarked JSON answer is a call only with exactly a name and its arguments."""
    return isinstance(value, dict) and set(value) in ({"name", "arguments"}, {"name", "parameters"})
