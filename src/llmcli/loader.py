"""From a model reference and flags to a loaded engine: resolve, validate the header, load.

Front ends call `load_engine`; tests replace `engine_factory` with a fake engine so every CLI
path runs without a model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from llmcli.engine.base import Engine, EngineOptions


@dataclass
class Loaded:
    engine: Engine
    ref: str
    path: Path


def _llama_factory(path: Path, options: EngineOptions, debug: bool) -> Engine:
    from llmcli.engine.llama import LlamaEngine

    return LlamaEngine(path, options, debug=debug)


engine_factory: Callable[[Path, EngineOptions, bool], Engine] = _llama_factory


def validate_file(path: Path) -> None:
    """Refuse files llama.cpp should never see: not GGUF, truncated, hostile headers or templates.

    The chat template is test-rendered in the sandbox before the weights load, so a template
    that reaches for Python internals fails closed here, with a clear message, at no cost.
    """
    from llmcli import gguf_file, templates

    header = gguf_file.read_header(path)
    if header.chat_template:
        templates.render(
            templates.PromptFormat(header.chat_template, "model"),
            [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
        )


def load_engine(ref: str | None, options: EngineOptions, *, offline: bool = False, debug: bool = False) -> Loaded:
    from llmcli import settings
    from llmcli.hub.resolve import resolve_model

    resolved = resolve_model(ref or settings.resolve("model") or None, offline=offline)
    if engine_factory is _llama_factory:
        validate_file(resolved.path)
    engine = engine_factory(resolved.path, options, debug)
    return Loaded(engine, resolved.ref, resolved.path)
