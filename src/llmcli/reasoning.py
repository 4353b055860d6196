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

from llmcli.tags import partial_tail

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


def switch_note(think: bool, fmt: ReasoningFormat | None) -> str | None:
    """What turning thinking on or off cannot do with this model's template, in a few words (None:
    it can): said once where the switch is asked for (--think/--no-think, `/set think`)."""
    if fmt is None:
        return "ignored, the model's template shows no reasoning"
    if not fmt.switchable and not think:
        return (
            "the model's template has no switch to turn its reasoning off; its block is closed as "
            "soon as it opens instead (--reasoning-budget 0)"
        )
    return None


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

    def __init__(self, fmt: ReasoningFormat, state: str | None = None) -> None:
        assert fmt.open_tag and fmt.close_tag
        self.open, self.close = fmt.open_tag, fmt.close_tag
        # start, reasoning, after (the closing tag; its whitespace follows), answer. Where the
        # generation prompt left the model (`prompt_state`), else the template's default.
        self.state = state or ("reasoning" if fmt.preopened else "start")
        self.held = ""

    @property
    def answering(self) -> bool:
        """Past the reasoning: whatever comes now is the answer."""
        return self.state in ("after", "answer")

    def would_answer(self, text: str) -> bool:
        """Whether `text`, fed now at the start, would begin the answer (no block opened)."""
        if self.state != "start":
            return False
        stripped = (self.held + text).lstrip()
        return bool(stripped) and not stripped.startswith(self.open) and not self.open.startswith(stripped)

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
                hold = partial_tail(buf, self.close)
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


def prompt_state(fmt: ReasoningFormat, tail: str) -> str:
    """Where a generation prompt ending in `tail` leaves the model: "reasoning" inside a block it
    opened, "answer" after a block it closed (thinking switched off renders an empty one), else
    "start" (the model may open one)."""
    assert fmt.open_tag and fmt.close_tag
    opened, closed = tail.rfind(fmt.open_tag), tail.rfind(fmt.close_tag)
    if opened > closed:
        return "reasoning"
    if closed >= 0 and not tail[closed + len(fmt.close_tag) :].strip():
        return "answer"
    return "start"


def closing_text(fmt: ReasoningFormat, message: str = "") -> str:
    """What a reasoning budget forces once it is spent: its message, then the closing tag."""
    assert fmt.close_tag
    return f"\n{message.strip()}\n{fmt.close_tag}\n\n" if message.strip() else f"\n{fmt.close_tag}\n\n"


class Tracker:
    """The reasoning block as the decode loop sees it, token by token: whether the output is inside
    it, how many tokens it took, and when a budget (`--reasoning-budget`) has been spent."""

    def __init__(self, fmt: ReasoningFormat, state: str, budget: int | None, message: str = "") -> None:
        self.splitter = Splitter(fmt, state)
        self.fmt, self.budget, self.message = fmt, budget, message
        self.tokens = 0  # decoded inside the block
        self.forced = False  # the budget closed it

    @property
    def answering(self) -> bool:
        return self.splitter.answering

    def feed(self, text: str) -> None:
        """One token's text (before any stop-string hold-back)."""
        splitter = self.splitter
        inside = splitter.in_reasoning
        splitter.feed(text)
        if inside or splitter.in_reasoning:
            self.tokens += 1

    def due(self, *, mid_character: bool = False) -> str | None:
        """The text to force now (the budget is spent inside the block), once; else None. Inside a
        multi-byte character it waits for the character to end (a few tokens at most)."""
        if self.budget is None or self.forced or not self.splitter.in_reasoning or self.tokens < self.budget:
            return None
        if mid_character and self.tokens < self.budget + 4:
            return None
        self.forced = True
        return closing_text(self.fmt, self.message)


def tracker_for(
    fmt: ReasoningFormat | None, state: str | None, budget: int | None, message: str, *, constrained: bool
) -> Tracker | None:
    """A decode loop's tracker where something depends on the block: a budget, or a grammar that
    must wait for the answer. None for text that is not a reasoning model's answer (`state` None)."""
    if fmt is None or not fmt.open_tag or not fmt.close_tag or state is None:
        return None
    if budget is None and not constrained:
        return None
    return Tracker(fmt, state, budget, message)
