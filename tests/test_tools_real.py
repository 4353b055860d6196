"""Tool calling with a real model: Qwen2.5-Coder-0.5B-Instruct (its template has the Hermes tools
block) calls a real Python function, and its result goes back through the template.

At temperature 0 the 0.5B model reliably calls the one tool it is given for a question only the
tool can answer; what it writes after the result varies, so the test asserts properties: a call
parsed, its arguments valid for the schema, the result in the next prompt, no markup in the text."""

from __future__ import annotations

import json

import pytest

from llmcli import tools
from llmcli.contract import EngineOptions, Request, SamplingParams
from llmcli.request import tool_loop

pytestmark = pytest.mark.model

FUNCTIONS = '''
def get_secret_code(name: str) -> str:
    """Look up the secret code of a person by name."""
    return "The secret code is 4817."
'''


class Recording:
    """An engine whose requests are kept, to see what each round was sent."""

    def __init__(self, engine):
        self.engine, self.requests = engine, []

    def respond(self, request):
        self.requests.append(request)
        return self.engine.respond(request)

    def interrupt(self):
        self.engine.interrupt()


def test_qwen_calls_a_python_function_and_reads_its_result(qwen_model, tmp_path):
    from llmcli.engine.llama import LlamaEngine

    path = tmp_path / "fns.py"
    path.write_text(FUNCTIONS)
    toolset = tools.build([path])
    engine = LlamaEngine(qwen_model, EngineOptions(ctx_size=4096))
    try:
        recording = Recording(engine)
        pieces: list[str] = []
        params = SamplingParams(temperature=0.0, seed=1, max_tokens=120)
        request = Request(params, messages=[{"role": "user", "content": "What is the secret code of Alice?"}],
                          tools=toolset.specs())  # fmt: skip
        loop = tool_loop.ToolLoop(toolset, approve=lambda call: "yes", rounds=2)
        sink = lambda event: pieces.append(event.text) if type(event).__name__ == "Token" else None  # noqa: E731
        done, _, turn = tool_loop.drive_tools(recording, request, sink, loop)
    finally:
        engine.close()
    first = turn.calls[0]
    assert first["name"] == "get_secret_code" and first["round"] == 1
    assert tools.check_arguments(toolset.get("get_secret_code").parameters, first["arguments"]) is None
    assert first["result"] == "The secret code is 4817." and first["error"] is None
    assert len(recording.requests) >= 2
    fed = recording.requests[1].messages
    assert fed[-1]["role"] == "tool" and fed[-1]["content"] == first["result"]
    assert fed[-2]["tool_calls"][0]["function"]["name"] == "get_secret_code"
    for text in (done.text, "".join(pieces)):
        assert "<tool_call>" not in text and "</tool_call>" not in text
        assert '"arguments"' not in text  # the calls' JSON is not in the answer either
    json.dumps(turn.calls)  # the record's field is plain JSON


def test_a_calls_json_is_written_under_its_schemas_grammar(qwen_model, tmp_path):
    """Unconstrained, the 0.5B model calls a tool that does not exist for this question (it writes
    `{"name": "multiply", ...}`); under the call grammar every call names one of the tools and its
    arguments fit that tool's schema, through the whole generate path."""
    from realmodel import llmcli

    result = llmcli("generate", "-m", str(qwen_model), "--temperature", "0", "-n", "80", "--tool",
                    "arithmetic", "--tool", "current_time", "--approve-tools", "--tool-rounds", "1", "--json",
                    "What is 17.5 times 3?", timeout=900)  # fmt: skip
    # with --tool-rounds 1 the tools are withdrawn after the first round; the 0.5B model may then
    # write no answer, which is said (exit 8), never silent
    assert result.returncode in (0, 8), result.stderr
    assert (result.returncode == 8) == ("no answer" in result.stderr), result.stderr
    calls = json.loads(result.stdout)["tool_calls"]
    assert calls, "the model called a tool"
    toolset = tools.build(None, ["arithmetic", "current_time"])
    for call in calls:
        if call["result"].startswith("error: not run"):
            continue  # past --tool-rounds: recorded, not run
        assert call["error"] is None, call
        assert tools.check_arguments(toolset.get(call["name"]).parameters, call["arguments"]) is None


