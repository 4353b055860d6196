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
from llmcli.media.image import Image

OVERFLOW_POLICIES = ("drop-oldest", "error")


# The message field a chat template reads an earlier answer's reasoning from (Qwen3's and others'),
# as Hugging Face's and vLLM's chat messages carry it
REASONING_FIELD = "reasoning_content"


@dataclass
class Message:
    role: str  # "user", "assistant", or "tool" (a tool's result)
    content: str  # an answer's text alone: a reasoning model's reasoning is never inside it
    interrupted: bool = False
    stats: dict[str, Any] | None = None
    reasoning: str | None = None  # a reasoning model's reasoning before this answer (None: none)
    # an assistant message's tool calls ([{"id", "type": "function", "function": {"name",
    # "arguments": dict}}]); a tool message's call id and tool name
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    # a user message's images (`/attach`, `chat -a`): beside its text, never in the template's
    # message; a saved session keeps their references (`attachments`), the bytes once by hash
    images: tuple[Image, ...] = ()
    # a user message's text attachments (media.fragment.TextFile): their blocks are already at the
    # start of `content`, where the template and a server read them; kept here for the log (which
    # stores each once) and `/context`; a saved session keeps them as the content holds them
    texts: tuple[Any, ...] = ()

    def template(self, reasoning: bool = False) -> dict[str, Any]:
        """The message as chat templates and servers take it; with `reasoning`, an answer's
        reasoning in its `reasoning_content` field (never in its content)."""
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if reasoning and self.reasoning:
            d[REASONING_FIELD] = self.reasoning
        if self.tool_calls:
            d["tool_calls"] = self.tool_calls
        if self.role == "tool":
            d.update(tool_call_id=self.tool_call_id or "", name=self.name or "")
        return d

    def as_dict(self) -> dict[str, Any]:
        d = self.template()
        if self.interrupted:
            d["interrupted"] = True
        if self.stats:
            d["stats"] = self.stats
        if self.reasoning:
            d["reasoning"] = self.reasoning
        if self.images:
            d["attachments"] = [attachment_ref(image) for image in self.images]
        return d

    @classmethod
    def from_template(cls, d: dict[str, Any]) -> Message:
        return cls(
            d["role"], d.get("content") or "", reasoning=d.get(REASONING_FIELD),
            tool_calls=d.get("tool_calls"), tool_call_id=d.get("tool_call_id"), name=d.get("name"),
        )  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any], images: ImageSource | None = None) -> Message:
        """A saved message; `images` gives back an attachment's image from its reference (raises
        ValueError where it cannot: the image is gone or is not the one referred to)."""
        if (
            not isinstance(d, dict)
            or d.get("role") not in ("user", "assistant", "tool")
            or not isinstance(d.get("content"), str)
            or not isinstance(d.get("tool_calls") or [], list)
        ):
            raise ValueError(f"not a message: {d!r:.80}")
        reasoning = d.get("reasoning")  # absent in sessions saved before reasoning models were told apart
        if reasoning is not None and not isinstance(reasoning, str):
            raise ValueError(f"a message's reasoning is not text: {reasoning!r:.80}")
        refs = d.get("attachments") or []
        if not isinstance(refs, list) or not all(isinstance(r, dict) and isinstance(r.get("sha256"), str)
                                                 for r in refs):  # fmt: skip
            raise ValueError(f"a message's attachments are not image references: {refs!r:.80}")
        if refs and images is None:
            raise ValueError("a message has images, and nothing to read them from")
        return cls(d["role"], d["content"], bool(d.get("interrupted")), d.get("stats"), reasoning or None,
                   d.get("tool_calls") or None, d.get("tool_call_id"), d.get("name"),
                   tuple(images(r) for r in refs) if images is not None else ())  # fmt: skip


ImageSource = Callable[[dict[str, Any]], Image]


def attachment_ref(image: Image) -> dict[str, Any]:
    """How a saved session or the log refers to an image kept apart, once by its hash."""
    return {"name": image.name, "media_type": image.media_type, "bytes": image.size, "sha256": image.sha256}


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
    ) -> list[dict[str, Any]]:
        """The messages as a chat template (or a server) takes them. An answer's reasoning, where
        `reasoning`, is its `reasoning_content` field, never part of its content: a template that
        reads the field decides what of it to show the model (engine/local.py drops the field for
        one that does not)."""
        out: list[dict[str, Any]] = [{"role": "system", "content": self.system}] if self.system else []
        out += [m.template(reasoning) for m in (self.messages if messages is None else messages)]
        return out

    def add_user(self, text: str, images: tuple[Image, ...] = (), texts: tuple[Any, ...] = ()) -> None:
        self.messages.append(Message("user", text, images=tuple(images), texts=tuple(texts)))

    def texts_by_index(self) -> dict[int, tuple[Any, ...]]:
        """The user messages' text attachments by the index of their message in `template_messages()`."""
        first = 1 if self.system else 0
        return {first + i: m.texts for i, m in enumerate(self.messages) if m.texts}

    def images_by_index(self, *, offset: int = 0) -> dict[int, tuple[Image, ...]]:
        """The user messages' images by the index of their message in `template_messages()` (the
        system prompt first where there is one), plus `offset`."""
        first = offset + (1 if self.system else 0)
        return {first + i: m.images for i, m in enumerate(self.messages) if m.images}

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

    def pop_last_answer(self) -> list[Message]:
        """For /retry: remove the last answer (its tool calls and their results too), leaving its
        question last; returns what was removed ([]: the last message is not an answer)."""
        if not self.messages or self.messages[-1].role == "user":
            return []
        at = len(self.messages)
        while at > 0 and self.messages[at - 1].role in ("assistant", "tool"):
            at -= 1
        removed = self.messages[at:]
        del self.messages[at:]
        return removed

    def fit(
        self,
        render: Callable[[list[dict[str, Any]]], list[int]],
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
    def from_dict(cls, d: dict[str, Any], images: ImageSource | None = None) -> Conversation:
        system = d.get("system") or ""
        if not isinstance(system, str) or not isinstance(d.get("messages", []), list):
            raise ValueError("bad conversation record")
        return cls(system, [Message.from_dict(m, images) for m in d.get("messages", [])])


def _drop_first_exchange(messages: list[Message]) -> list[Message]:
    """Drop the oldest message and the replies that belong to it, never the last message."""
    rest = messages[1:]
    while len(rest) > 1 and rest[0].role in ("assistant", "tool"):
        rest = rest[1:]
    return rest
