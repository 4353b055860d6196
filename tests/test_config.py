"""The configuration file and its precedence: flag > LLMCLI_* variable > config file > built-in default."""

from __future__ import annotations

import json
import os

import pytest
from helpers import engine_factory, run

from llmcli import settings
from llmcli.errors import ConfigError


@pytest.fixture
def config_file(isolated):
    path = isolated / "config.toml"
    assert os.environ["LLMCLI_CONFIG"] == str(path)
    return path


def write(path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    settings.reset_cache()


# -- precedence ---------------------------------------------------------------------------------


def test_precedence_in_resolve(config_file, monkeypatch):
    assert settings.resolve_with_source("temperature") == (0.8, "default")
    write(config_file, "temperature = 0.3\n")
    assert settings.resolve_with_source("temperature") == (0.3, "config")
    monkeypatch.setenv("LLMCLI_TEMPERATURE", "0.4")
    assert settings.resolve_with_source("temperature") == (0.4, "env")
    assert settings.resolve_with_source("temperature", 0.5) == (0.5, "flag")


def test_empty_environment_variable_counts_as_unset(config_file, monkeypatch):
    write(config_file, "threads = 3\n")
    monkeypatch.setenv("LLMCLI_THREADS", "")
    assert settings.resolve_with_source("threads") == (3, "config")


@pytest.mark.usefixtures("fake")
@pytest.mark.parametrize(
    ("file", "env", "flag", "expected"),
    [
        (None, None, None, 0.8),
        ("0.3", None, None, 0.3),
        ("0.3", "0.4", None, 0.4),
        ("0.3", "0.4", "0.5", 0.5),
        (None, None, "0.5", 0.5),
    ],
)
def test_precedence_end_to_end(config_file, monkeypatch, file, env, flag, expected):
    if file:
        write(config_file, f"temperature = {file}\nmax_tokens = 7\n")
    if env:
        monkeypatch.setenv("LLMCLI_TEMPERATURE", env)
    args = ["generate", "hi", "--json"] + (["--temperature", flag] if flag else [])
    result = run(*args)
    assert result.exit_code == 0, result.stderr
    params = json.loads(result.stdout)["params"]
    assert params["temperature"] == expected
    assert params["max_tokens"] == (7 if file else 512)


@pytest.mark.usefixtures("fake")
def test_config_file_sets_the_system_prompt(config_file):
    write(config_file, 'system = "Answer in French."\n')
    assert run("generate", "hi").exit_code == 0
    assert "Answer in French." in engine_factory().made[0].history[0].prompt


# -- config show / path -------------------------------------------------------------------------


def test_show_lists_every_setting_with_its_source(config_file, monkeypatch):
    write(config_file, "# mine\nctx_size = 8192\n")
    monkeypatch.setenv("LLMCLI_THREADS", "3")
    result = run("config", "show")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == f"# {config_file}"
    body = {line.split(" = ")[0]: line for line in lines[1:]}
    assert list(body) == list(settings.SETTINGS)
    assert body["ctx_size"].split("#")[0].strip() == "ctx_size = 8192"
    assert body["ctx_size"].endswith("# config file")
    assert body["threads"].endswith("# $LLMCLI_THREADS")
    assert body["temperature"].split("#")[0].strip() == "temperature = 0.8"
    assert body["system"].split("#")[0].strip() == 'system = ""'
    assert body["system"].endswith("# default")


def test_show_json(config_file, monkeypatch):
    write(config_file, 'color = "never"\n')
    monkeypatch.setenv("LLMCLI_MODEL", "org/repo:Q8_0")
    doc = json.loads(run("config", "show", "--json").stdout)
    assert doc["config_file"] == str(config_file)
    assert doc["config_file_exists"] is True
    assert set(doc["settings"]) == set(settings.SETTINGS)
    assert doc["settings"]["color"] == {
        "value": "never",
        "source": "config",
        "env": "LLMCLI_COLOR",
        "default": "auto",
        "help": settings.SETTINGS["color"].help,
    }
    assert doc["settings"]["model"]["value"] == "org/repo:Q8_0"
    assert doc["settings"]["model"]["source"] == "env"
    assert doc["settings"]["top_k"]["source"] == "default"


def test_show_without_a_file(config_file):
    result = run("config", "show")
    assert result.stdout.splitlines()[0] == f"# {config_file} (not present)"
    assert json.loads(run("config", "show", "--json").stdout)["config_file_exists"] is False


def test_path(config_file):
    result = run("config", "path")
    assert result.exit_code == 0
    assert result.stdout == f"{config_file}\n"


def test_default_path_is_in_the_user_config_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("LLMCLI_CONFIG")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    from llmcli import paths

    if os.name == "posix" and os.uname().sysname == "Linux":
        assert paths.config_file() == tmp_path / "xdg" / "llmcli" / "config.toml"
    assert paths.config_file().name == "config.toml"


# -- config set / unset -------------------------------------------------------------------------


def test_set_creates_the_file(config_file):
    result = run("config", "set", "ctx_size", "8192")
    assert result.exit_code == 0, result.stderr
    text = config_file.read_text()
    assert text.startswith("# llmcli configuration.")
    assert "ctx_size = 8192\n" in text
    assert settings.resolve_with_source("ctx_size") == (8192, "config")


def test_set_keeps_comments_and_order(config_file):
    write(
        config_file, '# my settings\nmodel = "a/b:Q4_K_M"  # the usual one\n\n# sampling\ntemperature = 0.2\n'
    )
    assert run("config", "set", "temperature", "0.7").exit_code == 0
    assert run("config", "set", "system", 'Be brief. Use "quotes".').exit_code == 0
    assert config_file.read_text() == (
        '# my settings\nmodel = "a/b:Q4_K_M"  # the usual one\n\n# sampling\ntemperature = 0.7\n'
        'system = "Be brief. Use \\"quotes\\"."\n'
    )
    assert settings.resolve("system") == 'Be brief. Use "quotes".'


def test_set_writes_atomically(config_file, monkeypatch):
    from llmcli import atomic

    calls = []
    real = atomic.write_atomic
    monkeypatch.setattr(
        atomic, "write_atomic", lambda path, data, **kw: (calls.append(path), real(path, data, **kw))
    )
    assert run("config", "set", "top_k", "20").exit_code == 0
    assert calls == [config_file]
    assert sorted(p.name for p in config_file.parent.iterdir() if p.name.startswith(".config")) == []


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("threads", "many", "threads must be an integer, got 'many'"),
        ("threads", "-2", "threads must be at least 0, got -2"),
        ("temperature", "hot", "temperature must be a number, got 'hot'"),
        ("color", "sometimes", "color must be one of auto, always, never, got 'sometimes'"),
        ("ctxsize", "1", "unknown key 'ctxsize' (did you mean 'ctx_size'?"),
    ],
)
def test_set_rejects_bad_values_and_leaves_the_file(config_file, key, value, message):
    write(config_file, "top_k = 10\n")
    result = run("config", "set", key, value)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"llmcli: configuration error: {message}")
    assert config_file.read_text() == "top_k = 10\n"


