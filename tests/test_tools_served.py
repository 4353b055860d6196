"""Tool calling with a served model: `tools` in the /chat/completions body, the stream's
`tool_calls` deltas (OpenAI's shape) assembled into the same `ToolCall` events and `Done.tool_calls`,
and the results sent back in OpenAI's shape, through the one loop generate and chat share. Against a
server of the tests' own that streams what each test scripts (tests/servers.py); the real
llama-server is in test_tools_real.py."""

from __future__ import annotations

import json

import pytest
from helpers import run
from servers import Behaviour, start_fault_server

from llmcli.contract import ToolCall
from llmcli.served.reply import Reply
from llmcli.served.wire import openai_messages

FUNCTIONS = '''
def word_length(word: str) -> int:
    """How many letters a word has."""
    return len(word)
'''


@pytest.fixture
def functions(tmp_path):
    path = tmp_path / "fns.py"
    path.write_text(FUNCTIONS)
    return path


@pytest.fixture
def server():
    running = start_fault_server()
    yield running
    running.server.shutdown()
    running.server.server_close()


def delta(finish: str | None = None, **fields) -> dict:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": finish}]}


def call_deltas(name: str, pieces: list[str], call_id: str = "call_abc", index: int = 0) -> list[dict]:
    """One call as llama-server and vLLM stream it: the id and name first, then the arguments' JSON
    text in pieces."""
    first = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    rest = [{"index": index, "function": {"arguments": piece}} for piece in pieces]
    return [delta(tool_calls=[first]), *(delta(tool_calls=[r]) for r in rest)]


