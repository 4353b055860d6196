"""Parts for the hub tests: git repositories of tiny GGUF files, olah, a range-capable proxy, helpers.

The repositories are built with `ggufgen` (the `gguf` package's writer); some files are stored in
git and some as Git LFS objects, so both of the hub's hashes (git blob id and LFS SHA-256) are
exercised. olah serves them in offline mirror mode. `RangeProxy` sits in front of olah for what
olah does not do: it answers `Range` with `206 Partial Content` (olah answers 200 and the whole
file), can cut a transfer for real after N bytes, corrupt a file, slow transfers down, and gate a
repository behind a token. It logs every request, so tests can assert what went over the wire.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from ggufgen import Tensor, write_gguf
from typer.testing import CliRunner

SRC = Path(__file__).resolve().parents[2] / "src"
TESTS = Path(__file__).resolve().parents[1]

# -- repositories ----------------------------------------------------------------------------

Q4_K_M, Q8_0, IQ4_XS, Q2_K, Q5_K_M = 15, 7, 30, 10, 17


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args]
    return subprocess.run(cmd, cwd=repo, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _lfs(repo: Path, name: str, data: bytes) -> None:
    """Store `data` as Git LFS does: a pointer in git, the object under .git/lfs/objects."""
    oid = hashlib.sha256(data).hexdigest()
    obj = repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
    obj.parent.mkdir(parents=True, exist_ok=True)
    obj.write_bytes(data)
    (repo / name).parent.mkdir(parents=True, exist_ok=True)
    (repo / name).write_text(
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(data)}\n"
    )


def _commit(repo: Path, message: str) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


def _gguf_bytes(tmp: Path, **kwargs) -> bytes:
    path = tmp / "scratch.gguf"
    write_gguf(path, **kwargs)
    data = path.read_bytes()
    path.unlink()
    return data


@dataclass
class Repos:
    """What the session's repositories hold, for assertions."""

    root: Path
    commits: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)  # "org/repo/file" -> content

    def content(self, ref: str) -> bytes:
        return self.files[ref]

    def sha256(self, ref: str) -> str:
        return hashlib.sha256(self.files[ref]).hexdigest()


def _new_repo(repos: Repos, repo_id: str) -> Path:
    path = repos.root / "models" / repo_id
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    return path


def _add(repos: Repos, repo_id: str, name: str, data: bytes, *, lfs: bool = False) -> None:
    path = repos.root / "models" / repo_id
    if lfs:
        _lfs(path, name, data)
    else:
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(data)
    repos.files[f"{repo_id}/{name}"] = data


def _model(tmp: Path, name: str, file_type: int, **kwargs) -> bytes:
    return _gguf_bytes(tmp, name=name, file_type=file_type, **kwargs)


def build_repos(root: Path, tmp: Path) -> Repos:
    repos = Repos(root)
    _tiny(repos, tmp)
    _vision(repos, tmp)
    _lfs_repo(repos, tmp)
    _split(repos, tmp)
    _revisions(repos, tmp)
    _misc(repos, tmp)
    return repos


def _tiny(repos: Repos, tmp: Path) -> None:
    repo = "test/tiny-GGUF"
    _new_repo(repos, repo)
    meta = {"size_label": "8K", "license": "apache-2.0", "chat_template": "{{ messages }}"}
    for label, ftype in (("Q4_K_M", Q4_K_M), ("Q8_0", Q8_0), ("IQ4_XS", IQ4_XS), ("Q2_K", Q2_K)):
        _add(repos, repo, f"tiny-{label}.gguf", _model(tmp, f"tiny {label}", ftype, **meta))
    _add(repos, repo, "README.md", b"# tiny\n")
    repos.commits[repo] = _commit(repos.root / "models" / repo, "tiny models")


def _vision(repos: Repos, tmp: Path) -> None:
    """A model with two projector quantizations beside it (as ggml-org's and unsloth's vision
    repositories have), and one in another folder that is never a projector for these."""
    repo = "test/vision-GGUF"
    _new_repo(repos, repo)
    for label, ftype in (("Q4_K_M", Q4_K_M), ("Q8_0", Q8_0), ("Q2_K", Q2_K)):
        _add(repos, repo, f"vision-{label}.gguf", _model(tmp, f"vision {label}", ftype))
    _add(repos, repo, "mmproj-vision-F16.gguf", _model(tmp, "projector f16", 1))
    _add(repos, repo, "mmproj-vision-Q8_0.gguf", _model(tmp, "projector q8", Q8_0))
    _add(repos, repo, "old/mmproj-vision-Q4_K_M.gguf", _model(tmp, "old projector", Q4_K_M))
    repos.commits[repo] = _commit(repos.root / "models" / repo, "vision model")


