"""Engines: the only code that runs a model here (a served model's engine, which talks to its server,
is `llmcli.served`). The contract they implement is `llmcli.contract`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the contract, checked by mypy (tests/test_types.py): each engine is an Engine
    from llmcli.contract import Engine
    from llmcli.engine.fake import FakeEngine
    from llmcli.engine.llama import LlamaEngine

    def _every_engine_is_an_engine(llama: LlamaEngine, fake: FakeEngine) -> tuple[Engine, Engine]:
        return llama, fake
