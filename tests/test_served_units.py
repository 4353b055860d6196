"""The pure parts of served models: SSE parsing, endpoint references, the request body per server
flavour, Retry-After, percentiles, and the stats line with unknown or estimated counts."""

from __future__ import annotations

import pytest

from llmcli.bench.stats import percentile
from llmcli.contract import SamplingParams, Stats
from llmcli.errors import UsageError
from llmcli.render.stats import stats_line
from llmcli.served import config as endpoint_config
from llmcli.served import endpoints, sse
from llmcli.served.faults import retry_after
from llmcli.served.wire import request_body


def test_sse_events():
    lines = [": comment", "data: a", "data: b", "", "event: x", "data:c", "", "id: 1", "retry: 5", "data: d"]
    assert list(sse.events(lines)) == [("message", "a\nb"), ("x", "c"), ("message", "d")]


def test_sse_rejects_lines_that_are_not_events():
    with pytest.raises(sse.MalformedEvent):
        list(sse.events(["<html>", ""]))


@pytest.mark.parametrize(
    ("text", "url", "model"),
    [
        ("http://127.0.0.1:8080/v1#smol", "http://127.0.0.1:8080/v1", "smol"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080/v1", None),
        (
            "HTTPS://api.example.com/openai/v1/#org/model:7b",
            "https://api.example.com/openai/v1",
            "org/model:7b",
        ),
    ],
)
def test_url_references(text, url, model):
    endpoint = endpoints.parse_url(text)
    assert (endpoint.url, endpoint.model) == (url, model)


def test_server_root_drops_v1():
    assert endpoints.parse_url("http://h:1/v1#m").server_root == "http://h:1"
    assert endpoints.parse_url("http://h:1/api/v1#m").server_root == "http://h:1/api"


@pytest.mark.parametrize(
    ("model", "short"),
    [
        ("/srv/models/SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"),  # llama-server
        ("C:\\models\\gemma.gguf", "gemma.gguf"),
        ("models/gemma.gguf", "gemma.gguf"),
        ("/models/llama", "llama"),  # vLLM serving a directory
        ("org/model", "org/model"),  # a Hub name stays whole
        ("llama3.2:1b", "llama3.2:1b"),
        ("gpt-4o", "gpt-4o"),
    ],
)
def test_a_served_model_named_by_its_path_is_shown_by_its_file_name(model, short):
    assert endpoints.short_model(model) == short
    ref = f"http://127.0.0.1:8080/v1#{model}"
    shown = endpoints.display_ref(ref)
    assert shown == (ref if short == model else f"{short} at http://127.0.0.1:8080/v1")


@pytest.mark.parametrize(
    "text", ["http://:8080/v1", "http://u:p@h/v1", "http://h/v1?key=1", "http://h:99999/v1"]
)
def test_bad_urls(text):
    with pytest.raises(UsageError):
        endpoints.parse_url(text)


def test_named_endpoints_and_key_precedence(isolated, monkeypatch):
    (isolated / "config.toml").write_text(
        '[endpoints.box]\nurl = "http://h:1/v1"\nmodel = "m"\n'
        'api_key_env = "BOX_KEY"\napi_key = "from-file"\n',
        encoding="utf-8",
    )
    endpoint = endpoint_config.lookup("box")
    assert endpoint is not None and endpoint.ref == "box/m" and endpoint.model == "m"
    assert endpoint_config.lookup("box/other").model == "other"
    assert endpoint_config.lookup("org/repo") is None  # not an endpoint: a hub reference
    assert endpoint.api_key() == ("from-file", "config file")
    monkeypatch.setenv("LLMCLI_API_KEY", "general")
    assert endpoint.api_key() == ("from-file", "config file")
    monkeypatch.setenv("BOX_KEY", "specific")
    assert endpoint.api_key() == ("specific", "$BOX_KEY")
    assert endpoints.parse_url("http://h/v1").api_key() == ("general", "$LLMCLI_API_KEY")
    assert "from-file" not in repr(endpoint) and "specific" not in repr(endpoint)


def test_request_body_per_flavour():
    params = SamplingParams(seed=3, max_tokens=10, stop=["x"], defaulted=frozenset({"top_k", "min_p"}))
    llama = request_body(params, "m", "llama-server", chat=True)
    assert llama["cache_prompt"] is True and llama["top_k"] == params.top_k and llama["repeat_last_n"] == 64
    generic = request_body(params, "m", "openai-compatible", chat=True)
    assert "top_k" not in generic and "min_p" not in generic and "cache_prompt" not in generic
    assert generic["repeat_penalty"] == params.repeat_penalty  # not marked defaulted here: set by the user
    vllm = request_body(params, "m", "vllm", chat=True)
    assert "repetition_penalty" in vllm and "repeat_penalty" not in vllm
    assert (generic["seed"], generic["max_tokens"], generic["stop"]) == (3, 10, ["x"])
    unlimited = request_body(SamplingParams(max_tokens=0), "m", "vllm", chat=True)
    assert "max_tokens" not in unlimited and isinstance(unlimited["seed"], int)


def test_the_serving_benchmarks_request_body():
    """Greedy, exactly max_tokens where the server takes ignore_eos, no prompt cache, and every
    other sampling setting left to the server's own defaults."""
    others = frozenset({"top_p", "top_k", "min_p", "repeat_penalty", "repeat_last_n"})
    params = SamplingParams(temperature=0.0, seed=5, max_tokens=8, defaulted=others)
    switches = {"cache_prompt": False, "ignore_eos": True, "server_defaults": True}
    llama = request_body(params, "m", "llama-server", chat=False, **switches)
    assert llama["cache_prompt"] is False and llama["ignore_eos"] is True and llama["temperature"] == 0.0
    assert not others & set(llama)
    python = request_body(params, "m", "llama-cpp-python", chat=False, **switches)
    assert "ignore_eos" not in python and "cache_prompt" not in python and not others & set(python)
    assert request_body(params, "m", "vllm", chat=False, **switches)["ignore_eos"] is True


def test_json_schema_with_raw_on_an_unknown_server_is_an_error():
    params = SamplingParams(json_schema={"type": "object"}, grammar="root ::= x")
    with pytest.raises(UsageError):
        request_body(params, "m", "openai-compatible", chat=False)
    assert request_body(params, "m", "vllm", chat=False)["guided_json"] == {"type": "object"}
    assert (
        request_body(params, "m", "llama-cpp-python", chat=True)["response_format"]["type"] == "json_object"
    )


def testretry_after():
    assert retry_after("2") == 2.0
    assert retry_after(None) is None and retry_after("soon") is None
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past: now


def test_percentile_interpolates_like_numpy():
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 90) == pytest.approx(3.7)
    assert percentile(values, 99) == pytest.approx(3.97)
    assert percentile([5.0], 99) == 5.0 and percentile([], 50) is None


def test_stats_line_for_a_served_model():
    s = Stats(
        completion_tokens=9,
        decode_tokens=8,
        decode_ms=100.0,
        ttft_ms=50.0,
        sources={"prompt_tokens": "unknown", "completion_tokens": "chunks"},
    )
    line = stats_line(s, context=2048, load=True)
    assert line.startswith("prompt ? tok · prefill ? tok/s · generated ~9 tok · decode ~80.0 tok/s")
    assert "context" not in line and "load" not in line
    s = Stats(
        prompt_tokens=10,
        cached_tokens=4,
        prefill_tokens=6,
        prefill_ms=10.0,
        completion_tokens=3,
        sources={"prompt_tokens": "usage"},
        server={"prompt_per_second": 500.0, "predicted_per_second": 90.0},
    )
    assert stats_line(s).endswith("server prefill 500.0 tok/s, decode 90.0 tok/s")
    assert "(4 reused)" in stats_line(s)
