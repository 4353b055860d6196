"""Prompt formats: the model's own chat template, or a documented fallback per architecture.

Templates come from GGUF metadata, that is from strangers on the internet, so they render in
Jinja's ImmutableSandboxedEnvironment: no attribute access to Python internals, no mutation of
the objects passed in. A template that tries either fails closed with a clear error.

Fallbacks (used when a model carries no `tokenizer.chat_template`, as the default Gemma model):
- gemma, gemma2, gemma3: Gemma's turn format; a system prompt is prepended to the first user turn
  (Gemma has no system role).
- llama (Llama 3 family): the header-id format.
- everything else: ChatML (`<|im_start|>role ... <|im_end|>`), which Qwen and many others use.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmcli.errors import InvalidModelError

GEMMA = (
    "{{ bos_token }}"
    "{% if messages and messages[0].role == 'system' %}"
    "{% set sys = messages[0].content %}{% set msgs = messages[1:] %}"
    "{% else %}{% set sys = '' %}{% set msgs = messages %}{% endif %}"
    "{% for m in msgs %}"
    "<start_of_turn>{{ 'model' if m.role == 'assistant' else 'user' }}\n"
    "{% if loop.first and sys %}{{ sys }}\n\n{% endif %}"
    "{{ m.content | trim }}<end_of_turn>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

LLAMA3 = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content | trim }}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

CHATML = (
    "{% for m in messages %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

FALLBACKS = {"gemma": GEMMA, "gemma2": GEMMA, "gemma3": GEMMA, "gemma3n": GEMMA, "llama": LLAMA3}


@dataclass
class PromptFormat:
    template: str
    source: str  # "model" (from GGUF metadata) or "fallback:<name>"

    @property
    def is_fallback(self) -> bool:
        return self.source != "model"


def choose(model_template: str | None, architecture: str) -> PromptFormat:
    """The model's own template, else the fallback for its architecture."""
    if model_template and model_template.strip():
        return PromptFormat(model_template, "model")
    name = {GEMMA: "gemma", LLAMA3: "llama3"}.get(FALLBACKS.get(architecture, CHATML), "chatml")
    return PromptFormat(FALLBACKS.get(architecture, CHATML), f"fallback:{name}")


def render(
    fmt: PromptFormat,
    messages: list[dict[str, str]],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
) -> str:
    """Render messages to prompt text in a sandbox; hostile or broken templates raise one clear error."""
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env.globals["raise_exception"] = raise_exception
    try:
        template = env.from_string(fmt.template)
        return template.render(
            messages=[dict(m) for m in messages],
            bos_token=bos_token,
            eos_token=eos_token,
            add_generation_prompt=add_generation_prompt,
        )
    except SecurityError as exc:
        raise InvalidModelError(
            f"the model's chat template tried an unsafe operation and was stopped ({exc})",
            hint="this file may be malicious; use --raw to bypass the template",
        ) from None
    except (TemplateError, TypeError, ValueError, AttributeError, IndexError, KeyError) as exc:
        raise InvalidModelError(
            f"the model's chat template failed to render: {exc}",
            hint="use --raw to send the prompt without a template",
        ) from None
