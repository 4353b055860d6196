"""The published schema of the request record (docs/record.schema.json), for the tests to hold
every record they produce against: in-process through the `record.build` wrapper that conftest
installs for every test, and from subprocesses through `realmodel.generate_json`."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jsonschema

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "docs" / "record.schema.json").read_text())


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    return jsonschema.Draft202012Validator(SCHEMA)


def validate(record: dict) -> dict:
    """`record`, after checking it against the schema (AssertionError naming each violation)."""
    errors = sorted(_validator().iter_errors(record), key=lambda e: list(e.absolute_path))
    assert not errors, "record does not match docs/record.schema.json:\n" + "\n".join(
        f"  {'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in errors
    )
    return record
