"""`llmcli models ...` and `pull --list`: listing, showing, removing, aliases, paths, verification."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from documents import check
from hubtools import blobs, hub_cache, one_line_error, run

pytestmark = pytest.mark.hub


def pulled(*refs: str) -> None:
    for ref in refs:
        result = run("pull", ref)
        assert result.exit_code == 0, result.stderr


# -- pull --list -----------------------------------------------------------------------------


def test_pull_list_shows_quantizations_sizes_and_fit_without_downloading(hub):
    result = run("pull", "--list", "test/tiny-GGUF")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["QUANT", "SIZE", "FITS", "LOCAL", "FILE"]
    rows = [line.split() for line in lines[1:]]
    assert [r[0] for r in rows] == ["Q4_K_M", "Q8_0", "IQ4_XS", "Q2_K"]  # preference order
    assert rows[0][1] == "*"  # the default
    assert all(r[-3] == "yes" and r[-1].startswith("tiny-") for r in rows)  # tiny files fit anywhere
    assert "mmproj" not in result.stdout
    assert "* marks the default" in result.stderr and "4096-token context" in result.stderr
    assert blobs("test/tiny-GGUF") == []


def test_pull_list_json_and_split_models(hub):
    pulled("test/split-GGUF:Q8_0")
    result = run("pull", "--list", "--json", "test/split-GGUF")
    assert result.exit_code == 0, result.stderr
    doc = check(json.loads(result.stdout), "pull/choices")  # docs/pull.schema.json
    assert doc["repo"] == "test/split-GGUF" and doc["commit"] == hub.repos.commits["test/split-GGUF"]
    models = {m["quant"]: m for m in doc["models"]}
    assert set(models) == {"Q4_K_M", "Q8_0"}
    q4 = models["Q4_K_M"]
    assert len(q4["files"]) == 3 and q4["default"] and not q4["downloaded"]
    assert q4["size"] == sum(len(hub.repos.content(f"test/split-GGUF/{f}")) for f in q4["files"])
    assert models["Q8_0"]["downloaded"] and models["Q8_0"]["ref"] == "test/split-GGUF:Q8_0"
    assert q4["fits"] in ("yes", "tight", "no") and q4["memory_needed"] > q4["size"]


def test_fit_estimate_against_memory(tmp_path, monkeypatch):
    from llmcli.hub import fit

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000000 kB\nMemFree:  1000 kB\nMemAvailable:    8000000 kB\n")
    monkeypatch.setattr(fit, "MEMINFO", meminfo)
    mem = fit.memory()
    assert mem == fit.Memory(8_000_000 * 1024, 16_000_000 * 1024)
    gb = 1_000_000_000
    assert fit.judge(int(4.9 * gb), "Q4_K_M", mem).verdict == "yes"  # an 8B model at Q4_K_M
    assert fit.judge(int(8.5 * gb), "Q8_0", mem).verdict == "tight"  # the same at Q8_0: only in total memory
    assert fit.judge(int(40 * gb), "Q4_K_M", mem).verdict == "no"  # a 70B model
    kv = fit.kv_estimate(int(4.9 * gb), "Q4_K_M")
    assert 400 << 20 < kv < 700 << 20  # Llama 3 8B really needs 512 MiB at 4096 tokens


# -- list / show -----------------------------------------------------------------------------


def bundled_names() -> list[str]:
    """The bundled models `models list` shows: SmolLM2's file is in its package; Gemma's is listed
    once assembled into the cache (the test session may have done that already)."""
    from llmcli.hub import default_model

    names = []
    for name in default_model.BUNDLED:
        path = default_model.expected_path(name)
        if path is not None and path.is_file():
            names.append(name)
    return names


def test_models_list_empty(hub, monkeypatch):
    from llmcli.hub import default_model

    monkeypatch.setattr(default_model, "installed", lambda name=None: False)
    result = run("models", "list")
    assert (result.exit_code, result.stdout) == (0, "")
    assert "no models downloaded yet" in result.stderr
    assert json.loads(run("models", "list", "--json").stdout) == []


def test_models_list_shows_the_bundled_models(hub):
    docs = json.loads(run("models", "list", "--json").stdout)
    assert [d["name"] for d in docs] == bundled_names()
    assert all(d["source"] == "bundled package" for d in docs)


def test_models_list_table_and_json(hub):
    pulled("test/tiny-GGUF:Q8_0", "test/split-GGUF", "test/revs-GGUF@v1")
    run("models", "alias", "small", "test/tiny-GGUF:Q8_0")
    result = run("models", "list")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "QUANT", "SIZE", "ARCH", "PARAMS", "CTX", "SOURCE"]
    names = [line.split()[0] for line in lines[1:]]
    assert names == [
        "test/revs-GGUF:Q4_K_M@v1",
        "test/split-GGUF:Q4_K_M",
        "test/tiny-GGUF:Q8_0",
        *bundled_names(),
    ]
    tiny = lines[3].split()
    commit = hub.repos.commits["test/tiny-GGUF"]
    assert tiny[1:] == ["Q8_0", tiny[2], "kB", "llama", tiny[5], "2048", f"test/tiny-GGUF@{commit[:7]}"]

    docs = {d["name"]: d for d in json.loads(run("models", "list", "--json").stdout)}
    doc = docs["test/tiny-GGUF:Q8_0"]
    assert doc["size"] == len(hub.repos.content("test/tiny-GGUF/tiny-Q8_0.gguf"))
    assert (doc["architecture"], doc["quantization"], doc["n_ctx_train"]) == ("llama", "Q8_0", 2048)
    assert doc["aliases"] == ["small"] and doc["commit"] == commit and doc["revisions"] == ["main"]
    assert docs["test/split-GGUF:Q4_K_M"]["size"] == sum(
        len(hub.repos.content(f"test/split-GGUF/split-Q4_K_M-0000{i}-of-00003.gguf")) for i in (1, 2, 3)
    )
    assert docs["test/revs-GGUF:Q4_K_M@v1"]["n_ctx_train"] == 1024


def test_models_show(hub):
    pulled("test/tiny-GGUF:IQ4_XS")
    result = run("models", "show", "test/tiny-GGUF:IQ4_XS")
    assert result.exit_code == 0, result.stderr
    shown = {line[:14].strip(): line[15:] for line in result.stdout.splitlines()}
    assert shown["architecture"] == "llama" and shown["quantization"] == "IQ4_XS"
    assert shown["size label"] == "8K" and shown["license"] == "apache-2.0"
    assert shown["layers"] == "2" and shown["context"] == "2048" and shown["vocabulary"] == "32"
    assert shown["chat template"] == "yes" and shown["files"] == "1"
    assert shown["sha256"] == hub.repos.sha256("test/tiny-GGUF/tiny-IQ4_XS.gguf")
    assert "general.architecture" not in result.stdout

    full = run("models", "show", "--all", "test/tiny-GGUF:IQ4_XS")
    assert "  general.architecture = llama" in full.stdout
    assert "  tokenizer.ggml.tokens = ['<unk>', '<s>'," not in full.stdout  # long arrays summarised
    assert "  tokenizer.ggml.tokens = [32 items]" in full.stdout

    doc = json.loads(run("models", "show", "--json", "--all", "test/tiny-GGUF:IQ4_XS").stdout)
    assert doc["metadata"]["general.file_type"] == 30 and doc["chat_template"] is True
    assert doc["sha256"] == [hub.repos.sha256("test/tiny-GGUF/tiny-IQ4_XS.gguf")]


def test_models_show_not_downloaded(hub):
    line = one_line_error(run("models", "show", "test/tiny-GGUF:Q8_0"), 3, "is not downloaded")
    assert "llmcli pull test/tiny-GGUF:Q8_0" in line


# -- rm --------------------------------------------------------------------------------------


def test_rm_removes_files_and_reports_space_freed(hub):
    pulled("test/tiny-GGUF:Q8_0", "test/tiny-GGUF:Q2_K")
    size = len(hub.repos.content("test/tiny-GGUF/tiny-Q8_0.gguf"))
    result = run("models", "rm", "--yes", "test/tiny-GGUF:Q8_0")
    assert result.exit_code == 0, result.stderr
    from llmcli.units import human_size

    assert result.stderr == f"removed test/tiny-GGUF:Q8_0, freed {human_size(size)}\n"
    assert len(blobs("test/tiny-GGUF")) == 1
    assert run("models", "path", "test/tiny-GGUF:Q2_K").exit_code == 0  # the other one is untouched

    assert run("models", "rm", "-y", "test/tiny-GGUF:Q2_K").exit_code == 0
    assert not (hub_cache() / "models--test--tiny-GGUF").exists()  # nothing left: the repository goes


def test_rm_says_which_aliases_still_name_the_model(hub):
    pulled("test/tiny-GGUF:Q8_0")
    assert run("models", "alias", "small", "test/tiny-GGUF:Q8_0").exit_code == 0
    result = run("models", "rm", "-y", "small")
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("removed test/tiny-GGUF:Q8_0, freed ")
    assert lines[1].startswith("  kept alias small: it downloads the model again when used")
    assert run("models", "alias", "small").stdout == "test/tiny-GGUF:Q8_0\n"  # the alias is kept


def test_rm_keeps_a_file_another_model_uses(hub):
    pulled("test/twins-GGUF:Q4_K_M", "test/twins-GGUF:Q4_K_S")
    assert len(blobs("test/twins-GGUF")) == 1
    result = run("models", "rm", "-y", "test/twins-GGUF:Q4_K_S")
    assert (
        result.stderr
        == "removed test/twins-GGUF:Q4_K_S, freed 0 B; its data is still used by another model\n"
    )
    path = Path(run("models", "path", "test/twins-GGUF:Q4_K_M").stdout.strip())
    assert path.read_bytes() == hub.repos.content("test/twins-GGUF/twins-Q4_K_M.gguf")


def test_rm_split_model_and_other_tools_files_stay(hub):
    from huggingface_hub import hf_hub_download

    hf_hub_download(
        "test/split-GGUF", "Q8_0/split-Q8_0-00001-of-00002.gguf", cache_dir=hub_cache(), endpoint=hub.url
    )
    pulled("test/split-GGUF:Q4_K_M")
    assert run("models", "rm", "-y", "test/split-GGUF:Q4_K_M").exit_code == 0
    assert len(blobs("test/split-GGUF")) == 1  # the file another tool fetched is still there
    assert (hub_cache() / "models--test--split-GGUF" / "refs" / "main").exists()


def test_rm_asks_first(hub):
    pulled("test/tiny-GGUF:Q8_0")
    no = run("models", "rm", "test/tiny-GGUF:Q8_0", input="n\n")
    assert (
        no.exit_code == 1 and "remove test/tiny-GGUF:Q8_0 (" in no.stderr and "nothing removed" in no.stderr
    )
    eof = run("models", "rm", "test/tiny-GGUF:Q8_0", input="")
    assert eof.exit_code == 1 and len(blobs("test/tiny-GGUF")) == 1
    yes = run("models", "rm", "test/tiny-GGUF:Q8_0", input="y\n")
    assert yes.exit_code == 0 and "freed" in yes.stderr and blobs("test/tiny-GGUF") == []


def test_rm_of_an_ambiguous_repository_name(hub):
    pulled("test/tiny-GGUF:Q8_0", "test/tiny-GGUF:Q2_K")
    line = one_line_error(run("models", "rm", "-y", "test/tiny-GGUF"), 2, "names 2 downloaded models")
    assert "test/tiny-GGUF:Q8_0" in line and "test/tiny-GGUF:Q2_K" in line


def test_rm_refuses_files_outside_the_cache(tmp_path):
    model = tmp_path / "mine.gguf"
    model.write_bytes(b"GGUF")
    one_line_error(run("models", "rm", "-y", str(model)), 2, "not in the Hugging Face cache")
    assert model.exists()


# -- alias / path / verify -------------------------------------------------------------------


def test_alias_set_show_list_delete(hub, tmp_path):
    from llmcli import paths

    assert (
        run("models", "alias", "tiny", "hf.co/test/tiny-GGUF:q8_0").stderr == "tiny -> test/tiny-GGUF:Q8_0\n"
    )
    file = tmp_path / "x.gguf"
    file.write_bytes(b"GGUF")
    assert run("models", "alias", "mine", str(file)).exit_code == 0
    assert run("models", "alias", "again", "tiny").stderr == "again -> test/tiny-GGUF:Q8_0\n"  # flattened
    assert run("models", "alias", "tiny").stdout == "test/tiny-GGUF:Q8_0\n"
    listing = run("models", "alias").stdout.splitlines()
    assert listing[0].split() == ["ALIAS", "REFERENCE"] and len(listing) == 4
    stored = json.loads((paths.data_dir() / "aliases.json").read_text())
    assert stored == {
        "again": "test/tiny-GGUF:Q8_0",
        "mine": str(file.resolve()),
        "tiny": "test/tiny-GGUF:Q8_0",
    }
    replaced = run("models", "alias", "again", str(file)).stderr
    assert replaced == f"again -> {file.resolve()} (it pointed to test/tiny-GGUF:Q8_0)\n"
    assert run("models", "alias", "again", str(file)).stderr == f"again -> {file.resolve()}\n"
    assert run("models", "alias", "--delete", "again").exit_code == 0
    assert json.loads(run("models", "alias", "--json").stdout) == {
        "mine": str(file.resolve()),
        "tiny": stored["tiny"],
    }


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["bad/name", "test/tiny-GGUF"], 2, "not a valid alias name"),
        (["gemma3-270m", "test/tiny-GGUF"], 2, "name of a bundled model"),
        (["smollm2-135m", "test/tiny-GGUF"], 2, "name of a bundled model"),
        (["x", "test/"], 2, "malformed model reference"),
        (["x", "nosuch"], 3, "no alias named 'nosuch'"),
        (["--delete", "nosuch"], 3, "no alias named 'nosuch'"),
        (["nosuch"], 3, "no alias named 'nosuch'"),
    ],
)
def test_alias_errors(args, code, fragment):
    one_line_error(run("models", "alias", *args), code, fragment)


def test_alias_is_usable_everywhere_a_model_is_named(hub):
    pulled("test/tiny-GGUF:Q2_K")
    run("models", "alias", "t", "test/tiny-GGUF:Q2_K")
    path = run("models", "path", "t").stdout.strip()
    assert path.endswith("/tiny-Q2_K.gguf")
    assert run("models", "show", "t").stdout.startswith("name           test/tiny-GGUF:Q2_K\n")
    assert run("models", "verify", "t").exit_code == 0
    assert run("pull", "t").stderr.endswith("is up to date\n")
    assert run("models", "rm", "-y", "t").exit_code == 0


def test_verify_rehashes_against_the_recorded_sha256(hub):
    pulled("test/tiny-GGUF:Q8_0", "test/lfs-GGUF:Q4_K_M")
    result = run("models", "verify")
    assert result.exit_code == 0, result.stderr
    lines = sorted(result.stdout.splitlines())
    expected = sorted(
        [f"{hub.repos.sha256('test/lfs-GGUF/lfs-Q4_K_M.gguf')}  test/lfs-GGUF:Q4_K_M  lfs-Q4_K_M.gguf  ok",
         f"{hub.repos.sha256('test/tiny-GGUF/tiny-Q8_0.gguf')}  test/tiny-GGUF:Q8_0  tiny-Q8_0.gguf  ok"]
    )  # fmt: skip
    assert lines == expected


def test_path_of_a_model_not_downloaded(hub):
    one_line_error(
        run("models", "path", "test/tiny-GGUF"), 3, "test/tiny-GGUF is not downloaded", "llmcli pull"
    )


def test_models_show_and_pull_list_say_base_or_instruct(hub):
    pulled("test/tiny-GGUF:Q8_0", "test/split-GGUF:Q8_0")
    tiny = json.loads(run("models", "show", "test/tiny-GGUF:Q8_0", "--json").stdout)
    split = json.loads(run("models", "show", "test/split-GGUF:Q8_0", "--json").stdout)
    assert (tiny["model_type"], split["model_type"]) == ("instruct", "base")
    text = run("models", "show", "test/split-GGUF:Q8_0").stdout
    assert [line.split()[1] for line in text.splitlines() if line.startswith("type ")] == ["base"]
    listed = run("pull", "--list", "test/tiny-GGUF")
    assert "type: not in the repository's name" in listed.stderr  # the file's metadata tells, once pulled
    doc = json.loads(run("pull", "--list", "--json", "test/tiny-GGUF").stdout)
    assert all(m["type"] is None for m in doc["models"])


@pytest.mark.parametrize(
    ("repo", "files", "named"),
    [
        ("bartowski/Qwen2.5-0.5B-Instruct-GGUF", (), True),
        ("unsloth/gemma-3-270m-it-GGUF", (), True),
        ("TheBloke/Llama-2-7B-Chat-GGUF", (), True),
        ("unsloth/gemma-3-270m-GGUF", ("gemma-3-270m-Q4_K_M.gguf",), False),
        ("org/Italian-GGUF", (), False),
    ],
)
def test_hub_names_that_mark_an_instruct_model(repo, files, named):
    from llmcli.cli.pull import _named_instruct

    assert _named_instruct(repo, files) is named
