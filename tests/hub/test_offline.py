"""Using models by name: pulled on first use, and offline with no network call at all."""

from __future__ import annotations

from pathlib import Path

import pytest
from hubtools import block_network, free_port, one_line_error, run

pytestmark = pytest.mark.hub


@pytest.fixture
def hub_gone(monkeypatch):
    """The hub is unreachable: HF_ENDPOINT points at a closed port."""
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")


def test_generate_pulls_a_model_that_is_not_downloaded_yet(hub, engine):
    result = run("generate", "hello", "-m", "test/tiny-GGUF:Q8_0")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.startswith(
        "test/tiny-GGUF:Q8_0 is not downloaded yet; pulling it\ndownloading tiny-Q8_0.gguf"
    )
    assert engine[0].name == "tiny-Q8_0.gguf" and engine[0].read_bytes() == hub.repos.content(
        "test/tiny-GGUF/tiny-Q8_0.gguf"
    )
    again = run("generate", "hello", "-m", "test/tiny-GGUF:Q8_0")
    assert again.exit_code == 0 and "pulling" not in again.stderr and engine[1] == engine[0]


def test_downloaded_models_are_used_with_no_network_call(hub, engine, monkeypatch):
    from llmcli.hub.resolve import resolve_model

    assert run("pull", "test/split-GGUF").exit_code == 0
    assert run("pull", "test/tiny-GGUF:Q2_K").exit_code == 0
    attempts = block_network(monkeypatch)
    for ref in (
        "test/split-GGUF",
        "test/split-GGUF:q4_k_m",
        "test/tiny-GGUF:Q2_K",
        "test/tiny-GGUF/tiny-Q2_K.gguf",
    ):
        online = resolve_model(ref)
        offline = resolve_model(ref, offline=True)
        assert online.path == offline.path and offline.path.is_file()
    split = resolve_model("test/split-GGUF", offline=True)
    assert [p.name for p in split.files] == [f"split-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert (split.repo_id, split.quantization) == ("test/split-GGUF", "Q4_K_M")
    assert run("generate", "hi", "--offline", "-m", "test/tiny-GGUF:Q2_K").exit_code == 0
    assert run("models", "list").exit_code == 0
    assert run("models", "show", "test/tiny-GGUF:Q2_K").exit_code == 0
    assert attempts == []


def test_hf_hub_offline_uses_the_cache_and_refuses_the_rest(hub, engine, hub_gone, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    assert run("pull", "test/tiny-GGUF:Q8_0").exit_code == 0
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert run("generate", "hi", "-m", "test/tiny-GGUF:Q8_0").exit_code == 0
    assert run("pull", "test/tiny-GGUF:Q8_0").stderr == (
        "test/tiny-GGUF:Q8_0 is already downloaded (offline: not checked for updates)\n"
    )
    line = one_line_error(run("generate", "hi", "-m", "test/tiny-GGUF:Q2_K"), 3, "offline mode is on")
    assert "llmcli pull test/tiny-GGUF:Q2_K" in line and "HF_HUB_OFFLINE" in line
    one_line_error(run("pull", "test/tiny-GGUF:Q2_K"), 3, "is not downloaded and offline mode is on")


def test_offline_flag_refuses_what_is_not_downloaded(hub_gone, engine):
    line = one_line_error(run("generate", "hi", "--offline", "-m", "test/tiny-GGUF"), 3, "test/tiny-GGUF")
    assert "offline mode is on" in line
    one_line_error(run("pull", "--offline", "--list", "test/tiny-GGUF"), 2, "offline")


def test_an_alias_and_the_configured_default(hub, engine, monkeypatch):
    from llmcli import settings

    assert run("models", "alias", "tiny", "test/tiny-GGUF:IQ4_XS").exit_code == 0
    assert run("generate", "hi", "-m", "tiny").exit_code == 0
    assert engine[-1].name == "tiny-IQ4_XS.gguf"
    monkeypatch.setenv("LLMCLI_MODEL", "tiny")
    settings.reset_cache()
    assert run("generate", "hi").exit_code == 0
    assert engine[-1].name == "tiny-IQ4_XS.gguf"


def test_resolve_model_with_no_reference_uses_the_configured_default(hub, monkeypatch):
    from llmcli.hub.resolve import resolve_model

    monkeypatch.setenv("LLMCLI_MODEL", "test/tiny-GGUF:Q2_K")
    resolved = resolve_model(None)
    assert resolved.path.name == "tiny-Q2_K.gguf" and resolved.ref == "test/tiny-GGUF:Q2_K"


def test_unknown_names_and_missing_files(engine):
    line = one_line_error(run("generate", "hi", "-m", "nosuch"), 3, "no model or alias named 'nosuch'")
    assert "org/repo" in line
    one_line_error(run("generate", "hi", "-m", "./missing.gguf"), 3, "no such model file: ./missing.gguf")


def test_default_model_when_nothing_is_configured(monkeypatch):
    from llmcli.hub import default_model
    from llmcli.hub.resolve import resolve_model

    monkeypatch.setattr(default_model, "model_path", lambda name: Path(f"/bundled/{name}.gguf"))
    resolved = resolve_model(None, offline=True)
    assert (resolved.path, resolved.ref) == (Path("/bundled/smollm2-135m.gguf"), "smollm2-135m")
    resolved = resolve_model("gemma3-270m", offline=True)
    assert (resolved.path, resolved.ref) == (Path("/bundled/gemma3-270m.gguf"), "gemma3-270m")
