"""A chat conversation: messages, system prompt, and the context-window budget. Pure: no I/O.

The whole history is the context of every turn. When it no longer fits, the overflow policy
applies: `drop-oldest` (the default) removes the oldest exchanges, always keeping the system
prompt and the latest message, until the prompt plus room for the answer fits in half the
window (dropping more than strictly needed means the following turns reuse the KV cache
instead of re-evaluating the whole history every turn); `error` refuses the turn instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llmcli.errors import ContextOverflowError

OVERFLOW_POLICIES = ("drop-oldest", "error")


# The message field a chat template reads an earlier answer's reasoning from (Qwen3's and others'),
# as Hugging Face's and vLLM's chat messages carry it
REASONING_FIELD = "reasoning_content"


@dataclass
class Message:
    role: str  # "user" or "assistant"
    content: str  # an answer's text alone: a reasoning model's reasoning is never inside it
    interrupted: bool = False
    stats: dict[str, Any] | None = None
    reasoning: str | None = None  # a reasoning model's reasoning before this answer (None: none)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.interrupted:
            d["interrupted"] = True
        if self.stats:
            d["stats"] = self.stats
        if self.reasoning:
            d["reasoning"] = self.reasoning
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Message:
        if (
            not isinstance(d, dict)
            or d.get("role") not in ("user", "assistant")
            or not isinstance(d.get("content"), str)
        ):
            raise ValueError(f"not a message: {d!r:.80}")
        reasoning = d.get("reasoning")  # absent in sessions saved before reasoning models were told apart
        if reasoning is not None and not isinstance(reasoning, str):
            raise ValueError(f"a message's reasoning is not text: {reasoning!r:.80}")
        return cls(d["role"], d["content"], bool(d.get("interrupted")), d.get("stats"), reasoning or None)


@dataclass
class Fitted:
    """The prompt for one turn, after the overflow policy."""

    tokens: list[int]
    dropped_messages: int = 0
    dropped_tokens: int = 0


@dataclass
class Conversation:
    system: str = ""
    messages: list[Message] = field(default_factory=list)

    def template_messages(
        self, messages: list[Message] | None = None, *, reasoning: bool = True
    ) -> list[dict[str, str]]:
        """The messages as a chat template (or a server) takes them. An answer's reasoning, where
        `reasoning`, is its `reasoning_content` field, never part of its content: a template that
        reads the field decides what of it to show the model (engine/local.py drops the field for
        one that does not)."""
        out = [{"role": "system", "content": self.system}] if self.system else []
        for m in self.messages if messages is None else messages:
            message = {"role": m.role, "content": m.content}
            if reasoning and m.reasoning:
                message[REASONING_FIELD] = m.reasoning
            out.append(message)
        return out

    def add_user(self, text: str) -> None:
        self.messages.append(Message("user", text))

    def add_assistant(
        self, text: str, *, interrupted: bool = False, stats: dict | None = None, reasoning: str | None = None
    ) -> None:
        self.messages.append(Message("assistant", text, interrupted, stats, reasoning or None))

    def clear(self) -> None:
        self.messages.clear()

    def undo(self) -> int:
        """Drop the last exchange (the last user message and what followed); returns messages removed."""
        for i in range(len(self.messages) - 1, -1, -1):
            if self.messages[i].role == "user":
                removed = len(self.messages) - i
                del self.messages[i:]
                return removed
        return 0

    def pop_last_answer(self) -> Message | None:
        """For /retry: remove the last assistant message, leaving its question last."""
        if self.messages and self.messages[-1].role == "assistant":
            return self.messages.pop()
        return None

    def fit(
        self,
        render: Callable[[list[dict[str, str]]], list[int]],
        n_ctx: int,
        reserve: int,
        policy: str = "drop-oldest",
    ) -> Fitted:
        """Tokens of the whole history for the next turn, applying the overflow policy."""
        tokens = render(self.template_messages())
        if len(tokens) + reserve <= n_ctx:
            return Fitted(tokens)
        if policy == "error":
            raise ContextOverflowError(
                f"the conversation is {len(tokens)} tokens and the answer needs {reserve} more, "
                f"but the context holds {n_ctx}",
                hint="use /clear or /undo, raise --ctx-size, or --on-overflow drop-oldest",
            )
        full = len(tokens)
        kept = list(self.messages)
        target = max(n_ctx // 2, 1)
        while len(kept) > 1 and len(tokens) + reserve > target:
            kept = _drop_first_exchange(kept)
            tokens = render(self.template_messages(kept))
        if len(tokens) + reserve > n_ctx:
            raise ContextOverflowError(
                f"the latest message alone is {len(tokens)} tokens with the system prompt, and the answer "
                f"needs {reserve} more, but the context holds {n_ctx}",
                hint="shorten the message or raise --ctx-size",
            )
        dropped = len(self.messages) - len(kept)
        del self.messages[:dropped]
        return Fitted(tokens, dropped, full - len(tokens))

    def to_dict(self) -> dict[str, Any]:
        return {"system": self.system, "messages": [m.as_dict() for m in self.messages]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Conversation:
        system = d.get("system") or ""
        if not isinstance(system, str) or not isinstance(d.get("messages", []), list):
            raise ValueError("bad conversation record")
        return cls(system, [Message.from_dict(m) for m in d.get("messages", [])])


def _drop_first_exchange(messages: list[Message]) -> list[Message]:
    """Drop the oldest message and the replies that belong to it, never the last message."""
    rest = messages[1:]
    while len(rest) > 1 and rest[0].role == "assistant":
        rest = rest[1:]
    return rest
