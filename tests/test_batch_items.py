"""`llmcli batch` items on the fake engine (which echoes the prompt's last line): `--each` files and
`--template`, per-item and command stop strings, grammars and JSON schemas as the input gives them,
and the bad input they can hold (one line, exit 2, nothing generated)."""

from __future__ import annotations

import json

from documents import check
from helpers import run


def _lines(text: str) -> list[dict]:
    return [check(json.loads(line), "batch/line") for line in text.splitlines() if line.strip()]


def test_each_file_is_one_item_its_id_its_path_in_the_template(fake, tmp_path):
    for name, text in (("b.txt", "beta"), ("a.txt", "alpha"), ("c.md", "gamma")):
        (tmp_path / name).write_text(text + "\n")
    result = run("batch", "--each", str(tmp_path / "*.txt"), str(tmp_path / "c.md"),
                 "--template", "File {name}: {content}")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    lines = _lines(result.stdout)
    assert [d["id"] for d in lines] == [str(tmp_path / n) for n in ("a.txt", "b.txt", "c.md")]
    assert [d["record"]["text"] for d in lines] == ["echo: File a.txt: alpha", "echo: File b.txt: beta",
                                                    "echo: File c.md: gamma"]  # fmt: skip


def test_each_resumes_by_path(fake, tmp_path):
    files = [tmp_path / f"{n}.txt" for n in "xyz"]
    for f in files[:2]:
        f.write_text(f"about {f.stem}")
    out = tmp_path / "out.jsonl"
    assert run("batch", "--each", *map(str, files[:2]), "-o", str(out)).exit_code == 0
    files[2].write_text("about z")
    again = run("batch", "--each", *map(str, files), "-o", str(out))
    assert again.exit_code == 0 and "2 already done" in again.stderr
    assert [d["id"] for d in _lines(out.read_text())] == [str(f) for f in files]


def test_each_bad_files_are_refused_in_one_line(fake, tmp_path):
    (tmp_path / "ok.txt").write_text("fine")
    (tmp_path / "empty.txt").write_text("  \n")
    missing = run("batch", "--each", str(tmp_path / "ok.txt"), str(tmp_path / "gone.txt"))
    assert missing.exit_code == 2 and "no file" in missing.stderr and missing.stdout == ""
    nothing = run("batch", "--each", str(tmp_path / "*.csv"))
    assert nothing.exit_code == 2 and "matches no file" in nothing.stderr
    empty = run("batch", "--each", str(tmp_path / "ok.txt"), str(tmp_path / "empty.txt"))
    assert empty.exit_code == 2 and "empty.txt: is empty" in empty.stderr and empty.stdout == ""
    skipped = run("batch", "--each", str(tmp_path / "ok.txt"), str(tmp_path / "empty.txt"), "--skip-bad")
    assert skipped.exit_code == 0 and [d["id"] for d in _lines(skipped.stdout)] == [str(tmp_path / "ok.txt")]
    none_left = run("batch", "--each", str(tmp_path / "empty.txt"), "--skip-bad")
    assert none_left.exit_code == 2 and "none is left" in none_left.stderr and none_left.stdout == ""
    two = run("batch", str(tmp_path / "ok.txt"), str(tmp_path / "empty.txt"))
    assert two.exit_code == 2 and "--each" in two.stderr


def test_template_applies_to_lines_and_json_items(fake, tmp_path):
    (tmp_path / "p.txt").write_text("one\ntwo\n")
    lines = _lines(run("batch", str(tmp_path / "p.txt"), "--template", "Q: {content}?").stdout)
    assert [d["record"]["text"] for d in lines] == ["echo: Q: one?", "echo: Q: two?"]
    src = tmp_path / "in.jsonl"
    items = [{"id": "p", "prompt": "three"}, {"id": "m", "messages": [{"role": "user", "content": "four"}]}]
    src.write_text("".join(json.dumps(d) + "\n" for d in items))
    lines = _lines(run("batch", str(src), "--template", "{{{content}}}").stdout)
    assert [d["record"]["text"] for d in lines] == ["echo: {three}", "echo: {four}"]


def test_a_bad_template_is_one_usage_line(fake, tmp_path):
    (tmp_path / "p.txt").write_text("one\n")
    for template, said in (("Summarise this", "no placeholder"), ("Say {contents}", "unknown placeholder"),
                           ("{0}", "unknown placeholder"), ("In {path}: {content}", "--each"),
                           ("{content", "not a template")):  # fmt: skip
        result = run("batch", str(tmp_path / "p.txt"), "--template", template)
        assert result.exit_code == 2 and said in result.stderr and result.stdout == "", template
        assert len([x for x in result.stderr.splitlines() if x.strip()]) <= 2  # the error, and a hint at most


