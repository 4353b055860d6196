"""What a served request carries: the sampling settings as the API takes them (`request_body`,
per server flavour), a reasoning budget (`budget_fields`), and the conversation in OpenAI's shape
(`openai_messages`). A setting a server cannot take is an error, never dropped."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

from llmcli.contract import SamplingParams
from llmcli.errors import UsageError
from llmcli.media.image import Image


def openai_messages(
    messages: list[dict[str, Any]],
    images: Sequence[Image] = (),
    earlier: Mapping[int, Sequence[Image]] | None = None,
) -> list[dict[str, Any]]:
    """The conversation as the OpenAI API takes it. An earlier answer's reasoning is not sent back:
    the server's template would drop it or, worse, put it before the answer again (what llama-server
    and vLLM ask of their clients). A call's arguments go as a JSON string; a tool result as a
    "tool" message with its `tool_call_id`. `images` join the last user message as content parts
    (`image_url` with a data URI), before its text, where a local model's prompt has them too;
    `earlier` (message index -> images) puts an earlier user message's images back at that message
    on every later turn, as the conversation had them."""
    from llmcli.conversation import REASONING_FIELD

    out = []
    for message in messages:
        m = {k: v for k, v in message.items() if k != REASONING_FIELD}
        if m.get("tool_calls"):
            m["tool_calls"] = [_openai_call(call) for call in m["tool_calls"]]
        out.append(m)
    for index, pictures in (earlier or {}).items():
        if pictures and 0 <= index < len(out) and out[index].get("role") == "user":
            out[index] = {**out[index], "content": image_parts(pictures, out[index].get("content"))}
    if images:
        last = max((i for i, m in enumerate(out) if m.get("role") == "user"), default=None)
        if last is None:
            raise UsageError("an image goes with a user message, and this conversation has none")
        out[last] = {**out[last], "content": image_parts(images, out[last].get("content"))}
    return out


def image_parts(images: Sequence[Image], text: Any) -> list[dict[str, Any]]:
    """A message's content as OpenAI content parts: one `image_url` part a picture (its bytes as a
    data URI: the server never fetches anything), then the text."""
    parts: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": image.data_uri()}} for image in images
    ]
    if isinstance(text, list):  # parts already
        return parts + text
    if text:
        parts.append({"type": "text", "text": str(text)})
    return parts


def _openai_call(call: dict[str, Any]) -> dict[str, Any]:
    function = dict(call.get("function") or {})
    if not isinstance(function.get("arguments"), str):
        function["arguments"] = json.dumps(function.get("arguments") or {}, ensure_ascii=False)
    return {"id": call.get("id") or "", "type": "function", "function": function}


def budget_fields(params: SamplingParams, flavour: str) -> dict[str, Any]:
    """A reasoning budget as the server takes it per request: llama-server's
    `reasoning_budget_tokens` (and its message; it enforces it for templates whose thinking tags it
    knows), vLLM's `thinking_token_budget` (it enforces it
    where it was started with a reasoning configuration). A server that takes none: refused."""
    budget, message = params.reasoning_budget, params.reasoning_budget_message
    if budget is None:
        return {}
    if flavour == "llama-server":
        return {
            "reasoning_budget_tokens": budget,
            **({"reasoning_budget_message": message} if message else {}),
        }
    if flavour == "vllm":
        if message:
            raise UsageError("vLLM takes a reasoning budget but no message: drop --reasoning-budget-message")
        return {"thinking_token_budget": budget}
    raise UsageError(
        f"this server ({flavour}) takes no reasoning budget: --reasoning-budget works with local "
        "models, llama-server and vLLM",
        hint="use --no-think where the model's template has a switch",
    )


def request_body(
    params: SamplingParams,
    model: str,
    flavour: str,
    *,
    chat: bool,
    cache_prompt: bool = True,
    ignore_eos: bool = False,
    server_defaults: bool = False,
) -> dict:
    """The sampling settings as the API takes them. Standard fields always; llama.cpp's own
    (top_k, min_p, repeat_penalty, grammar) to servers known to take them, and to other servers
    only when the user set them (an unknown field the server refuses is then its clear error);
    a setting that cannot be expressed is an error, never dropped.

    `cache_prompt=False` asks llama-server to prefill the whole prompt (as for a distinct user);
    `ignore_eos` asks the servers that take it (llama-server, vLLM) for exactly `max_tokens`;
    `server_defaults` leaves out the settings in `params.defaulted` (top_p, top_k, min_p,
    repeat_penalty, repeat_last_n), so the server's own defaults apply (the serving benchmark)."""
    seed = params.seed if params.seed is not None else random.randint(0, 2**31 - 1)
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": params.temperature,
        "seed": seed,
    }
    set_by_user = lambda name: name not in params.defaulted  # noqa: E731
    sent = set_by_user if server_defaults else (lambda name: True)
    if sent("top_p"):
        body["top_p"] = params.top_p
    if params.max_tokens:
        body["max_tokens"] = params.max_tokens
    for name in ("frequency_penalty", "presence_penalty"):  # OpenAI's own: every server takes them
        if getattr(params, name):
            body[name] = getattr(params, name)
    if params.stop:
        body["stop"] = list(params.stop)
    llama_like = flavour in ("llama-server", "llama-cpp-python")
    for name in ("top_k", "min_p", "repeat_penalty"):
        if (llama_like or set_by_user(name)) and sent(name):
            key = "repetition_penalty" if (name == "repeat_penalty" and flavour == "vllm") else name
            body[key] = getattr(params, name)
    if ignore_eos and flavour in ("llama-server", "vllm"):
        body["ignore_eos"] = True
    if flavour == "llama-server":
        if sent("repeat_last_n"):
            body["repeat_last_n"] = params.repeat_last_n
        body["cache_prompt"] = cache_prompt
        body["timings_per_token"] = False
    if params.json_schema is not None:
        schema = params.json_schema if isinstance(params.json_schema, dict) else {}
        if flavour == "llama-cpp-python":
            body["response_format"] = {"type": "json_object", "schema": schema}
        elif chat or flavour == "llama-server":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": schema, "strict": True},
            }
        elif flavour == "vllm":
            body["guided_json"] = schema
        else:
            raise UsageError(
                "--json-schema with --raw needs a server that constrains completions "
                "(llama-server, vLLM); this one takes a schema in chat only"
            )
    elif params.grammar is not None:
        if llama_like:
            body["grammar"] = params.grammar
        elif flavour == "vllm":
            body["guided_grammar"] = params.grammar
        else:
            raise UsageError(
                "this server does not take a GBNF grammar (--grammar-file): llama-server, "
                "llama-cpp-python and vLLM do",
                hint="use --json-schema, which OpenAI-compatible servers take",
            )
    return body
