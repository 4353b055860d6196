"""Prompt formats: the model's own chat template, or a documented fallback per architecture.

Templates come from GGUF metadata, that is from strangers on the internet, so they render in
Jinja's ImmutableSandboxedEnvironment: no attribute access to Python internals, no mutation of
the objects passed in. `*` and `**` are capped too (`'x' * 10**10` would take all memory, `9 ** 9 ** 9`
all afternoon). A template that tries any of these fails closed with a clear error.

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


MAX_REPEAT = 1 << 20  # items in the result of `sequence * n`
MAX_EXPONENT = 4096  # `a ** b` with integers


def _sandbox():
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

    class Sandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context, operator, left, right):
            if operator == "*":
                for seq, n in ((left, right), (right, left)):
                    sized = isinstance(seq, str | list | tuple) and isinstance(n, int)
                    if sized and len(seq) * n > MAX_REPEAT:
                        raise SecurityError(f"a repetition of {len(seq) * n} items is too big")
            elif isinstance(left, int) and isinstance(right, int) and abs(right) > MAX_EXPONENT:
                raise SecurityError(f"the power {left} ** {right} is too big")
            return super().call_binop(context, operator, left, right)

    return Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])


def probe(template: str) -> None:
    """Render a model's template once with sample messages; raises InvalidModelError if it is
    hostile or broken (what `loader` does before loading, and `models show` to describe it)."""
    sample = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    render(PromptFormat(template, "model"), sample)


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
    from jinja2.sandbox import SecurityError

    env = _sandbox()

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
    except (SecurityError, OverflowError) as exc:  # OverflowError: the sandbox's range() limit
        raise InvalidModelError(
            f"the model's chat template tried an unsafe operation and was stopped ({exc})",
            hint="this file may be malicious; use --raw to bypass the template",
        ) from None
    except (TemplateError, TypeError, ValueError, AttributeError, LookupError, RecursionError) as exc:
        raise InvalidModelError(
            f"the model's chat template failed to render: {exc}",
            hint="use --raw to send the prompt without a template",
        ) from None
