"""Built-in defaults, each defined once.

`settings.SETTINGS` (and so `config show`, the man page and docs/CONFIG.md), the engine's
`SamplingParams`, the memory-fit estimate and the `--help` texts all read these values; none
of them types a number of its own. Plain constants, so `--help` imports nothing heavy.
"""

from __future__ import annotations

# The context when -c/--ctx-size is not given: the model's trained context, capped at this.
CTX_CAP = 4096

BATCH_SIZE = 512

# Sampling (a model's recommended settings may replace those the user left at these values).
TEMPERATURE = 0.8
TOP_K = 40
TOP_P = 0.95
MIN_P = 0.05
REPEAT_PENALTY = 1.0
REPEAT_LAST_N = 64
MAX_TOKENS = 512  # 0 means: until end of generation or the context is full
# Sampling recommended for a bundled model (hub.default_model, by name) whose file carries no
# `general.sampling.*` keys (see llmcli.sampling). SmolLM2-135M at the built-in defaults
# (temperature 0.8, no repeat penalty) loops until the token cap on about one seed in ten for a
# short creative prompt; with llama.cpp's classic repeat penalty of 1.1 it stopped by itself on
# every seed tried (20 of 20).
BUNDLED_SAMPLING: dict[str, dict[str, float]] = {"smollm2-135m": {"repeat_penalty": 1.1}}

# Saved KV states (chat sessions) under the cache directory: at most this many megabytes.
KV_CACHE_MAX_MB = 2000

# Speculative decoding (--spec-type lookup|draft): most and fewest tokens proposed per
# verification batch (adaptive k chooses within, down to 0), and prompt lookup's n-gram lengths.
# 16: adaptive k keeps a larger ceiling from costing where proposals miss, and a long copy is then
# verified in half the passes (docs/SPECULATIVE.md, "k up to 16"). llama.cpp's draft-model default
# is 3, its n-gram proposers draft up to 48-64 (ngram-mod) at a fixed length.
SPEC_DRAFT_N_MAX = 16
SPEC_DRAFT_N_MIN = 1
SPEC_NGRAM_MAX = 4  # as llama-lookup (LLAMA_NGRAM_MAX)
SPEC_NGRAM_MIN = 1
