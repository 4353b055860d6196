"""Bad input and bad luck: each is one line on stderr with a hint, and an exact exit code."""

from __future__ import annotations

import pytest
from hubtools import GOOD_TOKEN, blobs, free_port, hub_cache, one_line_error, run

pytestmark = pytest.mark.hub


def nothing_cached(repo_id: str) -> None:
    """No blob, no partial file and no snapshot entry: nothing that could pass for a model."""
    folder = hub_cache() / ("models--" + repo_id.replace("/", "--"))
    assert blobs(repo_id) == []
    assert not any(p.is_file() for p in (folder / "snapshots").rglob("*"))


def test_repository_that_does_not_exist(hub):
    line = one_line_error(run("pull", "test/no-such-repo"), 3, "test/no-such-repo", "not found", hub.url)
    assert "HF_TOKEN" in line


@pytest.fixture
def gated(proxy):
    proxy.state.gated.add("test/gated-GGUF")
    return proxy


def test_gated_or_private_repository_401_and_403(gated, monkeypatch):
    line = one_line_error(run("pull", "test/gated-GGUF"), 6, "test/gated-GGUF is gated", "HTTP 401")
    assert "set HF_TOKEN" in line
    monkeypatch.setenv("HF_TOKEN", "hf_wrong_token")
    line = one_line_error(run("pull", "test/gated-GGUF"), 6, "HTTP 403")
    assert "HF_TOKEN may not have access" in line
    nothing_cached("test/gated-GGUF")


def test_gated_repository_with_a_good_token(gated, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)
    result = run("pull", "test/gated-GGUF")
    assert result.exit_code == 0, result.stderr


def test_repository_without_gguf_files(hub):
    line = one_line_error(run("pull", "test/nogguf"), 3, "test/nogguf has no GGUF model files")
    assert "-GGUF" in line


def test_quantization_the_repository_does_not_have_lists_those_it_has(hub):
    line = one_line_error(run("pull", "test/tiny-GGUF:Q3_K_M"), 3, "test/tiny-GGUF has no Q3_K_M")
    assert line.endswith("(it has: Q4_K_M, Q8_0, IQ4_XS, Q2_K)")


def test_file_the_repository_does_not_have(hub):
    one_line_error(
        run("pull", "test/tiny-GGUF/nope.gguf"), 3, "has no model file nope.gguf", "tiny-Q4_K_M.gguf"
    )


def test_revision_that_does_not_exist(hub):
    one_line_error(run("pull", "test/tiny-GGUF@no-such-branch"), 3, "no revision 'no-such-branch'")


@pytest.mark.parametrize(
    "ref",
    ["test/", "/", "test/tiny-GGUF:", "test/tiny-GGUF:Q4:K", "te st/repo", "test/tiny-GGUF@", "org/re--po",
     "test/tiny-GGUF/readme.md", "test/tiny-GGUF/x.gguf:Q4_K_M", "llama3:8b", "a:b@c"],
)  # fmt: skip
def test_malformed_references(hub, ref):
    result = run("pull", ref)
    assert result.exit_code == 2, (ref, result.stderr)
    if ref != "/":  # "/" is a path (a directory): a different, equally clear usage error
        one_line_error(result, 2, "malformed model reference")


def test_hub_unreachable_after_bounded_retries(monkeypatch):
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    result = run("pull", "test/tiny-GGUF")
    line = one_line_error(
        result, 6, f"cannot reach the hub at {endpoint} after 3 attempts", "connection refused"
    )
    assert "HF_ENDPOINT" in line and "--offline" in line
    assert result.stderr.count("retrying") == 2


def test_pull_of_a_local_file_or_unknown_alias(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    one_line_error(run("pull", str(model)), 2, "is a local file")
    one_line_error(run("pull", "nosuchalias"), 2, "no alias named 'nosuchalias'")


def test_rm_of_something_not_present(hub):
    one_line_error(
        run("models", "rm", "--yes", "test/tiny-GGUF:Q8_0"), 3, "test/tiny-GGUF:Q8_0 is not downloaded"
    )
    one_line_error(run("models", "rm", "--yes", "nosuchalias"), 3, "no model or alias named 'nosuchalias'")


def test_broken_gguf_in_the_repository_is_refused_and_discarded(hub):
    line = one_line_error(run("pull", "test/broken-GGUF"), 5, "is not a usable GGUF file", "discarded")
    assert "HTML" in line
    nothing_cached("test/broken-GGUF")


def test_no_space_left_is_refused_before_writing(hub, monkeypatch):
    from llmcli.hub import download

    monkeypatch.setattr(download, "free_space", lambda folder: 1000)
    line = one_line_error(
        run("pull", "test/lfs-GGUF/big-Q8_0.gguf"), 1, "needs 8.4 MB but only 1.0 kB is free"
    )
    assert "HF_HUB_CACHE" in line
    nothing_cached("test/lfs-GGUF")
