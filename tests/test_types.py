"""The engine contract is checked, not hoped for: mypy over the package, and a check that mypy does
catch an engine that lacks part of the contract."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def mypy(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, MYPYPATH=str(ROOT / "src")),  # this tree's package, however it is installed
    )


def test_the_package_type_checks():
    result = mypy("--config-file", str(ROOT / "pyproject.toml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_engine_without_interrupt_is_refused(tmp_path):
    """Everything of the contract but `interrupt`: mypy names the missing member."""
    module = tmp_path / "half_engine.py"
    module.write_text(
        textwrap.dedent(
            """
            from collections.abc import Iterator

            from llmcli.contract import (Capabilities, Engine, EngineOptions, Event, Many, ModelInfo,
                                         SamplingParams)
            from llmcli.engine.fake import FakeEngine
            from llmcli.tools.calls import CallFormat


            class HalfEngine:
                info: ModelInfo
                n_ctx: int = 0
                add_bos: bool = True
                can = Capabilities()
                options = EngineOptions()
                costs_pending = False

                def call_format(self) -> CallFormat:
                    return CallFormat("hermes")

                def describe(self) -> list[tuple[str, str]]:
                    return []

                def calibrate(self) -> None:
                    return None

                def tokenize(self, text: str, *, special: bool = True, add_bos: bool = False) -> list[int]:
                    return []

                def count(self, text: str) -> int:
                    return 0

                def bos_text(self) -> str:
                    return ""

                def eos_text(self) -> str:
                    return ""

                def stream(self, prompt: str | list[int], params: SamplingParams) -> Iterator[Event]:
                    return iter(())

                def reset(self) -> None: ...

                def state_identity(self) -> dict:
                    return {}

                def state_payload(self) -> tuple[list[int], memoryview]:
                    return [], memoryview(b"")

                def load_state_payload(self, tokens: list[int], payload: bytearray | memoryview) -> bool:
                    return False

                def close(self) -> None: ...

                def respond_many(self, parallel: int | None, *, items: int, room: int | None = None,
                     context: int | None = None) -> Many:
                    raise NotImplementedError

                def prepare_images(self) -> None: ...


            def use(engine: Engine) -> None:
                engine.interrupt()


            use(FakeEngine())
            use(HalfEngine())
            """
        )
    )
    result = mypy("--no-incremental", "--ignore-missing-imports", str(module), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    errors = [line for line in result.stdout.splitlines() if "error:" in line]
    assert len(errors) == 1 and '"HalfEngine"' in errors[0], result.stdout
    assert "interrupt" in result.stdout
