"""Tool calling on the fake engine and real templates: tool definitions, call parsing, the loop in
generate (approval, --show-tools, --json's tool_calls), bad input, and in chat (y / n / always, Ctrl-C,
the history, saved sessions and the log)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import run, use_engine
from records import validate

from llmcli import tools
from llmcli.engine.fake import FakeEngine
from llmcli.tools import calls as toolcalls
from llmcli.tools import grammar as toolgrammar

TEMPLATES = Path(__file__).parent / "data" / "templates"


def template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


FUNCTIONS = '''
from typing import Literal


def word_length(word: str, times: int = 1) -> int:
    """How many letters a word has.

    Longer text that is not part of the description."""
    return len(word) * times


def weather(city: str, unit: Literal["C", "F"] = "C") -> dict:
    """Today's weather in a city."""
    return {"city": city, "temperature": 21, "unit": unit}


def broken(x: int) -> int:
    """Always fails."""
    raise RuntimeError("the tool broke")


def _private() -> None:
    pass
'''


@pytest.fixture
def functions(tmp_path) -> Path:
    path = tmp_path / "fns.py"
    path.write_text(FUNCTIONS)
    return path


def hermes(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def qwen_fake(*replies: str):
    """The fake engine under Qwen2.5's real template (its tools block is long in the fake's one
    token a character: a context that holds a few turns with it)."""
    return use_engine(FakeEngine.factory(chat_template=template("qwen2.5-instruct"), architecture="qwen2",
                                         replies=list(replies), n_ctx=16384))  # fmt: skip


# -- definitions -------------------------------------------------------------------------------


def test_functions_file_gives_schemas(functions):
    toolset = tools.build([functions])
    assert sorted(toolset.tools) == ["broken", "weather", "word_length"]
    spec = toolset.get("word_length").spec()["function"]
    assert spec["description"] == "How many letters a word has."
    assert spec["parameters"]["properties"] == {"word": {"type": "string"},
                                                "times": {"type": "integer", "default": 1}}  # fmt: skip
    assert spec["parameters"]["required"] == ["word"]
    weather = toolset.get("weather").spec()["function"]["parameters"]
    assert weather["properties"]["unit"]["enum"] == ["C", "F"]


def test_builtins_are_safe_and_exact():
    arithmetic = tools.builtin("arithmetic")
    assert tools.run(arithmetic, {"operation": "multiply", "a": 12, "b": 34}).result == "408"
    out = tools.run(arithmetic, {"operation": "divide", "a": 1, "b": 0})
    assert out.error and "division by zero" in out.result
    assert tools.run(arithmetic, {"operation": "power", "a": 10, "b": 10**6}).error
    now = json.loads(tools.run(tools.builtin("current_time"), {}).result)
    assert now["utc"].endswith("+00:00")


def test_tools_list_without_flags_lists_the_builtins_then_the_hint():
    result = run("tools", "list")
    assert result.exit_code == 0, result.stderr
    heads = [line for line in result.stdout.splitlines() if line and not line.startswith(" ")]
    assert heads == [f"{name}  (builtin)" for name in tools.BUILTINS]
    assert result.stdout.endswith("}\n")  # a text listing ends its last line
    assert "--tool NAME" in result.stderr and "--functions" in result.stderr  # the hint, on stderr
    listed = json.loads(run("tools", "list", "--json").stdout)
    assert [t["name"] for t in listed] == list(tools.BUILTINS)
    assert {t["origin"] for t in listed} == {"builtin"}
    chosen = run("tools", "list", "--tool", "arithmetic")
    assert chosen.stdout.startswith("arithmetic  (builtin)") and "current_time" not in chosen.stdout
    assert chosen.stdout.endswith("\n") and not chosen.stderr


def test_tools_list_shows_each_schema(functions):
    result = run("tools", "list", "--functions", str(functions), "--tool", "current_time", "--json")
    assert result.exit_code == 0, result.stderr
    listed = {t["name"]: t for t in json.loads(result.stdout)}
    assert set(listed) == {"word_length", "weather", "broken", "current_time"}
    assert listed["word_length"]["parameters"]["required"] == ["word"]
    assert listed["current_time"]["origin"] == "builtin"
    plain = run("tools", "list", "--functions", str(functions))
    assert plain.exit_code == 0 and "word_length" in plain.stdout and '"required"' in plain.stdout


@pytest.mark.parametrize(
    "setup, args, message",
    [
        ("raise ImportError('nope')", [], "failed to import: ImportError: nope"),
        ("x = 1", [], "defines no public top-level function"),
        (None, ["--tool", "rm_rf"], "no built-in tool 'rm_rf'"),
        ("def arithmetic(a: int) -> int:\n    return a", ["--tool", "arithmetic"], "two tools are named"),
    ],
)
def test_bad_tool_sets_are_one_line(tmp_path, setup, args, message):
    flags = list(args)
    if setup is not None:
        path = tmp_path / "bad.py"
        path.write_text(setup + "\n")
        flags = ["--functions", str(path), *flags]
    result = run("tools", "list", *flags)
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


# -- call formats on real templates ------------------------------------------------------------


def test_formats_recognised_from_real_templates():
    assert toolcalls.detect(template("qwen2.5-instruct")).kind == "hermes"
    assert toolcalls.detect(template("llama3.2-instruct")).kind == "llama3"
    assert toolcalls.detect(template("mistral-nemo-instruct")).kind == "mistral"
    assert toolcalls.detect(template("smollm2")) is None
    assert toolcalls.detect(template("deepseek-r1-distill")) is None


def feed_all(parser: toolcalls.Parser, pieces: list[str]) -> list:
    out = []
    for piece in pieces:
        out += parser.feed(piece)
    return out + parser.finish()


def chars(text: str) -> list[str]:
    return list(text)


@pytest.mark.parametrize("split", [lambda t: [t], chars])
def test_hermes_calls_apart_from_text(split):
    text = "Checking.\n" + hermes("weather", {"city": "Oslo"}) + "\n" + hermes("word_length", {"word": "x"})
    out = feed_all(toolcalls.Parser(toolcalls.CallFormat("hermes")), split(text))
    words = "".join(p for p in out if isinstance(p, str))
    calls = [p for p in out if isinstance(p, toolcalls.Call)]
    assert words == "Checking."
    assert [(c.name, c.arguments) for c in calls] == [
        ("weather", {"city": "Oslo"}),
        ("word_length", {"word": "x"}),
    ]


def test_malformed_call_is_a_call_with_an_error():
    out = feed_all(toolcalls.Parser(toolcalls.CallFormat("hermes")), ["<tool_call>{not json</tool_call>"])
    assert len(out) == 1 and out[0].error and "not valid JSON" in out[0].error


@pytest.mark.parametrize("split", [lambda t: [t], chars])
def test_llama3_json_answer_is_a_call(split):
    text = '{"name": "weather", "parameters": {"city": "Oslo"}}'
    out = feed_all(toolcalls.Parser(toolcalls.CallFormat("llama3")), split(text))
    assert [(c.name, c.arguments) for c in out] == [("weather", {"city": "Oslo"})]
    plain = feed_all(toolcalls.Parser(toolcalls.CallFormat("llama3")), split("It is sunny {really}."))
    assert "".join(plain) == "It is sunny {really}."
    not_a_call = feed_all(toolcalls.Parser(toolcalls.CallFormat("llama3")), split('{"a": 1}'))
    assert not_a_call == ['{"a": 1}']


def test_mistral_calls():
    text = '[TOOL_CALLS][{"name": "weather", "arguments": {"city": "Oslo"}}]'
    out = feed_all(toolcalls.Parser(toolcalls.CallFormat("mistral")), chars(text))
    assert [(c.name, c.arguments) for c in out] == [("weather", {"city": "Oslo"})]


@pytest.mark.parametrize("name", ["qwen2.5-instruct", "llama3.2-instruct", "mistral-nemo-instruct"])
def test_real_templates_render_tools_calls_and_results(name):
    from llmcli import templates

    specs = tools.Toolset([tools.builtin("arithmetic")]).specs()
    function = {"name": "arithmetic", "arguments": {"operation": "add", "a": 1, "b": 2}}
    call = {"id": "call00001", "type": "function", "function": function}
    messages = [
        {"role": "user", "content": "1+2?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call00001", "name": "arithmetic", "content": "3"},
    ]
    prompt = templates.render(templates.PromptFormat(template(name), "model"), messages,
                              variables={"tools": specs})  # fmt: skip
    assert "arithmetic" in prompt and "multiply" in prompt  # the tool's schema
    assert prompt.count('"operation"') >= 2  # the schema and the call
    assert "3" in prompt.rsplit("arithmetic", 1)[1]  # the result after the call


# -- the loop in generate ----------------------------------------------------------------------


def test_generate_runs_an_approved_call_and_records_it(functions):
    factory = qwen_fake("On it.\n" + hermes("word_length", {"word": "llama", "times": 2}), "It has 10.")
    result = run("generate", "how long?", "--functions", str(functions), "--approve-tools", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert "<tool_call>" not in doc["text"] and doc["text"] == "On it.\nIt has 10."
    (call,) = doc["tool_calls"]
    assert call["name"] == "word_length" and call["arguments"] == {"word": "llama", "times": 2}
    assert call["result"] == "10" and call["error"] is None and call["round"] == 1
    assert call["duration_ms"] >= 0 and doc["timings"]["tool_ms"] >= 0
    second = factory.made[0].history[1].prompt
    assert "<tool_response>\n10\n</tool_response>" in second
    assert '"word_length"' in factory.made[0].history[0].prompt  # the tools block


def test_logs_rerun_of_a_request_that_offered_tools_refuses_in_one_line(functions):
    factory = qwen_fake("On it.\n" + hermes("word_length", {"word": "llama", "times": 2}), "It has 10.",
                        "No call.")  # fmt: skip
    assert run("generate", "how long?", "--functions", str(functions), "--approve-tools").exit_code == 0
    assert run("generate", "and now?", "--functions", str(functions)).exit_code == 0  # offered, not called
    for entry, called in (("1", " (it called word_length)"), ("2", "")):
        result = run("logs", "rerun", entry)
        assert result.exit_code == 2 and not result.stdout
        [line] = result.stderr.strip().splitlines()
        assert f"entry #{entry} offered the model tools{called}:" in line
        assert "--functions" in line and "--approve-tools" in line  # what to do instead
    assert len(factory.made) == 2  # the reruns loaded no model: refused before anything ran


def test_generate_streams_text_without_markup(functions):
    qwen_fake("Sure. " + hermes("weather", {"city": "Oslo"}), "Sunny, 21 C.")
    result = run("generate", "weather?", "--functions", str(functions), "--approve-tools", "--show-tools")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "Sure.\nSunny, 21 C.\n"
    assert "tool weather(" in result.stderr and '"temperature": 21' in result.stderr


def test_generate_without_approval_refuses_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "side.py"
    path.write_text(f"def touch() -> str:\n    '''Touch a file.'''\n    open({str(marker)!r}, 'w').close()\n"
                    "    return 'done'\n")  # fmt: skip
    factory = qwen_fake(hermes("touch", {}), "never")
    result = run("generate", "go", "--functions", str(path))
    assert result.exit_code == 2
    assert not marker.exists()
    (line,) = result.stderr.strip().splitlines()
    assert "touch({})" in line and "--approve-tools" in line
    assert len(factory.made[0].history) == 1  # no second request


@pytest.mark.parametrize(
    "call, said",
    [
        (hermes("nope", {}), "no tool is named 'nope'"),
        (hermes("word_length", {"word": 3}), "argument 'word': must be string"),
        (hermes("word_length", {}), "missing required argument: word"),
        (hermes("broken", {"x": 1}), "RuntimeError: the tool broke"),
        ("<tool_call>{oops</tool_call>", "could not be read"),
    ],
)
def test_bad_calls_are_told_to_the_model(functions, call, said):
    factory = qwen_fake(call, "Sorry.")
    result = run("generate", "go", "--functions", str(functions), "--approve-tools", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert said in doc["tool_calls"][0]["error"]
    assert said in factory.made[0].history[1].prompt  # the model reads what went wrong
    assert doc["text"] == "Sorry."


def test_tool_timeout(tmp_path):
    path = tmp_path / "slow.py"
    path.write_text(
        "import time\n\ndef slow() -> str:\n    '''Hangs.'''\n    time.sleep(30)\n    return 'x'\n"
    )
    qwen_fake(hermes("slow", {}), "Gave up.")
    result = run("generate", "go", "--functions", str(path), "--approve-tools", "--tool-timeout", "0.2",
                 "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "timed out after 0.2 s" in json.loads(result.stdout)["tool_calls"][0]["error"]


def test_tool_rounds_limit_sends_the_last_results_without_tools(functions):
    """The round that reaches --tool-rounds is answered without the tools: the model answers from
    what it has, and no call goes unrun."""
    calls = [hermes("word_length", {"word": w}) for w in "abc"]
    factory = qwen_fake(calls[0], calls[1], "Lengths: 1 and 1.")
    result = run("generate", "go", "--functions", str(functions), "--approve-tools", "--tool-rounds", "2",
                 "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    doc = validate(json.loads(result.stdout))
    assert [c["round"] for c in doc["tool_calls"]] == [1, 2]
    assert all(c["error"] is None for c in doc["tool_calls"])
    assert doc["text"].endswith("Lengths: 1 and 1.") and doc["finish_reason"] == "stop"
    prompts = [r.prompt for r in factory.made[0].history]
    assert "<tools>" in prompts[0] and "<tools>" in prompts[1]
    assert "<tools>" not in prompts[2]  # calls are no longer allowed
    assert prompts[2].count("<tool_response>") == 2  # but it has both results


TEMPERATURE = '''
def get_temperature(city: str) -> str:
    """The temperature in a city now."""
    with open(COUNTER, "a") as f:
        f.write("x")
    return f"It is 13.7 C in {city}."


