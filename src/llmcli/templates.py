"""Prompt formats: the model's own chat template, or a documented fallback per architecture.

Templates come from GGUF metadata, that is from strangers on the internet, so they render in
Jinja's ImmutableSandboxedEnvironment: no attribute access to Python internals, no mutation of
the objects passed in. `*` and `**` are capped too (`'x' * 10**10` would take all memory, `9 ** 9 ** 9`
all afternoon). What no operator cap can catch, nested loops of harmless size (10^5 x 10^5 steps) and
strings doubled by `~` in a loop, is stopped by a render budget: a trace function on the template's
own frames checks, every few template lines, the time spent and how far the process's memory has
grown (`RENDER_SECONDS`, `RENDER_MEMORY`). A template that tries any of these fails closed with a
clear error.

Fallbacks (used when a model carries no `tokenizer.chat_template`, as the default Gemma model):
- gemma, gemma2, gemma3: Gemma's turn format; a system prompt is prepended to the first user turn
  (Gemma has no system role).
- llama (Llama 3 family): the header-id format.
- everything else: ChatML (`<|im_start|>role ... <|im_end|>`), which Qwen and many others use.
"""

from __future__ import annotations

import functools
import os
import sys
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


# Words that mark a chat or instruction fine-tune in a model's name, fine-tune label or tags
# ("SmolLM2 135M Instruct", "gemma-3-270m-it", "Llama-2-7b-chat", "zephyr-7b-dpo").
TUNED_WORDS = frozenset({"instruct", "instruction", "it", "chat", "sft", "dpo", "rlhf", "orpo", "kto",
                         "assistant", "conversational"})  # fmt: skip
METADATA_KEYS = ("general.finetune", "general.name", "general.basename", "general.tags")
ModelType = str  # "instruct" or "base"


def model_type(chat_template: str | None, metadata: dict[str, object]) -> ModelType:
    """ "instruct" when the model carries a chat template or its metadata names a chat or instruct
    fine-tune; "base" otherwise (a pretrained model, which continues text rather than answering).

    `metadata` holds any of `METADATA_KEYS`; `general.tags` may be a list of strings."""
    if chat_template and chat_template.strip():
        return "instruct"
    return "instruct" if tuned_by_name(*_strings(metadata)) else "base"


def tuned_by_name(*names: str) -> bool:
    """Whether any of these names (a model name, a file name, a repository id) marks a chat or
    instruct fine-tune by one of `TUNED_WORDS` standing as a word of its own."""
    import re

    return any(word in TUNED_WORDS for name in names for word in re.split(r"[^a-z0-9]+", name.lower()))


def _strings(metadata: dict[str, object]) -> list[str]:
    found: list[str] = []
    for key in METADATA_KEYS:
        value = metadata.get(key)
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, list | tuple):
            found += [v for v in value if isinstance(v, str)]
    return found


MAX_REPEAT = 1 << 20  # items in the result of `sequence * n`
MAX_EXPONENT = 4096  # `a ** b` with integers
RENDER_SECONDS = 10.0  # a real template renders a long conversation in milliseconds
RENDER_MEMORY = 256 << 20  # growth of the process's RSS while rendering, in bytes
CHECK_EVERY = 8  # lines of compiled template code between two budget checks
MAX_CONCAT = 1 << 24  # characters in the result of `a ~ b`


class _RenderBudget:
    """Stops a render that runs too long or grows memory too much (see the module docstring).

    Installed with `sys.settrace` for the render only; it traces nothing but frames of compiled
    template code and checks every `CHECK_EVERY` lines, so a 200-message conversation renders in
    about 15 ms instead of 9. `~`, the one way to double a string at each step of a loop, is also
    capped where it happens (`_capped_join`), so that growth cannot outrun the checks."""

    def __init__(self) -> None:
        import time

        from jinja2.sandbox import SecurityError

        self._error = SecurityError
        self._clock = time.monotonic
        self._countdown = CHECK_EVERY
        self.deadline = self._clock() + RENDER_SECONDS
        self.memory = _Memory()
        self.memory_limit = self.memory.rss() + RENDER_MEMORY

    def __enter__(self) -> _RenderBudget:
        self.previous = sys.gettrace()
        sys.settrace(self._on_call)
        return self

    def __exit__(self, *exc) -> None:
        sys.settrace(self.previous)
        self.memory.close()

    def _on_call(self, frame, event, arg):
        return self._on_line if frame.f_code.co_filename == "<template>" else None

    def _on_line(self, frame, event, arg):
        self._countdown -= 1
        if self._countdown:
            return self._on_line
        self._countdown = CHECK_EVERY
        if self._clock() > self.deadline:
            raise self._error(f"rendering took more than {RENDER_SECONDS:g} s")
        if self.memory.rss() > self.memory_limit:
            raise self._error(f"rendering used more than {RENDER_MEMORY >> 20} MiB of memory")
        return self._on_line


class _Memory:
    """The process's resident memory in bytes: /proc/self/statm, kept open for the render, or the
    peak RSS where there is no /proc."""

    def __init__(self) -> None:
        try:
            self.fd = os.open("/proc/self/statm", os.O_RDONLY)
            self.page = os.sysconf("SC_PAGE_SIZE")
        except (OSError, AttributeError, ValueError):
            self.fd = -1

    def rss(self) -> int:
        if self.fd >= 0:
            return int(os.pread(self.fd, 128, 0).split()[1]) * self.page
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, else KiB

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _capped_join(join):
    """Jinja's implementation of `~`, refusing results longer than MAX_CONCAT characters."""
    from jinja2.sandbox import SecurityError

    def capped(seq):
        result = join(seq)
        if len(result) > MAX_CONCAT:
            raise SecurityError(f"a concatenation of {len(result)} characters is too big")
        return result

    return capped


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


@functools.lru_cache(maxsize=8)
def _compiled(source: str):
    """`source` compiled once in its own sandbox (a batch renders one template per item, a chat
    one per turn): the sandbox and the capped joins hold no state between renders."""
    from jinja2 import TemplateError

    env = _sandbox()

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env.globals["raise_exception"] = raise_exception
    template = env.from_string(source)
    namespace = template.root_render_func.__globals__  # the compiled template's module
    for name in ("str_join", "markup_join"):
        namespace[name] = _capped_join(namespace[name])
    return template


def render(
    fmt: PromptFormat,
    messages: list[dict],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    variables: dict[str, object] | None = None,
) -> str:
    """Render messages to prompt text in a sandbox; hostile or broken templates raise one clear error.

    `variables` are more names the template may read (as `enable_thinking`)."""
    from jinja2 import TemplateError
    from jinja2.sandbox import SecurityError

    try:
        template = _compiled(fmt.template)
        with _RenderBudget():
            return template.render(
                messages=[dict(m) for m in messages],
                bos_token=bos_token,
                eos_token=eos_token,
                add_generation_prompt=add_generation_prompt,
                **(variables or {}),
            )
    except MemoryError:
        raise InvalidModelError(
            "the model's chat template ran out of memory and was stopped",
            hint="this file may be malicious; use --raw to bypass the template",
        ) from None
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
