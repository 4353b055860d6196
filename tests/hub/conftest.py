"""Fixtures for the hub tests: olah on loopback (session), HF_ENDPOINT per test, the range proxy.

The whole directory is skipped, cleanly, only when olah is not installed (`pip install olah`;
the `test` extra installs it).
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import huggingface_hub  # noqa: F401  imported before any test sets HF_HUB_OFFLINE (read at import)
import pytest
from helpers import use_engine
from hubtools import OlahHub, ProxyServer, RangeProxy, build_repos, free_port, olah_command, wait_for_port


@pytest.fixture(scope="session")
def olah_hub(tmp_path_factory):
    """olah serving the test repositories on a free loopback port, for the whole session."""
    command = olah_command()
    if command is None:
        pytest.skip("olah is not installed (pip install olah, or the test extra)")
    base = tmp_path_factory.mktemp("olah")
    repos = build_repos(base / "mirrors", base)
    port = free_port()
    config = base / "olah.toml"
    config.write_text(
        f'[basic]\nhost = "127.0.0.1"\nport = {port}\nrepos-path = "{base / "repos"}"\n'
        f'mirrors-path = ["{base / "mirrors"}"]\n[accessibility]\noffline = true\n'
    )
    with (base / "olah.log").open("wb") as log:
        proc = subprocess.Popen([*command, "-c", str(config)], cwd=base, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_port(port, proc)
            yield OlahHub(f"http://127.0.0.1:{port}", repos, proc)
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def hub(olah_hub, monkeypatch) -> OlahHub:
    """HF_ENDPOINT pointed at olah for this test."""
    monkeypatch.setenv("HF_ENDPOINT", olah_hub.url)
    return olah_hub


@pytest.fixture(scope="session")
def _proxy_server(olah_hub):
    server = ProxyServer(olah_hub.url)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy(_proxy_server, olah_hub, monkeypatch) -> RangeProxy:
    """HF_ENDPOINT pointed at the range-capable proxy in front of olah, with a fresh state."""
    _proxy_server.reset()
    url = f"http://127.0.0.1:{_proxy_server.server_address[1]}"
    monkeypatch.setenv("HF_ENDPOINT", url)
    return RangeProxy(url, _proxy_server.state, olah_hub)


@pytest.fixture(autouse=True)
def _no_internet(monkeypatch):
    """Unless a test points HF_ENDPOINT at olah or the proxy, it points at a closed loopback port."""
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")


@pytest.fixture(autouse=True)
def _fast_retries(monkeypatch):
    """Keep the bounded retries, but without the pauses between them."""
    from llmcli.hub import download, remote

    monkeypatch.setattr(remote, "BACKOFF_S", 0.01)
    monkeypatch.setattr(download, "BACKOFF_S", 0.01)


@pytest.fixture
def engine(monkeypatch):
    """Model loading goes to the fake engine; returns the paths it was asked to load."""
    from llmcli.engine.fake import FakeEngine

    loaded: list[Path] = []
    build = FakeEngine.factory()

    def factory(path, options, debug):
        loaded.append(Path(path))
        return build(path, options, debug)

    use_engine(factory)
    return loaded
