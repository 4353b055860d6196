"""Weight repacking (llama.cpp's extra CPU buffer types) and the AMX hosts where it stays off.

llama.cpp's AMX matmul crashes the process at the first multi-token batch on AMX hosts whose tile
state it does not set up; the default keeps the weights out of the AMX buffer there."""

from __future__ import annotations

import json

import pytest

from llmcli import doctor
from llmcli.engine import backend
from llmcli.render.doctor import _compute_lines

AMX_INFO = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | REPACK = 1 |"
PLAIN_INFO = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | LLAMAFILE = 1 | REPACK = 1 |"


@pytest.mark.parametrize(
    ("info", "amx"),
    [(AMX_INFO, True), (PLAIN_INFO, False), ("CPU : AMX_INT8 = 0 | AVX2 = 1 |", False),
     ("CUDA : ARCHS = 900 | CPU : AVX2 = 1 | AMX_INT8 = 1 |", True)],
)  # fmt: skip
def test_amx_is_read_from_the_system_info(monkeypatch, info, amx):
    monkeypatch.setattr(backend, "system_info", lambda: info)
    assert backend.amx_weights() is amx
    assert backend.weight_repack() is (not amx)  # the default: off exactly where AMX would run


@pytest.mark.parametrize("info", [AMX_INFO, PLAIN_INFO])
def test_an_explicit_choice_wins_over_the_default(monkeypatch, info):
    monkeypatch.setattr(backend, "system_info", lambda: info)
    assert backend.weight_repack(True) is True
    assert backend.weight_repack(False) is False


def test_doctor_says_why_repacking_is_off_on_an_amx_build(monkeypatch):
    import llama_cpp  # noqa: F401
    monkeypatch.setattr(backend, "system_info", lambda: AMX_INFO)
    compute = doctor.compute()
    assert compute["amx"] is True and compute["weight_repack"] is False
    line = dict(_compute_lines(compute, {}))["weight repack"]
    assert "AMX" in line and "--repack" in line
    monkeypatch.setattr(backend, "system_info", lambda: PLAIN_INFO)
    compute = doctor.compute()
    assert compute["weight_repack"] is True
    assert dict(_compute_lines(compute, {}))["weight repack"].startswith("on")


@pytest.mark.model
def test_a_multi_token_batch_runs_at_the_default_and_the_record_says_so():
    """The crash came at the first prompt of more than one token: a real prompt, and the record
    naming the choice; --no-repack is honoured (and gives a coherent answer) on any host."""
    from realmodel import generate_json, llmcli

    default = generate_json("Name three colours of the rainbow.", "--temperature", "0", "-n", "12")
    assert default["usage"]["prefill_tokens"] > 1 and default["text"].strip()
    assert default["model"]["weight_repack"] is backend.weight_repack()
    off = generate_json("Name three colours of the rainbow.", "--temperature", "0", "-n", "12", "--no-repack")
    assert off["model"]["weight_repack"] is False and off["text"].strip()
    if not backend.amx_weights():  # --repack where it is safe
        on = generate_json("Name three colours of the rainbow.", "--temperature", "0", "-n", "4", "--repack")
        assert on["model"]["weight_repack"] is True
    report = json.loads(llmcli("doctor", "--json", "--offline", check=True).stdout)
    assert report["compute"]["weight_repack"] is backend.weight_repack()


@pytest.mark.parametrize("command", ["generate", "chat"])
@pytest.mark.parametrize(
    ("info", "flag", "warned"),
    [(AMX_INFO, "--repack", True), (AMX_INFO, "--no-repack", False), (PLAIN_INFO, "--repack", False)],
)
def test_repack_typed_on_an_amx_build_warns(fake, monkeypatch, command, info, flag, warned):
    from helpers import run

    monkeypatch.setattr(backend, "system_info", lambda: info)
    args = ("hi",) if command == "generate" else ()
    result = run(command, *args, flag, input="/bye\n")
    assert result.exit_code == 0, result.stderr
    assert ("llama.cpp's AMX kernels, which crash" in result.stderr) is warned
    assert "AMX" not in result.stdout
    assert fake.made[0].options.repack is (flag == "--repack")
