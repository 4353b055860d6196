"""A model's image projector fetched with it (issue 57): `pull` brings the repository's
`mmproj*.gguf` beside the model (its own quantization, else F16, else the nearest), `models show`
says `vision: yes (projector NAME)`, generate finds it there, and `models rm` of the last model
takes the projector with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from documents import check
from hubtools import blobs, run

from llmcli.hub import quants

pytestmark = pytest.mark.hub


def test_the_projector_chosen_for_a_quantization():
    files = [
        "m-Q4_K_M.gguf",
        "m-Q8_0.gguf",
        "mmproj-m-F16.gguf",
        "mmproj-m-Q8_0.gguf",
        "sub/mmproj-x-Q4_K_M.gguf",
    ]
    group = lambda name: quants.Group(quants.label_of(name), (name,))  # noqa: E731
    assert quants.choose_projector(files, group("m-Q8_0.gguf")) == "mmproj-m-Q8_0.gguf"  # its own
    assert quants.choose_projector(files, group("m-Q4_K_M.gguf")) == "mmproj-m-F16.gguf"  # else F16
    no_f16 = ["m-Q4_K_M.gguf", "mmproj-m-BF16.gguf", "mmproj-m-F32.gguf", "mmproj-m-Q8_0.gguf"]
    assert quants.choose_projector(no_f16, group("m-Q4_K_M.gguf")) == "mmproj-m-Q8_0.gguf"  # nearest
    assert quants.choose_projector(["m-F16.gguf", "mmproj-m-BF16.gguf", "mmproj-m-F32.gguf"],
                                   group("m-F16.gguf")) == "mmproj-m-BF16.gguf"  # fmt: skip
    assert quants.choose_projector(["m-Q4_K_M.gguf", "imatrix.gguf"], group("m-Q4_K_M.gguf")) is None
    assert quants.choose_projector(files, group("sub/m-Q4_K_M.gguf")) == "sub/mmproj-x-Q4_K_M.gguf"
    assert [g.first for g in quants.group_files(files)] == ["m-Q4_K_M.gguf", "m-Q8_0.gguf"]  # not models


def test_pull_fetches_the_projector_beside_the_model(hub):
    result = run("pull", "--json", "test/vision-GGUF:Q8_0")
    assert result.exit_code == 0, result.stderr
    doc = check(json.loads(result.stdout), "pull/pulled")
    projector = Path(doc["projector"])
    assert projector.name == "mmproj-vision-Q8_0.gguf" and projector.parent == Path(doc["files"][0]).parent
    assert projector.read_bytes() == hub.repos.content("test/vision-GGUF/mmproj-vision-Q8_0.gguf")
    assert doc["size"] == len(hub.repos.content("test/vision-GGUF/vision-Q8_0.gguf"))  # the model's
    assert "with its image projector mmproj-vision-Q8_0.gguf" in result.stderr
    assert len(blobs("test/vision-GGUF")) == 2  # the model and its projector, nothing else

    again = run("pull", "test/vision-GGUF:Q4_K_M")  # no Q4_K_M projector beside it: F16
    assert again.exit_code == 0, again.stderr
    assert "mmproj-vision-F16.gguf" in again.stderr
    assert len(blobs("test/vision-GGUF")) == 4

    listing = run("pull", "--list", "test/vision-GGUF")
    assert listing.exit_code == 0 and "mmproj" not in listing.stdout  # a projector is not a model


def test_models_show_says_vision_and_generate_finds_it(hub):
    assert run("pull", "test/vision-GGUF:Q8_0").exit_code == 0
    shown = run("models", "show", "test/vision-GGUF:Q8_0")
    assert shown.exit_code == 0, shown.stderr
    rows = {line[:14].strip(): line[15:] for line in shown.stdout.splitlines()}
    assert rows["vision"] == "yes (projector mmproj-vision-Q8_0.gguf)"
    doc = check(json.loads(run("models", "show", "--json", "test/vision-GGUF:Q8_0").stdout), "models/show")
    assert Path(doc["projector"]).name == "mmproj-vision-Q8_0.gguf"

    assert run("pull", "test/tiny-GGUF:Q8_0").exit_code == 0
    rows = {
        line[:14].strip(): line[15:]
        for line in run("models", "show", "test/tiny-GGUF:Q8_0").stdout.splitlines()
    }
    assert rows["vision"] == "no"

    from llmcli.hub import refs, store
    from llmcli.media import projector

    model = store.find_local(refs.parse("test/vision-GGUF:Q8_0"))
    assert model is not None and projector.find(str(model.path), None) == Path(doc["projector"])
    assert run("pull", "test/vision-GGUF:Q4_K_M").exit_code == 0  # two projectors in one snapshot now
    for quant, name in (("Q8_0", "mmproj-vision-Q8_0.gguf"), ("Q4_K_M", "mmproj-vision-F16.gguf")):
        shown = run("models", "show", f"test/vision-GGUF:{quant}").stdout
        assert f"vision         yes (projector {name})" in shown.splitlines()


def test_rm_of_the_last_model_takes_the_projector(hub):
    assert run("pull", "test/vision-GGUF:Q8_0").exit_code == 0
    assert run("pull", "test/vision-GGUF:Q4_K_M").exit_code == 0
    assert len(blobs("test/vision-GGUF")) == 4
    assert run("models", "rm", "--yes", "test/vision-GGUF:Q8_0").exit_code == 0
    assert len(blobs("test/vision-GGUF")) == 2  # Q8_0 and its projector; F16 stays for Q4_K_M
    assert run("models", "rm", "--yes", "test/vision-GGUF:Q4_K_M").exit_code == 0
    assert blobs("test/vision-GGUF") == []
