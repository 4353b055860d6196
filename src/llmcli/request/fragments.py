"""Text attachments into one request: each text's block before the user's own text, counted with
the model's tokenizer and refused in one line where they do not fit what the context leaves
(media.fragment.check_room); placed by their user message for the record and the log. Shared by
`generate`, chat and `batch`."""

from __future__ import annotations

from llmcli.contract import Engine
from llmcli.media.fragment import Placed, TextFile, check_room, compose, count


def answer_reserve(engine: Engine, max_tokens: int) -> int:
    """Room kept for the answer: max_tokens (else 512), at most a quarter of the window (as chat fits
    its history)."""
    return max(16, min(max_tokens or 512, engine.n_ctx // 4)) if engine.n_ctx else 0


def attach_texts(engine: Engine, texts: tuple[TextFile, ...], prompt: str, *, rest: str, message: int,
                 max_tokens: int) -> tuple[str, tuple[Placed, ...]]:  # fmt: skip
    """The user's message with `texts` before `prompt`, and where they went (`message`: the index of
    that user message in the request's messages; -1: plain text). `rest`: the rest of the prompt
    (system, history, the user's text), which the context must hold beside them."""
    if not texts:
        return prompt, ()
    tokens = count(texts, engine.count)
    try:
        rest_tokens = engine.count(rest) if rest else 0
    except Exception:  # a server that does not tokenize for clients: it refuses an overflow itself
        rest_tokens = 0
    check_room(texts, tokens, engine.n_ctx, rest_tokens, answer_reserve(engine, max_tokens))
    placed = tuple(Placed(t, message, n) for t, n in zip(texts, tokens, strict=True))
    return compose(texts, prompt), placed
