"""The published schemas of every JSON document llmcli prints (docs/*.schema.json), for the tests to
hold printed documents against: `check(doc, "logs/entries")` validates against
docs/logs.schema.json's $defs/entries, `check(doc, "record")` against a whole file. A schema may
refer to another file by name (logs' entries hold request records): they resolve among docs/."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource

DOCS = Path(__file__).resolve().parents[1] / "docs"
BASE = "https://llmcli.invalid/"


@functools.cache
def schemas() -> dict[str, dict]:
    """Each docs/FILE.schema.json by FILE, checked to be a draft 2020-12 schema with its $id."""
    found = {}
    for path in sorted(DOCS.glob("*.schema.json")):
        schema = json.loads(path.read_text())
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$id"] == BASE + path.name, f"{path.name}: $id {schema['$id']}"
        found[path.name.removesuffix(".schema.json")] = schema
    return found


@functools.cache
def _validator(name: str) -> jsonschema.Draft202012Validator:
    file, _, part = name.partition("/")
    assert file in schemas(), f"no docs/{file}.schema.json"
    if part:
        assert part in schemas()[file].get("$defs", {}), f"docs/{file}.schema.json has no $defs/{part}"
    registry = Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in schemas().values())
    ref = BASE + f"{file}.schema.json" + (f"#/$defs/{part}" if part else "")
    return jsonschema.Draft202012Validator({"$ref": ref}, registry=registry)


def check(doc: Any, name: str) -> Any:
    """`doc`, after checking it against the schema `name` (AssertionError naming each violation)."""
    errors = sorted(_validator(name).iter_errors(doc), key=lambda e: list(e.absolute_path))
    assert not errors, f"document does not match {name}:\n" + "\n".join(
        f"  {'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in errors[:20]
    )
    return doc


def problems(doc: Any, name: str) -> list[str]:
    """What is wrong with `doc` against `name` (empty: nothing)."""
    return [e.message for e in _validator(name).iter_errors(doc)]