def _lfs_repo(repos: Repos, tmp: Path) -> None:
    repo = "test/lfs-GGUF"
    _new_repo(repos, repo)
    _add(repos, repo, "lfs-Q4_K_M.gguf", _model(tmp, "lfs q4", Q4_K_M, ctx=4096), lfs=True)
    _add(repos, repo, "lfs-Q5_K_M.gguf", _model(tmp, "lfs q5", Q5_K_M, ctx=4096), lfs=True)
    big = [Tensor("token_embd.weight", (4096, 512), "F32")]  # 8 MiB of tensor data
    _add(repos, repo, "big-Q8_0.gguf", _model(tmp, "big", Q8_0, tensors=big), lfs=True)
    repos.commits[repo] = _commit(repos.root / "models" / repo, "lfs models")


def _split(repos: Repos, tmp: Path) -> None:
    repo = "test/split-GGUF"
    _new_repo(repos, repo)
    for i in range(3):
        split_kv = {"split.no": i, "split.count": 3, "split.tensors.count": 3}
        tensors = [Tensor(f"blk.{i}.weight", (256, 8), "Q4_K")]
        data = _model(tmp, "split", Q4_K_M, extra_kv=split_kv, tensors=tensors)
        _add(repos, repo, f"split-Q4_K_M-0000{i + 1}-of-00003.gguf", data)
    _add(
        repos,
        repo,
        "Q8_0/split-Q8_0-00001-of-00002.gguf",
        _model(tmp, "s8a", Q8_0, extra_kv={"split.count": 2}),
    )
    _add(
        repos,
        repo,
        "Q8_0/split-Q8_0-00002-of-00002.gguf",
        _model(tmp, "s8b", Q8_0, extra_kv={"split.count": 2}),
    )
    repos.commits[repo] = _commit(repos.root / "models" / repo, "split models")


def _revisions(repos: Repos, tmp: Path) -> None:
    repo = "test/revs-GGUF"
    path = _new_repo(repos, repo)
    _add(repos, repo, "revs-Q4_K_M.gguf", _model(tmp, "revs v1", Q4_K_M, ctx=1024))
    repos.files[f"{repo}/revs-Q4_K_M.gguf@v1"] = repos.files[f"{repo}/revs-Q4_K_M.gguf"]
    repos.commits[f"{repo}@v1"] = _commit(path, "v1")
    _git(path, "tag", "v1")
    _add(repos, repo, "revs-Q4_K_M.gguf", _model(tmp, "revs v2", Q4_K_M, ctx=2048))
    repos.commits[repo] = _commit(path, "v2")


def _misc(repos: Repos, tmp: Path) -> None:
    _new_repo(repos, "test/nogguf")
    _add(repos, "test/nogguf", "README.md", b"# safetensors only\n")
    _add(repos, "test/nogguf", "model.safetensors", b"\0" * 512)
    repos.commits["test/nogguf"] = _commit(repos.root / "models" / "test/nogguf", "no gguf")

    _new_repo(repos, "test/broken-GGUF")
    _add(repos, "test/broken-GGUF", "broken-Q4_K_M.gguf", b"<!DOCTYPE html><html>sign in</html>\n" * 4)
    repos.commits["test/broken-GGUF"] = _commit(repos.root / "models" / "test/broken-GGUF", "broken")

    _new_repo(repos, "test/gated-GGUF")
    _add(repos, "test/gated-GGUF", "gated-Q4_K_M.gguf", _model(tmp, "gated", Q4_K_M))
    repos.commits["test/gated-GGUF"] = _commit(repos.root / "models" / "test/gated-GGUF", "gated")

    same = _model(tmp, "twin", Q4_K_M)  # two names, one content: one blob in the cache
    _new_repo(repos, "test/twins-GGUF")
    _add(repos, "test/twins-GGUF", "twins-Q4_K_M.gguf", same)
    _add(repos, "test/twins-GGUF", "twins-Q4_K_S.gguf", same)
    repos.commits["test/twins-GGUF"] = _commit(repos.root / "models" / "test/twins-GGUF", "twins")


# -- olah ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen | None = None, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"olah exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listening on port {port} after {timeout}s")


def olah_command() -> list[str] | None:
    exe = shutil.which("olah-cli") or str(Path(sys.executable).with_name("olah-cli"))
    return [exe] if Path(exe).exists() else None


@dataclass
class OlahHub:
    url: str
    repos: Repos
    process: subprocess.Popen


# -- the range-capable fixture server in front of olah ---------------------------------------

GOOD_TOKEN = "hf_good_token"
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/[^/]+/(?P<file>.+)$")


@dataclass
class Logged:
    method: str
    path: str
    range: str | None
    auth: str | None
    status: int


@dataclass
class ProxyState:
    cuts: dict[str, list[int]] = field(default_factory=dict)  # file -> bytes to send before each cut
    corrupt: set[str] = field(default_factory=set)
    gated: set[str] = field(default_factory=set)
    rate: float | None = None  # bytes per second for file bodies
    ranges: bool = True  # answer Range with 206 (False: like olah, 200 and the whole file)
    log: list[Logged] = field(default_factory=list)

    def gets(self, filename: str) -> list[Logged]:
        return [e for e in self.log if e.method == "GET" and e.path.endswith("/" + filename)]