def tick() -> str:
    """Count a tick."""
    with open(COUNTER, "a") as f:
        f.write("x")
    return "ok"
'''


@pytest.fixture
def counted(tmp_path) -> tuple[Path, Path]:
    """A functions file whose tools count their runs in a file: (the functions file, the counter)."""
    counter = tmp_path / "runs"
    path = tmp_path / "temp.py"
    path.write_text(f"COUNTER = {str(counter)!r}\n" + TEMPERATURE)
    return path, counter


def test_a_repeated_call_is_not_run_again_and_the_model_answers_without_tools(counted):
    """A small model given a result with the tools still offered calls the same tool again: the
    repeat is not run, and the model is asked again, with the result and without the tools."""
    path, counter = counted
    call = hermes("get_temperature", {"city": "Tromso"})
    factory = qwen_fake(call, call, "The temperature in Tromso is 13.7 C.")
    result = run("generate", "temperature?", "--functions", str(path), "--approve-tools", "--json")
    assert result.exit_code == 0, result.stderr
    doc = validate(json.loads(result.stdout))
    assert counter.read_text() == "x"  # run once
    assert "13.7" in doc["text"] and doc["finish_reason"] == "stop"
    first, repeat = doc["tool_calls"]
    assert first["result"] == "It is 13.7 C in Tromso." and first["error"] is None
    assert repeat["error"] == "not run: the same call was answered in round 1" and repeat["round"] == 2
    assert first["id"] != repeat["id"]
    prompts = [r.prompt for r in factory.made[0].history]
    assert "<tools>" in prompts[1] and "<tools>" not in prompts[2]
    assert prompts[2].count("<tool_call>") == 1  # the repeat is left out of what the model reads


def test_a_call_written_after_the_tools_were_withdrawn_is_not_run_nor_the_answer(counted):
    """A model that calls again even without the tools: its JSON is read as a call, never printed as
    the answer, and the answer that is left is empty: exit 8, nothing on stdout."""
    path, counter = counted
    call = hermes("get_temperature", {"city": "Tromso"})
    qwen_fake(call, call, '{"name": "get_temperature", "arguments": {"city": "Tromso"}}')
    result = run("generate", "temperature?", "--functions", str(path), "--approve-tools")
    assert result.exit_code == 8 and result.stdout == ""
    assert counter.read_text() == "x"
    (line,) = result.stderr.strip().splitlines()
    assert "no answer" in line
    qwen_fake(call, call, '{"name": "get_temperature", "arguments": {"city": "Tromso"}}')
    as_json = run("generate", "temperature?", "--functions", str(path), "--approve-tools", "--json")
    doc = json.loads(as_json.stdout)
    assert doc["finish_reason"] == "no_answer" and doc["text"] == ""
    assert [c["error"] for c in doc["tool_calls"]][1:] == [
        "not run: the same call was answered in round 1",
        "not run: the tools were withdrawn after a repeated call",
    ]


def test_the_same_call_twice_in_one_answer_runs_once(counted):
    path, counter = counted
    qwen_fake(hermes("tick", {}) + hermes("tick", {}), "Done.")
    result = run("generate", "go", "--functions", str(path), "--approve-tools", "--json")
    assert result.exit_code == 0, result.stderr
    assert counter.read_text() == "x"
    assert json.loads(result.stdout)["tool_calls"][1]["error"].startswith("not run: the same call")


def test_call_ids_are_unique_in_the_conversation(functions, isolated):
    calls = [hermes("word_length", {"word": w}) for w in "abc"]
    qwen_fake(calls[0], calls[1], "One.", calls[2], "Two.")
    result = run("chat", "--functions", str(functions), "--approve-tools", "--session", "ids",
                 input="first\nsecond\n")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    saved = json.loads((isolated / "data" / "sessions" / "ids.json").read_text())
    ids = [c["id"] for m in saved["messages"] for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in saved["messages"] if m.get("tool_call_id")]
    assert len(ids) == 3 and len(set(ids)) == 3 and answered == ids


def test_an_empty_answer_after_tool_calls_is_exit_8_with_one_line(functions):
    qwen_fake(hermes("word_length", {"word": "a"}), "")
    result = run("generate", "go", "--functions", str(functions), "--approve-tools")
    assert result.exit_code == 8
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert "no answer" in line and "tool calls" in line


def test_an_empty_answer_after_tool_calls_in_json(functions):
    qwen_fake(hermes("word_length", {"word": "a"}), "")
    result = run("generate", "go", "--functions", str(functions), "--approve-tools", "--json")
    assert result.exit_code == 8
    doc = validate(json.loads(result.stdout))
    assert doc["finish_reason"] == "no_answer" and doc["tool_calls"][0]["result"] == "1"


def test_a_call_cut_by_max_tokens_is_exit_7_not_silence(functions):
    qwen_fake('<tool_call>\n{"name": "word_length", "arguments": {"word": "some long word here"}}')
    result = run("generate", "go", "--functions", str(functions), "--approve-tools", "-n", "30")
    assert result.exit_code == 7
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert "--max-tokens (30)" in line and "inside a tool call" in line


def test_chat_says_when_tool_calls_end_without_an_answer(functions):
    qwen_fake(hermes("word_length", {"word": "a"}), "")
    result = run("chat", "--functions", str(functions), "--approve-tools", input="go\n")
    assert result.exit_code == 0, result.stderr
    assert "no answer after its tool calls" in result.stderr


def test_no_tools_record_is_null(fake):
    doc = json.loads(run("generate", "hi", "--json").stdout)
    assert doc["tool_calls"] is None and doc["timings"]["tool_ms"] == 0


def test_template_without_tools_is_refused(fake, functions):
    result = run("generate", "hi", "--functions", str(functions))
    assert result.exit_code == 2 and "takes no tools" in result.stderr


# -- MCP ---------------------------------------------------------------------------------------

MCP_SERVER = Path(__file__).parent / "data" / "mcp" / "server.py"


def mcp_command() -> str:
    import shlex
    import sys

    return f"{shlex.quote(sys.executable)} {shlex.quote(str(MCP_SERVER))}"


def test_mcp_server_tools_are_listed_and_called():
    from llmcli.cli.resolve import build_toolset

    toolset = build_toolset(None, None, [mcp_command()])
    try:
        assert {"add", "shout", "die"} <= set(toolset.tools)
        add = toolset.get("add")
        assert add.parameters["required"] == ["a", "b"] and add.origin.startswith("mcp: ")
        assert tools.run(add, {"a": 2, "b": 40}, timeout=60).result == "42"
        died = tools.run(toolset.get("die"), {}, timeout=60)
        assert died.error  # the server died mid-call: an error result, not a crash
        again = tools.run(add, {"a": 1, "b": 1}, timeout=60)
        assert again.error
    finally:
        toolset.close()


def test_mcp_in_generate(functions):
    qwen_fake(hermes("shout", {"text": "hi"}), "Done.")
    result = run("generate", "go", "--mcp", mcp_command(), "--approve-tools", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["tool_calls"][0]["result"] == "HI"


def test_mcp_server_that_does_not_start():
    result = run("tools", "list", "--mcp", "/nonexistent/mcp-server --flag")
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "did not start" in line and "/nonexistent/mcp-server" in line


# -- chat ----------------------------------------------------------------------------------------


def session_doc(isolated, name: str) -> dict:
    return json.loads((isolated / "data" / "sessions" / f"{name}.json").read_text())


def test_chat_asks_runs_and_keeps_the_call_in_history_session_and_log(functions, isolated):
    factory = qwen_fake("On it.\n" + hermes("word_length", {"word": "llama", "times": 2}), "It has 10.",
                        "Yes.")  # fmt: skip
    result = run("chat", "--functions", str(functions), "--session", "t", input="how long?\ny\nsure?\n")
    assert result.exit_code == 0, result.stderr
    assert "<tool_call>" not in result.stdout and "On it." in result.stdout and "It has 10." in result.stdout
    question = 'run tool word_length({"word": "llama", "times": 2})? [y]es, [n]o, [a]lways for word_length'
    assert question in result.stderr
    assert 'tool word_length({"word": "llama", "times": 2}) -> 10' in result.stderr
    assert "· tools " in result.stderr  # the stats line has the tools' time apart from the model's
    prompts = [r.prompt for r in factory.made[0].history]
    assert len(prompts) == 3  # the call's round, the answer after its result, the next turn
    assert "<tool_response>\n10\n</tool_response>" in prompts[1]
    # the next turn's prompt holds the call and its result as the model saw them
    assert "<tool_response>\n10\n</tool_response>" in prompts[2] and '"word_length"' in prompts[2]
    messages = session_doc(isolated, "t")["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert messages[1]["content"] == "On it."
    function = messages[1]["tool_calls"][0]["function"]
    assert function == {"name": "word_length", "arguments": {"word": "llama", "times": 2}}
    assert (
        messages[2]["content"] == "10" and messages[2]["tool_call_id"] == messages[1]["tool_calls"][0]["id"]
    )
    assert messages[3]["content"] == "It has 10." and messages[3]["stats"]["tool_ms"] >= 0
    from test_logs import rows

    logged = rows(isolated)
    assert [r["prompt"] for r in logged] == ["how long?", "sure?"]  # one row for the turn, its calls in it
    (call,) = json.loads(logged[0]["record"])["tool_calls"]
    assert call["name"] == "word_length" and call["result"] == "10"


def test_chat_resumes_a_session_with_tool_calls(functions, isolated):
    qwen_fake(hermes("word_length", {"word": "ab"}), "Two.")
    assert run("chat", "--functions", str(functions), "--approve-tools", "--session", "r",
               input="len?\n").exit_code == 0  # fmt: skip
    factory = qwen_fake("Still two.")
    result = run("chat", "--resume", input="again?\n")
    assert result.exit_code == 0, result.stderr
    assert "<tool_response>\n2\n</tool_response>" in factory.made[0].history[0].prompt
    assert [m["role"] for m in session_doc(isolated, "r")["messages"]][-2:] == ["user", "assistant"]


def test_chat_declined_call_does_not_run_and_the_model_is_told(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "side.py"
    path.write_text(f"def touch() -> str:\n    '''Touch a file.'''\n    open({str(marker)!r}, 'w').close()\n"
                    "    return 'done'\n")  # fmt: skip
    factory = qwen_fake(hermes("touch", {}), "Fine, I did not.")
    result = run("chat", "--functions", str(path), input="touch it\nn\n")
    assert result.exit_code == 0, result.stderr
    assert not marker.exists()
    assert "the user declined this call" in factory.made[0].history[1].prompt
    assert "Fine, I did not." in result.stdout


def test_chat_always_approves_that_tool_for_the_session(functions):
    call = hermes("word_length", {"word": "a"})
    qwen_fake(call, "One.", call, "One again.")
    result = run("chat", "--functions", str(functions), input="len a?\na\nand again?\n")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count("run tool word_length") == 1  # asked once, then always
    assert result.stderr.count("tool word_length({") == 3 and "One again." in result.stdout


def test_chat_answers_other_than_y_n_a_ask_again_and_end_of_input_declines(functions):
    factory = qwen_fake(hermes("word_length", {"word": "a"}), "Ok.")
    result = run("chat", "--functions", str(functions), input="len a?\nmaybe\n")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count("run tool word_length") == 2
    assert "answer y (run it), n" in result.stderr and "(end of input): not run" in result.stderr
    assert "the user declined this call" in factory.made[0].history[1].prompt


@pytest.mark.parametrize("how", ["flag", "config"])
def test_chat_approve_tools_asks_nothing(functions, isolated, how):
    qwen_fake(hermes("word_length", {"word": "abc"}), "Three.")
    args = ["--functions", str(functions)]
    if how == "flag":
        args.append("--approve-tools")
    else:
        (isolated / "config.toml").write_text("approve_tools = true\n")
    result = run("chat", *args, input="len?\n")
    assert result.exit_code == 0, result.stderr
    assert "run tool" not in result.stderr and 'tool word_length({"word": "abc"}) -> 3' in result.stderr
    assert "Three." in result.stdout


def test_ctrl_c_during_a_call_stops_it_and_the_next_turn_goes_on(tmp_path, isolated):
    path = tmp_path / "hang.py"
    path.write_text(
        "import _thread\nimport time\n\n\ndef hang() -> str:\n    '''Hangs.'''\n"
        "    _thread.interrupt_main()  # as Ctrl-C does, while the call runs\n    time.sleep(30)\n"
        "    return 'never'\n"
    )
    factory = qwen_fake("Trying. " + hermes("hang", {}), "Understood.")
    result = run("chat", "--functions", str(path), "--approve-tools", "--tool-timeout", "60",
                 "--session", "c", input="go\nnext\n")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "[interrupted: the tool calls so far and their results are kept in the history]" in result.stderr
    prompts = [r.prompt for r in factory.made[0].history]
    assert len(prompts) == 2  # no round after the interrupted call: the next turn came next
    assert "the user interrupted this call" in prompts[1] and prompts[1].rstrip().endswith("assistant")
    messages = session_doc(isolated, "c")["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user", "assistant"]
    assert messages[1]["interrupted"] is True and messages[4]["content"] == "Understood."


def test_chat_with_tools_on_a_template_without_them_is_one_line(fake, functions):
    result = run("chat", "--functions", str(functions), input="hi\n")
    assert result.exit_code == 2
    assert "takes no tools" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_retry_regenerates_the_whole_answer_with_its_calls(functions, isolated):
    qwen_fake(hermes("word_length", {"word": "ab"}), "Two.", "Retried without a call.")
    result = run("chat", "--functions", str(functions), "--approve-tools", "--session", "x",
                 input="len?\n/retry\n")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    messages = session_doc(isolated, "x")["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["content"] == "Retried without a call."


def test_ctrl_c_at_the_question_stops_the_answer_and_runs_nothing(functions, isolated, monkeypatch):
    from llmcli.repl.loop import Repl

    def pressed(self, question):
        raise KeyboardInterrupt

    monkeypatch.setattr(Repl, "_ask", pressed)
    factory = qwen_fake(hermes("word_length", {"word": "a"}), "Next answer.")
    result = run("chat", "--functions", str(functions), "--session", "q", input="len?\nnext\n")
    assert result.exit_code == 0, result.stderr
    assert "[interrupted: the tool calls so far and their results are kept in the history]" in result.stderr
    prompts = [r.prompt for r in factory.made[0].history]
    assert len(prompts) == 2 and "not run: the user stopped the answer" in prompts[1]
    messages = session_doc(isolated, "q")["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user", "assistant"]
    assert messages[-1]["content"] == "Next answer."


def test_context_counts_the_tools_block_and_shows_the_calls(functions):
    factory = qwen_fake(hermes("word_length", {"word": "ab"}), "Two.")
    result = run("chat", "--functions", str(functions), "--approve-tools", input="len?\n/context\n")
    assert result.exit_code == 0, result.stderr
    assert "[calls word_length]" in result.stderr and "the tools block and the calls" in result.stderr
    total = int(re.search(r"context: (\d+) of", result.stderr).group(1))
    last = factory.made[0].history[-1].prompt  # the fake's tokens are characters
    assert total >= len(last) > 1000  # the tools block is counted, as the turn sent it


def test_mcp_server_serves_every_turn_of_a_chat():
    call = hermes("shout", {"text": "hi"})
    factory = qwen_fake(call, "Done.", call, "Again.")
    result = run("chat", "--mcp", mcp_command(), "--approve-tools", input="one\ntwo\n")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count('tool shout({"text": "hi"}) -> HI') == 2  # the server lived on between turns
    assert "Again." in result.stdout and len(factory.made[0].history) == 4


# -- the grammar a call's JSON is written under ---------------------------------------------------


def test_a_calls_opening_is_seen_however_the_text_is_cut():
    from llmcli.tools.grammar import CallWatch

    watch = CallWatch("<tool_call>")
    assert [watch.feed(piece) for piece in ["Let me check.", "\n<tool", "_call>"]] == [False, False, True]
    assert watch.feed("\n") is False  # once per opening
    watch = CallWatch("<tool_call>")
    assert watch.feed("<tool_call>\n") is True  # whitespace after it: nothing of the JSON yet
    watch = CallWatch("<tool_call>")
    assert watch.feed('<tool_call>{"name"') is False  # JSON already written free: left to the parser


def test_one_calls_schema_names_a_tool_and_its_arguments():
    specs = tools.build(None, ["arithmetic", "current_time"]).specs()
    schema = toolgrammar.call_schema(toolcalls.CallFormat("hermes"), specs)
    names = [choice["properties"]["name"]["const"] for choice in schema["oneOf"]]
    assert names == ["arithmetic", "current_time"]
    assert all(choice["additionalProperties"] is False for choice in schema["oneOf"])
    # formats whose call is the whole answer are checked once written, never constrained
    assert toolgrammar.call_schema(toolcalls.CallFormat("llama3"), specs) is None
    assert toolgrammar.call_schema(toolcalls.CallFormat("hermes"), []) is None


def test_the_call_grammar_wraps_the_converted_schema():
    from llmcli.engine.grammar import json_schema_to_gbnf

    specs = tools.build(None, ["arithmetic"]).specs()
    gbnf = json_schema_to_gbnf(json.dumps(toolgrammar.call_schema(toolcalls.CallFormat("hermes"), specs)))
    grammar = toolgrammar.call_grammar(gbnf)
    assert grammar is not None and grammar.trigger == "<tool_call>" and grammar.bare
    rules = [line.split(" ::=")[0] for line in grammar.grammar.splitlines() if " ::=" in line]
    assert rules.count("root") == 1 and toolgrammar.CALL_RULE in rules
    assert grammar.grammar.startswith(f"root ::= [ \\t\\n]* {toolgrammar.CALL_RULE}\n")
    assert toolgrammar.call_grammar("space ::= \" \"?") is None  # no root: nothing to wrap
