"""Served models against a misbehaving server of our own (tests/servers.py): each fault is one clear
line on stderr and its exit code; the partial text of a broken stream is kept; the API key never
shows; naming, config endpoints, aliases and the settings sent. The happy path against real
servers is in test_served_real.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import run
from servers import Behaviour, free_port, self_signed_cert, start_fault_server

SECRET = "sk-llmcli-test-5f3c9a1e-never-print-me"


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("llmcli: ")]
    assert len(lines) == 1, stderr
    return lines[0]


def posts(server) -> list[dict]:
    return [r for r in server.state.requests if r["body"] is not None]


# -- naming -------------------------------------------------------------------------------------


def test_generate_streams_from_an_endpoint_url(fault_server):
    result = run("generate", "-m", fault_server.ref, "hi", "--stats")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "Hello there, friend.\n"
    assert "generated 5 tok" in result.stderr  # the server's usage, not a count of chunks
    body = posts(fault_server)[0]["body"]
    assert body["model"] == "m" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"][-1] == {"role": "user", "content": "hi"}


def test_a_server_with_several_models_needs_a_name(fault_server):
    result = run("generate", "-m", fault_server.url, "hi")
    assert result.exit_code == 2
    assert "serves 2 models" in one_error_line(result.stderr) and "m, other" in result.stderr


def test_a_model_the_server_does_not_serve(fault_server):
    result = run("generate", "-m", fault_server.url + "#nope", "hi")
    assert result.exit_code == 3
    line = one_error_line(result.stderr)
    assert "does not serve 'nope'" in line and "served: m, other" in line


def test_credentials_in_the_url_are_refused():
    result = run("generate", "-m", "http://user:secret@127.0.0.1:9/v1#m", "hi")
    assert result.exit_code == 2
    assert "must not carry credentials" in one_error_line(result.stderr)


def test_named_endpoint_alias_and_per_endpoint_key(fault_server, isolated, monkeypatch):
    fault_server.state.behaviour = Behaviour(key=SECRET)
    (isolated / "config.toml").write_text(
        f'[endpoints.test]\nurl = "{fault_server.url}"\napi_key_env = "TEST_SERVER_KEY"\n', encoding="utf-8"
    )
    monkeypatch.setenv("TEST_SERVER_KEY", SECRET)
    result = run("generate", "-m", "test/m", "hi")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "Hello there, friend.\n"
    assert posts(fault_server)[-1]["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert run("models", "alias", "fast", "test/m").exit_code == 0
    assert run("models", "alias", "fast").stdout == "test/m\n"  # the name, never the key
    result = run("generate", "-m", "fast", "hi", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["model"]["ref"] == "fast"


def test_models_list_endpoint(fault_server, isolated):
    (isolated / "config.toml").write_text(f'[endpoints.box]\nurl = "{fault_server.url}"\n', encoding="utf-8")
    result = run("models", "list", "--endpoint", fault_server.url, "--json")
    assert result.exit_code == 0, result.stderr
    assert [m["id"] for m in json.loads(result.stdout)] == ["m", "other"]
    result = run("models", "list", "--endpoint", "box")
    assert result.exit_code == 0, result.stderr
    assert "box/m" in result.stdout and "box/other" in result.stdout
    assert run("models", "list", "--endpoint", "nosuch").exit_code == 2


@pytest.mark.parametrize(
    "served, ctx, window",
    [
        # llama-server -c 4096: its /props says the slot's context; the listing, the trained one
        (
            dict(
                model_ids=("m",),
                listing={"owned_by": "llamacpp", "meta": {"n_ctx_train": 32768}},
                props={"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1},
            ),
            4096,
            "4096 tokens (trained 32768)",
        ),
        (dict(listing={"owned_by": "vllm", "max_model_len": 2048}), 2048, "2048 tokens"),  # --max-model-len
        # a server that says no more: the trained context, labelled as such in chat
        (
            dict(model_ids=("m",), listing={"meta": {"n_ctx_train": 32768}}),
            32768,
            "the server's (trained 32768)",
        ),
    ],  # fmt: skip
    ids=["llama-server", "vllm", "trained-only"],
)
def test_models_list_endpoint_shows_the_served_context(fault_server, served, ctx, window):
    fault_server.state.behaviour = Behaviour(**served)
    listed = json.loads(run("models", "list", "--endpoint", fault_server.url, "--json").stdout)
    assert {m["id"]: m["context"] for m in listed} == dict.fromkeys(
        served.get("model_ids", ("m", "other")), ctx
    )
    table = run("models", "list", "--endpoint", fault_server.url)
    assert table.exit_code == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()[1:]]
    assert rows and all(row[-1] == str(ctx) for row in rows)
    shown = run("chat", "-m", f"{fault_server.url}#m", input="/show\n")  # chat says the same window
    assert f"\ncontext    {window}\n" in shown.stderr


def test_an_answer_in_one_chunk_shows_no_decode_speed(fault_server):
    usage = {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
    two_tokens = [{"choices": [{"index": 0, "delta": {"content": "Hi there"}, "finish_reason": "stop"}]},
                  {"choices": [], "usage": usage}]  # fmt: skip
    fault_server.state.behaviour = Behaviour(mode="script", scripts=[two_tokens, two_tokens])
    result = run("generate", "-m", fault_server.ref, "hi", "--stats")
    assert result.exit_code == 0, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("prompt ")]
    assert "generated 2 tok · decode – tok/s" in line and "0.0 tok/s" not in line
    doc = json.loads(run("generate", "-m", fault_server.ref, "hi", "--json").stdout)
    assert doc["usage"]["completion_tokens"] == 2 and doc["timings"]["decode_tokens_per_s"] is None


def test_a_bad_endpoint_table_is_a_config_error(isolated):
    (isolated / "config.toml").write_text('[endpoints.x]\nurl = "ftp://nope"\n', encoding="utf-8")
    result = run("generate", "-m", "x/m", "hi")
    assert result.exit_code == 2
    assert "endpoints.x.url must start with http" in one_error_line(result.stderr)
    (isolated / "config.toml").write_text(
        '[endpoints.x]\nurl = "http://h/v1"\napi_kee = "k"\n', encoding="utf-8"
    )
    assert "unknown key endpoints.x.api_kee" in run("generate", "-m", "x/m", "hi").stderr


# -- settings -----------------------------------------------------------------------------------


def test_settings_are_sent_and_llama_only_ones_only_when_set(fault_server):
    result = run("generate", "-m", fault_server.ref, "hi", "--temperature", "0.3", "--top-p", "0.5",
                 "--seed", "7", "--stop", "END", "-n", "20", "--min-p", "0.1")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    body = posts(fault_server)[-1]["body"]
    assert (body["temperature"], body["top_p"], body["seed"], body["stop"], body["max_tokens"]) == (
        0.3, 0.5, 7, ["END"], 20)  # fmt: skip
    assert body["min_p"] == 0.1  # set by the user: sent (the server refuses it clearly, or honours it)
    assert "top_k" not in body and "cache_prompt" not in body  # not set, and not llama-server


def test_a_grammar_an_unknown_server_cannot_take_is_an_error(fault_server, tmp_path):
    grammar = tmp_path / "g.gbnf"
    grammar.write_text('root ::= "yes" | "no"\n', encoding="utf-8")
    result = run("generate", "-m", fault_server.ref, "hi", "--grammar-file", str(grammar))
    assert result.exit_code == 2
    assert "does not take a GBNF grammar" in one_error_line(result.stderr)
    assert not posts(fault_server)


def test_json_schema_becomes_response_format(fault_server):
    schema = '{"type": "object", "properties": {"a": {"type": "integer"}}}'
    run("generate", "-m", fault_server.ref, "hi", "--json-schema", schema)
    body = posts(fault_server)[-1]["body"]
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == json.loads(schema)


def test_local_only_flags_are_said_to_be_ignored(fault_server):
    result = run("generate", "-m", fault_server.ref, "hi", "--ctx-size", "512", "-t", "2")
    assert result.exit_code == 0
    assert "--ctx-size, --threads: ignored for a served model" in result.stderr


def test_chat_cannot_set_a_served_models_cache_types(fault_server):
    result = run("chat", "-m", fault_server.ref, input="/set cache-type-k q8_0\nhi\n")
    assert result.exit_code == 0 and "Traceback" not in result.stderr
    assert "cache-type-k: a served model's KV cache is its server's to set" in result.stderr
    assert len(posts(fault_server)) == 1  # the message after it was still sent


def test_chat_show_of_a_served_model_claims_nothing_the_server_did_not_say(fault_server):
    result = run("chat", "-m", fault_server.ref, input="/show\n")
    assert result.exit_code == 0 and "Traceback" not in result.stderr
    lines = {line[:10].strip(): line[10:].strip() for line in result.stderr.splitlines()[1:]}
    assert lines["endpoint"] == fault_server.url and lines["template"] == "the server's (chat completions)"
    assert "kv cache" not in lines and "path" not in lines and "GPU layers" not in result.stderr
    assert ", ," not in lines["model"] and "()" not in lines["model"]


def test_chat_context_of_a_served_model_is_the_servers_count(fault_server):
    result = run("chat", "-m", fault_server.ref, input="/context\nhi\n/context\n")
    assert result.exit_code == 0 and "Traceback" not in result.stderr
    err = result.stderr
    assert "context: no turns yet" in err
    readout = re.search(r"^prompt (\d+) tok .* generated (\d+) tok", err, re.M)
    shown = re.search(r"^context: (\d+) .*the server's count at the last answer$", err, re.M)
    assert readout and shown and int(shown.group(1)) == int(readout.group(1)) + int(readout.group(2)), err
    assert re.search(r"^\s+1 user\s+\d+ (tok|chr)  hi$", err, re.M), err
    cleared = run("chat", "-m", fault_server.ref, input="hi\n/clear\n/context\n")
    assert cleared.stderr.count("context: no turns yet") == 1, cleared.stderr
    switched = run("chat", input=f"hi\n/model {fault_server.ref}\n/context\n")  # a local turn before
    assert switched.stderr.count("context: no turns yet") == 1, switched.stderr


def test_switching_to_a_served_model_names_the_servers_template(fault_server):
    result = run("chat", input=f"/model {fault_server.ref}\nhi\n")
    assert result.exit_code == 0, result.stderr
    line = next(x for x in result.stderr.splitlines() if x.startswith("now using "))
    assert line == f"now using {fault_server.ref} (the server's template)", line


def test_chat_set_lists_no_speculative_setting_for_a_served_model(fault_server):
    result = run("chat", "-m", fault_server.ref, input="/set\n")
    assert result.exit_code == 0 and "  temperature = " in result.stderr
    assert "spec-" not in result.stderr and "model-draft" not in result.stderr


# -- faults -------------------------------------------------------------------------------------


def test_connection_refused():
    result = run("generate", "-m", f"http://127.0.0.1:{free_port()}/v1#m", "hi")
    assert result.exit_code == 6
    assert "connection refused" in one_error_line(result.stderr)


def test_dns_failure():
    result = run("generate", "-m", "http://no-such-host.invalid/v1#m", "hi")
    assert result.exit_code == 6
    assert "cannot resolve the host name 'no-such-host.invalid'" in one_error_line(result.stderr)


def test_tls_is_verified_by_default_and_a_ca_bundle_is_honoured(tmp_path, isolated):
    import ssl

    made = self_signed_cert(tmp_path)
    if made is None:
        pytest.skip("no openssl command to make a certificate")
    cert, key = made
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = start_fault_server(context)
    try:
        (isolated / "config.toml").write_text(
            f'[endpoints.tls]\nurl = "{server.url}"\nca_bundle = "{cert}"\n', encoding="utf-8"
        )
        result = run("generate", "-m", server.ref, "hi")
        assert result.exit_code == 6
        assert "TLS failure" in one_error_line(result.stderr)
        result = run("generate", "-m", "tls/m", "hi")
        assert result.exit_code == 0, result.stderr
        assert result.stdout == "Hello there, friend.\n"
    finally:
        server.server.shutdown()
        server.server.server_close()


@pytest.mark.parametrize("status", [401, 403])
def test_auth_refused_without_and_with_a_key(fault_server, monkeypatch, status):
    fault_server.state.behaviour = Behaviour(key="the-right-key", auth_status=status)
    result = run("generate", "-m", fault_server.ref, "hi")
    assert result.exit_code == 6
    line = one_error_line(result.stderr)
    assert f"HTTP {status}" in line and "no API key was sent" in line
    monkeypatch.setenv("LLMCLI_API_KEY", SECRET)
    result = run("--debug", "generate", "-m", fault_server.ref, "hi")
    assert result.exit_code == 6
    assert "the key from $LLMCLI_API_KEY was not accepted" in result.stderr
    assert SECRET not in result.stderr + result.stdout


def test_404_on_the_request(fault_server):
    fault_server.state.behaviour = Behaviour(mode="status", status=404, failures=-1, message="model gone")
    result = run("generate", "-m", fault_server.ref, "hi")
    assert result.exit_code == 3
    assert "HTTP 404" in one_error_line(result.stderr) and "model gone" in result.stderr


def test_a_server_error_in_its_own_words_is_a_refusal_not_the_network(fault_server):
    # llama-server started with --embeddings, asked for a completion, answers 500 and says why
    said = "This server does not support completions. Start it without `--embeddings`"
    fault_server.state.behaviour = Behaviour(mode="status", status=500, failures=-1, message=said)
    result = run("generate", "-m", fault_server.ref, "hi")
    assert result.exit_code == 1 and result.stdout == ""
    line = one_error_line(result.stderr)
    assert "request refused" in line and "HTTP 500" in line and said in line and "network" not in line
    # a gateway that could not reach the server is the network's fault: exit 6
    fault_server.state.behaviour = Behaviour(mode="status", status=502, failures=-1, message="upstream down")
    result = run("generate", "-m", fault_server.ref, "hi")
    assert result.exit_code == 6 and "HTTP 502" in one_error_line(result.stderr)


def test_a_context_overflow_reported_by_the_server(fault_server):
    too_long = "the request exceeds the available context size"
    fault_server.state.behaviour = Behaviour(mode="status", status=400, failures=-1, message=too_long)
    result = run("generate", "-m", fault_server.ref, "hi")
    assert result.exit_code == 4
    assert "exceeds the available context size" in one_error_line(result.stderr)


def test_429_is_retried_honouring_retry_after(fault_server):
    fault_server.state.behaviour = Behaviour(mode="status", status=429, failures=2, retry_after="0")
    result = run("generate", "-m", fault_server.ref, "hi")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "Hello there, friend.\n"
    assert len(posts(fault_server)) == 3


def test_503_retries_are_bounded(fault_server):
    fault_server.state.behaviour = Behaviour(mode="status", status=503, failures=-1, retry_after="0",
                                             message="Loading model")  # fmt: skip
    result = run("generate", "-m", fault_server.ref, "hi")
    assert result.exit_code == 6
    line = one_error_line(result.stderr)
    assert "HTTP 503" in line and "after 3 retries" in line and "Loading model" in line
    assert len(posts(fault_server)) == 4


def test_a_long_retry_after_is_not_waited_for(fault_server):
    fault_server.state.behaviour = Behaviour(mode="status", status=429, failures=-1, retry_after="3600")
    result = run("generate", "-m", fault_server.ref, "hi")
    assert result.exit_code == 6
    assert "retry in 3600 s" in one_error_line(result.stderr)
    assert len(posts(fault_server)) == 1


def test_a_server_dying_mid_stream_keeps_the_partial_text(fault_server):
    fault_server.state.behaviour = Behaviour(mode="die", chunks=3)
    result = run("generate", "-m", fault_server.ref, "hi")
    assert result.exit_code == 6
    assert result.stdout == "Hello there,\n"
    assert "the partial answer was kept" in one_error_line(result.stderr)
    assert len(posts(fault_server)) == 1  # a stream that produced text is never retried
    result = run("generate", "-m", fault_server.ref, "hi", "--json")
    assert result.exit_code == 6
    record = json.loads(result.stdout)
    assert record["text"] == "Hello there," and record["finish_reason"] == "error"


def test_a_broken_chat_turn_keeps_the_partial_answer_in_the_session(fault_server, isolated):
    fault_server.state.behaviour = Behaviour(mode="die", chunks=2)
    result = run("chat", "-m", fault_server.ref, "--session", "s", input="hi\n")
    assert "the partial answer was kept" in result.stderr
    assert "Hello there" in result.stdout
    saved = json.loads((isolated / "data" / "sessions" / "s.json").read_text())
    assert [m["role"] for m in saved["messages"]] == ["user", "assistant"]
    assert saved["messages"][1]["content"] == "Hello there"


@pytest.mark.parametrize(
    ("mode", "says"),
    [("malformed", "malformed event"), ("html", "did not answer with an event stream"),
     ("error_event", "the model crashed")],
)  # fmt: skip
def test_malformed_streams(fault_server, mode, says):
    fault_server.state.behaviour = Behaviour(mode=mode)
    result = run("generate", "-m", fault_server.ref, "hi")
    assert result.exit_code == 6
    assert says in one_error_line(result.stderr)


@pytest.mark.parametrize("how", ["env", "flag", "endpoint"])
def test_a_stalled_stream_times_out(fault_server, monkeypatch, isolated, how):
    fault_server.state.behaviour = Behaviour(mode="stall", chunks=1)
    ref, extra = fault_server.ref, []
    if how == "env":
        monkeypatch.setenv("LLMCLI_TIMEOUT", "1")
    elif how == "flag":
        extra = ["--timeout", "1"]
    else:
        (isolated / "config.toml").write_text(
            f'timeout = 600\n[endpoints.slow]\nurl = "{fault_server.url}"\ntimeout = 1\n', encoding="utf-8"
        )
        ref = "slow/m"
    result = run("generate", "-m", ref, "hi", *extra)
    assert result.exit_code == 6
    assert result.stdout == "Hello\n"
    assert "stalled: nothing for 1 s" in one_error_line(result.stderr)


def test_ctrl_c_closes_the_stream_and_exits_130(fault_server, tmp_path):
    fault_server.state.behaviour = Behaviour(mode="slow")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "llmcli", "generate", "-m", fault_server.ref, "hi"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)  # fmt: skip
    try:
        assert fault_server.state.first_chunk_sent.wait(60)
        time.sleep(0.3)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert out.decode().startswith(" w0")
    # the server sees the connection go (its next write fails) long before its minute of text ends
    assert fault_server.state.disconnected.wait(20)
    assert fault_server.state.disconnected_at is not None and fault_server.state.disconnected_at - sent < 20


# -- the key ------------------------------------------------------------------------------------


def test_the_key_never_appears(fault_server, isolated, monkeypatch):
    fault_server.state.behaviour = Behaviour(key=SECRET)
    monkeypatch.setenv("LLMCLI_API_KEY", SECRET)
    outputs = []
    for args in (["--debug", "generate", "-m", fault_server.ref, "hi", "--json"],
                 ["generate", "-m", fault_server.ref, "hi", "--stats"]):  # fmt: skip
        result = run(*args)
        assert result.exit_code == 0, result.stderr
        outputs += [result.stdout, result.stderr]
    result = run("--debug", "chat", "-m", fault_server.ref, "--session", "k", input="hi\n/stats\n")
    assert result.exit_code == 0, result.stderr
    outputs += [result.stdout, result.stderr]
    fault_server.state.behaviour = Behaviour(mode="die", key=SECRET)
    result = run("--debug", "generate", "-m", fault_server.ref, "hi", "--json")
    outputs += [result.stdout, result.stderr]
    files = [p.read_text(errors="replace") for p in isolated.rglob("*") if p.is_file()]
    assert all(r["headers"].get("Authorization") == f"Bearer {SECRET}" for r in fault_server.state.requests)
    for text in outputs + files:
        assert SECRET not in text


def test_help_does_not_import_the_http_client():
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom llmcli.cli.app import app\n"
        'for args in (["--help"], ["generate", "--help"], ["bench", "--help"]):\n'
        "    assert CliRunner().invoke(app, args).exit_code == 0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('httpx', 'httpcore')))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