_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/?]+)")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ProxyServer

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def do_HEAD(self) -> None:
        self._handle(head=True)

    def do_GET(self) -> None:
        self._handle(head=False)

    def _handle(self, head: bool) -> None:
        state = self.server.state
        path = self.path.split("?")[0]
        match = _RESOLVE.match(path) or _API.match(path)
        if match and self._refuse_gated(match.group("repo"), state):
            return
        status, headers, body = self.server.upstream(
            self.command, self.path, self.headers.get("Authorization")
        )
        if match and "file" in match.groupdict() and status == 200 and not head:
            return self._send_file(match.group("file"), headers, body, state)
        self._log(status)
        self._send(status, headers, b"" if head else body, content_length=headers.get("content-length"))

    def _refuse_gated(self, repo: str, state: ProxyState) -> bool:
        if repo not in state.gated:
            return False
        auth = self.headers.get("Authorization")
        if auth == f"Bearer {GOOD_TOKEN}":
            return False
        status = 403 if auth else 401
        body = b'{"error": "Access to model ' + repo.encode() + b' is restricted."}'
        self._log(status)
        self._send(status, {"x-error-code": "GatedRepo", "x-error-message": "Access restricted",
                            "content-type": "application/json"}, body)  # fmt: skip
        return True

    def _send_file(self, name: str, headers: dict, body: bytes, state: ProxyState) -> None:
        if name in state.corrupt:
            body = body[:-100] + bytes([body[-100] ^ 0xFF]) + body[-99:]
        start, status = self._range(len(body), state)
        part = body[start:]
        out = dict(headers)
        if status == 206:
            out["content-range"] = f"bytes {start}-{len(body) - 1}/{len(body)}"
        cuts = state.cuts.get(name)
        limit = cuts.pop(0) if cuts else None
        self._log(status)
        self._send(status, out, part, limit=limit, rate=state.rate)

    def _range(self, size: int, state: ProxyState) -> tuple[int, int]:
        match = re.match(r"bytes=(\d+)-$", self.headers.get("Range") or "")
        if not state.ranges or match is None:
            return 0, 200
        return min(int(match.group(1)), size), 206

    def _log(self, status: int) -> None:
        entry = Logged(
            self.command, self.path, self.headers.get("Range"), self.headers.get("Authorization"), status
        )
        self.server.state.log.append(entry)

    def _send(self, status, headers, body, *, content_length=None, limit=None, rate=None) -> None:
        self.send_response(status)
        for key, value in headers.items():
            if key.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                self.send_header(key, value)
        self.send_header("Content-Length", content_length if content_length is not None else str(len(body)))
        self.end_headers()
        self._write_body(body, limit, rate)

    def _write_body(self, body: bytes, limit: int | None, rate: float | None) -> None:
        stop = len(body) if limit is None else min(limit, len(body))
        sent = 0
        try:
            while sent < stop:
                end = min(stop, sent + (64 << 10))
                self.wfile.write(body[sent:end])
                self.wfile.flush()
                if rate:
                    time.sleep((end - sent) / rate)
                sent = end
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        if stop < len(body):  # a real cut: the client sees the connection close mid-body
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)


class ProxyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream_url: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = ProxyState()
        self.upstream_host, self.upstream_port = upstream_url.removeprefix("http://").split(":")

    def reset(self) -> None:
        self.state = ProxyState()

    def upstream(self, method: str, path: str, auth: str | None) -> tuple[int, dict, bytes]:
        conn = http.client.HTTPConnection(self.upstream_host, int(self.upstream_port), timeout=30)
        try:
            conn.request(method, path, headers={"Authorization": auth} if auth else {})
            resp = conn.getresponse()
            body = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body
        finally:
            conn.close()


@dataclass
class RangeProxy:
    url: str
    state: ProxyState
    hub: OlahHub


# -- helpers ---------------------------------------------------------------------------------


def run(*args: str, input: str | None = None):
    """The CLI, as a shell would run it (separate stdout and stderr)."""
    from llmcli.cli.app import app

    return CliRunner().invoke(app, list(args), input=input, catch_exceptions=False)


def one_line_error(result, code: int, *fragments: str) -> str:
    """Exit code `code`, nothing on stdout, and exactly one `llmcli:` error line last on stderr."""
    assert result.exit_code == code, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("llmcli: ") and "; retrying (" not in line]
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])
    assert "(" in errors[0] and errors[0].endswith(")"), f"no hint: {errors[0]}"
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    return errors[0]


def cli_subprocess(*args: str, env: dict | None = None, **kwargs) -> subprocess.Popen:
    """llmcli in its own process (for locks, resource limits and terminals)."""
    full_env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)])}
    return subprocess.Popen([sys.executable, "-m", "llmcli", *args], env=full_env, **kwargs)


def hub_cache() -> Path:
    from llmcli.hub import env

    return env.hub_cache()


def blobs(repo_id: str) -> list[Path]:
    folder = hub_cache() / ("models--" + repo_id.replace("/", "--")) / "blobs"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def block_network(monkeypatch) -> list[object]:
    """From now on, any attempt to open a connection fails the test (and is recorded)."""
    attempts: list[object] = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    return attempts
