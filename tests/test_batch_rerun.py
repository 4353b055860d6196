"""`llmcli batch -o FILE` rerun on the fake engine: each line records what identifies its work (the
prompt's hash, the model's file, the settings that change the text); a rerun skips an id only
where they match and stops before anything is generated where they do not; an -o that is an input
or not batch output is refused; lines of an older llmcli resume by id with a note; Ctrl-C (a real
SIGINT to a subprocess) says what is saved and the command that resumes. And the smaller findings
of issue 63 about batch: bad lines named, blank lines said, ids keep their JSON type, the summary
of a run whose items all failed."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from batchtools import SRC
from batchtools import lines as _lines
from helpers import run

TESTS = Path(__file__).resolve().parent


def _engines_asked(fake) -> int:
    """Requests the fake engines of this test were sent (0: nothing was generated)."""
    return sum(len(e.history) for e in fake.made)


def test_each_line_records_its_prompt_model_and_settings(fake, tmp_path):
    (tmp_path / "p.txt").write_text("alpha\nbeta\n")
    result = run("batch", str(tmp_path / "p.txt"), "--temperature", "0.5", "--system", "Be brief.")
    assert result.exit_code == 0, result.stderr
    first, second = _lines(result.stdout)
    work = first["work"]
    assert len(work["prompt"]) == 64 and work["prompt"] != second["work"]["prompt"]  # the prompt's hash
    model = Path(os.environ["LLMCLI_MODEL"])
    assert (
        work["model"]["file"].startswith(f"gguf:{model.stat().st_size}:") and work["model"]["served"] is None
    )
    settings = work["settings"]
    assert (
        settings["temperature"] == 0.5 and settings["seed"] is None
    )  # the seed as asked: each draws its own
    assert settings["system"] and settings["template"] == "chat" and settings["json_schema"] is None
    assert first["record"]["params"]["seed"] is not None  # the seed drawn is in the record


def test_a_rerun_skips_only_the_same_work_and_stops_before_generating_on_another(fake, tmp_path):
    src, out = tmp_path / "p.txt", tmp_path / "out.jsonl"
    src.write_text("".join(f"prompt {i}\n" for i in range(1, 4)))
    assert run("batch", str(src), "-o", str(out), "--seed", "1").exit_code == 0
    kept = out.read_bytes()
    same = run("batch", str(src), "-o", str(out), "--seed", "1")
    assert same.exit_code == 0 and "all 3 items are already in" in same.stderr
    src.write_text("a new first line\n" + "".join(f"prompt {i}\n" for i in range(1, 4)))  # ids 1-3 move
    before = _engines_asked(fake)
    moved = run("batch", str(src), "-o", str(out), "--seed", "1")
    assert moved.exit_code == 2 and moved.stdout == ""
    errors = [x for x in moved.stderr.splitlines() if x.startswith("llmcli:")]
    assert len(errors) == 1 and 'id "1"' in errors[0] and "another prompt" in errors[0]
    assert "--overwrite" in errors[0]
    assert _engines_asked(fake) == before and out.read_bytes() == kept  # nothing generated, nothing written
    src.write_text("".join(f"prompt {i}\n" for i in range(1, 5)))  # the same three, and a fourth
    hotter = run("batch", str(src), "-o", str(out), "--seed", "1", "--temperature", "0.1")
    assert hotter.exit_code == 2 and "other settings (temperature" in hotter.stderr
    assert out.read_bytes() == kept
    resumed = run("batch", str(src), "-o", str(out), "--seed", "1")
    assert resumed.exit_code == 0 and "3 already done" in resumed.stderr
    assert [d["id"] for d in _lines(out.read_text())] == ["1", "2", "3", "4"]
    again = run("batch", str(src), "-o", str(out), "--seed", "1", "--temperature", "0.1", "--overwrite")
    assert again.exit_code == 0 and len(_lines(out.read_text())) == 4


def test_another_model_file_is_told_apart_and_a_copy_is_not(fake, tmp_path, monkeypatch):
    src, out = tmp_path / "p.txt", tmp_path / "out.jsonl"
    src.write_text("one\ntwo\n")
    model = Path(os.environ["LLMCLI_MODEL"])
    assert run("batch", str(src), "-o", str(out), "--seed", "3").exit_code == 0
    copy = tmp_path / "elsewhere" / "copy.gguf"
    copy.parent.mkdir()
    copy.write_bytes(model.read_bytes())
    src.write_text("one\ntwo\nthree\n")
    same = run("batch", str(src), "-o", str(out), "--seed", "3", "-m", str(copy))
    assert same.exit_code == 0 and "2 already done" in same.stderr  # the same weights under another name
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF and other weights")
    src.write_text("one\ntwo\nthree\nfour\n")
    refused = run("batch", str(src), "-o", str(out), "--seed", "3", "-m", str(other))
    assert refused.exit_code == 2 and 'id "1"' in refused.stderr and "another model" in refused.stderr
    assert len(_lines(out.read_text())) == 3


def test_an_output_that_is_an_input_or_not_batch_output_is_refused(fake, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"id": 1, "prompt": "hi"}) + "\n")
    itself = run("batch", str(src), "-o", str(src))
    assert itself.exit_code == 2 and "is an input file" in itself.stderr
    assert run("batch", str(src), "-o", str(src), "--overwrite").exit_code == 2  # never over the input
    assert src.read_text() == json.dumps({"id": 1, "prompt": "hi"}) + "\n"
    (tmp_path / "a.txt").write_text("about a")
    each = run("batch", "--each", str(tmp_path / "a.txt"), "-o", str(tmp_path / "a.txt"))
    assert each.exit_code == 2 and "is an input file" in each.stderr
    unrelated = tmp_path / "data.jsonl"
    unrelated.write_text('{"name": "a row of someone\'s data"}\n')
    refused = run("batch", str(src), "-o", str(unrelated))
    assert refused.exit_code == 2 and "line 1 is not a line of `llmcli batch`'s output" in refused.stderr
    assert len([x for x in refused.stderr.splitlines() if x.strip()]) == 1
    assert unrelated.read_text() == '{"name": "a row of someone\'s data"}\n'  # not appended to
    notes = tmp_path / "notes.txt"
    notes.write_text("some notes\n")
    assert run("batch", str(src), "-o", str(notes)).exit_code == 2 and notes.read_text() == "some notes\n"


def test_lines_of_an_older_llmcli_resume_by_id_with_a_note(fake, tmp_path):
    src, out = tmp_path / "p.txt", tmp_path / "out.jsonl"
    src.write_text("a\nb\nc\n")
    assert run("batch", str(src), "-o", str(out)).exit_code == 0
    old = [json.loads(x) for x in out.read_text().splitlines()[:2]]
    out.write_text("".join(json.dumps({"schema_version": 1, "id": d["id"], "record": d["record"]}) + "\n"
                           for d in old))  # fmt: skip
    result = run("batch", str(src), "-o", str(out))
    assert result.exit_code == 0 and "2 already done" in result.stderr
    assert "2 line(s) of" in result.stderr and "resumed by id, unchecked" in result.stderr
    docs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [d["id"] for d in docs] == ["1", "2", "3"]
    assert [d["record"] for d in docs[:2]] == [d["record"] for d in old]  # the old lines kept as they were
    assert _lines(out.read_text().splitlines()[2])[0]["work"]  # the line answered now records its work


def test_json_ids_keep_their_type_and_resume(fake, tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps({"id": key, "prompt": f"p{key}"}) + "\n" for key in (7, "x", 8)))
    first = run("batch", str(src), "-o", str(out))
    assert first.exit_code == 0, first.stderr
    assert [d["id"] for d in _lines(out.read_text())] == [7, "x", 8]
    src.write_text(src.read_text() + json.dumps({"id": 9, "prompt": "p9"}) + "\n")
    again = run("batch", str(src), "-o", str(out))
    assert again.exit_code == 0 and "3 already done" in again.stderr
    assert [d["id"] for d in _lines(out.read_text())] == [7, "x", 8, 9]


def test_bad_lines_are_named_and_blank_lines_counted(fake, tmp_path):
    src = tmp_path / "in.jsonl"
    good = json.dumps({"id": "ok", "prompt": "fine"})
    src.write_text(good + "\n\n" + "".join("not json\n" for _ in range(7)) + "\n")
    result = run("batch", str(src), "--skip-bad")
    assert result.exit_code == 0, result.stderr
    assert "7 bad line(s) skipped: line 3, line 4, line 5, line 6, line 7 and 2 more" in result.stderr
    assert "2 blank line(s) of" in result.stderr
    (tmp_path / "blank.txt").write_text("\n  \n\n")
    blank = run("batch", str(tmp_path / "blank.txt"))
    assert blank.exit_code == 2 and "its 3 line(s) are all blank" in blank.stderr and blank.stdout == ""
    (tmp_path / "empty.txt").write_text("")
    empty = run("batch", str(tmp_path / "empty.txt"))
    assert empty.exit_code == 2 and "it is empty" in empty.stderr


def test_the_summary_of_failed_items_reads_as_items_that_failed(fake, tmp_path):
    src = tmp_path / "p.txt"
    src.write_text("x" * 3000 + "\n" + "y" * 3000 + "\n")  # longer than the fake engine's context
    result = run("batch", str(src))
    assert result.exit_code == 1
    assert "batch: 2 items: 0 done, 2 failed" in result.stderr
    assert all(d["record"]["finish_reason"] == "error" for d in _lines(result.stdout))


# A child that answers on the fake engine, each answer taking a while, so a run can be interrupted
CHILD = """
import sys, time
sys.path.insert(0, sys.argv.pop(1))
from helpers import use_engine
from llmcli.engine.fake import FakeEngine
from llmcli.cli.app import main

