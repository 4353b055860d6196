"""The OpenAI batch format, both ways: an input line as OpenAI's batch API and `vllm run-batch` read
it (`custom_id`, `method`, `url`, `body`) made into an item, and the item's answer as the output
line they write (`id`, `custom_id`, `response` with `status_code`, `request_id` and `body`, a
`chat.completion` or `text_completion` object with `usage`, and `error`), so their tooling reads it.

A body's fields that a local engine honours are read (batch/inputs.py's options: `max_tokens`,
`max_completion_tokens`, `temperature`, `top_p`, `seed`, `stop`, `frequency_penalty`,
`presence_penalty`, `response_format`, and llama.cpp's and vLLM's `top_k`, `min_p`,
`repetition_penalty`); what it cannot do (`n` > 1, `logprobs`, `tools`, ...) makes the line a bad
one, said in one line; a field it does not know is named in one warning and not read."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from llmcli.batch.items import OPTIONS, Item, fill

ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}
READ = {*OPTIONS, "messages", "prompt", "stop", "response_format", "grammar"}
# fields that change nothing here: the model (-m chooses), the caller's tags, streaming (a batch's
# answers are written whole), tool settings that mean nothing without tools
IGNORED = {"model", "user", "metadata", "store", "stream", "stream_options", "tool_choice",
           "parallel_tool_calls", "service_tier"}  # fmt: skip
LINE_FIELDS = {"custom_id", "method", "url", "body"}


def _refusal(body: dict) -> str | None:
    """What the body asks that llmcli cannot give, in one line (None: nothing)."""
    n = body.get("n")
    if n is not None and n != 1:
        return f"`n` {json.dumps(n)}: llmcli answers each request once (write the request n times)"
    best_of = body.get("best_of")
    if best_of is not None and best_of != 1:
        return f"`best_of` {json.dumps(best_of)}: llmcli answers each request once"
    if body.get("logprobs") or body.get("top_logprobs"):
        return "`logprobs`: llmcli's engines do not give token log-probabilities"
    if body.get("tools") or body.get("functions"):
        return "`tools`: a batch does not run tools (llmcli generate --tool does)"
    if body.get("logit_bias"):
        return "`logit_bias` is not supported"
    if body.get("echo") or body.get("suffix"):
        return "`echo` and `suffix` are not supported"
    return None


def read_line(doc: dict, n: int) -> Item | str:
    """The item of an OpenAI batch line, or what is wrong with it."""
    key = doc["custom_id"]
    if not isinstance(key, (str, int)) or isinstance(key, bool):
        return "`custom_id` must be a string"
    body = doc.get("body")
    if not isinstance(body, dict):
        return "an OpenAI batch line needs a `body` object"
    method = doc.get("method", "POST")
    if method != "POST":
        return f"`method` {json.dumps(method)}: batch requests are POST"
    url = doc.get("url")
    if url is None:
        url = "/v1/completions" if "prompt" in body and "messages" not in body else "/v1/chat/completions"
    endpoint = ENDPOINTS.get(url) if isinstance(url, str) else None
    if endpoint is None:
        return f"`url` {json.dumps(url)}: llmcli batch answers /v1/chat/completions and /v1/completions"
    if why := _refusal(body):
        return why
    item = Item(str(key), n, keyed=True, given_id=key, openai=endpoint, raw=endpoint == "completions")
    if endpoint == "chat":
        if "messages" not in body:
            return "a /v1/chat/completions body needs `messages`"
        if "prompt" in body:
            return "a /v1/chat/completions body has `messages`, not `prompt`"
        why = fill(item, body, messages=body["messages"], prompt=None)
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:  # a list of one prompt is one prompt
            prompt = prompt[0]
        if prompt is None or "messages" in body:
            return "a /v1/completions body needs a `prompt` (text), not `messages`"
        if isinstance(prompt, list):
            return "`prompt` holds several prompts: write one request a prompt"
        why = fill(item, body, messages=None, prompt=prompt)
    if why:
        return why
    item.unknown = tuple(sorted({*body} - READ - IGNORED - {"n", "best_of", "logprobs", "top_logprobs"}) +
                         sorted(f"line's {k}" for k in {*doc} - LINE_FIELDS))  # fmt: skip
    return item


def _finish(record: dict) -> str:
    return "length" if record["finish_reason"] == "length" else "stop"


def output_line(item: Item, model: str, record: dict, work: dict) -> dict[str, Any]:
    """The line OpenAI's batch API and `vllm run-batch` write for `item`, `record` its answer (or
    its failure: `response.body` null, `error` why), with llmcli's own under `llmcli`."""
    request_id = f"llmcli-batch-{uuid.uuid4().hex}"
    from llmcli.render.documents import VERSIONS

    ours = {"schema_version": VERSIONS["batch"], "work": work, "record": record}
    if record["finish_reason"] == "error":
        return {"id": f"llmcli-{uuid.uuid4().hex}", "custom_id": item.output_id,
                "response": {"status_code": 500, "request_id": request_id, "body": None},
                "error": {"code": "server_error", "message": record["error"]}, "llmcli": ours}  # fmt: skip
    usage = record["usage"] or {}
    prompt_tokens, completion_tokens = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
    chat = item.openai == "chat"
    choice: dict[str, Any] = {"index": 0}
    if chat:
        choice["message"] = {"role": "assistant", "content": record["text"]}
        if record.get("reasoning"):
            choice["message"]["reasoning_content"] = record["reasoning"]
    else:
        choice["text"] = record["text"]
    choice.update(logprobs=None, finish_reason=_finish(record))
    body = {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.get("cached_tokens") or 0},
        },
    }
    return {"id": f"llmcli-{uuid.uuid4().hex}", "custom_id": item.output_id,
            "response": {"status_code": 200, "request_id": request_id, "body": body}, "error": None,
            "llmcli": ours}  # fmt: skip
