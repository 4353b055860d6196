"""One run specification: what every command that runs a model runs with.

`resolve_run` turns a command's run flags into a `RunSpec`: sampling, how the model is loaded, the
system prompt, the template mode and the think switch, each setting resolved flag > LLMCLI_* >
config file > the model's recommendation (applied once the model is loaded, `RunSpec.recommend`) >
the built-in default, from the settings registry (`llmcli.settings`). generate, chat, batch, bench,
embed, similar and `logs rerun` all resolve here, so a setting means the same in each.

An item of a batch may carry its own options (a JSON line's, an OpenAI body's): they sit between
the flags and the rest (`RunSpec.item_params`): a flag typed on the command line wins over the item,
the item over the environment, the config file, the model and the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from llmcli.runspec.resolve import (
    _typed,
    engine_options,
    load_grammar,
    read_schema,
    reasoning_budget,
    sampling_params,
)

if TYPE_CHECKING:
    from llmcli.contract import EngineOptions, ModelInfo, SamplingParams

# The sampling settings a run resolves through the registry (the others: seed, stop, grammar, schema)
SAMPLING_KEYS = ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "max_tokens")
CONSTRAINT = {"grammar", "json_schema"}


@dataclass
class RunSpec:
    """What a run needs, resolved once. `sources`: where each sampling setting came from ("flag",
    "env", "config", "model", "default"), for an item's options and for what a run records."""

    sampling: SamplingParams
    engine: EngineOptions
    system: str | None = None
    raw: bool = False  # --raw: plain text, no chat template
    fallback_template: bool = False  # --fallback-template: a base model in its architecture's turns
    think: bool | None = None  # --think/--no-think, else LLMCLI_THINK or the config; None: the template's
    sources: dict[str, str] = field(default_factory=dict)

    def recommend(self, info: ModelInfo, ref: str) -> dict[str, Any]:
        """The model's recommended sampling (general.sampling.*) over the settings left at their
        defaults; what it applied."""
        from llmcli.sampling import apply_recommended

        applied = apply_recommended(self.sampling, info, ref)
        self.sources.update(dict.fromkeys(applied, "model"))
        return applied

    def template(self, engine) -> tuple[str, str | None]:
        """How a prompt is built for `engine`: "raw", or the template's source; and a notice where
        the model decided (a base model continues plain text)."""
        from llmcli.prompting import generate_format

        return generate_format(engine, raw=self.raw, fallback_template=self.fallback_template)

    def item_params(self, options: Mapping[str, Any]) -> SamplingParams:
        """The sampling of one item that carries `options` of its own: each over the run's value,
        except where a flag was typed (the flag wins)."""
        typed = {key for key, source in self.sources.items() if source == "flag"}
        if typed & CONSTRAINT:  # a grammar and a JSON schema are one constraint: the flag's, whole
            typed |= CONSTRAINT
        own = {key: value for key, value in options.items() if key not in typed}
        if not own:
            return self.sampling
        params = replace(self.sampling, **own)
        return replace(params, defaulted=params.defaulted - set(own))


def resolve_run(values: Mapping[str, Any], *, ctx: Any = None, speculative=None) -> RunSpec:
    """The run flags `values` (by the settings' keys; None or absent: not given) resolved into a
    `RunSpec`. `ctx`: the command's Click context, which tells a typed flag from an environment
    variable Typer handed over as one; `speculative`: the run's speculative options, resolved
    apart (`runspec.speculative`), or None (the command does not speculate)."""
    from llmcli import settings

    v = values.get
    sampling, engine = resolve_sampling(values), resolve_engine(values, speculative)
    sources = {}
    for key in SAMPLING_KEYS:
        _, source = settings.resolve_with_source(key, v(key))
        sources[key] = "env" if source == "flag" and not _typed(v(key), key, ctx) else source
    for key in ("seed", "stop", "grammar", "json_schema"):
        given = v("grammar_file") if key == "grammar" else v(key)
        sources[key] = "flag" if given not in (None, []) else "default"
    system = settings.resolve("system", v("system")) or None
    return RunSpec(sampling, engine, system=system, raw=bool(v("raw")),
                   fallback_template=bool(v("fallback_template")), think=settings.think(v("think")),
                   sources=sources)  # fmt: skip


def resolve_sampling(values: Mapping[str, Any]) -> SamplingParams:
    """The sampling half of `resolve_run`: checked, the grammar or JSON schema converted."""
    v = values.get
    sampling = sampling_params(v("temperature"), v("top_k"), v("top_p"), v("min_p"), v("repeat_penalty"),
                               v("seed"), v("max_tokens"), v("stop"), v("grammar_file"),
                               v("json_schema"))  # fmt: skip
    sampling.reasoning_budget, sampling.reasoning_budget_message = reasoning_budget(
        v("reasoning_budget"), v("reasoning_budget_message")
    )
    return sampling


def resolve_engine(values: Mapping[str, Any], speculative=None) -> EngineOptions:
    """The loading half of `resolve_run`: how the model is loaded, checked."""
    v = values.get
    return engine_options(v("ctx_size"), v("gpu_layers"), v("threads"), v("batch_size"), v("flash_attn"),
                          speculative, v("repack"), v("cache_type_k"), v("cache_type_v"))  # fmt: skip


def configured(key: str) -> list[str] | None:
    """A load setting as bench sweeps it: `[value]` where LLMCLI_* or the config file set it to
    something other than the engine's default (`threads = 1`, `batch_size = 256`), else None (bench
    keeps llama-bench's own default: a benchmark measures the same thing wherever it runs unless
    the user configured otherwise)."""
    from llmcli import settings

    value, source = settings.resolve_with_source(key)
    if source == "default" or settings.SETTINGS[key].option(value) is None:
        return None
    return [str(value)]


__all__ = ["RunSpec", "configured", "load_grammar", "read_schema", "resolve_run"]
