"""Text attachments (fragments, issue 65): `-a FILE|URL|-` takes text as well as images, in
`generate`, chat's `/attach`, `batch` items and the log, on the fake engine (its tokens are the
prompt's characters, so what fits is easy to reason about); served: the text is in the message; and
one real-model test that a fact only in the attached file reaches the answer (SmolLM2-135M)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sqlite3
import sys

import pytest
from documents import check
from helpers import run

SECRET = "The secret code is 7431.\n"


def one_error(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("llmcli: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def notes(tmp_path):
    path = tmp_path / "notes.md"
    path.write_text(SECRET)
    return path


def test_generate_puts_the_named_block_before_the_question_and_records_it(fake, notes):
    result = run("generate", "-a", str(notes), "What is the code?", "--json")
    assert result.exit_code == 0, result.stderr
    prompt = fake.made[0].history[0].prompt
    block = f"{notes}\n```markdown\n{SECRET}```"
    assert block in prompt and prompt.index(block) < prompt.index("What is the code?")
    [attached] = json.loads(result.stdout)["attachments"]  # the record is checked against its schema
    assert attached["name"] == str(notes) and attached["media_type"] == "text/markdown"
    assert (
        attached["bytes"] == len(SECRET) and attached["sha256"] == hashlib.sha256(SECRET.encode()).hexdigest()
    )
    assert attached["tokens"] == len(block)  # the fake's tokens are characters: the block's, whole


@pytest.mark.parametrize(
    ("name", "content", "media_type", "fence"),
    [
        ("data.json", '{"code": 7431}', "application/json", "```json\n"),
        ("table.csv", "name,code\nsecret,7431\n", "text/csv", "```csv\n"),
        ("tool.py", "CODE = 7431\n", "text/x-python", "```python\n"),
        ("README", "plain words", "text/plain", "```\n"),
        ("fences.md", "```sh\nls\n```\n", "text/markdown", "````markdown\n"),  # a longer fence than inside
    ],
)
def test_each_kind_of_text_by_its_name(fake, tmp_path, name, content, media_type, fence):
    path = tmp_path / name
    path.write_text(content)
    result = run("generate", "-a", str(path), "q", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["attachments"][0]["media_type"] == media_type
    prompt = fake.made[0].history[0].prompt
    assert f"{path}\n{fence}{content.rstrip(chr(10))}\n{fence.split(chr(96) * 3)[0]}```" in prompt


def test_stdin_is_a_text_attachment_and_raw_takes_texts(fake):
    result = run("generate", "-a", "-", "What is the code?", input=SECRET)
    assert result.exit_code == 0, result.stderr
    assert f"stdin\n```\n{SECRET}```\n\nWhat is the code?" in fake.made[0].history[0].prompt
    result = run("generate", "--raw", "-a", "-", "The code is", input=SECRET)
    assert result.exit_code == 0, result.stderr
    assert fake.made[1].history[0].prompt == f"stdin\n```\n{SECRET}```\n\nThe code is"


@pytest.mark.parametrize(
    ("name", "data", "said"),
    [
        ("blob.bin", b"\x00\x01\x02binary\xff", "not an image (PNG, JPEG, WebP or GIF) nor UTF-8 text"),
        ("latin1.txt", "caf\xe9".encode("latin-1"), "nor UTF-8 text"),
        ("empty.md", b"   \n", "empty"),
        ("picture.png", b"plain text", "not an image"),  # the name says image: it must be one
    ],
)
def test_what_is_not_text_is_refused_in_one_line_before_any_model_loads(tmp_path, name, data, said):
    path = tmp_path / name
    path.write_bytes(data)
    result = run("generate", "-m", "no-such-model", "-a", str(path), "q")
    assert result.exit_code == 2 and result.stdout == ""
    assert said in one_error(result)


def _pdf(text: str) -> bytes:
    """A one-page PDF whose page shows `text` (Helvetica), offsets and all, written by hand."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def test_a_pdfs_text_goes_in_the_prompt(fake, tmp_path):
    pytest.importorskip("pypdf")  # the `pdf` extra (in the test extra too)
    path = tmp_path / "paper.pdf"
    path.write_bytes(_pdf("The secret code is 7431."))
    result = run("generate", "-a", str(path), "What is the code?", "--json")
    assert result.exit_code == 0, result.output
    prompt = fake.made[-1].history[-1].prompt
    assert "The secret code is 7431." in prompt and "paper.pdf" in prompt
    assert json.loads(result.stdout)["attachments"][0]["name"].endswith("paper.pdf")


