"""The conversation log (llmcli.log, `llmcli logs`): what each request writes, finding it again,
continuing and rerunning it, speed over time, and a log that is locked, read-only, full, damaged
or from a newer llmcli costing one warning line and never the answer."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import run

from llmcli.log import cap, queries, store, writer
from llmcli.log.pending import pending_path
from llmcli.log.rows import new_cid, pack_tokens, row_values, unpack_tokens


def db_file(home: Path) -> Path:
    return home / "data" / "logs.db"


def rows(home: Path, sql: str = "SELECT * FROM responses ORDER BY id") -> list[dict]:
    """The log's rows, after moving in what one-shot processes left waiting (as `llmcli logs` does)."""
    if pending_path(db_file(home)).exists():
        queries.reader(db_file(home)).close()
    db = sqlite3.connect(db_file(home))
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute(sql)]
    finally:
        db.close()


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "warning" in line]


# -- recording ----------------------------------------------------------------------------------


def test_the_log_lives_in_the_tests_data_dir(isolated):
    assert store.db_path() == isolated / "data" / "logs.db"  # never the user's real data directory


def test_generate_writes_one_row_with_its_record(fake, isolated):
    result = run("generate", "hello there", "--system", "be brief", "--seed", "7", "--temperature", "0.5")
    assert result.exit_code == 0, result.stderr
    [row] = rows(isolated)
    assert row["command"] == "generate" and row["prompt"] == "hello there"
    assert row["response"] == result.stdout.rstrip("\n")
    assert row["system"] == "be brief"
    assert json.loads(row["messages"]) == [{"role": "system", "content": "be brief"},
                                           {"role": "user", "content": "hello there"}]  # fmt: skip
    assert row["seed"] == 7 and row["temperature"] == 0.5
    assert json.loads(row["params"])["seed"] == 7
    assert row["finish_reason"] == "stop" and row["error"] is None
    assert row["completion_tokens"] > 0 and row["prompt_tokens"] > 0
    assert row["decode_tps"] > 0 and row["ttft_ms"] >= 0
    assert unpack_tokens(row["tokens"])  # the answer's token ids, for rerun
    rec = json.loads(row["record"])
    assert rec["text"] == row["response"] and rec["versions"]["llmcli"] == row["llmcli_version"]
    assert rec["model"]["path"] == row["model_path"]


def test_a_random_seed_is_logged_as_the_seed_used(fake, isolated):
    assert run("generate", "hi").exit_code == 0
    [row] = rows(isolated)
    assert isinstance(row["seed"], int)


def test_chat_turns_share_one_conversation_and_clear_starts_another(fake, isolated):
    result = run("chat", input="first\nsecond\n/clear\nthird\n")
    assert result.exit_code == 0, result.stderr
    got = rows(isolated)
    assert [r["prompt"] for r in got] == ["first", "second", "third"]
    assert {r["command"] for r in got} == {"chat"}
    assert got[0]["conversation_id"] == got[1]["conversation_id"] != got[2]["conversation_id"]
    # the second turn's prompt messages are the whole history
    assert [m["content"] for m in json.loads(got[1]["messages"])] == ["first", got[0]["response"], "second"]


@pytest.mark.parametrize(
    "how", ["flag", "env", "config", "logs-off"], ids=["--no-log", "LLMCLI_LOG", "config", "logs off"]
)
def test_logging_turned_off(fake, isolated, monkeypatch, how):
    args = ["generate", "hello"]
    if how == "flag":
        args.append("--no-log")
    elif how == "env":
        monkeypatch.setenv("LLMCLI_LOG", "false")
    elif how == "config":
        (isolated / "config.toml").write_text("log = false\n")
    else:
        assert run("logs", "off").exit_code == 0
    assert run(*args).exit_code == 0
    assert not db_file(isolated).exists()
    assert run("generate", "again", "--log").exit_code == 0  # --log logs this one request anyway
    assert [r["prompt"] for r in rows(isolated)] == ["again"]


