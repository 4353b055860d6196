"""Turn what the user typed into the token sequence the model sees.

With a template (the default), messages are rendered by the model's chat template or the
architecture's fallback and tokenized with special tokens parsed. With `raw`, the text is
tokenized as plain text after the model's BOS token, for base-model completion.
"""

from __future__ import annotations

from llmcli import templates
from llmcli.engine.base import Engine


def prompt_format(engine: Engine) -> templates.PromptFormat:
    return templates.choose(engine.info.chat_template, engine.info.architecture)


def chat_tokens(
    engine: Engine, messages: list[dict[str, str]], fmt: templates.PromptFormat | None = None
) -> list[int]:
    """Tokens for a conversation, ending with the assistant's turn opened."""
    fmt = fmt or prompt_format(engine)
    text = templates.render(fmt, messages, bos_token=engine.bos_text(), eos_token=engine.eos_text())
    return engine.tokenize(text, special=True, add_bos=False)


def raw_tokens(engine: Engine, text: str) -> list[int]:
    return engine.tokenize(text, special=False, add_bos=engine.add_bos)


def messages_for(prompt: str, system: str | None) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": prompt})
    return messages
