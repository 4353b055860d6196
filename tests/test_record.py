"""One record for one request (llmcli.record): local and served models, a finished request and one
that failed midway, `generate --json` and chat's saved turns, all in one shape that the published
schema (docs/record.schema.json) describes."""

from __future__ import annotations

import json

import pytest
from helpers import run
from records import SCHEMA, validate

from llmcli import record
from llmcli.contract import Done, ModelInfo, SamplingParams, Stats

LOCAL = ModelInfo(path="/m/model.gguf", architecture="llama", quantization="Q4_1", size_bytes=10, n_params=5,
                  n_layers=2, n_ctx_train=4096, n_vocab=100, chat_template=None, name="m")  # fmt: skip
SERVED = ModelInfo(path="http://127.0.0.1:8080/v1", architecture="vLLM", quantization="", size_bytes=0,
                   n_params=0, n_layers=0, n_ctx_train=0, n_vocab=0, chat_template=None, name="smol",
                   backend="server", server="vLLM")  # fmt: skip


def _done(**stats) -> Done:
    return Done("hi", "stop", Stats(prompt_tokens=5, completion_tokens=2, decode_tokens=2, decode_ms=4.0,
                                    context_size=4096, **stats), seed=3)  # fmt: skip


def test_the_schema_is_a_valid_json_schema_and_names_every_field_it_requires():
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert set(SCHEMA["required"]) == set(SCHEMA["properties"])


def test_local_and_served_records_have_one_shape_with_nulls_where_a_field_does_not_apply():
    local = record.build(ref="m", info=LOCAL, params=SamplingParams(), done=_done(), prompt_format="model")
    served = record.build(
        ref="vllm/smol", info=SERVED, params=SamplingParams(), prompt_format="server",
        done=_done(sources={"prompt_tokens": "unknown", "completion_tokens": "usage"}),
    )  # fmt: skip
    validate(local), validate(served)

    def keys(d, prefix=""):
        return {prefix + k for k in d} | {
            k2
            for k, v in d.items()
            if k in ("model", "usage", "timings", "versions")
            for k2 in keys(v, k + ".")
        }

    assert keys(local) == keys(served)
    assert (
        local["model"]["endpoint"] is None and local["model"]["server"] is None and local["sources"] is None
    )
    assert local["schema_version"] == served["schema_version"] == record.SCHEMA_VERSION
    assert served["model"]["path"] is None and served["model"]["endpoint"] == SERVED.path
    assert served["model"]["architecture"] is None and served["timings"]["load_ms"] is None
    assert served["usage"]["prompt_tokens"] is None  # the server did not say: null, not 0
    assert served["usage"]["completion_tokens"] == 2 and served["sources"]["completion_tokens"] == "usage"
    assert served["versions"]["server"] == "vLLM" and served["versions"]["llama_cpp_python"] is None


def test_a_request_that_failed_midway_has_the_same_shape_with_unknown_figures():
    failed = record.build(ref="vllm/smol", info=SERVED, params=SamplingParams(seed=9), done=None,
                          prompt_format=None, error="the stream broke", partial_text="par")  # fmt: skip
    validate(failed)
    assert (failed["finish_reason"], failed["error"], failed["text"]) == ("error", "the stream broke", "par")
    assert failed["usage"] is None and failed["timings"] is None and failed["params"]["seed"] == 9


@pytest.mark.parametrize(
    "damage",
    [
        lambda r: r.pop("usage"),
        lambda r: r["model"].pop("endpoint"),
        lambda r: r.update(finish_reason="done"),
        lambda r: r.update(extra=1),
        lambda r: r["usage"].update(prompt_tokens=-1),
    ],  # fmt: skip
)
def test_a_record_out_of_shape_is_refused(damage):
    bad = record.build(ref="m", info=LOCAL, params=SamplingParams(), done=_done(), prompt_format="raw")
    damage(bad)
    with pytest.raises(AssertionError, match="does not match"):
        validate(bad)


def test_generate_json_and_a_chat_turn_come_from_the_one_builder(fake, tmp_path):
    fake_record = json.loads(run("generate", "hello", "--json", "--seed", "4").stdout)
    assert validate(fake_record)["params"]["seed"] == 4
    chat = run("chat", "--session", "s", input="hello\n")
    assert chat.exit_code == 0, chat.stderr
    from llmcli.repl import session_files

    saved = session_files.load("s")
    turn = [m for m in saved["messages"] if m["role"] == "assistant"][0]["stats"]
    assert set(turn) == {"finish_reason", "seed", "prompt_tokens", "cached_tokens", "completion_tokens",
                         "prefill_ms", "decode_ms", "ttft_ms"}  # fmt: skip
    assert turn["completion_tokens"] > 0 and turn["finish_reason"] == "stop"
