"""Images in chat, the log and saved sessions (issue 57): `/attach` joins the next message and a
later turn about the same image does not encode it again (the KV cache holds it); the image phase
in the readout and the stats line; the log and saved sessions keep each image once by hash, so
`logs show`, `logs rerun`, `chat --continue` and `--resume` work with images, and a session whose
image is gone is refused without touching anything. The real path runs SmolLM2-135M with the tiny
projector of tests/projector.py, as tests/test_images.py does."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from test_images import png

from llmcli.contract import PrefillProgress, Stats
from llmcli.conversation import Conversation, Message
from llmcli.log import queries, rows, store, writer
from llmcli.log.cap import prune
from llmcli.media import image as media
from llmcli.render.stats import stats_line
from llmcli.repl.readout import LiveReadout

RED = png(64, 64, (255, 0, 0))
BLUE = png(64, 64, (0, 0, 255))


# -- the image phase: the readout and the stats line ----------------------------------------------


def test_stats_line_shows_the_image_phase_apart_and_reused_images():
    encoded = Stats(prompt_tokens=60, prefill_ms=100, image_tokens=16, image_ms=420.0,
                    images=[{"sha256": "a", "tokens": 16, "cached": False}])  # fmt: skip
    parts = stats_line(encoded).split(" · ")
    assert parts[2:4] == ["image 0.42 s", "16 tok"] and parts[1].startswith("prefill")
    encoded.image_ms = 4.2  # milliseconds are not shown as 0.00 s
    assert "image 0.004 s · 16 tok" in stats_line(encoded)
    reused = Stats(prompt_tokens=80, cached_tokens=65, image_tokens=16,
                   images=[{"sha256": "a", "tokens": 16, "cached": True}])  # fmt: skip
    assert "image 16 tok (16 reused)" in stats_line(reused)
    assert "image" not in stats_line(Stats(prompt_tokens=5))


def test_readout_shows_the_image_being_encoded_then_the_prefill():
    readout = LiveReadout(columns=100, dim=False)
    readout(PrefillProgress(0, 60, 0.0))
    readout(PrefillProgress(10, 60, 5.0, encoding=16))
    status = readout.status_text()
    assert status.startswith("image ") and status.endswith(" · 16 tok"), status
    readout(PrefillProgress(26, 60, 9.0, image_tokens=16, image_ms=420.0))
    status = readout.status_text()
    assert status.startswith("prefill 26/60 tok") and "image 0.42 s · 16 tok" in status, status


# -- a message's images: kept by reference, read back or refused ----------------------------------


def test_a_saved_message_refers_to_its_images_and_needs_them_back():
    red = media.from_bytes("red.png", RED)
    conversation = Conversation("be brief")
    conversation.add_user("what is it?", (red,))
    conversation.add_assistant("red")
    saved = json.loads(json.dumps(conversation.to_dict()))  # as a session file holds it
    (ref,) = saved["messages"][0]["attachments"]
    assert ref == {"name": "red.png", "media_type": "image/png", "bytes": len(RED), "sha256": red.sha256}
    assert "content" not in saved["messages"][0] or saved["messages"][0]["content"] == "what is it?"
    with pytest.raises(ValueError):
        Conversation.from_dict(saved)  # images, and nothing to read them from
    back = Conversation.from_dict(saved, images=lambda r: red if r["sha256"] == red.sha256 else None)
    assert back.messages[0].images == (red,) and back.images_by_index() == {1: (red,)}
    assert Message.from_dict({"role": "user", "content": "x"}).images == ()


# -- the log: each image once by hash, migrated in place ------------------------------------------


def _row(cid: str, text: str, placed: dict) -> dict:
    rec = {"text": "answer", "model": {"ref": "m"}, "params": {}, "usage": {}, "timings": {}}
    messages = [{"role": "user", "content": text}]
    encoded = [{"sha256": img.sha256, "tokens": 16} for imgs in placed.values() for img in imgs]
    images = rows.attachments(placed, encoded)
    return rows.row_values(rec, cid=cid, command="chat", messages=messages, images=images)


def test_the_log_keeps_an_image_once_however_many_requests_hold_it(isolated):
    red, blue = media.from_bytes("red.png", RED), media.from_bytes("blue.png", BLUE)
    first = writer.write(_row("c1", "one", {0: (red,)}))
    second = writer.write(_row("c1", "two", {0: (red, blue)}))
    assert writer.defer(_row("c2", "three", {0: (red,)}))  # a one-shot process's row, with its image
    writer.close_all()
    db = queries.reader()  # moves the waiting row in
    try:
        assert db.execute("SELECT count(*) FROM attachments").fetchone()[0] == 2
        assert db.execute("SELECT count(*) FROM response_attachments").fetchone()[0] == 4
        assert [a["name"] for a in queries.attachments(db, second)] == ["red.png", "blue.png"]
        assert queries.images(db, first) == {0: (red,)}
        third = db.execute("SELECT max(id) FROM responses").fetchone()[0]
        assert queries.images(db, third) == {0: (red,)}
        assert prune(db, keep=1) == 2  # the rows go, and blue with them: no row holds it now
        assert [r[0] for r in db.execute("SELECT id FROM attachments")] == [red.sha256]
    finally:
        db.close()


def test_a_log_of_schema_1_migrates_in_place(isolated):
    path = store.db_path()
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path, isolation_level=None)
    store.MIGRATIONS[0](db)
    db.execute("PRAGMA user_version = 1")
    old = {k: v for k, v in _row("c0", "before images", {}).items() if k != rows.ATTACHMENTS}
    rows.insert(db, old)
    db.close()
    db = store.connect(path)
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA == 2
        assert [r[0] for r in db.execute("SELECT prompt FROM responses")] == ["before images"]
        assert queries.attachments(db, 1) == []
        rows.insert(db, _row("c0", "after", {0: (media.from_bytes("red.png", RED),)}))
        assert db.execute("SELECT count(*) FROM attachments").fetchone()[0] == 1
    finally:
        db.close()


def test_attach_completes_paths(tmp_path):
    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    from llmcli.repl.loop import SlashCompleter

    (tmp_path / "red.png").write_bytes(RED)
    (tmp_path / "notes").mkdir()
    completer = SlashCompleter()
    got = [c.text for c in completer.get_completions(Document(f"/attach {tmp_path}/re"), CompleteEvent())]
    assert got == ["d.png"]
    names = [c.text for c in completer.get_completions(Document("/att"), CompleteEvent())]
    assert names == ["/attach"]


# -- the real path: SmolLM2-135M with the tiny projector ------------------------------------------


@pytest.fixture(scope="module")
def vision(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).parent))
    import projector

    try:
        mmproj = projector.path()
    except projector.Unavailable as e:
        pytest.skip(f"the test projector cannot be built here: {e}")
    from llmcli.hub.default_model import model_path

    try:
        model = model_path("smollm2-135m")
    except Exception as e:  # the bundled model is missing
        pytest.skip(f"SmolLM2-135M is not installed: {e}")
    folder = tmp_path_factory.mktemp("pictures")
    (folder / "red.png").write_bytes(RED)
    (folder / "blue.png").write_bytes(BLUE)
    return model, mmproj, folder


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


def llmcli(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    src = Path(__file__).parent.parent / "src"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMCLI_")}
    env.update(PYTHONPATH=str(src), LLMCLI_DATA_DIR=str(home / "data"), LLMCLI_CACHE_DIR=str(home / "cache"),
               LLMCLI_CONFIG=str(home / "config.toml"), NO_COLOR="1")  # fmt: skip
    return subprocess.run([sys.executable, "-m", "llmcli", *args], input=stdin, capture_output=True,
                          text=True, timeout=600, env=env)  # fmt: skip


SETTINGS = ("--temp", "0", "-n", "8", "-t", "1", "-c", "2048")


def chat(home: Path, vision, *args: str, stdin: str) -> subprocess.CompletedProcess:
    model, mmproj, _ = vision
    return llmcli(home, "chat", "-m", str(model), "--mmproj", str(mmproj), *SETTINGS, *args, stdin=stdin)


def logged(home: Path, sql: str) -> list[tuple]:
    queries.reader(home / "data" / "logs.db").close()  # what waits in the pending file moved in
    db = sqlite3.connect(home / "data" / "logs.db")
    try:
        return [tuple(r) for r in db.execute(sql)]
    finally:
        db.close()


def records(home: Path) -> list[dict]:
    return [json.loads(r[0]) for r in logged(home, "SELECT record FROM responses ORDER BY id")]


@pytest.mark.model
def test_attach_then_a_second_turn_about_the_same_image_encodes_nothing(vision, home):
    _, _, folder = vision
    stdin = f"/attach\n/attach {folder}/red.png\n/attach\nDescribe the image.\nSay it again.\n/context\n"
    result = chat(home, vision, stdin=stdin)
    assert result.returncode == 0, result.stderr
    assert "nothing attached" in result.stderr and "attached to the next message: " in result.stderr
    first, second = records(home)
    (a1,) = first["attachments"]
    assert a1["cached"] is False and a1["encode_ms"] > 0 and first["usage"]["image_tokens"] == 16
    (a2,) = second["attachments"]  # the same image, held by the KV cache: not encoded again
    assert a2["cached"] is True and a2["encode_ms"] == 0 and second["timings"]["image_ms"] == 0
    assert second["usage"]["image_tokens"] == 16 and second["usage"]["cached_tokens"] > 16
    # /context counts the image apart from the text, under its message
    assert "16 of them image tokens" in result.stderr
    rows = result.stderr.split("context: ", 1)[1].splitlines()
    assert [r.split() for r in rows if r.split()[:1] == ["image"]] == [
        ["image", "16", "tok", f"{folder}/red.png"]
    ]
    lines = [line for line in result.stderr.splitlines() if line.startswith("prompt ")]
    assert "image 16 tok (16 reused)" in lines[1] and "image " in lines[0] and "reused)" not in lines[0]
    # the log holds the image once, linked to both requests
    assert logged(home, "SELECT count(*) FROM attachments") == [(1,)]
    assert logged(home, "SELECT response_id, message FROM response_attachments ORDER BY 1") == [
        (1, 0),
        (2, 0),
    ]


@pytest.mark.model
def test_logs_show_rerun_and_continue_read_the_image_from_the_log(vision, home, tmp_path):
    model, mmproj, folder = vision
    picture = tmp_path / "gone.png"
    picture.write_bytes(BLUE)
    result = chat(home, vision, "-a", str(picture), "--system", "Be brief.", stdin="What colour is it?\n")
    assert result.returncode == 0, result.stderr
    picture.unlink()  # from here on only the log has it
    shown = llmcli(home, "logs", "show", "1")
    sha = media.from_bytes("x", BLUE).sha256
    assert (
        shown.returncode == 0 and f"gone.png  image/png  {len(BLUE)} B, 16 tok  sha256 {sha}" in shown.stdout
    )
    assert "## user [image: " in shown.stdout
    doc = json.loads(llmcli(home, "logs", "show", "1", "--json").stdout)
    assert [(a["sha256"], a["message"]) for a in doc["attachments"]] == [(sha, 1)]  # after the system prompt
    rerun = llmcli(home, "logs", "rerun", "1", "--mmproj", str(mmproj))
    assert rerun.returncode == 0, rerun.stderr
    assert "identical to #1" in rerun.stderr and rerun.stdout.strip() == records(home)[0]["text"].strip()
    # --continue: a new process rebuilds the prompt, the image re-attached from the log
    more = chat(home, vision, "--continue", stdin="And the shape?\n")
    assert more.returncode == 0, more.stderr
    last = records(home)[-1]
    assert last["usage"]["image_tokens"] == 16 and [a["sha256"] for a in last["attachments"]] == [sha]
    assert logged(home, "SELECT count(*) FROM attachments") == [(1,)]
    # generate --continue goes on from the same conversation, its image too
    again = llmcli(home, "generate", "-m", str(model), "--mmproj", str(mmproj), "--continue", "Why?",
                   *SETTINGS, "--json")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["usage"]["image_tokens"] == 16


@pytest.mark.model
def test_a_saved_session_keeps_its_image_once_and_resumes(vision, home):
    _, _, folder = vision
    first = chat(home, vision, "--session", "pics", "-a", str(folder / "red.png"), stdin="What is it?\n")
    assert first.returncode == 0, first.stderr
    stdin = f"/attach {folder}/red.png\nAnd this one?\n"  # the same image again, in another message
    second = chat(home, vision, "--resume", stdin=stdin)
    assert second.returncode == 0, second.stderr
    sessions = home / "data" / "sessions"
    saved = json.loads((sessions / "pics.json").read_text())
    refs = [a["sha256"] for m in saved["messages"] for a in m.get("attachments", [])]
    assert len(refs) == 2 and len(set(refs)) == 1
    assert [p.name for p in (sessions / "images").iterdir()] == [f"{refs[0]}.png"]
    assert "continuing session 'pics': 2 messages" in second.stderr
    turn = [line for line in second.stderr.splitlines() if line.startswith("prompt ")][0]
    assert "image " in turn and " · 32 tok (16 reused)" in turn  # the first from the warm state


@pytest.mark.model
def test_a_session_whose_image_is_gone_is_refused_and_left_untouched(vision, home):
    _, _, folder = vision
    made = chat(home, vision, "--session", "pics", "-a", str(folder / "red.png"), stdin="What is it?\n")
    assert made.returncode == 0, made.stderr
    sessions = home / "data" / "sessions"
    before = (sessions / "pics.json").read_bytes()
    for kept in (sessions / "images").iterdir():
        kept.unlink()
    other = chat(home, vision, "--session", "other", stdin="/load pics\nhello\n")
    assert other.returncode == 0, other.stderr
    assert "is gone" in other.stderr and "left untouched" in other.stderr
    assert (sessions / "pics.json").read_bytes() == before  # nor overwritten by the chat's autosave
    assert json.loads((sessions / "other.json").read_text())["messages"][0]["content"] == "hello"
    resumed = chat(home, vision, "--session", "pics", stdin="hi\n")
    assert resumed.returncode != 0 and resumed.stdout == ""
    assert len(resumed.stderr.strip().splitlines()) <= 2 and "is gone" in resumed.stderr
    assert (sessions / "pics.json").read_bytes() == before


@pytest.mark.model
def test_attach_refuses_in_one_line_and_the_chat_goes_on(vision, home, tmp_path):
    model, _, folder = vision
    (tmp_path / "model.gguf").symlink_to(model)  # no projector beside it
    stdin = f"/attach {tmp_path}/absent.png\n/attach {folder}/red.png\n/detach\nhello\n"
    result = llmcli(home, "chat", "-m", str(tmp_path / "model.gguf"), *SETTINGS, stdin=stdin)
    assert result.returncode == 0, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 2 and "cannot read image" in errors[0] and "--mmproj" in errors[1]
    assert "nothing attached" in result.stderr and result.stdout.strip()  # the message was answered
    refused = llmcli(
        home, "chat", "-m", str(tmp_path / "model.gguf"), "-a", str(folder / "red.png"), stdin="hi\n"
    )
    assert refused.returncode == 2 and "--mmproj" in refused.stderr and refused.stdout == ""


@pytest.mark.model
def test_a_conversation_with_images_past_the_window_is_refused_and_its_images_stay_attached(vision, home):
    _, _, folder = vision
    long = "word " * 200
    stdin = f"/attach {folder}/red.png\n{long}\n/attach\n/detach\nhi\n"
    result = chat(home, vision, "-c", "256", "--no-log", stdin=stdin)
    assert result.returncode == 0, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "1 image(s)" in errors[0] and "context holds 256" in errors[0]
    assert "still attached to the next message" in result.stderr
    assert "attached to the next message: " in result.stderr and "detached 1 image(s)" in result.stderr
    turns = [line for line in result.stderr.splitlines() if line.startswith("prompt ")]
    assert len(turns) == 1 and "image" not in turns[0] and result.stdout.strip()  # "hi", answered alone
