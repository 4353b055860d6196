"""`llmcli bench`: measurement only. Runs benchmark cases and returns numbers; never prints.

- `run`: one invocation from parsed flags: the plan, the checks, and the `--scenario`s (`Scenario`);
- `sweep`: flag values (lists, ranges) to the cross product of cases, with llama-bench's defaults;
- `runner`: runs the cases on a backend (`llama_backend` for llama.cpp, `fake` for tests);
- `chat`: the end-to-end multi-turn scenario through the real template and tokenizer;
- `spec`: speculative decoding against plain decoding;
- `serve`: the serving benchmark, many requests at once through the served engine's own client;
- `stats`, `traffic`, `membw`: statistics, memory traffic per token and the bandwidth probe;
- `environment`, `formats`, `compare`: what a result records, how it is written, how two are compared.

The method and the statistics are documented in docs/BENCH.md.
"""
