"""`llmcli pull` against a real hub (olah on loopback): quantizations, files, revisions, the HF cache."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from documents import check
from hubtools import GOOD_TOKEN, blobs, hub_cache, run

pytestmark = pytest.mark.hub


def snapshot(repo_id: str, commit: str) -> Path:
    return hub_cache() / ("models--" + repo_id.replace("/", "--")) / "snapshots" / commit


def test_pull_default_quantization_into_the_hf_cache_layout(hub):
    result = run("pull", "test/tiny-GGUF")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert "pulled test/tiny-GGUF:Q4_K_M (" in result.stderr
    assert hub_cache() == Path(os.environ["HF_HOME"]) / "hub"
    commit = hub.repos.commits["test/tiny-GGUF"]
    entry = snapshot("test/tiny-GGUF", commit) / "tiny-Q4_K_M.gguf"
    content = hub.repos.content("test/tiny-GGUF/tiny-Q4_K_M.gguf")
    assert entry.is_symlink() and entry.read_bytes() == content
    git_blob_id = hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
    assert entry.resolve() == hub_cache() / "models--test--tiny-GGUF" / "blobs" / git_blob_id
    assert (hub_cache() / "models--test--tiny-GGUF" / "refs" / "main").read_text() == commit
    assert [p.name for p in blobs("test/tiny-GGUF")] == [git_blob_id]  # nothing else fetched


def test_huggingface_hub_finds_what_llmcli_pulled_offline(hub):
    from huggingface_hub import hf_hub_download

    assert run("pull", "test/tiny-GGUF:Q8_0").exit_code == 0
    found = hf_hub_download("test/tiny-GGUF", "tiny-Q8_0.gguf", cache_dir=hub_cache(), local_files_only=True)
    assert Path(found).read_bytes() == hub.repos.content("test/tiny-GGUF/tiny-Q8_0.gguf")


def test_llmcli_reuses_what_huggingface_hub_downloaded(hub):
    from huggingface_hub import hf_hub_download

    hf_hub_download("test/tiny-GGUF", "tiny-Q2_K.gguf", cache_dir=hub_cache(), endpoint=hub.url)
    result = run("pull", "test/tiny-GGUF:Q2_K")
    assert result.exit_code == 0, result.stderr
    assert "is up to date" in result.stderr and "downloading" not in result.stderr


@pytest.mark.parametrize(
    ("ref", "file"),
    [
        ("test/tiny-GGUF:q8_0", "tiny-Q8_0.gguf"),
        ("test/tiny-GGUF:IQ4_XS", "tiny-IQ4_XS.gguf"),
        ("test/tiny-GGUF/tiny-Q2_K.gguf", "tiny-Q2_K.gguf"),
        ("hf.co/test/tiny-GGUF:Q2_K", "tiny-Q2_K.gguf"),
    ],
)
def test_pull_by_quantization_or_file(hub, ref, file):
    result = run("pull", ref, "--json")
    assert result.exit_code == 0, result.stderr
    doc = check(json.loads(result.stdout), "pull/pulled")  # docs/pull.schema.json
    assert [Path(p).name for p in doc["files"]] == [file]
    assert Path(doc["files"][0]).read_bytes() == hub.repos.content(f"test/tiny-GGUF/{file}")
    assert doc["downloaded"] is True


def test_split_model_is_pulled_whole(hub):
    result = run("pull", "test/split-GGUF", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    names = [Path(p).name for p in doc["files"]]
    assert names == [f"split-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    for path, name in zip(doc["files"], names, strict=True):
        assert Path(path).read_bytes() == hub.repos.content(f"test/split-GGUF/{name}")
    assert "in 3 files" in result.stderr
    path = run("models", "path", "test/split-GGUF:Q4_K_M")
    assert path.stdout == doc["files"][0] + "\n"


def test_naming_any_shard_or_a_subfolder_pulls_the_whole_split(hub):
    result = run("pull", "test/split-GGUF/Q8_0/split-Q8_0-00002-of-00002.gguf", "--json")
    assert result.exit_code == 0, result.stderr
    names = [Path(p).name for p in json.loads(result.stdout)["files"]]
    assert names == ["split-Q8_0-00001-of-00002.gguf", "split-Q8_0-00002-of-00002.gguf"]


def test_revisions_tag_commit_and_branch(hub):
    from llmcli.gguf_file import read_header

    old = hub.repos.commits["test/revs-GGUF@v1"]
    for ref in ("test/revs-GGUF@v1", f"test/revs-GGUF:Q4_K_M@{old}", "test/revs-GGUF@main"):
        result = run("pull", ref, "--json")
        assert result.exit_code == 0, result.stderr
        doc = json.loads(result.stdout)
        expected_ctx = 2048 if ref.endswith("main") else 1024
        assert read_header(doc["files"][0]).n_ctx_train == expected_ctx
    refs = hub_cache() / "models--test--revs-GGUF" / "refs"
    assert (refs / "v1").read_text() == old
    assert (refs / "main").read_text() == hub.repos.commits["test/revs-GGUF"]


def test_lfs_files_are_checked_and_recorded_by_sha256(hub):
    from llmcli.hub import records

    result = run("pull", "test/lfs-GGUF:Q5_K_M", "--json")
    assert result.exit_code == 0, result.stderr
    path = Path(json.loads(result.stdout)["files"][0])
    sha = hub.repos.sha256("test/lfs-GGUF/lfs-Q5_K_M.gguf")
    assert path.resolve().name == sha  # the blob is named by the LFS SHA-256, as huggingface_hub names it
    record = records.load(path.resolve())
    assert record["sha256"] == sha and record["algo"] == "sha256" and record["checked"] == sha


def test_pull_twice_is_up_to_date_and_downloads_nothing(proxy):
    assert run("pull", "test/tiny-GGUF").exit_code == 0
    proxy.state.log.clear()
    result = run("pull", "test/tiny-GGUF")
    assert result.exit_code == 0
    assert result.stderr == f"test/tiny-GGUF:Q4_K_M ({_size(proxy, 'tiny-Q4_K_M.gguf')}) is up to date\n"
    assert proxy.state.gets("tiny-Q4_K_M.gguf") == []


def _size(proxy, name: str) -> str:
    from llmcli.units import human_size

    return human_size(len(proxy.hub.repos.content(f"test/tiny-GGUF/{name}")))


def test_force_downloads_again(proxy):
    assert run("pull", "test/tiny-GGUF:Q8_0").exit_code == 0
    result = run("pull", "--force", "test/tiny-GGUF:Q8_0")
    assert result.exit_code == 0 and "pulled" in result.stderr
    assert len(proxy.state.gets("tiny-Q8_0.gguf")) == 2


def test_hf_hub_cache_and_hf_home_are_honoured(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert run("pull", "test/tiny-GGUF:Q8_0").exit_code == 0
    assert list((tmp_path / "elsewhere" / "models--test--tiny-GGUF" / "snapshots").iterdir())
    assert not (Path(os.environ["HF_HOME"]) / "hub").exists()


def test_hf_token_is_sent_to_the_api_and_the_file_server(proxy, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)
    assert run("pull", "test/tiny-GGUF:Q8_0").exit_code == 0
    assert proxy.state.log and {e.auth for e in proxy.state.log} == {f"Bearer {GOOD_TOKEN}"}


def test_no_token_is_sent_without_one(proxy):
    assert run("pull", "test/tiny-GGUF:Q8_0").exit_code == 0
    assert {e.auth for e in proxy.state.log} == {None}


def test_hf_endpoint_mirror_is_used(proxy):
    assert run("pull", "test/tiny-GGUF:Q2_K").exit_code == 0
    paths = [e.path for e in proxy.state.log]
    assert any(p.startswith("/api/models/test/tiny-GGUF") for p in paths)
    assert any(
        p.endswith("/resolve/" + proxy.hub.repos.commits["test/tiny-GGUF"] + "/tiny-Q2_K.gguf") for p in paths
    )


def test_no_progress_bar_when_stderr_is_not_a_terminal(hub):
    result = run("pull", "test/lfs-GGUF/big-Q8_0.gguf")
    assert result.exit_code == 0
    lines = result.stderr.splitlines()
    assert lines[0].startswith("downloading big-Q8_0.gguf (8.4 MB")
    assert lines[1].startswith("  big-Q8_0.gguf: 8.4 MB in ")
    assert lines[2] == "pulled test/lfs-GGUF/big-Q8_0.gguf (8.4 MB)"
    assert "\r" not in result.stderr and "\x1b" not in result.stderr


def test_quiet_pull_prints_nothing(hub):
    result = run("-q", "pull", "test/tiny-GGUF:Q8_0")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")
