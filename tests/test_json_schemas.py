"""Every JSON document llmcli prints has a published schema in docs/ (docs/JSON.md), with its
schema_version: each command run here on the fake engine, the fake bench backend or the fake
server, and what it prints held against its schema; every `out_json` call in src/ names one of
them, so a new JSON output without a schema fails here."""

from __future__ import annotations

import ast
import json
import sqlite3
from pathlib import Path

import pytest
from benchfake import FakeBackend, FakeClock
from documents import DOCS, check, problems, schemas
from helpers import bench_in, run
from servers import Behaviour

from llmcli.render.documents import VERSIONS

SRC = Path(__file__).resolve().parents[1] / "src" / "llmcli"

# every document llmcli prints -> the command that prints it (the tests below run each)
PRINTED = {
    "record": "generate --json",
    "bench": "bench -o json",
    "bench/line": "bench -o jsonl (a line)",
    "bench-compare": "bench compare -o json",
    "bench-embed": "bench --scenario embed -o json (tests/test_bench_embed.py, on a real embedding model)",
    "logs/entries": "logs --json",
    "logs/entry": "logs show ID --json",
    "logs/rerun": "logs rerun ID --json",
    "logs/stats": "logs stats --json",
    "models/list": "models list --json",
    "models/served_list": "models list --endpoint URL --json",
    "models/show": "models show REF --json",
    "aliases": "models alias --json",
    "tools": "tools list --json",
    "config": "config show --json",
    "kv": "kv list --json",
    "doctor": "doctor --json",
    "pull/pulled": "pull REF --json (tests/hub/test_pull.py)",
    "pull/choices": "pull --list REF --json (tests/hub/test_pull.py)",
    "embed/vector": "embed TEXT (a line per text; tests/test_embed.py, on a real embedding model)",
    "embed/line": "embed --jsonl (tests/test_embed.py)",
    "embed/match": "similar NAME TEXT (a line per match; tests/test_embed.py)",
    "embed/collections": "collections list --json (tests/test_embed.py)",
    "batch/line": "batch FILE (a line per item; tests/test_batch.py)",
    "batch/openai_line": "batch OPENAI.jsonl (OpenAI's batch output lines; tests/test_batch_openai.py)",
    "rerank/ranking": "rerank QUERY FILE... --json (tests/test_rerank.py, on the test reranker)",
}
# json.dumps in the output layers that is not a document on stdout: text for people, CSV cells,
# and bench's -o json / -o jsonl (held against "bench" and "bench/line" below)
NOT_DOCUMENTS = {
    ("cli/tools.py", "list_tools"), ("cli/logs.py", "show"), ("render/bench.py", "to_json"),
    ("render/bench.py", "jsonl_line"), ("render/bench.py", "_csv_value"), ("render/__init__.py", "out_json"),
    ("runspec/resolve.py", "schema_to_grammar"), ("runspec/speculative.py", "_came_from"),
}  # fmt: skip


def _calls(name: str) -> list[tuple[str, str, ast.Call]]:
    """(file, enclosing function, call) of each call to a function or method called `name` in src/."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                func = getattr(node, "func", None)
                called = getattr(func, "attr", None) or getattr(func, "id", None)
                if isinstance(node, ast.Call) and called == name:
                    found.append((str(path.relative_to(SRC)), fn.name, node))
    return list({(f, fn, id(c)): (f, fn, c) for f, fn, c in found}.values())


def test_every_out_json_call_names_a_published_schema():
    used = {}
    for file, fn, call in _calls("out_json"):
        schema = next((k.value for k in call.keywords if k.arg == "schema"), None)
        assert isinstance(schema, ast.Constant) and isinstance(schema.value, str), (
            f"{file}:{call.lineno} ({fn}): out_json without a literal schema= naming its docs/ schema"
        )
        used[schema.value] = f"{file}:{call.lineno}"
    assert used, "no out_json call found: the scan is broken"
    for name in used:
        assert name in PRINTED, f"{used[name]}: {name} is printed but no test here checks it"
        file = name.partition("/")[0]
        assert file in schemas(), f"{used[name]}: no docs/{file}.schema.json"
    stale = set(PRINTED) - set(used) - {"bench", "bench/line"}  # those two are written by render.bench
    assert not stale, f"documents no out_json prints any more: {stale}"


def test_json_written_otherwise_is_known():
    """Output code that dumps JSON without out_json: each place is text for people or bench's formats."""
    seen = set()
    for file, fn, _ in _calls("dumps"):
        if file.startswith(("cli/", "render/", "repl/")):
            seen.add((file, fn))
    unknown = seen - NOT_DOCUMENTS
    assert not unknown, f"JSON written without a published schema (use render.out_json): {sorted(unknown)}"