USAGE = {"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}}


def script(server, *replies: list[dict]) -> None:
    server.state.behaviour = Behaviour(mode="script", scripts=[list(r) for r in replies])


def answer(text: str) -> list[dict]:
    return [delta(role="assistant", content=text), delta("stop"), USAGE]


def posts(server) -> list[dict]:
    return [r["body"] for r in server.state.requests if r["body"] is not None]


# -- the stream's shape --------------------------------------------------------------------------


def feed(docs: list[dict]) -> Reply:
    from llmcli.served.client import Chunk

    reply = Reply(0.0)
    for doc in docs:
        reply.add(Chunk(0.0, doc), chat=True)
    return reply


def test_deltas_become_calls_with_their_arguments_joined():
    docs = [
        *call_deltas("word_length", ['{"wo', 'rd": "lla', 'ma"}'], "c1", index=0),
        *call_deltas("word_length", ["{}"], "c2", index=1),
        delta("tool_calls"),
    ]
    reply = feed(docs)
    assert reply.tool_calls() == [ToolCall("c1", "word_length", {"word": "llama"}),
                                  ToolCall("c2", "word_length", {})]  # fmt: skip
    assert reply.text == "" and reply.finish_reason == "stop"


def test_interleaved_deltas_and_a_whole_message_without_index():
    docs = [
        delta(tool_calls=[{"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x": '}}]),
        delta(tool_calls=[{"index": 1, "id": "b", "function": {"name": "g", "arguments": '{"y": '}}]),
        delta(
            tool_calls=[
                {"index": 0, "function": {"arguments": "1}"}},
                {"index": 1, "function": {"arguments": "2}"}},
            ]
        ),
    ]
    assert [(c.id, c.name, c.arguments) for c in feed(docs).tool_calls()] == [
        ("a", "f", {"x": 1}),
        ("b", "g", {"y": 2}),
    ]
    whole = feed([{"choices": [{"index": 0, "message": {"tool_calls": [
        {"id": "p", "function": {"name": "f", "arguments": {"x": 1}}},
        {"function": {"name": "g", "arguments": "{}"}},
    ]}, "finish_reason": "tool_calls"}]}])  # fmt: skip
    assert [(c.id, c.name, c.arguments) for c in whole.tool_calls()] == [
        ("p", "f", {"x": 1}),
        ("call00002", "g", {}),
    ]


@pytest.mark.parametrize(
    "deltas, said",
    [
        (call_deltas("f", ['{"x": ', "oops"]), "not valid JSON"),
        (call_deltas("f", ["[1, 2]"]), "must be a JSON object"),
        ([delta(tool_calls=[{"index": 0, "function": {"arguments": "{}"}}])], "no function name"),
        ([delta(tool_calls=["junk"])], "not an object"),
    ],
)
def test_a_malformed_call_is_a_call_with_an_error(deltas, said):
    (call,) = feed(deltas).tool_calls()
    assert call.error and said in call.error and call.arguments == {}


def test_messages_go_back_in_openai_shape():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
    sent = openai_messages([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "reasoning_content": "hmm", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "2"},
    ])  # fmt: skip
    assert sent[1] == {"role": "assistant", "content": "",
                       "tool_calls": [{"id": "c1", "type": "function",
                                       "function": {"name": "f", "arguments": '{"x": 1}'}}]}  # fmt: skip
    assert sent[2] == {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "2"}
    assert call["function"]["arguments"] == {"x": 1}  # the history itself is left as it was


# -- the loop, served ------------------------------------------------------------------------------


def test_generate_sends_tools_runs_the_call_and_sends_the_result_back(server, functions):
    script(server,
           [delta(role="assistant", content="Let me count."),
            *call_deltas("word_length", ['{"word"', ': "llama"}']), delta("tool_calls"), USAGE],
           answer("It has 5 letters."))  # fmt: skip
    result = run("generate", "-m", server.ref, "how long is llama?", "--functions", str(functions),
                 "--approve-tools", "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["text"] == "Let me count.\nIt has 5 letters."
    (call,) = doc["tool_calls"]
    got = (call["id"], call["name"], call["arguments"], call["result"])
    assert got == ("call_abc", "word_length", {"word": "llama"}, "5")
    first, second = posts(server)
    assert [t["function"]["name"] for t in first["tools"]] == ["word_length"]
    assert first["tools"][0]["function"]["parameters"]["required"] == ["word"]
    assistant, tool = second["messages"][-2:]
    assert assistant["role"] == "assistant" and assistant["content"] == "Let me count."
    function = {"name": "word_length", "arguments": '{"word": "llama"}'}  # the arguments as a JSON string
    assert assistant["tool_calls"] == [{"id": "call_abc", "type": "function", "function": function}]
    assert tool == {"role": "tool", "tool_call_id": "call_abc", "name": "word_length", "content": "5"}
    assert second["tools"] == first["tools"]


def test_generate_without_approval_refuses_a_served_call(server, functions):
    script(server, [*call_deltas("word_length", ['{"word": "a"}']), delta("tool_calls"), USAGE])
    result = run("generate", "-m", server.ref, "go", "--functions", str(functions))
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert 'word_length({"word": "a"})' in line and "--approve-tools" in line
    assert len(posts(server)) == 1


def test_a_malformed_served_call_is_told_to_the_model_not_a_crash(server, functions):
    script(server, [*call_deltas("word_length", ['{"word": ']), delta("tool_calls"), USAGE], answer("Sorry."))
    result = run(
        "generate", "-m", server.ref, "go", "--functions", str(functions), "--approve-tools", "--json"
    )
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert "not valid JSON" in doc["tool_calls"][0]["error"] and doc["text"] == "Sorry."
    tool = posts(server)[1]["messages"][-1]
    assert (
        tool["role"] == "tool"
        and "could not be read" in tool["content"]
        and "not valid JSON" in tool["content"]
    )


def test_a_call_the_server_left_in_the_text_is_read_and_never_shown(server, functions):
    """A small model that drops the tags writes a bare JSON call, which the server passes on as text."""
    bare = '{"name": "word_length", "arguments": {"word": "abc"}}'
    pieces = [delta(role="assistant", content=bare[:20]), delta(content=bare[20:]), delta("stop"), USAGE]
    script(server, pieces, answer("Three."))
    result = run("generate", "-m", server.ref, "go", "--functions", str(functions), "--approve-tools")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "Three.\n"
    tool = posts(server)[1]["messages"][-1]
    assert tool["role"] == "tool" and tool["content"] == "3"


def test_chat_with_a_served_model_asks_and_keeps_the_call(server, functions, isolated):
    script(server, [*call_deltas("word_length", ['{"word": "ab"}']), delta("tool_calls"), USAGE],
           answer("Two."), answer("Yes."))  # fmt: skip
    result = run("chat", "-m", server.ref, "--functions", str(functions), "--session", "s",
                 input="len?\ny\nsure?\n")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert 'run tool word_length({"word": "ab"})?' in result.stderr and "Two." in result.stdout
    third = posts(server)[2]["messages"]
    assert [m["role"] for m in third] == ["user", "assistant", "tool", "assistant", "user"]
    assert third[1]["tool_calls"][0]["function"]["arguments"] == '{"word": "ab"}'
    saved = json.loads((isolated / "data" / "sessions" / "s.json").read_text())["messages"]
    assert saved[1]["tool_calls"][0]["function"]["arguments"] == {"word": "ab"}


def test_a_repeated_served_call_is_not_run_and_the_next_request_has_no_tools(server, functions):
    """The server's model calls the same tool twice (the id it gives repeats too): the repeat is not
    run, the next request's body has no `tools`, and the answer comes from the result."""
    same = [*call_deltas("word_length", ['{"word": "llama"}'], call_id="call_1"), delta("tool_calls"), USAGE]
    script(server, same, same, answer("It has 5 letters."))
    result = run("generate", "-m", server.ref, "how long is llama?", "--functions", str(functions),
                 "--approve-tools", "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert "5" in doc["text"] and doc["finish_reason"] == "stop"
    ran, repeat = doc["tool_calls"]
    assert ran["result"] == "5" and repeat["error"] == "not run: the same call was answered in round 1"
    assert ran["id"] != repeat["id"]  # the server's id repeated; the conversation's are unique
    first, second, third = posts(server)
    assert "tools" in first and "tools" in second and "tools" not in third
    sent = [m["tool_call_id"] for m in third["messages"] if m["role"] == "tool"]
    assert sent == ["call_1"]  # the repeat is left out of what the model reads


def test_served_call_ids_are_unique_across_rounds(server, functions):
    """A server that numbers each answer's calls from one again (the same id in two rounds): every
    tool_call_id sent back names one call."""
    script(server,
           [*call_deltas("word_length", ['{"word": "a"}'], call_id="call_1"), delta("tool_calls"), USAGE],
           [*call_deltas("word_length", ['{"word": "bb"}'], call_id="call_1"), delta("tool_calls"), USAGE],
           answer("1 and 2."))  # fmt: skip
    result = run("generate", "-m", server.ref, "go", "--functions", str(functions), "--approve-tools",
                 "--tool-rounds", "3")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    last = posts(server)[-1]["messages"]
    ids = [c["id"] for m in last for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in last if m["role"] == "tool"]
    assert len(ids) == 2 and len(set(ids)) == 2 and answered == ids


def test_bare_json_calls_cut_by_max_tokens_are_exit_7_not_silence(server, functions):
    """A served model writing bare-JSON calls until -n cuts them: nothing on stdout, one line, exit 7."""
    bare = '{"name": "word_length", "arguments": {"word": "abc"}}\n{"name": "word_length", "argu'
    script(server, [delta(role="assistant", content=bare), delta("length"), USAGE])
    result = run("generate", "-m", server.ref, "go", "--functions", str(functions), "--approve-tools",
                 "-n", "60")  # fmt: skip
    assert result.exit_code == 7
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert "inside a tool call" in line
