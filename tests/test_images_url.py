"""`generate -a URL` (issue 57): the image fetched over http(s) into memory, checked like a file,
refused in one line when it cannot be had (an HTTP error, a refused connection, a silent server, a
body past the size limit, a transfer that breaks off, --offline). A loopback http.server of the
test's own serves the answers."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers import run
from test_images import png

from llmcli.errors import NetworkError, UsageError
from llmcli.media import fetch
from llmcli.media import image as media

RED = png(16, 16, (255, 0, 0))
HUGE_HEADER = png(4, 4, (0, 0, 0))[:16] + (20000).to_bytes(4, "big") * 2 + png(4, 4, (0, 0, 0))[24:]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        if self.path == "/red.png":
            self._send(200, RED, "image/png")
        elif self.path == "/red-as-text":  # the type a server claims does not matter: the bytes do
            self._send(200, RED, "text/plain")
        elif self.path == "/notes.txt":
            self._send(200, b"plain text, not a picture", "text/plain")
        elif self.path == "/blob.bin":  # neither an image nor text
            self._send(200, b"\x00\x01binary, not a picture", "application/octet-stream")
        elif self.path == "/huge.png":
            self._send(200, HUGE_HEADER, "image/png")
        elif self.path == "/big.png":  # no Content-Length: the limit is found while reading
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.end_headers()
            self.wfile.write(RED + b"\x00" * 4096)
        elif self.path == "/cut.png":  # claims more than it sends, then closes
            self.send_response(200)
            self.send_header("Content-Length", str(len(RED) * 4))
            self.end_headers()
            self.wfile.write(RED[:20])
            self.close_connection = True
        elif self.path == "/slow.png":
            time.sleep(3)
            self._send(200, RED, "image/png")
        elif self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/red.png")
            self.end_headers()
        else:
            self._send(404, b"no such thing", "text/plain")

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:  # a client that stopped reading (the limit)
        pass


@pytest.fixture(scope="module")
def site():
    server = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_image_url_is_fetched_and_checked_like_a_file(site):
    for path in ("/red.png", "/red-as-text", "/moved"):
        image = media.load(site + path)
        assert (
            image.data == RED and image.media_type == "image/png" and (image.width, image.height) == (16, 16)
        )
        assert image.name == site + path


@pytest.mark.parametrize(
    "path, error, words",
    [
        ("/notes.txt", UsageError, "not an image"),
        ("/huge.png", UsageError, "20000 x 20000"),
        ("/missing.png", NetworkError, "HTTP 404"),
        ("/cut.png", NetworkError, "broke off"),
    ],
)
def test_a_bad_url_is_one_line(site, path, error, words):
    with pytest.raises(error) as e:
        media.load(site + path)
    assert words in e.value.one_line() and "\n" not in e.value.one_line()


def test_the_size_limit_holds_with_and_without_a_length(site):
    with pytest.raises(UsageError, match="larger than"):
        fetch.fetch(site + "/red.png", len(RED) - 1)  # Content-Length says so: nothing read
    with pytest.raises(UsageError, match="larger than"):
        fetch.fetch(site + "/big.png", len(RED) + 100)  # found while reading
    assert fetch.fetch(site + "/red.png", len(RED)) == RED


def test_a_silent_server_times_out(site):
    with pytest.raises(NetworkError, match="no answer within"):
        fetch.fetch(site + "/slow.png", 1 << 20, timeout=0.5)


def test_a_closed_port_and_offline_are_one_line():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens there
    with pytest.raises(NetworkError, match="cannot fetch image"):
        media.load(f"http://127.0.0.1:{port}/x.png")
    with pytest.raises(UsageError, match="--offline"):
        media.load(f"http://127.0.0.1:{port}/x.png", offline=True)


def test_cli_refuses_a_bad_url_before_loading_anything(site):
    for url, code, words in [
        (site + "/blob.bin", 2, "not an image"),  # (issue 65: a text URL is a text attachment now)
        (site + "/notes.txt", 3, "model not found"),  # the text was taken: the next thing said is the model
        (site + "/missing.png", 6, "HTTP 404"),
        (site + "/huge.png", 2, "20000 x 20000"),
    ]:
        result = run("generate", "-m", "no-such-model", "-a", url, "what is this?")
        assert result.exit_code == code, result.output
        assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1
        assert result.stdout == ""
