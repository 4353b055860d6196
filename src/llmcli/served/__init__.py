"""Served models: a model on an OpenAI-compatible server (llama-server, vLLM, a hosted API), named
like any other model and run through the same engine contract. This package owns the reference
syntax and the config file's `[endpoints.NAME]` tables (`endpoints`; `config`: which endpoint a
reference names, how long a stream may stall), the connection pool and its faults (`client`,
`faults`), the event stream (`sse`), one streamed request read into a reply (`reply`: `Exchange`,
`Reply`), what a request carries (`wire`) and `ServedEngine` (`engine`), which the loader builds
and the serving benchmark drives. Its public face is `ServedEngine`, `Client`, `Exchange` and the
endpoint syntax; `endpoints` and `config` sit in the core layer (the settings validate the config
file with them, the hub stores aliases to served models), the rest above the engine, and only
`client`, `faults` and `reply` import httpx.
"""
