"""Shell completion round trips: the committed scripts in completions/, run by real shells.

bash is always there; the zsh and fish tests run where those shells are installed (Debian:
`apt-get install zsh fish`) and are skipped elsewhere. `llmcli` on the shells' PATH is a small
wrapper around this checkout's `python -m llmcli`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMPLETIONS = ROOT / "completions"
HEAVY = ("llama_cpp", "numpy", "huggingface_hub", "gguf", "jinja2", "prompt_toolkit")


@pytest.fixture
def shell_env(isolated, tmp_path):
    """PATH with an `llmcli` wrapper, two aliases in the store, and a working directory with files."""
    from llmcli.hub import aliases

    model = tmp_path / "work" / "tiny.gguf"
    model.parent.mkdir()
    model.write_bytes(b"GGUF")
    (tmp_path / "work" / "json.gbnf").write_text('root ::= "{}"\n')
    (tmp_path / "work" / "prompts").mkdir()
    aliases.set_alias("tiny", str(model))
    aliases.set_alias("qwen-small", "bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "llmcli"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m llmcli "$@"\n')
    wrapper.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env["HOME"] = str(isolated)
    return env, tmp_path / "work"


# -- the helper the scripts call ------------------------------------------------------------------


def helper(env, *args: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-m", "llmcli", "__complete", "--", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and result.stderr == ""
    return result.stdout.splitlines()


def test_helper_values(shell_env):
    env, _ = shell_env
    from llmcli.hub import store

    assert helper(env, "generate", "model", "") == store.completion_names()
    assert {"qwen-small", "tiny"} <= set(store.completion_names())
    from llmcli.hub import default_model

    bundled = {name for name in default_model.BUNDLED if default_model.installed(name)}
    assert bundled and bundled <= set(store.completion_names())  # -m smollm2-135m works, so completes
    assert helper(env, "chat", "model", "t") == ["tiny"]
    assert helper(env, "pull", "ref", "org/repo:q8") == ["org/repo:Q8_0"]
    assert helper(env, "pull", "ref", "org/repo:Q4_K_") == [
        "org/repo:Q4_K_M",
        "org/repo:Q4_K_S",
        "org/repo:Q4_K_L",
    ]
    assert helper(env, "config set", "key", "top") == ["top_k", "top_p"]


def test_helper_is_silent_on_nonsense(shell_env):
    env, _ = shell_env
    assert helper(env, "no such", "model", "") == []
    assert helper(env, "generate", "nope", "") == []


def test_fast_path_matches_the_command(shell_env, capsys, monkeypatch):
    from llmcli.cli.app import fast_complete

    env, _ = shell_env
    assert fast_complete(["--", "generate", "model", ""]) == 0
    assert capsys.readouterr().out.splitlines() == helper(env, "generate", "model", "")


def test_completing_a_model_name_loads_nothing_heavy(shell_env):
    env, _ = shell_env
    code = (
        "import sys\n"
        "sys.argv = ['llmcli', '__complete', '--', 'generate', 'model', '']\n"
        "from llmcli.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print('HEAVY', sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert {"qwen-small", "tiny"} <= set(lines[:-1])
    assert lines[-1] == "HEAVY []"


# -- bash ------------------------------------------------------------------------------------------


def bash_words(line: str) -> list[str]:
    """COMP_WORDS as bash builds them: split at blanks, and at ':' and '=' which stay words of their own."""
    words, word = [], ""
    for ch in line:
        if ch == " ":
            if word:
                words.append(word)
            word = ""
        elif ch in ":=":
            if word:
                words.append(word)
            words.append(ch)
            word = ""
        else:
            word += ch
    if word or line.endswith(" "):
        words.append(word)
    return words


def bash_complete(env, cwd, line: str) -> list[str]:
    words = bash_words(line)
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    script = (
        f"source '{COMPLETIONS / 'llmcli.bash'}'\n"
        f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n"
        f"COMP_LINE='{line}'; COMP_POINT={len(line)}\n"
        '_llmcli llmcli "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"\n'
        "printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    result = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return [line for line in result.stdout.splitlines() if line]


def command_names() -> list[str]:
    import typer

    from llmcli.cli.app import app

    return [name for name, cmd in typer.main.get_command(app).commands.items() if not cmd.hidden]


BASH_CASES = [
    ("llmcli gen", ["generate"]),
    ("llmcli --debug -q gen", ["generate"]),
    ("llmcli models ", ["list", "show", "rm", "alias", "path", "verify"]),
    ("llmcli config s", ["show", "set"]),
    ("llmcli generate --max", ["--max-tokens"]),
    ("llmcli generate -n", ["-n", "-nfa", "-ngl", "-ngld"]),
    ("llmcli generate -m q", ["qwen-small"]),
    ("llmcli generate -m t", ["tiny"]),
    ("llmcli chat --model=q", ["qwen-small"]),
    ("llmcli generate -m tiny --temperature 0.5 --top", ["--top-k", "--top-p"]),
    ("llmcli pull org/repo:Q8", ["Q8_0"]),  # bash replaces only what follows the ':'
    ("llmcli pull org/repo:iq4", ["IQ4_XS", "IQ4_NL"]),
    ("llmcli models rm tiny q", ["qwen-small"]),
    ("llmcli config set to", ["tool_rounds", "tool_timeout", "top_k", "top_p"]),
    ("llmcli chat --on-overflow ", ["drop-oldest", "error"]),
    ("llmcli generate --temperature ", []),  # a number: nothing to offer
    ("llmcli generate hello ", []),  # the prompt is free text
    ("llmcli generate --grammar-file js", ["json.gbnf"]),
    ("llmcli generate -f ", ["json.gbnf", "prompts", "tiny.gguf"]),
    ("llmcli generate -- -", []),
]


@pytest.mark.parametrize(("line", "expected"), BASH_CASES)
def test_bash(shell_env, line, expected):
    env, cwd = shell_env
    assert sorted(bash_complete(env, cwd, line)) == sorted(expected)


def test_bash_root_lists_every_command(shell_env):
    env, cwd = shell_env
    assert sorted(bash_complete(env, cwd, "llmcli ")) == sorted(command_names())
    assert "__complete" not in bash_complete(env, cwd, "llmcli _")


def test_bash_bench_output_formats(shell_env):
    if "bench" not in command_names():
        pytest.skip("no bench command in this build")
    from llmcli.render.bench import FORMATS

    env, cwd = shell_env
    assert sorted(bash_complete(env, cwd, "llmcli bench -o ")) == sorted(FORMATS)


def test_bash_interactive_tab(shell_env):
    """A real interactive bash: Tab edits the command line."""
    import pexpect
    env, cwd = shell_env
    env = dict(env, PS1="$ ", TERM="dumb", INPUTRC="/dev/null")
    child = pexpect.spawn(
        "bash",
        ["--norc", "--noprofile", "-i"],
        env=env,
        cwd=str(cwd),
        encoding="utf-8",
        timeout=60,
        dimensions=(24, 200),
    )
    try:
        child.sendline(f"source '{COMPLETIONS / 'llmcli.bash'}'; echo READY")
        child.expect("READY\r\n")
        child.send("llmcli gene\t-m ti\t")
        child.send("\x01echo LINE: \r")  # Ctrl-A: run `echo` on the completed line to see it
        child.expect_exact("LINE: llmcli generate -m tiny\r\n")
        child.send("llmcli pull bartowski/X-GGUF:q8\t")
        child.send("\x01echo LINE: \r")
        child.expect_exact("LINE: llmcli pull bartowski/X-GGUF:Q8_0\r\n")
    finally:
        child.close(force=True)


# -- zsh and fish ------------------------------------------------------------------------------------

ZSH_CAPTURE = r"""
fpath=(COMPLETIONS_DIR $fpath)
autoload -Uz compinit && compinit -u -D
zstyle ':completion:*' list-grouped false
zstyle ':completion:*' insert-tab false
zmodload zsh/zutil
bindkey '^I' complete-word
null-line() { echo -E - $'\0' }
compprefuncs=( null-line )
comppostfuncs=( null-line exit )
# Print each candidate instead of inserting it (after Valodim's zsh-capture-completion).
compadd() {
  if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then
    builtin compadd "$@"
    return $?
  fi
  typeset -a __hits
  builtin compadd -A __hits "$@"
  local h
  for h in $__hits; do echo -E - "$IPREFIX$h"; done
}
"""


def zsh_complete(env, cwd, line: str) -> list[str]:
    import pexpect
    rc = cwd.parent / "capture.zsh"
    rc.write_text(ZSH_CAPTURE.replace("COMPLETIONS_DIR", str(COMPLETIONS)))
    child = pexpect.spawn(
        "zsh",
        ["-f", "-i"],
        env=dict(env, PS1="> ", TERM="dumb"),
        cwd=str(cwd),
        encoding="utf-8",
        timeout=60,
        dimensions=(24, 200),
    )
    try:
        child.sendline(f"source {rc}")
        child.send(line + "\t")
        child.expect("\0")
        child.expect("\0")
        out = child.before
    finally:
        child.close(force=True)
    return [item.strip() for item in out.replace("\r", "").splitlines() if item.strip()]


ZSH_FISH_CASES = [
    ("llmcli gen", ["generate"]),
    ("llmcli models ", ["list", "show", "rm", "alias", "path", "verify"]),
    ("llmcli generate --max", ["--max-tokens"]),
    ("llmcli generate -m q", ["qwen-small"]),
    ("llmcli chat --on-overflow ", ["drop-oldest", "error"]),
    ("llmcli pull org/repo:Q8", ["org/repo:Q8_0"]),
    ("llmcli models rm tiny q", ["qwen-small"]),
    ("llmcli config set to", ["tool_rounds", "tool_timeout", "top_k", "top_p"]),
    ("llmcli generate --grammar-file js", ["json.gbnf"]),
]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (Debian: apt-get install zsh)")
@pytest.mark.parametrize(
    ("line", "expected"), ZSH_FISH_CASES + [("llmcli generate --model=t", ["--model=tiny"])]
)
def test_zsh(shell_env, line, expected):
    env, cwd = shell_env
    assert sorted(zsh_complete(env, cwd, line)) == sorted(expected)


def fish_complete(env, cwd, line: str) -> list[str]:
    script = f"source {COMPLETIONS / 'llmcli.fish'}; complete -C {line!r}"
    result = subprocess.run(
        ["fish", "--no-config", "-c", script], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return [entry.split("\t")[0] for entry in result.stdout.splitlines()]


@pytest.mark.skipif(
    shutil.which("fish") is None, reason="fish is not installed (Debian: apt-get install fish)"
)
@pytest.mark.parametrize(
    ("line", "expected"), ZSH_FISH_CASES + [("llmcli generate --model=t", ["--model=tiny"])]
)
def test_fish(shell_env, line, expected):
    env, cwd = shell_env
    assert sorted(fish_complete(env, cwd, line)) == sorted(expected)


@pytest.mark.skipif(
    shutil.which("fish") is None, reason="fish is not installed (Debian: apt-get install fish)"
)
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("llmcli generate -ng", ["-ngl", "-ngld"]),  # -n takes a value, and still does not hide -ngl
        ("llmcli generate -nf", ["-nfa"]),
        ("llmcli generate -f", ["-f", "-fa"]),
        ("llmcli bench -ct", ["-ctk", "-ctkd", "-ctv", "-ctvd"]),
        ("llmcli bench -p", ["-p", "-pg"]),
        ("llmcli generate -f js", ["json.gbnf"]),  # short options keep completing their values
        ("llmcli generate -m q", ["qwen-small"]),
    ],
)
def test_fish_short_options_that_begin_old_style_ones(shell_env, line, expected):
    env, cwd = shell_env
    assert sorted(fish_complete(env, cwd, line)) == sorted(expected)