def test_stop_strings_from_the_command_and_per_item(fake, tmp_path):
    src = tmp_path / "in.jsonl"
    text = "alpha beta gamma"
    items = [{"id": "cmd", "prompt": text}, {"id": "own", "prompt": text, "stop": "gamma"},
             {"id": "list", "prompt": text, "stop": ["nope", "alpha"]}]  # fmt: skip
    src.write_text("".join(json.dumps(d) + "\n" for d in items))
    lines = {d["id"]: d["record"] for d in _lines(run("batch", str(src)).stdout)}
    assert lines["cmd"]["text"] == "echo: alpha beta gamma" and lines["cmd"]["params"]["stop"] == []
    assert lines["own"]["text"] == "echo: alpha beta " and lines["own"]["params"]["stop"] == ["gamma"]
    assert lines["list"]["text"] == "echo: " and lines["list"]["finish_reason"] == "stop"
    # a flag typed on the command line wins over an item's own (the item's sit below the flags)
    lines = {d["id"]: d["record"] for d in _lines(run("batch", str(src), "--stop", " beta").stdout)}
    for key in ("cmd", "own", "list"):
        assert lines[key]["text"] == "echo: alpha" and lines[key]["finish_reason"] == "stop", key
        assert lines[key]["params"]["stop"] == [" beta"], key


def test_per_item_json_schema_and_grammar_are_the_records_constraint(fake, tmp_path):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    src = tmp_path / "in.jsonl"
    as_schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    body = {"messages": [{"role": "user", "content": "e"}], "response_format": as_schema}
    src.write_text("\n".join(json.dumps(d) for d in [
        {"id": "s", "prompt": "a", "response_format": as_schema},
        {"id": "o", "prompt": "b", "response_format": {"type": "json_object"}},
        {"id": "g", "prompt": "c", "grammar": 'root ::= "yes" | "no"'},
        {"id": "t", "prompt": "d", "response_format": {"type": "text"}},
    ]) + "\n")  # fmt: skip
    lines = {d["id"]: d["record"] for d in _lines(run("batch", str(src)).stdout)}
    # an OpenAI batch line has a file of its own (one format a file; its output is OpenAI's)
    (tmp_path / "openai.jsonl").write_text(json.dumps({"custom_id": "openai", "body": body}) + "\n")
    (line,) = [json.loads(x) for x in run("batch", str(tmp_path / "openai.jsonl")).stdout.splitlines()]
    lines["openai"] = check(line, "batch/openai_line")["llmcli"]["record"]
    kinds = {k: (r["constraint"] or {}).get("kind") for k, r in lines.items()}
    assert kinds == {
        "s": "json_schema",
        "o": "json_object",  # recorded as asked, not as a schema (issue 63)
        "g": "grammar",
        "t": None,
        "openai": "json_schema",
    }
    assert lines["s"]["params"]["json_schema"] is True and lines["g"]["params"]["grammar"] is True
    assert lines["t"]["params"]["grammar"] is False
    with_flag = _lines(run("batch", str(tmp_path / "in.jsonl"), "--json-schema", json.dumps(schema)).stdout)
    assert {d["id"]: d["record"]["constraint"]["kind"] for d in with_flag}["t"] == "json_schema"


def test_bad_constraints_are_bad_lines(fake, tmp_path):
    unconvertible = {"type": "json_schema", "json_schema": {"schema": {"type": "no"}}}
    cases = [
        ({"prompt": "a", "stop": ""}, "`stop`"),
        ({"prompt": "a", "stop": [1]}, "`stop`"),
        ({"prompt": "a", "response_format": {"type": "xml"}}, "response_format"),
        ({"prompt": "a", "response_format": {"type": "json_schema"}}, "schema"),
        ({"prompt": "a", "response_format": unconvertible}, "could not be converted"),
        ({"prompt": "a", "grammar": "root ::= x", "response_format": {"type": "json_object"}}, "not both"),
    ]  # fmt: skip
    for doc, said in cases:
        src = tmp_path / "in.jsonl"
        src.write_text(json.dumps({"id": 1, "prompt": "fine"}) + "\n" + json.dumps(doc) + "\n")
        result = run("batch", str(src))
        assert result.exit_code == 2 and "line 2" in result.stderr and said in result.stderr, (
            doc,
            result.stderr,
        )
        assert result.stdout == ""
    both = run("batch", str(src), "--grammar-file", str(src), "--json-schema", "{}")
    assert both.exit_code == 2 and "not both" in both.stderr
