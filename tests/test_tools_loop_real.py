"""The tool loop with a real model that loops: Qwen2.5-Coder-1.5B-Instruct, given a tool's result
with the tools still offered, writes the same call again (as bare JSON) instead of answering. llmcli
must run the call once, then get an answer out of the model, and the answer must carry the tool's
value: locally through `generate`, through a real llama-server, and in chat.

The model is the slow tier's (about 1.1 GB, fetched from PyPI once and cached by tests/qwen.py), so
these are a few end-to-end cases, not a matrix. At temperature 0 the answer's wording varies with
the build; what is asserted is what the user needs: the value the tool returned, in the answer."""

from __future__ import annotations

import json

import pytest
from realmodel import llmcli
from records import validate

pytestmark = pytest.mark.model

FUNCTIONS = '''
def get_temperature(city: str) -> str:
    """The current temperature in a city, in degrees Celsius."""
    return f"The temperature in {city} is 13.7 degrees Celsius."
'''
QUESTION = "What is the temperature in Tromso right now? Use the tool, then answer in one sentence."
VALUE = "13.7"


@pytest.fixture(scope="module")
def qwen15() -> str:
    import qwen

    try:
        return str(qwen.path_1_5b())
    except qwen.Unavailable as exc:
        pytest.skip(f"the 1.5B model cannot be fetched here: {exc}")


@pytest.fixture
def functions(tmp_path) -> str:
    path = tmp_path / "weather.py"
    path.write_text(FUNCTIONS)
    return str(path)


def check_calls(calls: list[dict]) -> None:
    """The tool ran once, with Tromso, and every call has its own id."""
    ran = [c for c in calls if c["error"] is None]
    assert len(ran) == 1, calls
    assert ran[0]["name"] == "get_temperature" and "tromso" in ran[0]["arguments"]["city"].lower()
    assert all(c["error"].startswith("not run: the same call") for c in calls if c["error"] is not None)
    assert len({c["id"] for c in calls}) == len(calls)


def test_generate_runs_the_call_once_and_answers_with_its_value(qwen15, functions):
    result = llmcli("generate", "-m", qwen15, "--functions", functions, "--approve-tools",
                    "--temperature", "0", "-n", "120", "--json", QUESTION, timeout=1800)  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = validate(json.loads(result.stdout))
    assert doc["finish_reason"] == "stop"
    assert VALUE in doc["text"], doc["text"]
    check_calls(doc["tool_calls"])


@pytest.mark.served
def test_through_llama_server_the_answer_has_the_value(qwen15, functions, tmp_path):
    """The same through llama-server --jinja: the round without tools is a request whose body has no
    `tools`, and the server's template renders the call and its result without them."""
    from pathlib import Path

    import llamacpp_tools
    from servers import start_llama_server

    try:
        server = start_llama_server(tmp_path, model=Path(qwen15), slots=1, ctx=4096, extra=["--jinja"])
    except llamacpp_tools.ToolsUnavailable as exc:
        pytest.skip(f"llama-server cannot be built here: {exc}")
    try:
        result = llmcli("generate", "-m", server.ref, "--functions", functions, "--approve-tools",
                        "--temperature", "0", "--seed", "1", "-n", "120", "--json", "--timeout", "600",
                        QUESTION, timeout=1800)  # fmt: skip
    finally:
        server.stop()
    assert result.returncode == 0, result.stderr
    doc = validate(json.loads(result.stdout))
    assert VALUE in doc["text"], doc["text"]
    check_calls(doc["tool_calls"])


def test_chat_answers_with_the_value_and_keeps_the_call(qwen15, functions, tmp_path):
    result = llmcli("chat", "-m", qwen15, "--functions", functions, "--approve-tools", "--temperature", "0",
                    "-n", "120", "--session", "weather", input=QUESTION + "\n", timeout=1800)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert VALUE in result.stdout, result.stdout
    assert "no answer" not in result.stderr
