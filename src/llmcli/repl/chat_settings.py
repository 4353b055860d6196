"""What `/set` changes in a chat session: the sampling settings, the think switch, speculative
decoding and the KV cache's types (these two load the model again), each checked and shown in the
REPL's own words. `SessionSettings` is the part of `ChatSession` that holds them."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any

from llmcli.contract import SamplingParams

if TYPE_CHECKING:
    from llmcli.contract import Engine
    from llmcli.loader import Loaded


class SessionSettings:
    """`/set` on a chat session (mixed into `ChatSession`, which holds what these read and change)."""

    params: SamplingParams
    think: bool | None
    loaded: Loaded

    if TYPE_CHECKING:

        @property
        def engine(self) -> Engine: ...

        def switch_model(self, ref: str, speculative=None, **kv: str | None) -> int: ...

    def setting(self, name: str) -> object:
        """The current value of what `/set NAME` changes (a one-line error for an unknown name)."""
        dashed = name.replace("_", "-")
        if dashed == "think":
            return think_word(self.think)
        if dashed in SPEC_SETTINGS:
            return self.spec_value(dashed)
        if dashed in KV_SETTINGS:
            kv_type = self.cache_type(dashed)
            return "the server's" if kv_type is None else kv_type
        key = self._sampling_key(name)
        return getattr(self.params, key)

    def _sampling_key(self, name: str) -> str:
        from llmcli.errors import UsageError

        # the constraint is the command line's (--grammar-file, --json-schema); `defaulted` is bookkeeping
        known = {f.name for f in fields(SamplingParams)} - {"grammar", "json_schema", "defaulted"}
        key = name.replace("-", "_")
        if key not in known:
            settable = sorted(known) + sorted(SPEC_SETTINGS) + sorted(KV_SETTINGS) + ["think"]
            raise UsageError(f"unknown setting {name!r}; settable: {', '.join(settable)}")
        return key

    def set_param(self, name: str, value: str) -> int | None:
        """Change a setting; for one that loads the model again (speculative, KV cache types), the
        cached tokens carried over to it (`carry_kv`), else None."""
        from llmcli.errors import UsageError

        if name == "think":
            self.set_think(value)
            return None
        if name.replace("_", "-") in SPEC_SETTINGS:
            return self.set_spec(name.replace("_", "-"), value)
        if name.replace("_", "-") in KV_SETTINGS:
            return self.set_cache_type(name.replace("_", "-"), value)
        key = self._sampling_key(name)
        parsed = sampling_value(key, name, value)
        old = getattr(self.params, key)
        setattr(self.params, key, parsed)
        try:  # named as typed here: `top_p must be in (0, 1]`
            self.params.validate(names=lambda field: name if field == key else field)
        except UsageError:
            setattr(self.params, key, old)
            raise
        self.params.defaulted = self.params.defaulted - {key}  # set by the user: the model's advice is off
        return None

    def set_think(self, value: str) -> None:
        """`/set think on|off|auto`: a reasoning model's switch, as --think/--no-think (auto: the
        template's default). It applies from the next turn; the KV cache of the history stays good
        (the switch changes only the generation prompt)."""
        from llmcli.errors import UsageError
        from llmcli.values import BOOL_WORDS

        word = value.strip().lower()
        if word in ("auto", "default"):
            self.think = None
        elif word in BOOL_WORDS:
            self.think = BOOL_WORDS[word]
        else:
            raise UsageError(f"think needs on, off or auto, got {value!r}")

    def think_note(self) -> str | None:
        """Why the switch cannot do what it is set to with the loaded model, in one line (None: it
        can, or a served model, whose server decides)."""
        from llmcli import reasoning

        if self.think is None or not self.engine.can.template:
            return None
        return reasoning.switch_note(self.think, self.engine.info.reasoning)

    @property
    def spec(self):
        from llmcli.contract import SpecOptions

        return self.engine.options.speculative if self.engine.can.speculation else SpecOptions()

    def set_spec(self, name: str, value: str) -> int:
        """`/set spec-type lookup`, `/set spec-draft-n-max 4`...: the model is loaded again with the
        new speculative settings (a verification batch's size is fixed when the context is made);
        the conversation is kept, and so is its KV cache where the new context can hold it
        (`carry_kv`). Returns the tokens carried over."""
        from dataclasses import replace

        from llmcli import settings, values
        from llmcli.engine.speculation.proposal import kind_of

        spec = replace(self.spec)
        field_name, _ = SPEC_SETTINGS[name]
        key = name.replace("-", "_")  # the setting: its type, range and special values
        if field_name in DRAFT_KV_FIELDS and value.strip().lower() == "target":
            parsed: Any = None  # follow the target's type again
        else:
            setting = settings.SETTINGS[key]
            parsed = setting.option(values.parse(setting, value, name, text=True))
        if field_name == "kind":
            parsed = kind_of(parsed)  # llama.cpp's names for the same proposers
        elif field_name == "type_v_draft":
            refuse_v_cache(parsed, self.engine.options.flash_attn if self.engine.can.load_options else None)
        setattr(spec, field_name, parsed)
        if field_name == "model_draft":
            spec.model_draft_ref = parsed
            spec.model_draft_from = None  # typed here
            spec.kind = "draft" if parsed else ("none" if spec.kind == "draft" else spec.kind)
        if spec.kind == "draft" and not spec.model_draft:
            spec.model_draft = spec.model_draft_ref
        if spec.kind != "draft":
            spec.model_draft = spec.model_draft_ref = None
        spec.validate(names=set_name)  # in the REPL's own words
        return self.switch_model(self.loaded.ref, speculative=spec)

    def set_cache_type(self, name: str, value: str) -> int:
        """`/set cache-type-k q8_0`: the model is loaded again with its KV cache of that type (a
        cache's types are fixed when the context is made); the conversation is kept and
        re-evaluated at the next turn (keys and values of another type cannot be carried over)."""
        from llmcli.errors import UsageError

        if not self.engine.can.load_options:
            raise UsageError(f"{name}: a served model's KV cache is its server's to set")
        field_name = KV_SETTINGS[name]
        kv_type = kv_cache_type(name, value, self.engine.options.flash_attn)
        return self.switch_model(self.loaded.ref, speculative=self.spec, **{field_name: kv_type})

    def cache_type(self, name: str) -> str | None:
        """The KV cache type `name` names in the loaded model (None for a served model)."""
        if not self.engine.can.load_options:
            return None
        return getattr(self.engine.options, KV_SETTINGS[name]) or "f16"

    def spec_value(self, name: str) -> Any:
        field_name, _ = SPEC_SETTINGS[name]
        value = getattr(self.spec, field_name)
        if field_name == "model_draft":
            return self.spec.model_draft_ref or value
        if field_name in DRAFT_KV_FIELDS:
            return value or "target"
        return value


def think_word(think: bool | None) -> str:
    """The switch as `/set` shows it."""
    return "auto" if think is None else "on" if think else "off"


# /set names for speculative decoding: the SpecOptions field and the value's type.
SPEC_SETTINGS: dict[str, tuple[str, type]] = {
    "spec-type": ("kind", str),
    "spec-draft-n-max": ("draft_max", int),
    "spec-draft-n-min": ("draft_min", int),
    "spec-ngram-max": ("ngram_max", int),
    "spec-ngram-min": ("ngram_min", int),
    "spec-adaptive": ("adaptive", bool),
    "spec-exact": ("exact", bool),
    "model-draft": ("model_draft", str),
    "gpu-layers-draft": ("gpu_layers_draft", int),  # -ngld; below 0: all when the build can offload
    "ctx-size-draft": ("ctx_size_draft", int),  # -cd; 0: the target's
    "cache-type-k-draft": ("type_k_draft", str),  # -ctkd; "target": the target's
    "cache-type-v-draft": ("type_v_draft", str),  # -ctvd
}
DRAFT_KV_FIELDS = ("type_k_draft", "type_v_draft")


# /set names for the KV cache's types (-ctk, -ctv): the EngineOptions field.
KV_SETTINGS: dict[str, str] = {"cache-type-k": "type_k", "cache-type-v": "type_v"}


def set_name(key: str) -> str:
    """A setting as `/set` names it in an error: `spec-draft-n-max`, `/set model-draft`."""
    return "/set model-draft" if key == "model_draft" else key.replace("_", "-")


def sampling_value(key: str, name: str, value: str) -> Any:
    """`/set NAME VALUE` for a sampling setting: a registry setting's value parsed by its declaration
    (named as typed); the stop list, the seed and the penalty window, which are not settings, here."""
    from llmcli import settings, values
    from llmcli.errors import UsageError

    word = value.lower()
    if key == "stop":  # `a|b`; none (or "") clears the list
        return [] if word in ("", "none", '""', "''") else [s for s in value.split("|") if s]
    if key == "reasoning_budget_message":
        return value
    if key in settings.SETTINGS:  # -1 (or none) for reasoning_budget: no limit, as --reasoning-budget -1
        setting = settings.SETTINGS[key]
        if key == "reasoning_budget" and word in ("", "none"):
            return None
        return setting.option(values.parse(setting, value, name, text=True))
    if key == "seed" and word in ("", "none", "random"):
        return None
    try:
        parsed = int(value)
    except ValueError:
        kind = "an integer (or none)" if key == "seed" else "an integer"
        raise UsageError(f"{name} needs {kind}, got {value!r}") from None
    if key == "repeat_last_n" and parsed < 0:
        raise UsageError(f"repeat_last_n must be >= 0 (0: no penalty window), got {parsed}")
    return parsed


def kv_cache_type(name: str, value: str, flash_attn: bool | None) -> str | None:
    """`value` as the engine option for the KV setting `name` (None: f16, llama.cpp's default, as
    -ctk f16), checked: UsageError for an unknown type, or a quantized V cache without flash attention."""
    from llmcli import settings, values

    setting = settings.SETTINGS[name.replace("-", "_")]
    parsed = values.parse(setting, value, name, text=True)
    if KV_SETTINGS[name] == "type_v":
        refuse_v_cache(parsed, flash_attn)
    return setting.option(parsed)


def refuse_v_cache(kv_type: str | None, flash_attn: bool | None) -> None:
    """A quantized V cache needs flash attention: UsageError where this chat runs without it."""
    from llmcli.errors import UsageError
    from llmcli.gguf_file import v_cache_refused

    if kv_type and v_cache_refused(kv_type, flash_attn):
        raise UsageError(
            f"a quantized V cache ({kv_type}) needs flash attention, and this chat runs without it (-nfa)"
        )