def test_a_pdf_is_said_not_read_without_pypdf_or_without_text(fake, tmp_path, monkeypatch):
    path = tmp_path / "paper.pdf"
    path.write_bytes(_pdf("The secret code is 7431."))
    monkeypatch.setitem(sys.modules, "pypdf", None)  # as where the `pdf` extra is not installed
    result = run("generate", "-a", str(path), "q")
    assert result.exit_code == 2 and "paper.pdf: a PDF" in one_error(result) and "pypdf" in result.stderr
    assert result.stdout == "" and fake.made == []
    monkeypatch.undo()
    if importlib.util.find_spec("pypdf") is not None:
        empty = tmp_path / "empty.pdf"
        empty.write_bytes(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n")
        result = run("generate", "-a", str(empty), "q")
        assert result.exit_code == 2 and "empty.pdf" in one_error(result)  # it holds no text
        assert fake.made == []


def test_a_text_larger_than_the_context_leaves_is_refused_with_the_numbers(fake, tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("word " * 1000)  # 5000 characters, the fake's 2048-token context
    result = run("generate", "-a", str(big), "What is it about?")
    assert result.exit_code == 4 and result.stdout == ""
    line = one_error(result)
    need = len(f"{big}\n```\n" + "word " * 1000 + "\n```")
    assert f"needs {need} tokens" in line and "the context leaves" in line
    assert "llmcli ask" in result.stderr and "--from" in result.stderr  # where such a text goes
    assert fake.made[0].history == []  # nothing was generated


def test_chat_attach_lists_counts_in_context_and_detaches(fake, notes):
    stdin = f"/attach {notes}\n/attach\nWhat is the code?\n/context\n/attach {notes}\n/detach\n"
    result = run("chat", input=stdin)
    assert result.exit_code == 0, result.stderr
    assert f"attached {notes} (text/markdown, 25 B)" in result.stderr
    assert f"{notes}\n```markdown\n{SECRET}```\n\nWhat is the code?" in fake.made[0].history[0].prompt
    block = len(f"{notes}\n```markdown\n{SECRET}```")
    rows = [line for line in result.stderr.splitlines() if "tok" in line]
    assert any(
        line.split()[:2] == ["1", "user"] and line.rstrip().endswith("What is the code?") for line in rows
    )
    assert any(line.split()[:3] == ["text", str(block), "tok"] and str(notes) in line for line in rows), rows
    assert "detached 1 text(s)" in result.stderr


def test_chat_refuses_a_text_too_long_and_keeps_it_attached(fake, tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("word " * 1000)
    result = run("chat", input=f"/attach {big}\nsummarise\nhello\n")
    assert result.exit_code == 0, result.stderr
    assert "needs" in result.stderr and "tokens but the context leaves" in result.stderr
    assert "1 text(s) still attached to the next message" in result.stderr
    assert [r.prompt.count("word word") > 0 for r in fake.made[0].history] == []  # neither message went


def test_batch_items_name_their_attachments(fake, tmp_path, notes):
    source = tmp_path / "in.jsonl"
    items = [
        {"id": "a", "prompt": "What is the code?", "attachments": [str(notes)]},
        {"id": "b", "prompt": "hi", "attachments": [str(tmp_path / "gone.md")]},
        {"id": "c", "prompt": "hi"},
    ]
    source.write_text("".join(json.dumps(item) + "\n" for item in items))
    result = run("batch", str(source))
    lines = {d["id"]: d["record"] for d in map(json.loads, result.stdout.splitlines())}
    for line in result.stdout.splitlines():
        check(json.loads(line), "batch/line")
    assert lines["a"]["attachments"][0]["name"] == str(notes) and lines["a"]["finish_reason"] == "stop"
    assert any(SECRET.strip() in r.prompt and "What is the code?" in r.prompt for r in fake.made[0].history)
    assert "cannot read attachment" in lines["b"]["error"] and lines["c"]["attachments"] is None
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "prompt": "hi", "attachments": "notes.md"}) + "\n")
    refused = run("batch", str(bad))
    assert refused.exit_code == 2 and "`attachments` must be a list" in one_error(refused)