def test_logs_on_after_off(fake, isolated):
    run("logs", "off")
    run("generate", "unlogged")
    run("logs", "on")
    run("generate", "logged")
    assert [r["prompt"] for r in rows(isolated)] == ["logged"]


def test_a_served_models_api_key_is_never_written(isolated, fault_server, monkeypatch):
    from servers import Behaviour

    secret = "sk-very-secret-key-123"
    fault_server.state.behaviour = Behaviour(key=secret)
    (isolated / "config.toml").write_text(
        f'[endpoints.box]\nurl = "{fault_server.url}"\napi_key = "{secret}"\n', encoding="utf-8"
    )
    result = run("generate", "hello", "-m", "box/m")
    assert result.exit_code == 0, result.stderr
    monkeypatch.setenv("LLMCLI_API_KEY", secret)
    assert run("chat", "-m", fault_server.ref, input="hi\n").exit_code == 0
    got = rows(isolated)
    assert len(got) == 2 and all("127.0.0.1" in r["endpoint"] for r in got)
    for name in ("logs.db", "logs.db-wal"):
        path = db_file(isolated).with_name(name)
        assert not path.exists() or secret.encode() not in path.read_bytes()


def test_a_served_stream_that_breaks_is_logged_with_its_error(isolated, fault_server):
    from servers import Behaviour

    fault_server.state.behaviour = Behaviour(mode="die", chunks=2)
    result = run("generate", "hello", "-m", fault_server.ref)
    assert result.exit_code != 0
    [row] = rows(isolated)
    assert row["finish_reason"] == "error" and row["error"] and row["response"] == result.stdout.strip()


# -- finding it again ---------------------------------------------------------------------------


def write_rows(entries: list[dict]) -> None:
    """Rows straight through llmcli.log, as the request path writes them."""
    for e in entries:
        usage = {"prompt_tokens": e.get("prompt_tokens", 10), "cached_tokens": 0, "completion_tokens": 5}
        timings = {"prefill_tokens_per_s": e.get("prefill", 100.0),
                   "decode_tokens_per_s": e.get("decode", 10.0),
                   "prefill_ms": 1, "decode_ms": 1, "ttft_ms": 1, "total_ms": 2}  # fmt: skip
        rec = {"text": e.get("response", ""), "reasoning": e.get("reasoning"),
               "tool_calls": e.get("tool_calls"),
               "finish_reason": "stop", "error": None, "model": {"ref": e.get("model", "m1"), "name": "n"},
               "params": {"seed": 1, "temperature": 0.0}, "usage": usage, "timings": timings,
               "versions": {"llmcli": "x"}}  # fmt: skip
        row = row_values(rec, cid=e.get("cid", new_cid()), command="generate",
                               messages=[{"role": "user", "content": e.get("prompt", "p")}],
                               created=e.get("created"))  # fmt: skip
        assert writer.write(row) is not None


