"""The reference grammar and quantization rules, as pure functions (no hub needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmcli.errors import ModelNotFoundError, UsageError
from llmcli.hub import quants, refs
from llmcli.hub.refs import AliasRef, HubRef, PathRef


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("org/repo", HubRef("org/repo")),
        ("org/repo:q4_k_m", HubRef("org/repo", quant="Q4_K_M")),
        ("org/repo:IQ4_XS", HubRef("org/repo", quant="IQ4_XS")),
        ("org/repo:ud-q4_k_xl", HubRef("org/repo", quant="UD-Q4_K_XL")),
        ("org/repo/sub/file-Q8_0.gguf", HubRef("org/repo", filename="sub/file-Q8_0.gguf")),
        ("org/repo@v1.0", HubRef("org/repo", revision="v1.0")),
        ("org/repo:Q8_0@v1.0", HubRef("org/repo", quant="Q8_0", revision="v1.0")),
        ("org/repo@v1.0:Q8_0", HubRef("org/repo", quant="Q8_0", revision="v1.0")),
        ("org/repo@refs/pr/1", HubRef("org/repo", revision="refs/pr/1")),
        ("org/repo/f.gguf@" + "a" * 40, HubRef("org/repo", filename="f.gguf", revision="a" * 40)),
        ("hf.co/org/repo:Q4_K_M", HubRef("org/repo", quant="Q4_K_M")),
        ("https://huggingface.co/org/repo", HubRef("org/repo")),
        (
            "https://huggingface.co/org/repo/blob/main/x.gguf",
            HubRef("org/repo", filename="x.gguf", revision="main"),
        ),
        ("my-model", AliasRef("my-model")),
        ("model.gguf", PathRef(Path("model.gguf"))),
        ("models/model.gguf", PathRef(Path("models/model.gguf"))),
        ("./org/repo/x.gguf", PathRef(Path("./org/repo/x.gguf"))),
        ("/abs/x.gguf", PathRef(Path("/abs/x.gguf"))),
    ],
)
def test_parse(text, expected):
    assert refs.parse(text) == expected


def test_existing_file_wins_over_hub_syntax(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "repo").mkdir(parents=True)
    (tmp_path / "org" / "repo" / "x.gguf").write_bytes(b"GGUF")
    assert refs.parse("org/repo/x.gguf") == PathRef(Path("org/repo/x.gguf"))
    assert refs.parse("org/repo") == HubRef("org/repo")  # a directory is not a model file


@pytest.mark.parametrize(
    "text",
    ["", "  ", "org/", "org/repo:", "org/repo:Q4:K", "org/repo:Q4 K", "o rg/repo", "org/repo@", "org/re--po",
     "org/repo@a..b", "org/repo/README.md", "org/repo/x.gguf:Q4_K_M", "org/repo:Q4@v:Q8", "gemma:2b",
     "-org/repo", "org/repo/../x.gguf"],
)  # fmt: skip
def test_malformed(text):
    with pytest.raises(UsageError) as err:
        refs.parse(text)
    assert err.value.hint == refs.SYNTAX_HINT


def test_canonical_text_round_trips():
    for text in ("org/repo", "org/repo:Q4_K_M", "org/repo/a/b.gguf", "org/repo:Q8_0@v1", "org/repo@main"):
        assert str(refs.parse(text)) == text


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("Llama-3.2-1B-Instruct-Q4_K_M.gguf", "Q4_K_M"),
        ("qwen2.5-0.5b-instruct-q8_0.gguf", "Q8_0"),
        ("llama-2-7b-chat.Q5_K_S.gguf", "Q5_K_S"),
        ("gemma-3-270m-it-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"),
        ("model-IQ4_XS-00002-of-00003.gguf", "IQ4_XS"),
        ("Q8_0/model-00001-of-00002.gguf", "Q8_0"),
        ("ggml-model-f16.gguf", "F16"),
        ("Mistral-7B-bf16.gguf", "BF16"),
        ("Qwen2.5-7B-Instruct.gguf", None),
    ],
)
def test_quantization_from_file_names(name, label):
    assert quants.label_of(name) == label


def test_grouping_splits_and_skipping_projectors():
    names = ["a-Q4_K_M-00002-of-00002.gguf", "a-Q4_K_M-00001-of-00002.gguf", "a-Q8_0.gguf",
             "mmproj-a-F16.gguf", "README.md", "b-Q2_K-00001-of-00003.gguf"]  # fmt: skip
    groups = quants.group_files(names)
    assert [(g.label, g.files, g.complete) for g in groups] == [
        ("Q4_K_M", ("a-Q4_K_M-00001-of-00002.gguf", "a-Q4_K_M-00002-of-00002.gguf"), True),
        ("Q8_0", ("a-Q8_0.gguf",), True),
        ("Q2_K", ("b-Q2_K-00001-of-00003.gguf",), False),
    ]


def test_default_choice_follows_the_documented_preference():
    def pick(*names):
        return quants.choose(quants.group_files(names), repo="r").label

    assert pick("m-Q8_0.gguf", "m-Q4_K_M.gguf", "m-Q2_K.gguf") == "Q4_K_M"
    assert pick("m-Q8_0.gguf", "m-Q4_K_S.gguf") == "Q4_K_S"
    assert pick("m-Q8_0.gguf", "m-Q5_K_M.gguf", "m-F16.gguf") == "Q5_K_M"
    assert pick("m-F16.gguf", "m-Q3_K_M.gguf") == "Q3_K_M"
    assert pick("z.gguf", "a.gguf") is None  # no labels: the first by name
    assert quants.PREFERENCE[:5] == ("Q4_K_M", "Q4_K_S", "Q5_K_M", "Q4_0", "Q8_0")


def test_choice_errors():
    groups = quants.group_files(["m-Q8_0.gguf", "m-Q2_K.gguf"])
    with pytest.raises(ModelNotFoundError, match="has no Q4_K_M") as err:
        quants.choose(groups, repo="r", quant="q4_k_m")
    assert err.value.hint == "it has: Q8_0, Q2_K"
    with pytest.raises(ModelNotFoundError, match="no GGUF model files"):
        quants.choose([], repo="r")


def test_an_incomplete_split_model_is_named_as_such():
    groups = quants.group_files(["m-Q4_K_M-00001-of-00003.gguf", "m-Q4_K_M-00003-of-00003.gguf"])
    with pytest.raises(ModelNotFoundError, match="Q4_K_M is a split model with 2 of its 3 files") as err:
        quants.choose(groups, repo="r", quant="Q4_K_M")
    assert "incomplete" in err.value.hint
    with pytest.raises(ModelNotFoundError, match="has no Q8_0") as err:
        quants.choose(groups, repo="r", quant="Q8_0")
    assert err.value.hint == "it has only incomplete split models"