def test_the_log_stores_a_text_once_and_gives_the_prompt_back_whole(fake, notes, isolated):
    for question in ("What is the code?", "Again?"):
        assert run("generate", "-a", str(notes), question).exit_code == 0
    shown = json.loads(run("logs", "show", "1", "--json").stdout)  # (the one-shot rows moved in)
    db = sqlite3.connect(isolated / "data" / "logs.db")
    try:
        stored = db.execute("SELECT id, media_type, bytes, content FROM attachments").fetchall()
        prompts = [p for (p,) in db.execute("SELECT prompt || coalesce(messages, '') FROM responses")]
        links = db.execute("SELECT count(*) FROM response_attachments").fetchone()[0]
    finally:
        db.close()
    sha = hashlib.sha256(SECRET.encode()).hexdigest()
    assert stored == [(sha, "text/markdown", len(SECRET), SECRET.encode())] and links == 2
    assert len(prompts) == 2 and not any("7431" in p for p in prompts)  # in the attachments table only
    assert f"{notes}\n```markdown\n{SECRET}```\n\nWhat is the code?" == shown["messages"][0]["content"]
    assert shown["attachments"][0]["sha256"] == sha and shown["attachments"][0]["tokens"] > 0
    assert f"[text: {notes}]" in run("logs", "show", "1").stdout
    assert run("generate", "--continue", "And now?").exit_code == 0
    assert f"```markdown\n{SECRET}```\n\nAgain?" in fake.made[-1].history[0].prompt  # the history, whole
    continued = json.loads(run("logs", "show", "3", "--json").stdout)
    assert [a["message"] for a in continued["attachments"]] == [0]  # the history's text, where it is
    db = sqlite3.connect(isolated / "data" / "logs.db")
    try:
        assert db.execute("SELECT count(*) FROM attachments").fetchone()[0] == 1
        assert "7431" not in db.execute("SELECT messages FROM responses WHERE id = 3").fetchone()[0]
    finally:
        db.close()
    rerun = run("logs", "rerun", "1", "--json")  # the same prompt, the text back in place
    assert rerun.exit_code == 0, rerun.stderr
    assert f"{notes}\n```markdown\n{SECRET}```\n\nWhat is the code?" in fake.made[-1].history[-1].prompt
    chat = run("chat", "--continue", input="/context\n")  # the text is still its message's in chat
    assert chat.exit_code == 0, chat.stderr
    assert any(line.split()[:1] == ["text"] and str(notes) in line for line in chat.stderr.splitlines())


def test_a_served_model_gets_the_text_in_the_message(fault_server, notes):
    result = run("generate", "-m", fault_server.ref, "-a", str(notes), "What is the code?")
    assert result.exit_code == 0, result.stderr
    body = [r for r in fault_server.state.requests if r["body"]][0]["body"]
    content = f"{notes}\n```markdown\n{SECRET}```\n\nWhat is the code?"
    assert body["messages"][-1] == {"role": "user", "content": content}


@pytest.mark.model
def test_a_fact_only_in_the_attached_file_reaches_the_answer(tmp_path):
    from realmodel import default_model_env, llmcli

    notes = tmp_path / "notes.txt"
    notes.write_text(SECRET)
    result = llmcli("generate", "-m", "smollm2-135m", "-a", str(notes), "--temperature", "0", "-n", "40",
                    "What is the secret code? Answer with the number.", env=default_model_env())  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "7431" in result.stdout
