"""A run's options, as the engine contract carries them: how to sample (`SamplingParams`), how to
speculate (`SpecOptions`) and how a model is loaded (`EngineOptions`). Plain dataclasses of the
core layer; `llmcli.contract` re-exports them, and `llmcli.runspec` resolves them from the flags,
the environment, the config file and the model."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from llmcli import defaults


def flag_name(key: str) -> str:
    """The command-line flag of a setting or sampling field, as errors name it: `--top-k`."""
    return "-md/--model-draft" if key == "model_draft" else "--" + key.replace("_", "-")


@dataclass
class SamplingParams:
    """Every sampling setting; `seed=None` means "pick one and report it"."""

    temperature: float = defaults.TEMPERATURE
    top_k: int = defaults.TOP_K
    top_p: float = defaults.TOP_P
    min_p: float = defaults.MIN_P
    repeat_penalty: float = defaults.REPEAT_PENALTY
    repeat_last_n: int = defaults.REPEAT_LAST_N
    frequency_penalty: float = 0.0  # OpenAI's penalties, in llama.cpp's penalties sampler (0: none)
    presence_penalty: float = 0.0
    seed: int | None = None
    max_tokens: int = defaults.MAX_TOKENS  # 0 means: until end of generation or the context is full
    stop: list[str] = field(default_factory=list)
    grammar: str | None = None  # GBNF text (from --grammar-file or --json-schema)
    json_schema: dict | bool | None = None  # the --json-schema itself (a served model sends it, not GBNF)
    # A reasoning model's budget: tokens it may reason before its block is closed for it (0: none;
    # None: no limit), and the text written before the forced closing tag
    reasoning_budget: int | None = None
    reasoning_budget_message: str = ""
    # Settings the user left at the built-in default (a model's recommendation may replace them).
    defaulted: frozenset[str] = field(default_factory=frozenset, repr=False, compare=False)

    def validate(self, names: Callable[[str], str] | None = None) -> None:
        """UsageError for a value out of range, naming it by `names` (a field's name as the user
        typed it: the flag by default, `/set`'s key in chat)."""
        from llmcli.errors import UsageError

        n = names or flag_name
        checks = [
            (0 <= self.temperature < math.inf,
             f"{n('temperature')} must be >= 0 and finite, got {self.temperature}"),  # fmt: skip
            (self.top_k >= 0, f"{n('top_k')} must be >= 0, got {self.top_k}"),
            (0 < self.top_p <= 1, f"{n('top_p')} must be in (0, 1], got {self.top_p}"),
            (0 <= self.min_p <= 1, f"{n('min_p')} must be in [0, 1], got {self.min_p}"),
            (0 < self.repeat_penalty < math.inf,
             f"{n('repeat_penalty')} must be > 0 and finite, got {self.repeat_penalty}"),  # fmt: skip
            (self.max_tokens >= 0, f"{n('max_tokens')} must be >= 0 (0: no limit), got {self.max_tokens}"),
            (abs(self.frequency_penalty) <= 2 and abs(self.presence_penalty) <= 2,
             f"{n('frequency_penalty')} and {n('presence_penalty')} must be in [-2, 2]"),  # fmt: skip
            (
                self.seed is None or 0 <= self.seed < 2**32 - 1,
                f"{n('seed')} must be in [0, 4294967294], got {self.seed}",
            ),
            (all(self.stop), f"{n('stop')} strings must not be empty"),
            (
                self.reasoning_budget is None or self.reasoning_budget >= 0,
                f"{n('reasoning_budget')} must be >= 0 (-1: no limit), got {self.reasoning_budget}",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise UsageError(message)

    def as_dict(self) -> dict:
        d = asdict(self)
        d.pop("defaulted")
        d["grammar"] = self.grammar is not None
        d["json_schema"] = self.json_schema is not None
        return d


@dataclass
class SpecOptions:
    """Speculative decoding (engine/speculation/, engine/decoding.py): who
    proposes tokens for the target to verify in one batch, and how many. Lossless: each token is a
    sample of the target's own distribution, and the same command gives the same text."""

    kind: str = "none"  # "none", "lookup" (prompt lookup: n-grams of the context) or "draft"
    draft_max: int = defaults.SPEC_DRAFT_N_MAX  # most tokens proposed per verification batch
    draft_min: int = defaults.SPEC_DRAFT_N_MIN  # fewer than this are not worth a batch
    ngram_max: int = defaults.SPEC_NGRAM_MAX  # prompt lookup: longest n-gram matched
    ngram_min: int = defaults.SPEC_NGRAM_MIN  # and the shortest
    adaptive: bool = True  # choose k per batch from measured costs and acceptance (else draft_max)
    # Verify only in batches whose logits are bit-identical to single steps on this build and model
    # (probed once, cached): temperature 0 then gives exactly the plain text. Off (the default): in
    # whatever batch sizes pay, each token still a sample of the target's distribution.
    exact: bool = False
    model_draft: str | None = None  # the draft model's file (kind "draft")
    model_draft_ref: str | None = None  # as the user named it, for the record
    model_draft_from: str | None = None  # where that name came from when not typed, for errors
    gpu_layers_draft: int | None = None
    ctx_size_draft: int | None = None  # None: the target's context size
    # the draft's KV cache types (-ctkd/-ctvd, lowercase); None: the target's (f16 as llama.cpp's None)
    type_k_draft: str | None = None
    type_v_draft: str | None = None

    @property
    def enabled(self) -> bool:
        return self.kind != "none" and self.draft_max > 0

    def validate(self, names: Callable[[str], str] | None = None) -> None:
        """UsageError for settings that do not go together, naming each by `names` (the setting's
        key as the user typed it: the flag by default, `/set`'s name in chat)."""
        from llmcli.errors import UsageError

        n = names or flag_name
        if self.kind not in ("none", "lookup", "draft"):
            raise UsageError(f"{n('spec_type')} must be none, lookup or draft, got {self.kind!r}")
        # Each range always; a pair only where it is used, so that a configured pair that does not
        # fit together (say an n-gram minimum above the maximum) does not stop a run that ignores it.
        if not 0 <= self.draft_max <= 64:
            raise UsageError(f"{n('spec_draft_n_max')} must be in [0, 64], got {self.draft_max}")
        if not 0 <= self.draft_min <= 64:
            raise UsageError(f"{n('spec_draft_n_min')} must be in [0, 64], got {self.draft_min}")
        for key, value in (("spec_ngram_min", self.ngram_min), ("spec_ngram_max", self.ngram_max)):
            if not 1 <= value <= 16:
                raise UsageError(f"{n(key)} must be in [1, 16], got {value}")
        if self.kind != "none" and self.draft_min > max(self.draft_max, 1):
            raise UsageError(
                f"{n('spec_draft_n_min')} must be in [0, {n('spec_draft_n_max')}], got {self.draft_min}"
            )
        if self.kind == "lookup" and self.ngram_min > self.ngram_max:
            raise UsageError(
                f"{n('spec_ngram_min')} and {n('spec_ngram_max')} must satisfy 1 <= min <= max <= 16, got "
                f"{self.ngram_min} and {self.ngram_max}"
            )
        if self.kind == "draft" and not self.model_draft:
            raise UsageError(f"{n('spec_type')} draft needs a draft model: {n('model_draft')} REF")

    def settings(self) -> dict:
        """What the `--json` record and bench report about the proposer."""
        d: dict = {"type": self.kind, "draft_max": self.draft_max, "draft_min": self.draft_min,
                   "adaptive": self.adaptive, "exact": self.exact}  # fmt: skip
        if self.kind == "lookup":
            d.update(ngram_max=self.ngram_max, ngram_min=self.ngram_min)
        if self.kind == "draft":
            d.update(model_draft=self.model_draft_ref or self.model_draft, model_draft_path=self.model_draft,
                     gpu_layers_draft=self.gpu_layers_draft, ctx_size_draft=self.ctx_size_draft)  # fmt: skip
            if self.type_k_draft or self.type_v_draft:  # else the target's (the engine's report says which)
                d.update(cache_type_k_draft=self.type_k_draft, cache_type_v_draft=self.type_v_draft)
        return d


@dataclass
class EngineOptions:
    """How a model is loaded; `None` fields get the engine's documented defaults."""

    ctx_size: int | None = None
    gpu_layers: int | None = None
    threads: int | None = None
    batch_size: int = defaults.BATCH_SIZE
    ubatch_size: int | None = None
    flash_attn: bool | None = None  # None: auto
    swa_full: bool = True  # keep full-size KV for sliding-window models so prefixes can be reused
    type_k: str | None = None
    type_v: str | None = None
    mmproj: str | None = None  # the image projector (--mmproj); None: an mmproj*.gguf beside the model
    repack: bool | None = None  # None: on, except where llama.cpp would use AMX (see backend.weight_repack)
    speculative: SpecOptions = field(default_factory=SpecOptions)

    def draft_cache_types(self) -> tuple[str, str]:
        """The draft model's KV cache types: -ctkd/-ctvd, else the target's (lowercase names)."""
        spec = self.speculative
        return (
            (spec.type_k_draft or self.type_k or "f16").lower(),
            (spec.type_v_draft or self.type_v or "f16").lower(),
        )