def test_set_refuses_when_the_file_is_invalid(config_file):
    write(config_file, "top_k = 10\nbogus = 1\n")
    result = run("config", "set", "top_p", "0.5")
    assert result.exit_code == 2
    assert f"{config_file}, line 2: unknown key 'bogus'" in result.stderr
    assert config_file.read_text() == "top_k = 10\nbogus = 1\n"


def test_unset_removes_any_key_even_an_unknown_one(config_file):
    write(config_file, "top_k = 10\nbogus = 1\n")
    assert run("config", "unset", "bogus").exit_code == 0
    assert config_file.read_text() == "top_k = 10\n"
    result = run("config", "unset", "bogus")
    assert result.exit_code == 0
    assert "bogus is not set" in result.stderr
    assert run("config", "show").exit_code == 0


def test_unset_without_a_file_creates_nothing(config_file):
    assert run("config", "unset", "top_k").exit_code == 0
    assert not config_file.exists()


# -- invalid files -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("top_k = 10\ntemperature = = 2\n", "line 2, column 15: invalid TOML: Invalid value"),
        ("top_k = 10\n\nbogus = 1\n", "line 3: unknown key 'bogus'"),
        ("top_k = 10\n\n[sampling]\ntop_p = 0.5\n", "line 3: unknown key 'sampling'"),
        ('top_k = "ten"\n', "line 1: top_k must be an integer, got 'ten'"),
        ("# c\nctx_size = 4096.0\n", "line 2: ctx_size must be an integer, got 4096.0"),
        ("threads = true\n", "line 1: threads must be an integer, got a boolean"),
        ('system = ["a"]\n', "line 1: system must be a string, got an array"),
        (
            'on_overflow = "truncate"\n',
            "line 1: on_overflow must be one of drop-oldest, error, got 'truncate'",
        ),
        ('"max_tokens" = -1\n', "line 1: max_tokens must be at least 0, got -1"),
    ],
)
def test_invalid_file_names_file_line_and_key(config_file, text, message):
    write(config_file, text)
    with pytest.raises(ConfigError) as err:
        settings.load_config()
    assert err.value.message == f"{config_file}, {message}"
    result = run("config", "show")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"llmcli: configuration error: {config_file}, {message}")