def test_search_covers_prompts_answers_reasoning_and_tool_calls_ranked(isolated):
    write_rows([
        {"prompt": "tell me about otters", "response": "they swim"},
        {"prompt": "unrelated", "response": "nothing here", "reasoning": "maybe otters?"},
        {"prompt": "weather", "response": "calling",
         "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
        {"prompt": "otters otters otters", "response": "otters are mustelids, otters"},
    ])  # fmt: skip
    found = json.loads(run("logs", "-q", "otters", "--json").stdout)
    assert {r["id"] for r in found} == {1, 2, 4}
    assert found[0]["id"] == 4  # the most relevant first (bm25)
    assert [r["id"] for r in json.loads(run("logs", "-q", "Oslo", "--json").stdout)] == [3]
    assert [r["id"] for r in json.loads(run("logs", "-q", "maybe", "--json").stdout)] == [2]
    # punctuation is text, never FTS syntax
    result = run("logs", "-q", 'otters" OR (', "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == []


def test_filters_and_count(isolated):
    import time

    write_rows([
        {"model": "alpha", "cid": "c1", "created": time.time() - 10 * 86400},
        {"model": "alpha", "cid": "c1"},
        {"model": "beta", "cid": "c2"},
    ])  # fmt: skip
    ids = lambda *a: [r["id"] for r in json.loads(run("logs", "--json", *a).stdout)]  # noqa: E731
    assert ids() == [3, 2, 1]  # newest first
    assert ids("-m", "alpha") == [2, 1]
    assert ids("--cid", "c2") == [3]
    assert ids("--since", "2d") == [3, 2]
    assert ids("-n", "1") == [3]
    text = run("logs").stdout
    assert text.index("#1 ") < text.index("#3 ")  # the listing ends with the newest
    bad = run("logs", "--since", "yesterday-ish")
    assert bad.exit_code == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_show(fake, isolated):
    run("generate", "what is two plus two", "--seed", "3", "--temperature", "0")
    shown = run("logs", "show", "1")
    assert shown.exit_code == 0
    assert "what is two plus two" in shown.stdout
    [settings] = [line for line in shown.stdout.splitlines() if line.startswith("settings: ")]
    items = dict(item.split(" ", 1) for item in settings.removeprefix("settings: ").split(", "))
    # every setting as a user types it: temperature 0 (not dropped as false), no Python reprs
    assert items["temperature"] == "0" and items["seed"] == "3" and items["stop"] == "none"
    assert items["reasoning_budget"] == "none" and "json_schema" not in items and "grammar" not in items
    assert not any(word in settings for word in ("None", "False", "True", "=", "[]"))
    assert run("logs", "show", "#1").stdout == shown.stdout  # the id as `llmcli logs` shows it
    doc = json.loads(run("logs", "show", "1", "--json").stdout)
    assert doc["record"]["params"]["seed"] == 3 and doc["tokens"]
    missing = run("logs", "show", "99")
    assert missing.exit_code == 2 and "no log entry #99" in missing.stderr


@pytest.mark.parametrize("command", ["show", "rerun"])
@pytest.mark.parametrize("bad", ["abc", "12x", "-3", "#"])
def test_an_id_that_is_not_a_number_is_one_usage_line(fake, isolated, command, bad):
    run("generate", "hello")
    result = run("logs", command, "--", bad)
    assert result.exit_code == 2 and not result.stdout
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert f"not a log entry id: {bad!r}" in result.stderr and "integer" not in result.stderr


def test_status_counts_the_write_ahead_log_and_the_waiting_entries(fake, isolated):
    for prompt in ("one", "two", "three"):
        assert run("generate", prompt).exit_code == 0
    where = db_file(isolated)
    wal, pending = where.with_name("logs.db-wal"), pending_path(where)
    result = run("logs", "status")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "entries: 3 in 3 conversations;" in result.stdout
    [files] = [line for line in lines if line.startswith("files: ")]
    assert f"{where.name} " in files
    sizes = [p.stat().st_size for p in (where, wal, pending) if p.exists()]
    if wal.exists():  # the entries moved in are in the WAL until a checkpoint folds it
        assert "logs.db-wal " in files
    from llmcli.units import human_size

    [entries] = [line for line in lines if line.startswith("entries: ")]
    assert f"; {human_size(sum(sizes))} on disk of " in entries


def test_logs_before_anything_is_logged(isolated):
    result = run("logs")
    assert result.exit_code == 2 and "nothing logged yet" in result.stderr and not result.stdout


# -- continuing ---------------------------------------------------------------------------------


def test_generate_continue_and_cid_rebuild_the_conversation(fake, isolated):
    run("generate", "first question", "--system", "sys")
    run("generate", "other conversation")
    cid = rows(isolated)[0]["conversation_id"]
    result = run("generate", "follow-up", "--cid", cid)
    assert result.exit_code == 0, result.stderr
    last = rows(isolated)[-1]
    assert last["conversation_id"] == cid
    assert [(m["role"], m["content"]) for m in json.loads(last["messages"])] == [
        ("system", "sys"), ("user", "first question"), ("assistant", "echo: first question"),
        ("user", "follow-up"),
    ]  # fmt: skip
    assert run("generate", "and then", "--continue").exit_code == 0  # the last one: the same conversation
    assert rows(isolated)[-1]["conversation_id"] == cid
    assert len(json.loads(rows(isolated)[-1]["messages"])) == 6


def test_chat_continue(fake, isolated):
    run("generate", "remember the word giraffe")
    result = run("chat", "--continue", input="what word?\n")
    assert result.exit_code == 0, result.stderr
    assert "continuing conversation" in result.stderr
    last = rows(isolated)[-1]
    assert last["command"] == "chat" and last["conversation_id"] == rows(isolated)[0]["conversation_id"]
    assert "remember the word giraffe" in last["messages"]


def test_continue_refusals(fake, isolated):
    nothing = run("generate", "x", "--continue", "--no-log")
    assert nothing.exit_code == 2 and "nothing logged yet" in nothing.stderr
    run("generate", "x")
    both = run("generate", "y", "--continue", "--cid", "abc")
    assert both.exit_code == 2 and "give one" in both.stderr
    unknown = run("generate", "y", "--cid", "nope")
    assert unknown.exit_code == 2 and "no logged conversation 'nope'" in unknown.stderr
    session = run("chat", "--continue", "--session", "s", input="")
    assert session.exit_code == 2


# -- rerun --------------------------------------------------------------------------------------


def test_rerun_identical_and_where_it_differs(fake, isolated):
    run("generate", "hello", "--seed", "11")
    same = run("logs", "rerun", "1")
    assert same.exit_code == 0 and "identical to #1" in same.stderr
    assert same.stdout.strip() == rows(isolated)[0]["response"]
    # the logged answer's tokens from the third on were other ones: the rerun says where
    db = sqlite3.connect(db_file(isolated))
    tokens = unpack_tokens(db.execute("SELECT tokens FROM responses").fetchone()[0])
    changed = tokens[:3] + [t + 1 for t in tokens[3:]]
    db.execute("UPDATE responses SET tokens = ?, response = response || '!'", (pack_tokens(changed),))
    db.commit()
    db.close()
    differs = run("logs", "rerun", "1", "--json")
    doc = json.loads(differs.stdout)
    assert doc["identical"] is False and doc["differs_at_token"] == 3
    assert len(rows(isolated)) == 1  # a rerun is not logged unless --log


# -- speed over time ----------------------------------------------------------------------------


def test_stats_median_and_spread_by_model_and_prompt_length(isolated):
    small_prompts = [
        {"model": "m", "prompt_tokens": 20, "decode": d, "prefill": 100 * d} for d in (10, 20, 30, 40)
    ]
    write_rows([*small_prompts, {"model": "m", "prompt_tokens": 1000, "decode": 5}])
    groups = json.loads(run("logs", "stats", "--json").stdout)
    small = next(g for g in groups if g["prompt_tokens"] == "0-127")
    assert small["requests"] == 4 and small["decode_tokens_per_s"]["median"] == 25
    assert small["decode_tokens_per_s"]["p25"] <= 25 <= small["decode_tokens_per_s"]["p75"]
    assert small["prefill_tokens_per_s"]["median"] == 2500
    assert any(g["prompt_tokens"] == "512-2047" for g in groups)
    table = run("logs", "stats")
    assert table.exit_code == 0 and "0-127" in table.stdout and "█" in table.stdout


# -- never in the way ---------------------------------------------------------------------------


def _answer_and_one_warning(result) -> None:
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "echo: hello"
    warned = warnings(result.stderr)
    assert len(warned) == 1 and "not logged" in warned[0], result.stderr


def _answer_and_waiting(result, home: Path) -> None:
    """A one-shot generate never opens the database: the answer, no warning, its row waiting."""
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "echo: hello"
    assert not warnings(result.stderr), result.stderr
    assert b'"prompt":"hello"' in pending_path(db_file(home)).read_bytes()


def _one_line_error(result) -> str:
    assert result.exit_code != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) <= 2 and "error" in lines[0], result.stderr  # the error and at most its hint
    return lines[0]


def test_a_damaged_log_costs_one_warning(fake, isolated):
    run("generate", "before")
    rows(isolated)  # into the database
    path = db_file(isolated)
    writer.close_all()
    data = path.read_bytes()
    path.write_bytes(b"this is no database at all" + data[len(data) // 2 :])
    _answer_and_waiting(run("generate", "hello"), isolated)
    assert "not a SQLite database" in _one_line_error(run("logs"))
    assert b'"prompt":"hello"' in pending_path(path).read_bytes()  # still waiting, not lost
    result = run("chat", input="hello\n")  # a chat writes itself: one warning, the answer kept
    _answer_and_one_warning(result)


def test_a_truncated_log_costs_one_warning(fake, isolated):
    write_rows([{"prompt": "x" * 5000} for _ in range(20)])
    writer.close_all()
    path = db_file(isolated)
    for extra in ("-wal", "-shm"):
        path.with_name("logs.db" + extra).unlink(missing_ok=True)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 3)
    _answer_and_waiting(run("generate", "hello"), isolated)
    result = run("chat", input="hello\n")
    assert result.exit_code == 0 and result.stdout.strip() == "echo: hello"
    assert (
        len(warnings(result.stderr)) <= 1
    )  # a truncation SQLite notices costs one line; one it cannot, none


def test_a_chat_warns_once_then_carries_on(fake, isolated):
    db_file(isolated).parent.mkdir(parents=True)
    db_file(isolated).write_bytes(b"garbage" * 100)
    result = run("chat", input="one\ntwo\nthree\n")
    assert result.exit_code == 0
    assert result.stdout.count("echo:") == 3
    assert len(warnings(result.stderr)) == 1


def test_a_locked_log_costs_one_warning(fake, isolated, monkeypatch):
    monkeypatch.setattr(store, "BUSY_TIMEOUT_MS", 200)
    run("generate", "before")
    rows(isolated)
    writer.close_all()
    holder = sqlite3.connect(db_file(isolated), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        _answer_and_waiting(run("generate", "hello"), isolated)
        _answer_and_one_warning(run("chat", input="hello\n"))
        writer.close_all()
        listed = run("logs", "--json")  # what is there, and one line on what waits
        assert listed.exit_code == 0, listed.stderr
        assert [e["prompt"] for e in json.loads(listed.stdout)] == ["before"]
        [warned] = warnings(listed.stderr)
        assert "not in the log yet" in warned
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [r["prompt"] for r in rows(isolated)] == ["before", "hello"]  # the waiting row landed


def _make_read_only(path: Path) -> callable:
    if os.geteuid() != 0:
        os.chmod(path, 0o444)
        os.chmod(path.parent, 0o555)
        return lambda: (os.chmod(path.parent, 0o755), os.chmod(path, 0o644))
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
    if made.returncode != 0:
        pytest.skip("running as root, and chattr cannot make the file immutable here")
    return lambda: subprocess.run(["chattr", "-i", str(path)], check=False)


def test_a_read_only_log_costs_one_warning(fake, isolated):
    run("generate", "before")
    rows(isolated)
    writer.close_all()
    db = sqlite3.connect(db_file(isolated))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    for extra in ("-wal", "-shm"):
        db_file(isolated).with_name("logs.db" + extra).unlink(missing_ok=True)
    undo = _make_read_only(db_file(isolated))
    try:
        result = run("generate", "hello")
        if os.geteuid() != 0:  # the directory is read-only too: nowhere to leave the row
            _answer_and_one_warning(result)
        else:  # only the database is: the row waits beside it
            _answer_and_waiting(result, isolated)
        _answer_and_one_warning(run("chat", input="hello\n"))
    finally:
        undo()
    expected = ["before"] if os.geteuid() != 0 else ["before", "hello"]
    assert [r["prompt"] for r in rows(isolated)] == expected


def test_a_full_disk_costs_one_warning(fake, isolated):
    import resource
    import signal

    run("generate", "before")
    rows(isolated)
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, limit[1]))  # no file may grow past 1 kB: full
    try:
        result = run("generate", "hello")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, handler)
    _answer_and_one_warning(result)
    pending = pending_path(db_file(isolated))
    assert not pending.exists() or pending.stat().st_size == 0  # no half-written entry left behind
    assert [r["prompt"] for r in rows(isolated)] == ["before"]


