"""What tests swap is one object: the environment (streams, output options, settings cache, the
engine factory, bench's backend, the hub's reporter), derived once per invocation."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace

from helpers import run

from llmcli import environment
from llmcli.engine.fake import FakeEngine
from llmcli.reporting import Progress, Reporter


class Collecting(Reporter):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def info(self, message: str) -> None:
        self.notes.append(message)

    @contextmanager
    def progress(self):
        yield Progress()


def test_one_object_carries_the_engine_factory_and_the_invocation_keeps_it(tmp_path):
    factory = FakeEngine.factory(replies=["from the installed factory"])
    environment.install(replace(environment.current(), engine_factory=factory))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    result = run("generate", "-m", str(model), "hi")
    assert result.exit_code == 0 and result.stdout == "from the installed factory\n"
    assert environment.current().engine_factory is factory  # the root callback kept it
    assert len(factory.made) == 1


def test_the_global_flags_land_in_the_environment(fake):
    run("--quiet", "--debug", "generate", "hi")
    env = environment.current()
    assert env.quiet and env.debug and env.color is None


def test_hub_notices_go_to_the_environments_reporter():
    from llmcli import reporting

    collecting = Collecting()
    environment.install(replace(environment.current(), reporter=collecting))
    reporting.info("downloading x")
    assert collecting.notes == ["downloading x"]


def test_the_settings_cache_is_the_environments(isolated):
    from llmcli import settings

    (isolated / "config.toml").write_text("temperature = 0.3\n")
    assert settings.resolve("temperature") == 0.3
    (isolated / "config.toml").write_text("temperature = 0.6\n")
    assert settings.resolve("temperature") == 0.3  # read once per environment
    environment.install(environment.Environment())
    assert settings.resolve("temperature") == 0.6


def test_a_fake_engine_skips_the_file_checks_unless_asked():
    env = environment.Environment(engine_factory=FakeEngine.factory())
    assert not env.checks_model_files
    assert replace(env, check_model_files=True).checks_model_files
    assert environment.Environment().checks_model_files  # the real engine always checks
