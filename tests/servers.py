"""Servers for the served-model tests: a real llama-server (built from the installed release's
vendored llama.cpp through `llamacpp_tools`, cached outside the checkout), llama-cpp-python's own
server, and a small misbehaving server of our own for the faults (stdlib, in a thread).

The real servers run the bundled SmolLM2-135M-Instruct on a free loopback port and are started once
per test session (`-np 4`: four parallel slots, as the serving benchmark expects)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

MODEL_ALIAS = "smollm2"
START_TIMEOUT_S = 300  # a loaded two-core machine may take a while to map the model


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def smollm2_path() -> Path:
    from llmcli.hub.default_model import model_path

    return model_path("smollm2-135m")


@dataclass
class Running:
    url: str  # the API base, .../v1
    model: str
    process: subprocess.Popen
    log: Path

    @property
    def root(self) -> str:
        return self.url.removesuffix("/v1")

    @property
    def ref(self) -> str:
        return f"{self.url}#{self.model}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def _wait_ready(url: str, process: subprocess.Popen, log: Path, timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    process.terminate()
    raise RuntimeError(f"the server did not become ready in {timeout_s:.0f} s: {log.read_text()[-2000:]}")


def start_llama_server(
    log_dir: Path, *, slots: int = 4, ctx: int = 8192, threads: int = 2, extra: list[str] | None = None,
    model: Path | None = None,
) -> Running:  # fmt: skip
    """llama-server on a free port with the bundled model (or `model`); raises ToolsUnavailable when
    it cannot build."""
    import llamacpp_tools

    binary = llamacpp_tools.ensure("llama-server")["llama-server"]
    port = free_port()
    log = log_dir / f"llama-server-{port}.log"
    cmd = [
        str(binary),
        "-m",
        str(model or smollm2_path()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-np",
        str(slots),
        "-c",
        str(ctx),
        "-t",
        str(threads),
        "--alias",
        MODEL_ALIAS,
        "--metrics",
        *llamacpp_tools.weights_args("llama-server"),
        *(extra or []),
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    _wait_ready(f"http://127.0.0.1:{port}/health", process, log)
    return Running(f"http://127.0.0.1:{port}/v1", MODEL_ALIAS, process, log)


# `python -m llama_cpp.server`, with the weights where llmcli puts them: llama-cpp-python's server
# has no --no-repack, and on an AMX build its default (the AMX buffer) crashes the first
# multi-token batch on many AMX hosts (llmcli.engine.backend.weight_repack).
_PYTHON_SERVER = """
import runpy
from llama_cpp import llama_cpp as binding
from llmcli.engine.backend import weight_repack

default_params = binding.llama_model_default_params

def model_params():
    params = default_params()
    params.use_extra_bufts = weight_repack()
    return params

binding.llama_model_default_params = model_params
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


