"""Bad input to `generate`: one clear line on stderr and the documented exit code."""

from __future__ import annotations

import pytest
from helpers import run, use_engine


def one_line_error(result, code: int, *fragments: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("llmcli: ")
    for fragment in fragments:
        assert fragment in lines[0]
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--temperature", "-1"], "--temperature"),
        (["--top-p", "1.5"], "--top-p"),
        (["--max-tokens", "-1"], "--max-tokens"),
        (["--min-p", "2"], "--min-p"),
        (["--repeat-penalty", "0"], "--repeat-penalty"),
    ],
)
def test_out_of_range_sampling(fake, flags, fragment):
    one_line_error(run("generate", "hi", *flags), 2, fragment)


def test_empty_prompt(fake):
    one_line_error(run("generate", "   "), 2, "empty")
    one_line_error(run("generate", input=""), 2, "empty")


def test_non_utf8_stdin(fake):
    one_line_error(run("generate", "x", input=b"caf\xe9 \xff\xfe"), 2, "UTF-8")


def test_unreadable_grammar_file(fake, tmp_path):
    one_line_error(run("generate", "x", "--grammar-file", str(tmp_path / "missing.gbnf")), 2, "grammar")


def test_schema_not_json(fake):
    one_line_error(run("generate", "x", "--json-schema", "{not json"), 2, "not valid JSON")


def test_prompt_longer_than_context(monkeypatch, tmp_path):
    from llmcli.engine.fake import FakeEngine

    use_engine(FakeEngine.factory(n_ctx=64))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    result = run("generate", "x" * 200, "-m", str(model), "--raw")
    one_line_error(result, 4, "201 tokens", "64")


def test_model_path_missing(tmp_path):
    one_line_error(run("generate", "x", "-m", str(tmp_path / "nope.gguf")), 3, "nope.gguf")


def test_model_is_directory(tmp_path):
    one_line_error(run("generate", "x", "-m", str(tmp_path)), 2, "directory")


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["generate", "hi", "-t", "abc"], ["'--threads'", "valid integer", "(see 'llmcli generate -h')"]),
        (["generate", "hi", "--bogus"], ["no such option: --bogus", "(see 'llmcli generate -h')"]),
        (["generate", "hi", "--temp"], ["'--temp' requires an argument", "(see 'llmcli generate -h')"]),
        (["nosuch"], ["no such command 'nosuch'", "(see 'llmcli -h')"]),
        (["--bogus", "generate"], ["no such option: --bogus", "(see 'llmcli -h')"]),
        (["models", "rm"], ["missing argument", "(see 'llmcli models rm -h')"]),
        (["kv", "clear", "--nope"], ["no such option: --nope", "(see 'llmcli kv clear -h')"]),
        # words after the prompt: the prompt is one argument (a newcomer's `generate Tell me a joke`)
        (
            ["generate", "Tell", "me", "a", "joke"],
            ["(me a joke)", 'quote it (llmcli generate "Tell me a joke")'],
        ),
        (["generate", "say", '"hi"'], ["""quote it (llmcli generate 'say "hi"')"""]),
        # a value after a flag that takes none
        (["chat", "--resume", "notes"], ["(notes); --resume takes no value (--session NAME continues"]),
        (
            ["generate", "hi", "--stats", "more"],
            ["(more); --stats takes no value", "(see 'llmcli generate -h')"],
        ),
        (["chat", "notes"], ["(notes) (see 'llmcli chat -h')"]),  # no guess where none fits
    ],
)
def test_click_usage_errors_are_one_line(fake, args, fragments):
    """Click's own parse errors (a value of the wrong type, an unknown option or command, a missing
    argument) read like every other usage error: one line, exit 2, not a Usage/Try/Error box."""
    result = run(*args)
    one_line_error(result, 2, "llmcli: usage error: ", *fragments)
    assert "Usage:" not in result.stderr and "Try '" not in result.stderr


def test_no_arguments_still_prints_the_help(fake):
    result = run()
    assert result.exit_code == 2
    assert "Usage: llmcli" in result.stderr and "Commands:" in result.stderr