@pytest.mark.served
def test_qwen_through_llama_server_calls_a_python_function(qwen_model, tmp_path):
    """The same through a real llama-server with --jinja: llmcli sends `tools` and the server renders
    them with the model's template; the call comes back (as `tool_calls` deltas where the server
    parses it; this 0.5B model drops the tags, so the server passes its bare JSON on as text, which
    llmcli reads as the call), and its result goes back in OpenAI's shape, which the server's
    template takes, for the model to go on."""
    import llamacpp_tools
    from helpers import run
    from servers import start_llama_server

    path = tmp_path / "fns.py"
    path.write_text(FUNCTIONS)
    try:
        server = start_llama_server(tmp_path, model=qwen_model, slots=1, ctx=4096, extra=["--jinja"])
    except llamacpp_tools.ToolsUnavailable as exc:
        pytest.skip(f"llama-server cannot be built here: {exc}")
    try:
        question = "What is the secret code of Alice?"
        result = run("generate", "-m", server.ref, question, "--functions", str(path), "--approve-tools",
                     "--tool-rounds", "2", "--temperature", "0", "--seed", "1", "-n", "60", "--json",
                     "--timeout", "300")  # fmt: skip
    finally:
        server.stop()
    # the 0.5B model may go on writing calls once the tools are withdrawn (no answer: exit 7 when -n
    # cuts them, 8 when it stops); that is said, never silent (tests/test_tools_loop_real.py has the
    # 1.5B, which answers)
    assert result.exit_code in (0, 7, 8), result.stderr
    assert (result.exit_code != 0) == ("no answer" in result.stderr), result.stderr
    doc = json.loads(result.stdout)
    first = doc["tool_calls"][0]
    assert first["name"] == "get_secret_code" and first["round"] == 1 and first["error"] is None
    assert first["result"] == "The secret code is 4817."
    assert doc["usage"]["prompt_tokens"] > 100  # the tools block, rendered by the server's template
    assert "<tool_call>" not in doc["text"] and '"arguments"' not in doc["text"]


SLOW = '''
import time


def get_secret_code(name: str) -> str:
    """Look up the secret code of a person by name."""
    time.sleep(120)
    return "The secret code is 4817."
'''


@pytest.mark.terminal
def test_chat_on_a_terminal_asks_then_ctrl_c_stops_the_call_and_the_chat_goes_on(qwen_model, tmp_path):
    """In a real terminal: the call is shown and waits for y / n / a; the status line says which tool
    runs; Ctrl-C stops the call, and the next turn answers from a consistent history."""
    import os
    import sys

    import pexpect

    path = tmp_path / "slow.py"
    path.write_text(SLOW)
    env = dict(os.environ, TERM="xterm", COLUMNS="120", LINES="40")
    env.pop("NO_COLOR", None)
    argv = ["-m", "llmcli", "chat", "-m", str(qwen_model), "--functions", str(path), "--temperature", "0",
            "-n", "60", "-c", "4096", "--session", "tty-tools", "--tool-rounds", "2"]  # fmt: skip
    child = pexpect.spawn(sys.executable, argv, env=env, encoding="utf-8", timeout=300, dimensions=(40, 120))
    prompt = r"\x1b\[\?2004h"
    child.expect(prompt)
    child.sendline("What is the secret code of Alice?")
    child.expect(r"run tool get_secret_code\(.*Alice.*\)\? \[y\]es, \[n\]o, \[a\]lways for get_secret_code")
    child.sendline("y")
    child.expect(r"tool get_secret_code · \d")  # the live status line: the tool runs, not the model
    child.sendintr()
    child.expect(r"the user interrupted this call")
    child.expect(r"\[interrupted: the tool calls so far and their results are kept in the history\]")
    child.expect(prompt)
    child.sendline("Thanks. Say OK.")
    question, stats = r"run tool get_secret_code\(.*\)\? \[y\]es", r"prompt \d+ tok \(\d+ reused\)"
    while child.expect([question, stats]) == 0:  # it may ask for the code again: declined now
        child.sendline("n")
        child.expect(r"the user declined this call")  # taken (the question redrawn is not a new one)
    child.expect(prompt)
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    from llmcli.repl import session_files

    messages = session_files.load("tty-tools")["messages"]
    assert [m["role"] for m in messages[:3]] == ["user", "assistant", "tool"]
    assert "interrupted" in messages[2]["content"] and messages[-1]["role"] == "assistant"