@pytest.mark.usefixtures("fake")
def test_nothing_runs_with_an_invalid_file(config_file):
    write(config_file, 'temperature = 0.2\ntop_k = "x"\n')
    result = run("generate", "hi")
    assert result.exit_code == 2
    assert "line 2: top_k must be an integer" in result.stderr
    assert engine_factory().made == []
    assert result.stdout == ""


def test_invalid_environment_variable_is_named(monkeypatch):
    monkeypatch.setenv("LLMCLI_TOP_K", "lots")
    result = run("config", "show")
    assert result.exit_code == 2
    assert (
        result.stderr == "llmcli: configuration error: $LLMCLI_TOP_K: top_k must be an integer, got 'lots'\n"
    )


def test_unreadable_file(config_file):
    config_file.write_bytes(b'model = "\xff"\n')
    result = run("config", "show")
    assert result.exit_code == 2
    assert f"{config_file}: not UTF-8 text" in result.stderr


def test_path_and_unset_work_with_a_broken_file(config_file):
    write(config_file, "this is not toml\n")
    assert run("config", "path").stdout == f"{config_file}\n"
    result = run("config", "set", "top_k", "3")
    assert result.exit_code == 2
    assert f"{config_file}, line 1, column 6: invalid TOML" in result.stderr


# -- the registry and the flags ------------------------------------------------------------------


def test_every_setting_is_documented_in_config_md():
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "CONFIG.md").read_text()
    for setting in settings.SETTINGS.values():
        assert f"`{setting.key}`" in text and setting.env in text


def test_color_preference(config_file, monkeypatch):
    assert settings.color_preference() is None
    write(config_file, 'color = "never"\n')
    assert settings.color_preference() is False
    monkeypatch.setenv("LLMCLI_COLOR", "always")
    assert settings.color_preference() is True
    monkeypatch.delenv("LLMCLI_COLOR")
    write(config_file, "color = 3\n")
    assert settings.color_preference() is None  # the broken file is reported by whoever needs it


def _options():
    import typer

    from llmcli.cli.app import app

    def walk(command, path):
        for name, sub in getattr(command, "commands", {}).items():
            if not sub.hidden:
                yield from walk(sub, [*path, name])
        for param in command.params:
            if param.param_type_name == "option":
                yield path, param

    return list(walk(typer.main.get_command(app), []))


def test_options_show_their_environment_variable_in_help():
    seen = set()
    for path, option in _options():
        if isinstance(option.envvar, str):
            seen.add(option.envvar)
            result = run(*path, "--help")
            assert f"env var: {option.envvar}" in " ".join(result.stdout.split()), (path, option.name)
    missing = (
        {s.env for s in settings.SETTINGS.values()} - seen - {"LLMCLI_COLOR", "LLMCLI_THINK"}
    )  # colour: --color/--no-color; think: --think/--no-think (whose help names the variable)
    assert not missing, f"settings without a flag showing their variable: {missing}"
    think = " ".join(run("generate", "--help").stdout.split())
    assert "LLMCLI_THINK" in think
