"""The JSON documents llmcli prints, each published as a JSON Schema in docs/ (docs/JSON.md lists them).

`render.out_json(doc, schema=NAME)` prints a document and stamps it with its `schema_version`:
NAME is "FILE/DEF", the schema file `docs/FILE.schema.json` and the definition in its `$defs` that
describes this document. A document that is a JSON object gets `schema_version` as its first field;
one that is a list gets it on each of its objects (the list itself has no room for a field, and
wrapping it would change what users read). `bench -o json` and `-o jsonl` carry theirs from
`llmcli.bench.results`, the request record from `llmcli.record`.

Bump a file's version with any change that could break a reader (a field removed, renamed or
retyped); adding a field is not one. tests/test_json_schemas.py checks every `out_json` call names
a definition here and that each printed document matches it.
"""

from __future__ import annotations

from typing import Any

from llmcli import record
from llmcli.bench import results

# schema file (docs/FILE.schema.json) -> the schema_version of its documents; None: a document with
# no room for one (`models alias --json`, a map whose keys are the user's alias names)
VERSIONS: dict[str, int | None] = {
    "record": record.SCHEMA_VERSION,
    "bench": results.SCHEMA_VERSION,
    "bench-compare": 1,
    "bench-embed": 1,
    "logs": 1,
    "models": 1,
    "aliases": None,
    "tools": 1,
    "config": 1,
    "kv": 1,
    "doctor": 1,
    "pull": 1,
    "embed": 1,
    "batch": 2,
    "rerank": 1,
}


# documents whose shape is another's (OpenAI's batch output lines): their version is inside them
UNSTAMPED = {"batch/openai_line"}


def stamped(doc: Any, schema: str) -> Any:
    """`doc` with the `schema_version` of `schema` ("FILE/DEF"); a field it already has is kept."""
    file = schema.split("/", 1)[0]
    if schema in UNSTAMPED:
        return doc
    if file not in VERSIONS:
        raise ValueError(f"no published schema {file!r} (llmcli.render.documents.VERSIONS)")
    version = VERSIONS[file]
    if version is None:
        return doc
    if isinstance(doc, dict):
        return {"schema_version": version, **doc}
    if isinstance(doc, list):
        return [{"schema_version": version, **d} if isinstance(d, dict) else d for d in doc]
    return doc