def test_every_schema_file_is_published_versioned_and_listed():
    listed = (DOCS / "JSON.md").read_text()
    assert set(schemas()) == set(VERSIONS), "docs/*.schema.json and llmcli.render.documents.VERSIONS differ"
    for name, schema in schemas().items():
        assert f"{name}.schema.json" in listed, f"docs/JSON.md does not list {name}.schema.json"
        if VERSIONS[name] is None:
            continue
        text = json.dumps(schema)
        assert f'"schema_version": {{"const": {VERSIONS[name]}' in text, f"{name}: no schema_version"
    for name in PRINTED:
        assert name.partition("/")[0] in schemas(), f"{name}: no such schema file"


def test_a_renamed_or_missing_field_fails_the_schemas():
    kv = {"schema_version": 1, "directory": "/d", "total_bytes": 0, "cap_bytes": None, "states": []}
    check(kv, "kv")
    assert problems({**kv, "schema_version": 2}, "kv")
    renamed = dict(kv)
    renamed["total"] = renamed.pop("total_bytes")
    assert len(problems(renamed, "kv")) == 2  # total_bytes missing, total unknown
    assert problems([{"name": "x", "origin": "builtin", "description": "", "parameters": {}}], "tools")


# -- the commands ---------------------------------------------------------------------------------


