"""Turn what the user typed into the token sequence the model sees.

With a template (the default), messages are rendered by the model's chat template or the
architecture's fallback and tokenized with special tokens parsed. With `raw`, the text is
tokenized as plain text after the model's BOS token, for base-model completion.

A base model (no chat template, no chat or instruct fine-tune in its metadata: see
`templates.model_type`) was never trained on a turn format, and one forced on it makes it babble.
So `generate` continues its prompt as plain text unless told otherwise (`--fallback-template`),
and `chat` refuses it unless told the same.
"""

from __future__ import annotations

from llmcli import templates
from llmcli.contract import Engine


def prompt_format(engine: Engine) -> templates.PromptFormat:
    return templates.choose(engine.info.chat_template, engine.info.architecture)


def is_base(engine: Engine) -> bool:
    return engine.info.model_type == "base"


def generate_format(engine: Engine, *, raw: bool, fallback_template: bool) -> tuple[str, str | None]:
    """How `generate` builds its prompt: "raw" or "template", and a notice for stderr, if any."""
    if raw:
        return "raw", None
    if is_base(engine) and not fallback_template:
        fmt = prompt_format(engine)
        return "raw", (
            "a base model (no chat template, no instruct fine-tune in its metadata): continuing the "
            f"prompt as plain text; --fallback-template wraps it in the {fmt.source} turn format instead"
        )
    return "template", None


def chat_refusal(engine: Engine, ref: str) -> str:
    """What `chat` says when asked to chat with a base model without `--fallback-template`."""
    fmt = prompt_format(engine)
    return (
        f"{ref} is a base model: it continues text and does not follow instructions or take turns "
        f"(no chat template, no instruct fine-tune in its metadata); use an instruct model, or pass "
        f"--fallback-template to chat in the {fmt.source} turn format anyway"
    )


def base_warning(ref: str) -> str:
    what = f"{ref} is a base model: it does not follow instructions"
    return f"{what}; chatting in its fallback turn format as asked"


def chat_tokens(
    engine: Engine,
    messages: list[dict],
    fmt: templates.PromptFormat | None = None,
    variables: dict[str, object] | None = None,
) -> list[int]:
    """Tokens for a conversation, ending with the assistant's turn opened; `variables`: more names
    the template reads (a reasoning model's `enable_thinking`)."""
    fmt = fmt or prompt_format(engine)
    text = templates.render(
        fmt, messages, bos_token=engine.bos_text(), eos_token=engine.eos_text(), variables=variables
    )
    return engine.tokenize(text, special=True, add_bos=False)


def raw_tokens(engine: Engine, text: str) -> list[int]:
    return engine.tokenize(text, special=False, add_bos=engine.add_bos)


def messages_for(prompt: str, system: str | None) -> list[dict]:
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": prompt})
    return messages
