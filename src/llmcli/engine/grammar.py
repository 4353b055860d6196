"""Grammar conversion: a JSON schema to the GBNF grammar llama.cpp's grammar sampler enforces.

The converter is llama-cpp-python's (`llama_cpp.llama_grammar`); this is the one place llmcli calls it.
"""

from __future__ import annotations


def json_schema_to_gbnf(schema: str) -> str:
    """GBNF for a JSON schema given as JSON text; the converter raises plain exceptions (ValueError,
    KeyError, ...) on schemas it does not support."""
    from llmcli.engine.backend import binding

    return binding("llama_grammar").json_schema_to_gbnf(schema)