def _json(*args: str):
    result = run(*args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_generate_json_is_a_record(fake):
    doc = check(_json("generate", "hello", "--json"), "record")
    assert doc["schema_version"] == 1 and doc["text"]


def test_logs_documents(fake, isolated):
    _json("generate", "hello", "--seed", "3", "--json")
    _json("generate", "again", "--seed", "4", "--json")
    entries = check(_json("logs", "--json"), "logs/entries")
    assert len(entries) == 2 and all(e["schema_version"] == 1 for e in entries)
    assert all(e["record"]["schema_version"] == 1 for e in entries)
    entry = check(_json("logs", "show", "1", "--json"), "logs/entry")
    assert entry["prompt"] == "hello" and entry["schema_version"] == 1
    rerun = check(_json("logs", "rerun", "1", "--json"), "logs/rerun")
    assert rerun["identical"] is True
    stats = check(_json("logs", "stats", "--json"), "logs/stats")
    assert stats and stats[0]["requests"] == 2


def _llm_log(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE responses (id TEXT PRIMARY KEY, model TEXT, prompt TEXT, system TEXT, prompt_json TEXT,
            options_json TEXT, response TEXT, response_json TEXT, conversation_id TEXT, duration_ms INTEGER,
            datetime_utc TEXT, input_tokens INTEGER, output_tokens INTEGER);
        INSERT INTO responses VALUES ('r1', 'gpt-4o-mini', 'hi', NULL, NULL, '{"temperature": 0.2}',
            'hello!', NULL, 'c1', 120, '2024-05-01T10:00:00', 3, 2);
        """
    )
    db.commit()
    db.close()
    return path


def test_an_imported_entry_is_a_versioned_record(tmp_path, isolated):
    assert run("logs", "import", str(_llm_log(tmp_path / "llm.db"))).exit_code == 0
    (entry,) = check(_json("logs", "--json"), "logs/entries")
    rec = entry["record"]
    assert rec["schema_version"] == 1 and rec["source"] == "llm"
    assert (rec["text"], rec["usage"]["prompt_tokens"], rec["timings"]["total_ms"]) == ("hello!", 3, 120)
    assert rec["params"] == {"temperature": 0.2} and rec["model"]["ref"] == "gpt-4o-mini"
    assert problems(rec, "record"), "an imported record must not pass for one of llmcli's requests"


def test_an_entry_imported_before_the_version_reads_back_versioned(tmp_path, isolated):
    """Imports written before the record had a version (schema_version null, llm's figures only)."""
    from llmcli.log import writer

    assert run("logs", "import", str(_llm_log(tmp_path / "llm.db"))).exit_code == 0
    old = {"schema_version": None, "source": "llm", "text": "hello!", "reasoning": None, "tool_calls": None,
           "model": {"ref": "gpt-4o-mini", "name": "gpt-4o-mini"}, "params": {"temperature": 0.2},
           "usage": {"prompt_tokens": 3, "completion_tokens": 2}, "timings": {"total_ms": 120},
           "finish_reason": None}  # fmt: skip
    writer.close_all()
    db = sqlite3.connect(isolated / "data" / "logs.db")
    db.execute("UPDATE responses SET record = ?", (json.dumps(old),))
    db.commit()
    db.close()
    entry = check(_json("logs", "show", "1", "--json"), "logs/entry")
    assert entry["record"]["schema_version"] == 1 and entry["record"]["usage"]["total_tokens"] == 5


def test_tools_list(tmp_path):
    functions = tmp_path / "fns.py"
    functions.write_text('def word_length(word: str) -> int:\n    """Letters in a word."""\n'
                         "    return len(word)\n")
    listed = check(_json("tools", "list", "--functions", str(functions), "--tool", "current_time", "--json"),
                   "tools")  # fmt: skip
    assert {t["name"] for t in listed} == {"word_length", "current_time"}
    assert all(t["schema_version"] == 1 for t in listed)


def test_models_documents(tmp_path):
    listed = check(_json("models", "list", "--json"), "models/list")
    assert listed, "the bundled models are listed"
    shown = check(_json("models", "show", listed[0]["name"], "--json", "--all"), "models/show")
    assert shown["name"] == listed[0]["name"] and "metadata" in shown
    model = tmp_path / "mine.gguf"
    model.write_bytes(b"GGUF")
    assert run("models", "alias", "mine", str(model)).exit_code == 0
    assert check(_json("models", "alias", "--json"), "aliases") == {"mine": str(model.resolve())}


def test_models_list_of_a_server(fault_server):
    served = check(_json("models", "list", "--endpoint", fault_server.url, "--json"), "models/served_list")
    assert [m["id"] for m in served] == ["m", "other"]


def test_config_kv_and_doctor(isolated):
    config = check(_json("config", "show", "--json"), "config")
    assert "ctx_size" in config["settings"]
    from llmcli import kvstore

    kvstore.kv_dir().mkdir(parents=True, exist_ok=True)
    (kvstore.kv_dir() / "broken.kv").write_bytes(b"not a state")
    kv = check(_json("kv", "list", "--json"), "kv")
    assert kv["schema_version"] == 1
    result = run("doctor", "--offline", "--json")
    doctor = check(json.loads(result.stdout), "doctor")
    assert doctor["versions"]


# -- bench ----------------------------------------------------------------------------------------


@pytest.fixture
def backend(monkeypatch, tmp_path):
    fake = FakeBackend(clock=FakeClock(step_ns=1_000_000))
    return bench_in(tmp_path, monkeypatch, fake, ("a.gguf", "b.gguf", "draft.gguf"))


@pytest.mark.parametrize(
    "args",
    [
        ("-p", "16,32", "-n", "8", "-r", "2"),
        ("--scenario", "chat", "-n", "8", "-r", "2"),
        ("--scenario", "spec", "-n", "8", "-r", "2"),
    ],
    ids=["tests", "chat", "spec"],
)
def test_bench_json_and_jsonl(backend, args):
    doc = check(_json("bench", "-t", "1", *args, "-o", "json"), "bench")
    assert doc["schema_version"] == 1 and doc["schema"] == "llmcli-bench/1" and doc["results"]
    scenario = doc["settings"]["scenario"]
    assert {r["scenario"] for r in doc["results"]} == {scenario}
    result = run("bench", "-t", "1", *args, "-o", "jsonl")
    assert result.exit_code == 0, result.stderr
    lines = [check(json.loads(line), "bench/line") for line in result.stdout.splitlines()]
    assert len(lines) == len(doc["results"]) and all(line["schema_version"] == 1 for line in lines)


def test_a_renamed_bench_field_fails(backend):
    doc = _json("bench", "-t", "1", "-p", "16", "-n", "0", "-r", "1", "-o", "json")
    row = doc["results"][0]
    row["tps"] = row.pop("avg_ts")
    assert problems(doc, "bench")


def test_bench_serve_json(fault_server):
    fault_server.state.behaviour = Behaviour(delay_s=0.01)
    args = ("-p", "8", "-n", "5", "-r", "1", "--no-warmup", "--request-rate", "50", "--requests", "4",
            "--percentiles", "90,99")  # fmt: skip
    doc = check(_json("bench", "-m", fault_server.ref, *args, "-o", "json"), "bench")
    assert doc["results"][0]["scenario"] == "serve" and "p99_ttft_ms" in doc["results"][0]
    result = run("bench", "-m", fault_server.ref, *args, "-o", "jsonl")
    assert result.exit_code == 0, result.stderr
    (line,) = [check(json.loads(x), "bench/line") for x in result.stdout.splitlines()]
    assert line["endpoint"] == doc["environment"]["endpoint"]


def test_bench_compare_json(backend, tmp_path):
    for name in ("old.json", "new.json"):
        result = run("bench", "-t", "1", "-p", "16", "-n", "4", "-r", "3", "-o", "json")
        assert result.exit_code == 0, result.stderr
        (tmp_path / name).write_text(result.stdout)
    doc = check(_json("bench", "compare", "old.json", "new.json", "-o", "json"), "bench-compare")
    assert doc["schema_version"] == 1 and len(doc["comparisons"]) == 2