def start_python_server(log_dir: Path) -> Running:
    """llama-cpp-python's own OpenAI-compatible server (the `server` extra) with the bundled model."""
    port = free_port()
    log = log_dir / f"llama-cpp-python-server-{port}.log"
    cmd = [
        sys.executable,
        "-c",
        _PYTHON_SERVER,
        "--model",
        str(smollm2_path()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model_alias",
        MODEL_ALIAS,
        "--n_ctx",
        "2048",
        "--n_threads",
        "2",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    _wait_ready(f"http://127.0.0.1:{port}/v1/models", process, log)
    return Running(f"http://127.0.0.1:{port}/v1", MODEL_ALIAS, process, log)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """A real llama-server, -np 4, built once and cached (skipped only where it cannot build)."""
    import llamacpp_tools

    try:
        server = start_llama_server(tmp_path_factory.mktemp("llama-server"))
    except llamacpp_tools.ToolsUnavailable as exc:
        pytest.skip(f"llama-server cannot be built here: {exc}")
    yield server
    server.stop()


VLLM_START_TIMEOUT_S = 900  # the first start compiles (about 2 min alone; much longer on a loaded machine)
VLLM_CONTEXT = 2048


def start_vllm(log_dir: Path, *, eager: bool = True, extra: list[str] | None = None) -> Running:
    """vLLM's OpenAI-compatible server (its CPU build, in its own cached venv: tests/vllm_tools.py)
    on a free loopback port, serving the bundled SmolLM2 converted to a Hugging Face folder; raises
    VllmUnavailable when it cannot be installed. `eager` (the tests'): no torch.compile (`-O0`), so
    it starts in about half a minute instead of one and a half (vLLM 0.32's compile cache does not
    load on this build, so every start compiles) and decodes about a quarter slower; the benchmarks
    start it compiled."""
    import vllm_tools

    args = [
        "--max-model-len",
        str(VLLM_CONTEXT),
        "--dtype",
        "bfloat16",
        # SmolLM2 does not reason: a parser of the tests' own puts an answer's first tokens in
        # vLLM's `reasoning` field when a request turns thinking on (--think), and nothing otherwise
        "--reasoning-parser-plugin",
        str(Path(__file__).parent / "data" / "vllm_reasoning_plugin.py"),
        "--reasoning-parser",
        "llmcli-test",
        *(["-O0"] if eager else []),
        *(extra or []),
    ]
    return _launch_vllm(vllm_tools.smollm2(), MODEL_ALIAS, args, log_dir)


def start_vllm_embedding(log_dir: Path, folder: Path, alias: str) -> Running:
    """vLLM serving an embedding model's Hugging Face folder with its pooling runner (float32,
    without torch.compile): `/v1/embeddings`."""
    args = ["--runner", "pooling", "--dtype", "float32", "-O0"]  # its context: the folder's own
    return _launch_vllm(folder, alias, args, log_dir)


def _launch_vllm(folder: Path, alias: str, args: list[str], log_dir: Path) -> Running:
    """vLLM's OpenAI-compatible server on a free loopback port, ready."""
    import vllm_tools

    interpreter = vllm_tools.python()
    port = free_port()
    log = log_dir / f"vllm-{port}.log"
    cmd = [str(interpreter), "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
           "--served-model-name", alias, "--host", "127.0.0.1", "--port", str(port), *args]  # fmt: skip
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    env.pop("PYTHONPATH", None)  # its own venv, not llmcli's
    with log.open("wb") as out:
        process = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    _wait_ready(f"http://127.0.0.1:{port}/v1/models", process, log, VLLM_START_TIMEOUT_S)
    return Running(f"http://127.0.0.1:{port}/v1", alias, process, log)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    """A real vLLM server (CPU build), installed and converted once and cached; skipped only where
    vLLM cannot be installed (no network to PyPI on a first run, no wheel for this platform).
    `LLMCLI_TEST_VLLM=URL` (the API base, .../v1) uses a server already running instead, started
    as `start_vllm` starts it (`python tests/servers.py vllm` starts one and prints its URL)."""
    import vllm_tools

    given = os.environ.get("LLMCLI_TEST_VLLM")
    if given:
        yield Running(given.rstrip("/"), MODEL_ALIAS, subprocess.Popen(["true"]), Path(os.devnull))
        return
    try:
        server = start_vllm(tmp_path_factory.mktemp("vllm"))
    except vllm_tools.VllmUnavailable as exc:
        pytest.skip(f"vLLM cannot be installed here: {exc}")
    yield server
    server.stop()
    try:  # its engine core runs in a process of its own, in the server's session
        os.killpg(server.process.pid, signal.SIGKILL)
    except OSError:
        pass


@pytest.fixture(scope="session")
def python_server(tmp_path_factory):
    try:
        import llama_cpp.server.app  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"llama-cpp-python's server extra is not installed: {exc}")
    server = start_python_server(tmp_path_factory.mktemp("llama-cpp-python-server"))
    yield server
    server.stop()


# -- the misbehaving server ---------------------------------------------------------------------


@dataclass
class Behaviour:
    """What the fault server does with the next chat or completion request."""

    mode: str = "ok"  # ok, status, die, malformed, html, stall, slow, error_event
    status: int = 200
    retry_after: str | None = None
    failures: int = 0  # for "status": answer `status` this many times, then stream normally
    chunks: int = 3  # text chunks before dying / stalling
    delay_s: float = 0.05  # between chunks (slow: 0.1 s for a long time)
    usage: bool = True
    message: str = "nope"
    key: str | None = None  # when set, a request without `Authorization: Bearer KEY` gets auth_status
    auth_status: int = 401
    # mode "script": each request streams the next list of chunk documents as they are (the
    # `choices`/`usage` of each `data:` event), then [DONE]
    scripts: list[list[dict]] = field(default_factory=list)
    serial: bool = False  # answer one request at a time (the others queue): a server that saturates
    # GET: fields added to each model of the /models listing (vLLM's max_model_len, llama-server's
    # meta), and the /props document (llama-server's; None: 404, as other servers answer)
    listing: dict = field(default_factory=dict)
    props: dict | None = None
    model_ids: tuple[str, ...] = ("m", "other")


@dataclass
class FaultState:
    behaviour: Behaviour = field(default_factory=Behaviour)
    requests: list[dict] = field(default_factory=list)  # each request's path, headers and body
    disconnected: threading.Event = field(default_factory=threading.Event)
    disconnected_at: float | None = None
    first_chunk_sent: threading.Event = field(default_factory=threading.Event)
    in_flight: int = 0  # streams being answered now, and the most at once
    most_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    one_at_a_time: threading.Lock = field(default_factory=threading.Lock)


def _chunk(
    text: str | None = None, finish: str | None = None, usage: dict | None = None, *, completion: bool = False
) -> bytes:
    """One event of a chat completion's stream (or, with `completion`, a text completion's)."""
    if completion:
        choice = {"index": 0, "text": text or "", "finish_reason": finish}
    else:
        choice = {"index": 0, "delta": {"content": text} if text else {}, "finish_reason": finish}
    doc: dict = {
        "object": "text_completion" if completion else "chat.completion.chunk",
        "model": "m",
        "choices": [] if usage else [choice],
    }
    if usage:
        doc["usage"] = usage
    return f"data: {json.dumps(doc)}\n\n".encode()


class FaultHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: FaultState

    def log_message(self, *args) -> None:  # quiet
        pass

    def _json(self, status: int, doc: dict, headers: dict | None = None) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _refused(self) -> bool:
        b = self.state.behaviour
        if b.key is not None and self.headers.get("Authorization") != f"Bearer {b.key}":
            self._json(b.auth_status, {"error": {"message": "invalid api key"}})
            return True
        return False

    def do_GET(self) -> None:
        self.state.requests.append({"path": self.path, "headers": dict(self.headers), "body": None})
        if self._refused():
            return
        b = self.state.behaviour
        if self.path.endswith("/models"):
            models = [
                {"id": name, "object": "model", "owned_by": "test", **b.listing} for name in b.model_ids
            ]
            return self._json(200, {"object": "list", "data": models})
        if self.path == "/props" and b.props is not None:
            return self._json(200, b.props)
        self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        self.state.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
        if self._refused():
            return
        b = self.state.behaviour
        if b.mode == "status" and b.failures != 0:
            b.failures -= 1
            headers = {"Retry-After": b.retry_after} if b.retry_after is not None else {}
            return self._json(b.status, {"error": {"message": b.message}}, headers)
        if b.mode == "html":
            page = b"<html><body>Bad gateway</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        with self.state.lock:
            self.state.in_flight += 1
            self.state.most_in_flight = max(self.state.most_in_flight, self.state.in_flight)
        try:
            if b.serial:
                with self.state.one_at_a_time:
                    self._stream(b)
            else:
                self._stream(b)
        except (BrokenPipeError, ConnectionResetError):
            self.state.disconnected_at = time.monotonic()
            self.state.disconnected.set()
        finally:
            with self.state.lock:
                self.state.in_flight -= 1
        self.close_connection = True

    def _send(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def _stream(self, b: Behaviour) -> None:
        words = ["Hello", " there", ",", " friend", "."]
        if b.mode == "script":
            for doc in b.scripts.pop(0) if b.scripts else []:
                event = {"object": "chat.completion.chunk", "model": "m", **doc}
                self._send(f"data: {json.dumps(event)}\n\n".encode())
            self._send(b"data: [DONE]\n\n")
            return
        if b.mode == "malformed":
            self._send(_chunk("Hello"))
            self._send(b"data: {this is not json\n\n")
            return
        if b.mode == "error_event":
            self._send(b'data: {"error": {"message": "the model crashed"}}\n\n')
            return
        if b.mode == "slow":
            for i in range(600):  # a minute of text unless the client goes away
                self._send(_chunk(f" w{i}"))
                self.state.first_chunk_sent.set()
                time.sleep(0.1)
            return
        text = not self.path.endswith("/chat/completions")  # /completions: text chunks
        for i in range(b.chunks if b.mode in ("die", "stall") else len(words)):
            self._send(_chunk(words[i % len(words)], completion=text))
            self.state.first_chunk_sent.set()
            time.sleep(b.delay_s)
        if b.mode == "die":
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if b.mode == "stall":
            time.sleep(30)
            return
        self._send(_chunk(finish="stop", completion=text))
        if b.usage:
            usage = {"prompt_tokens": 7, "completion_tokens": len(words), "total_tokens": 12}
            self._send(_chunk(usage=usage, completion=text))
        self._send(b"data: [DONE]\n\n")


@dataclass
class FaultServer:
    url: str
    state: FaultState
    server: ThreadingHTTPServer

    @property
    def ref(self) -> str:
        return f"{self.url}#m"


def start_fault_server(tls_context=None) -> FaultServer:
    state = FaultState()
    handler = type("Handler", (FaultHandler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    scheme = "http"
    if tls_context is not None:
        server.socket = tls_context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return FaultServer(f"{scheme}://127.0.0.1:{server.server_address[1]}/v1", state, server)


@pytest.fixture
def fault_server():
    server = start_fault_server()
    yield server
    server.server.shutdown()
    server.server.server_close()


def self_signed_cert(directory: Path) -> tuple[Path, Path] | None:
    """A throwaway certificate for 127.0.0.1 made with the openssl command (None without it)."""
    import shutil

    if shutil.which("openssl") is None:
        return None
    cert, key = directory / "cert.pem", directory / "key.pem"
    result = subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        capture_output=True,
        env={**os.environ, "OPENSSL_CONF": os.environ.get("OPENSSL_CONF", "")},
    )
    return (cert, key) if result.returncode == 0 else None


if __name__ == "__main__" and sys.argv[1:] == ["vllm"]:
    import tempfile

    running = start_vllm(Path(tempfile.mkdtemp(prefix="vllm-")), eager=False)
    print(running.url, flush=True)
    print(f"log: {running.log}", file=sys.stderr, flush=True)
    try:
        running.process.wait()
    except KeyboardInterrupt:
        running.stop()
