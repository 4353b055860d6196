"""Reasoning models recognised from their chat template: which tags mark the reasoning, whether
the template takes a switch to turn it off, and whether the generation prompt opens the block.

Everything comes from the template text, never from a list of model names: a tag pair whose name
means thinking (`<think>`/`</think>`, `<seed:think>`, `<thinking>`), the `enable_thinking` switch
(Qwen3 renders an empty `<think>\\n\\n</think>` block when it is false: that is how "off" works),
and a block the generation prompt leaves open (DeepSeek-R1's distills end their prompt with
`<｜Assistant｜><think>\\n`). A template that shows none of these is not a reasoning model's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

SWITCH = "enable_thinking"  # the name Qwen3, SmolLM3, DeepSeek-V3.1, GLM and others read

# A closing tag whose name (after an optional namespace, as `seed:` or `mm:`) means thinking.
# `</thinking_instructions>` and the like do not match: the name must end there.
_CLOSE = re.compile(r"</((?:[A-Za-z][\w.-]*:)?(?:think|thinking|thought|reasoning))>")
_SWITCH = re.compile(rf"\b{SWITCH}\b")
_SENTINEL = "\x00llmcli-user\x00"  # the user message, to find where the generation prompt starts


@dataclass(frozen=True)
class ReasoningFormat:
    """How a model's template marks reasoning. Tags are None where the template has the switch
    but marks the block with something other than a tag pair (special tokens, channels)."""

    open_tag: str | None
    close_tag: str | None
    switch: str | None  # "enable_thinking" where the template reads it, else None
    preopened: bool  # the generation prompt (with the switch on) ends inside an open block

    @property
    def switchable(self) -> bool:
        return self.switch is not None

    def describe(self) -> str:
        """One line for `models show` and `/show`, after "yes: "."""
        tags = f"{self.open_tag}…{self.close_tag}" if self.open_tag else "its own markers"
        if self.switch:
            how = f"switchable ({self.switch})"
            if self.preopened:
                how += ", block opened by the template"
        elif self.preopened:
            how = "always on (block opened by the template)"
        else:
            how = "always on (not switchable)"
        return f"{tags}, {how}"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReasoningFormat:
        """Back from `as_dict` (`models show` reads it from the model's description)."""
        return cls(data["open_tag"], data["close_tag"], data["switch"], bool(data["preopened"]))

    def as_dict(self) -> dict[str, object]:
        return {
            "open_tag": self.open_tag,
            "close_tag": self.close_tag,
            "switch": self.switch,
            "switchable": self.switchable,
            "preopened": self.preopened,
        }


def detect(template: str | None) -> ReasoningFormat | None:
    """The reasoning a chat template shows, or None where it shows none."""
    if not template:
        return None
    tags = _tags(template)
    switch = SWITCH if _SWITCH.search(template) else None
    if tags is None and switch is None:
        return None
    open_tag, close_tag = tags or (None, None)
    return ReasoningFormat(open_tag, close_tag, switch, _preopened(template, tags, switch))


def describe(fmt: ReasoningFormat | None) -> str:
    """What `models show` and `/show` say: "yes: <think>…</think>, switchable (...)" or "no"."""
    return f"yes: {fmt.describe()}" if fmt else "no"


def _tags(template: str) -> tuple[str, str] | None:
    """The first thinking tag pair the template writes both halves of."""
    for match in _CLOSE.finditer(template):
        open_tag = f"<{match.group(1)}>"
        if open_tag in template:
            return open_tag, match.group(0)
    return None


def _preopened(template: str, tags: tuple[str, str] | None, switch: str | None) -> bool:
    """Whether the generation prompt for one user message, with the switch on where there is one,
    ends inside an open block. A template that fails to render opens nothing (the loader refuses
    it anyway, and `models show` says why)."""
    from llmcli import templates
    from llmcli.errors import InvalidModelError

    if tags is None:
        return False
    try:
        prompt = templates.render(
            templates.PromptFormat(template, "model"),
            [{"role": "user", "content": _SENTINEL}],
            variables={switch: True} if switch else None,
        )
    except InvalidModelError:
        return False
    _, _, after = prompt.rpartition(_SENTINEL)  # what the template added after the question
    open_tag, close_tag = tags
    return after.rfind(open_tag) > after.rfind(close_tag)


class Splitter:
    """The model's text, told apart as it streams: reasoning (between the template's tags, or from
    the start where the generation prompt opened the block) and the answer. Tags never reach
    either. A tag split across pieces is held until it is whole or cannot be; the opening tag
    counts only before any answer text (after whitespace), and the whitespace after the closing
    tag is not part of the answer."""

    def __init__(self, fmt: ReasoningFormat) -> None:
        assert fmt.open_tag and fmt.close_tag
        self.open, self.close = fmt.open_tag, fmt.close_tag
        self.state = "reasoning" if fmt.preopened else "start"  # start, reasoning, after, answer
        self.held = ""

    @property
    def in_reasoning(self) -> bool:
        return self.state == "reasoning"

    def feed(self, text: str) -> tuple[str, str]:
        """One piece of text in; (reasoning, answer) text now safe to show."""
        reasoning, answer = "", ""
        buf, self.held = self.held + text, ""
        while buf:
            if self.state == "answer":
                return reasoning, answer + buf
            if self.state == "start":
                stripped = buf.lstrip()
                if stripped.startswith(self.open):
                    buf, self.state = stripped[len(self.open) :], "reasoning"
                elif self.open.startswith(stripped):  # whitespace, or the tag's beginning: wait
                    self.held = buf
                    break
                else:
                    self.state = "answer"
            elif self.state == "reasoning":
                end = buf.find(self.close)
                if end >= 0:
                    reasoning += buf[:end]
                    buf, self.state = buf[end + len(self.close) :], "after"
                    continue
                hold = _partial_tail(buf, self.close)
                reasoning += buf[: len(buf) - hold]
                self.held = buf[len(buf) - hold :]
                break
            else:  # after the closing tag: its whitespace is dropped
                buf = buf.lstrip()
                if buf:
                    self.state = "answer"
        return reasoning, answer

    def finish(self) -> tuple[str, str]:
        """What is still held when the text ends: (reasoning, answer)."""
        held, self.held = self.held, ""
        if self.state == "reasoning":
            return held, ""
        return "", held if self.state in ("start", "answer") and held.strip() else ""


def _partial_tail(text: str, tag: str) -> int:
    """How many characters at the end of `text` could be the start of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
