"""Every bench scenario refuses a model of the wrong kind in one line, exit 2, before anything is
measured: an embedding model for the pp/tg tests (the default), chat, spec and batch; a generative
one for --scenario embed. On the fake backend (nothing loaded, nothing run), then as a user runs it,
in a process of its own on the real backend: an embedding GGUF written by tests/ggufgen.py (its
header says BERT with mean pooling; llama.cpp never sees it) and the real all-MiniLM-L6-v2
(tests/minilm.py; skipped where it cannot be built), whose batch run used to abort inside
llama.cpp with a backtrace on stdout. Also: the old `bench -c` still works, with a notice."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import ggufgen
import pytest
from benchfake import FakeBackend
from helpers import bench_in, run

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = [(), ("--scenario", "chat"), ("--scenario", "spec"), ("--scenario", "batch")]


@pytest.fixture
def backend(tmp_path, monkeypatch) -> FakeBackend:
    return bench_in(tmp_path, monkeypatch, FakeBackend(embedding={"e.gguf"}), ("a.gguf", "e.gguf"))


def _one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("output", ["md", "json", "jsonl"])
def test_an_embedding_model_is_refused_before_anything_loads(backend, scenario, output):
    result = run("bench", "-m", "e.gguf", *scenario, "-n", "4", "-r", "1", "-o", output)
    assert result.exit_code == 2, result.stderr
    line = _one_line(result)
    assert "e.gguf is an embedding model (fake, mean pooling)" in line
    assert "--scenario embed -m" in line  # what measures it
    assert result.stdout == ""
    assert backend.loads == [] and backend.engines == [] and backend.runs == 0


def test_a_mix_is_refused_before_the_generative_model_is_measured(backend):
    result = run("bench", "-m", "a.gguf,e.gguf", "-p", "16", "-n", "4", "-r", "1", "-o", "jsonl")
    assert result.exit_code == 2 and "e.gguf is an embedding model" in _one_line(result)
    assert result.stdout == "" and backend.loads == [] and backend.runs == 0


def test_an_embedding_draft_model_is_refused(backend):
    result = run("bench", "--scenario", "spec", "-n", "4", "-r", "1", "-md", "e.gguf")
    assert result.exit_code == 2
    assert "draft model e.gguf is an embedding model" in _one_line(result)
    assert result.stdout == "" and backend.engines == []


def test_the_old_bench_c_still_works_with_a_notice(backend):
    """`bench -c` was --concurrency; -c is the context size elsewhere, so bench has no -c now: the
    old spelling is rewritten to --concurrency, and said so, for one release."""
    result = run("bench", "-c", "2", "-r", "1")
    assert "-c is now --concurrency" in result.stderr
    # a local model: --concurrency is the serving benchmark's, refused as before
    assert result.exit_code == 2 and "--concurrency: for a served model" in result.stderr
    assert backend.loads == []
    assert "-c" not in _bench_help_letters()


def _bench_help_letters() -> set[str]:
    import typer.main

    from llmcli.cli.app import app

    command = typer.main.get_command(app).commands["bench"]
    return {name for p in command.params for name in getattr(p, "opts", []) if not name.startswith("--")}


def test_the_old_bench_c_sets_the_concurrency_of_a_served_run(fault_server):
    result = run("bench", "-m", fault_server.ref, "-c", "2", "--requests", "4", "-p", "8", "-n", "4",
                 "-r", "1", "--no-warmup", "-o", "json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "llmcli: note: bench: -c is now --concurrency" in result.stderr
    import json

    rows = json.loads(result.stdout)["results"]
    assert [r["concurrency"] for r in rows] == [2] and rows[0]["completed"] == 4


# -- as a user runs it: a process of its own, the real backend ------------------------------------


def _llmcli(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMCLI_")}
    env.update(PYTHONPATH=str(ROOT / "src"), LLMCLI_CONFIG=str(home / "config.toml"),
               LLMCLI_DATA_DIR=str(home / "data"), NO_COLOR="1")  # fmt: skip
    return subprocess.run([sys.executable, "-m", "llmcli", *args], capture_output=True, text=True, env=env,
                          timeout=300, stdin=subprocess.DEVNULL)  # fmt: skip


def _refused(done: subprocess.CompletedProcess, says: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:], done.stdout[-2000:])
    assert done.stdout == ""  # nothing of llama.cpp's (a backtrace, a table) reaches stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr


@pytest.fixture
def bert(tmp_path) -> Path:
    """An embedding GGUF by its header (BERT, mean pooling); its tensors are stand-ins."""
    return ggufgen.write_gguf(tmp_path / "tiny-bert.gguf", arch="bert", chat_template=None,
                              extra_kv={"bert.pooling_type": 1, "bert.attention.causal": False})  # fmt: skip


@pytest.fixture
def llama(tmp_path) -> Path:
    """A generative GGUF by its header (llama, no pooling)."""
    return ggufgen.write_gguf(tmp_path / "tiny-llama.gguf")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_written_embedding_gguf_is_refused_by_the_real_backend(bert, tmp_path, scenario):
    done = _llmcli("bench", "-m", str(bert), *scenario, "-n", "4", "-r", "1", "-o", "json", home=tmp_path)
    _refused(done, "tiny-bert.gguf is an embedding model (bert, mean pooling)")


def test_a_generative_gguf_is_refused_by_the_embed_scenario_before_anything_is_measured(bert, llama,
                                                                                       tmp_path):
    # the embedding model first: it would be loaded and measured before the second were looked at
    done = _llmcli("bench", "--scenario", "embed", "-m", f"{bert},{llama}", "--texts", "3", "-r", "1",
                   "-o", "json", home=tmp_path)  # fmt: skip
    _refused(done, "tiny-llama.gguf is a generative model (llama)")
    assert "warm-up" not in done.stderr and "repetition" not in done.stderr


@pytest.fixture(scope="module")
def minilm_gguf() -> Path:
    import minilm

    try:
        return minilm.path()
    except minilm.Unavailable as exc:
        pytest.skip(f"all-MiniLM-L6-v2 cannot be built here: {exc}")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_minilm_is_refused_by_every_scenario_that_wants_text(minilm_gguf, tmp_path, scenario):
    done = _llmcli("bench", "-m", str(minilm_gguf), *scenario, "-n", "4", "-r", "1", "-o", "json",
                   home=tmp_path)  # fmt: skip
    _refused(done, "is an embedding model (bert, mean pooling)")


def test_minilm_batch_run_no_longer_aborts_in_llama_cpp(minilm_gguf, tmp_path):
    """The trial's command: it aborted in llama.cpp (GGML_ASSERT, exit 134, a backtrace on stdout)."""
    done = _llmcli("bench", "--scenario", "batch", "-m", str(minilm_gguf), "-o", "json", home=tmp_path)
    _refused(done, "llmcli bench --scenario batch measures a model that writes text")
    assert "GGML_ASSERT" not in done.stderr