def test_a_line_cut_short_is_dropped_and_the_next_entry_lands(fake, isolated):
    pending = pending_path(db_file(isolated))
    pending.parent.mkdir(parents=True)
    pending.write_bytes(b'{}\n[1]\n{"conversation_id":"x","prompt":"cut sh')  # no rows; one cut short
    assert run("generate", "hello").exit_code == 0
    assert [r["prompt"] for r in rows(isolated)] == ["hello"]
    assert pending.read_bytes() == b""


def test_waiting_entries_move_in_once_they_pass_the_threshold(fake, isolated, monkeypatch):
    monkeypatch.setattr(writer, "PENDING_DRAIN_BYTES", 1)
    assert run("generate", "one").exit_code == 0
    assert run("generate", "two").exit_code == 0
    assert pending_path(db_file(isolated)).read_bytes() == b""
    db = sqlite3.connect(db_file(isolated))
    try:
        assert [r[0] for r in db.execute("SELECT prompt FROM responses ORDER BY id")] == ["one", "two"]
    finally:
        db.close()


def test_a_log_from_a_newer_llmcli_is_left_alone(fake, isolated):
    run("generate", "before")
    rows(isolated)
    writer.close_all()
    db = sqlite3.connect(db_file(isolated))
    db.execute(f"PRAGMA user_version = {store.SCHEMA + 5}")
    db.close()
    _answer_and_waiting(run("generate", "hello"), isolated)
    assert "newer llmcli" in _one_line_error(run("logs"))
    result = run("chat", input="hello\n")
    _answer_and_one_warning(result)
    assert "newer llmcli" in result.stderr


