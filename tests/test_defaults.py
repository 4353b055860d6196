"""Each built-in default is defined once (llmcli.defaults); settings, the engine and --help agree."""

from __future__ import annotations

from helpers import run

from llmcli import defaults, settings
from llmcli.contract import SamplingParams
from llmcli.hub import fit

SAMPLING = {
    "temperature": defaults.TEMPERATURE,
    "top_k": defaults.TOP_K,
    "top_p": defaults.TOP_P,
    "min_p": defaults.MIN_P,
    "repeat_penalty": defaults.REPEAT_PENALTY,
    "max_tokens": defaults.MAX_TOKENS,
}


def test_settings_and_sampling_params_take_their_defaults_from_one_place():
    params = SamplingParams()
    for key, value in SAMPLING.items():
        assert settings.SETTINGS[key].default == value == getattr(params, key), key
    assert params.repeat_last_n == defaults.REPEAT_LAST_N
    assert settings.SETTINGS["batch_size"].default == defaults.BATCH_SIZE


def test_the_context_cap_is_one_value_in_help_config_and_the_fit_estimate():
    assert fit.DEFAULT_CTX == defaults.CTX_CAP
    assert f"capped at {defaults.CTX_CAP}" in settings.SETTINGS["ctx_size"].help
    result = run("generate", "--help")
    assert f"capped at {defaults.CTX_CAP}" in " ".join(result.stdout.split())
    for key, value in SAMPLING.items():
        assert f"(default {value})" in " ".join(result.stdout.split()), key


def test_the_bundled_sampling_table_names_bundled_models():
    """defaults.BUNDLED_SAMPLING is keyed by a bundled model's name (core cannot import the hub)."""
    from llmcli.defaults import BUNDLED_SAMPLING
    from llmcli.hub.default_model import BUNDLED, SMOLLM2

    assert set(BUNDLED_SAMPLING) <= set(BUNDLED) and SMOLLM2.name in BUNDLED_SAMPLING
