"""`llmcli doctor`: versions, compute, directories, hub endpoint and default model, as text and JSON."""

from __future__ import annotations

import http.server
import json
import platform
import socket
import threading

import pytest
from helpers import run

from llmcli import __version__, doctor


@pytest.fixture
def hub_server(monkeypatch):
    """A loopback HTTP server standing in for the hub; HF_ENDPOINT points at it."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint + "/")
    for proxy in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)
    yield endpoint
    server.shutdown()
    server.server_close()


@pytest.fixture
def dead_endpoint(monkeypatch):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"  # nothing listens there now
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    return endpoint


def doc(*args: str):
    result = run("doctor", "--json", *args)
    return result, json.loads(result.stdout)


def test_json_report(hub_server):
    result, report = doc()
    assert result.exit_code == 0, report["problems"]
    assert set(report) == {
        "schema_version",  # docs/doctor.schema.json
        "versions",
        "compute",
        "cpu",
        "config",
        "directories",
        "hub",
        "default_model",
        "problems",
    }
    versions = report["versions"]
    assert versions["llmcli"] == __version__
    assert versions["python"] == platform.python_version()
    assert report["hub"] == {
        "endpoint": hub_server,
        "endpoint_from": "HF_ENDPOINT",
        "offline": False,
        "token": False,
        "checked": True,
        "answers": True,
        "status": 200,
        "ms": report["hub"]["ms"],
        "error": None,
    }
    assert report["problems"] == []


def test_llama_cpp_versions_and_compute():
    import llama_cpp

    from llmcli.engine.backend import backend_name
    from llmcli.engine.llama import physical_cores

    _, report = doc("--offline")
    assert report["versions"]["llama_cpp_python"] == llama_cpp.__version__
    assert report["versions"]["ggml"]
    compute = report["compute"]
    assert compute["backend"] == backend_name()
    assert compute["gpu_offload"] is bool(llama_cpp.llama_supports_gpu_offload())
    assert any(d["type"] == "CPU" for d in compute["devices"])
    assert all(d["memory_total"] >= d["memory_free"] >= 0 for d in compute["devices"])
    assert compute["system_info"] == llama_cpp.llama_print_system_info().decode().strip()
    assert compute["features"] == doctor.parse_system_info(compute["system_info"])
    assert report["cpu"]["physical_cores"] == physical_cores()
    assert report["cpu"]["threads"] == physical_cores()


def test_threads_follow_the_setting(monkeypatch):
    monkeypatch.setenv("LLMCLI_THREADS", "3")
    assert doc("--offline")[1]["cpu"]["threads"] == 3


def test_parse_system_info():
    text = (
        "CUDA : ARCHS = 890,900 | USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 | CPU : SSE3 = 1 | AVX512 = 0 | "
        "AVX2 = 1 | LLAMAFILE = 1 |"
    )
    assert doctor.parse_system_info(text) == {
        "CUDA": ["ARCHS=890,900", "USE_GRAPHS", "PEER_MAX_BATCH_SIZE=128"],
        "CPU": ["SSE3", "AVX2", "LLAMAFILE"],
    }


def test_directories(isolated):
    (isolated / "data").mkdir()
    (isolated / "data" / "aliases.json").write_text("{}" * 50)
    dirs = doc("--offline")[1]["directories"]
    assert set(dirs) == {"config", "data", "cache", "kv", "models"}
    assert dirs["config"]["path"] == str(isolated)
    assert dirs["data"] == {**dirs["data"], "path": str(isolated / "data"), "exists": True, "used_bytes": 100}
    assert dirs["models"]["path"] == str(isolated / "hf" / "hub")
    assert dirs["models"]["exists"] is False and dirs["models"]["used_bytes"] == 0
    assert all(d["free_bytes"] > 0 for d in dirs.values())


def test_file_sizes_in_the_units_kv_list_uses(isolated, monkeypatch):
    """The KV cap is set in MB (kv_cache_max_mb): the report says 2.0 GB as `kv list` does, not
    1.9 GiB; sizes on disk are decimal like every other size llmcli prints."""
    monkeypatch.setenv("LLMCLI_KV_CACHE_MAX_MB", "2000")
    (isolated / "data").mkdir()
    (isolated / "data" / "aliases.json").write_text("x" * 3600)
    result = run("doctor", "--offline")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    kv = next(line for line in lines if line.startswith("  KV states "))
    assert "2.0 GB (kv_cache_max_mb)" in kv, kv
    data = next(line for line in lines if line.startswith("  data dir "))
    assert "(3.6 kB used," in data, data
    assert "iB" not in kv + data


def test_unreachable_hub_is_a_warning(dead_endpoint):
    result, report = doc()
    assert result.exit_code == 0
    assert report["hub"]["answers"] is False and report["hub"]["error"]
    assert report["problems"] == [{"level": "warning", "message": report["problems"][0]["message"]}]
    assert dead_endpoint in report["problems"][0]["message"]


def test_offline_skips_the_hub(monkeypatch, dead_endpoint):
    assert doc("--offline")[1]["hub"]["checked"] is False
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub = doc()[1]["hub"]
    assert hub["checked"] is False and hub["offline"] is True
    assert "not checked: HF_HUB_OFFLINE" in run("doctor").stdout


def test_default_endpoint(monkeypatch):
    hub = doctor.hub(network=False)
    assert hub["endpoint"] == "https://huggingface.co" and hub["endpoint_from"] == "default"


def test_invalid_config_is_an_error_but_the_report_is_complete(isolated):
    (isolated / "config.toml").write_text("top_k = 1\nbogus = 2\n")
    result, report = doc("--offline")
    assert result.exit_code == 1
    assert report["config"]["valid"] is False
    assert "line 2: unknown key 'bogus'" in report["config"]["error"]
    assert report["problems"][0]["level"] == "error"
    assert "versions" in report and "compute" in report


def test_configured_model_missing_is_a_warning(isolated):
    (isolated / "config.toml").write_text(f'model = "{isolated / "gone.gguf"}"\n')
    result, report = doc("--offline")
    assert result.exit_code == 0
    model = report["default_model"]
    assert model["configured"] == str(isolated / "gone.gguf")
    assert model["configured_present"] is False
    assert any("gone.gguf" in p["message"] for p in report["problems"])


def test_configured_model_present(isolated):
    gguf = isolated / "m.gguf"
    gguf.write_bytes(b"GGUF")
    (isolated / "config.toml").write_text(f'model = "{gguf}"\n')
    model = doc("--offline")[1]["default_model"]
    assert model["configured_present"] is True and model["configured_path"] == str(gguf)


def test_bundled_default_model():
    from llmcli.hub import default_model

    model = doc("--offline")[1]["default_model"]
    assert model["configured"] is None
    assert model["bundled_installed"] is default_model.installed()
    assert model["bundled_name"] == default_model.DEFAULT_REF


def test_broken_part_is_reported_not_raised(monkeypatch):
    def boom():
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(doctor, "directories", boom)
    report = doctor.collect(network=False)
    assert report["directories"] == {"error": "RuntimeError: disk on fire"}
    assert {"level": "error", "message": "directories: RuntimeError: disk on fire"} in report["problems"]


def test_cpu_only_build_with_a_visible_gpu_says_how_to_rebuild(monkeypatch):
    monkeypatch.setattr(doctor, "gpus_visible", lambda: ["NVIDIA H200 (0000:00:01.0)"])
    report = {"compute": {"gpu_offload": False, "gpus_visible": doctor.gpus_visible()}}
    (finding,) = doctor.findings(report)
    assert finding["level"] == "warning" and "-DGGML_CUDA=on" in finding["message"]


def test_text_report(hub_server):
    result = run("doctor")
    assert result.exit_code == 0
    out = result.stdout
    titles = [line for line in out.splitlines() if line and not line.startswith(" ")]
    assert titles == ["versions", "compute", "files", "hub", "default model"]
    assert f"  llmcli             {__version__}\n" in out
    assert f"{hub_server} (answers: HTTP 200 in " in out
    assert result.stderr == ""