def test_the_schema_migrates_forward(isolated, monkeypatch):
    write_rows([{"prompt": "kept"}])
    writer.close_all()
    step = store._script(
        "ALTER TABLE responses ADD COLUMN rating INTEGER;\nUPDATE responses SET rating = 5;\n"
    )
    monkeypatch.setattr(store, "MIGRATIONS", [*store.MIGRATIONS, step])
    monkeypatch.setattr(store, "SCHEMA", store.SCHEMA + 1)
    db = store.connect()
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA
        assert [tuple(r) for r in db.execute("SELECT prompt, rating FROM responses")] == [("kept", 5)]
    finally:
        db.close()


WRITER = textwrap.dedent(
    """
    import sys
    from llmcli.log import rows, writer
    for i in range(int(sys.argv[1])):
        rec = {"text": f"answer {i}", "model": {"ref": "m"}, "params": {}, "usage": {}, "timings": {}}
        row = rows.row_values(rec, cid=sys.argv[2], command="generate",
                              messages=[{"role": "user", "content": f"q {i}"}])
        if sys.argv[3] == "defer":
            assert writer.defer(row), "not left"
        else:
            assert writer.write(row) is not None, "not written"
    """
)


@pytest.mark.parametrize("how", ["write", "defer", "both"])
def test_writers_in_separate_processes_all_land(isolated, how, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    env = dict(os.environ)
    n, writers = 40, 4
    command = [sys.executable, "-c", WRITER, str(n)]
    kinds = {"write": ["write"] * 4, "defer": ["defer"] * 4, "both": ["write", "defer"] * 2}[how]
    procs = [subprocess.Popen([*command, f"w{k}", kinds[k]], env=env, stderr=subprocess.PIPE, text=True)
             for k in range(writers)]  # fmt: skip
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert "warning" not in err
    got = rows(isolated, "SELECT conversation_id, count(*) AS n FROM responses GROUP BY conversation_id")
    assert sorted((r["conversation_id"], r["n"]) for r in got) == [(f"w{k}", n) for k in range(writers)]
    assert rows(isolated, "PRAGMA journal_mode")[0]["journal_mode"] == "wal"


def test_the_size_cap_removes_the_oldest(isolated, monkeypatch):
    monkeypatch.setenv("LLMCLI_LOG_MAX_MB", "1")
    write_rows([{"prompt": f"entry {i} " + "y" * 20_000} for i in range(120)])
    db = store.connect()
    try:
        assert cap.used_bytes(db) <= 1_000_000
        ids = [r[0] for r in db.execute("SELECT id FROM responses ORDER BY id")]
    finally:
        db.close()
    assert ids[-1] == 120 and ids[0] > 1  # the newest kept, the oldest gone


def test_prune(isolated):
    import time

    write_rows([{"created": time.time() - 40 * 86400}, {"created": time.time() - 40 * 86400}, {}, {}, {}])
    assert run("logs", "prune").exit_code == 2  # says what to remove
    result = run("logs", "prune", "--older-than", "30d")
    assert result.exit_code == 0 and "removed 2 entries" in result.stderr
    assert run("logs", "prune", "--keep", "1").exit_code == 0
    assert [r["id"] for r in rows(isolated)] == [5]
    assert rows(isolated, "SELECT count(*) AS n FROM conversations")[0]["n"] == 1


def test_logs_path_moves_waiting_entries_in_so_sqlite_sees_them(fake, isolated):
    assert run("generate", "hello").exit_code == 0
    assert pending_path(db_file(isolated)).stat().st_size > 0  # waiting beside the log
    result = run("logs", "path")
    assert result.exit_code == 0 and result.stdout.strip() == str(db_file(isolated))
    db = sqlite3.connect(result.stdout.strip())
    try:
        assert [r[0] for r in db.execute("SELECT prompt FROM responses")] == ["hello"]
    finally:
        db.close()


def test_stats_plot_draws_each_model_in_both_panels(isolated, tmp_path):
    short = [{"model": "small", "prompt_tokens": 20, "decode": d, "prefill": 100 * d} for d in (10, 20, 30)]
    write_rows([*short, {"model": "small", "prompt_tokens": 1000, "decode": 5, "prefill": 300},
                {"model": "big", "prompt_tokens": 20, "decode": 4, "prefill": 90}])  # fmt: skip
    from llmcli.render import charts, plot

    groups = json.loads(run("logs", "stats", "--json").stdout)
    fig = plot.figure(charts.speeds_chart(groups))
    prefill, decode = fig.axes
    assert [a.get_title() for a in fig.axes] == ["prefill", "decode"]
    labels = {c.get_label(): c for c in decode.containers}
    assert set(labels) == {"small", "big"} == {c.get_label() for c in prefill.containers}
    xs, ys = labels["small"].lines[0].get_data()
    assert list(ys) == [20, 5] and [t.get_text() for t in decode.get_xticklabels()] == ["0-127", "512-2047"]
    low, high = labels["small"][2][0].get_segments()[0][:, 1]  # the quartiles as the error bar
    assert (low, high) == (15, 25)
    out = tmp_path / "speeds.svg"
    result = run("logs", "stats", "--plot", str(out))
    assert result.exit_code == 0, result.stderr
    assert "0-127" in result.stdout  # the table still printed
    ids = {e.get("id") for e in ET.parse(out).iter()}
    assert {"series:small", "series:big"} <= ids
    term = run("logs", "stats", "--plot", "-")
    assert term.exit_code == 0 and "PROMPT TOK" not in term.stdout  # the chart instead of the table
    assert "small" in term.stdout and "big" in term.stdout and "decode" in term.stdout
    both = run("logs", "stats", "--plot", "-", "--json")
    assert both.exit_code == 2 and both.stdout == ""
    assert run("logs", "stats", "--plot", str(tmp_path / "x.gif")).exit_code == 2