class Slow(FakeEngine):
    def respond(self, request):
        time.sleep(0.4)
        yield from super().respond(request)

use_engine(Slow.factory())
sys.argv[0] = "llmcli"
main()
"""


def _default_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a child of a background job may inherit it ignored


def test_ctrl_c_says_what_is_saved_and_the_command_that_resumes(tmp_path):
    src, out = tmp_path / "p.txt", tmp_path / "out.jsonl"
    src.write_text("".join(f"prompt {i}\n" for i in range(40)))
    model = tmp_path / "fake.gguf"
    model.write_bytes(b"GGUF")
    env = {**os.environ, "PYTHONPATH": str(SRC), "LLMCLI_MODEL": str(model), "LLMCLI_LOG": "0"}
    args = ["batch", str(src), "-o", str(out), "-np", "2", "--seed", "5"]
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(TESTS), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_default_signals)  # fmt: skip
    deadline = time.monotonic() + 300
    while not out.exists() or out.read_text().count("\n") < 3:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no lines written"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr
    saved = len(_lines(out.read_text()))
    assert 3 <= saved < 40 and stdout == ""
    said = [x for x in stderr.splitlines() if "resume with:" in x]
    assert len(said) == 1 and f"{saved} of 40 item(s) saved in {out}" in said[0], stderr
    command = shlex.split(said[0].split("resume with: ", 1)[1])
    assert command[0] == "llmcli" and command[1:] == args
    done = subprocess.run([sys.executable, "-c", CHILD, str(TESTS), *command[1:]], env=env, text=True,
                          capture_output=True, timeout=300)  # fmt: skip
    assert done.returncode == 0 and f"{saved} already done" in done.stderr, done.stderr
    ids = [d["id"] for d in _lines(out.read_text())]
    assert sorted(ids, key=int) == [str(i) for i in range(1, 41)]  # every item once
