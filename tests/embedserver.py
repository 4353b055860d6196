"""A tiny stand-in for an embedding server (llama-server `--embeddings`, vLLM's pooling runner) on
loopback, for the CLI tests of `embed`, `similar`, collections and `logs --like` that need no real
model: `/v1/models` lists MODELS, `/v1/embeddings` gives each text a bag-of-words vector (each word
hashed to one of DIMENSIONS dimensions, normalised), so texts that share words are close and texts
that share none score 0, and any other POST answers as llama-server `--embeddings` does: HTTP 500
with why. Every request is kept (path and body) for the tests to count."""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

MODELS = ("emb", "other", "third")
DIMENSIONS = 64
NOT_COMPLETIONS = "This server does not support completions. Start it without `--embeddings`"


def vector(text: str, dimensions: int = DIMENSIONS) -> list[float]:
    out = [0.0] * dimensions
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        out[int(hashlib.sha256(word.encode()).hexdigest(), 16) % dimensions] += 1.0
    norm = math.sqrt(sum(x * x for x in out)) or 1.0
    return [x / norm for x in out]


@dataclass
class Served:
    url: str
    server: ThreadingHTTPServer
    requests: list[dict] = field(default_factory=list)
    dimensions: int = DIMENSIONS

    def ref(self, model: str = "emb") -> str:
        return f"{self.url}#{model}"

    def embedded(self) -> list[str]:
        """Every text sent to /embeddings, in order."""
        return [t for r in self.requests if r["path"].endswith("/embeddings") for t in r["body"]["input"]]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start() -> Served:
    served: Served

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def _json(self, status: int, doc: dict) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            served.requests.append({"path": self.path, "body": None})
            if self.path.endswith("/models"):
                return self._json(
                    200, {"object": "list", "data": [{"id": m, "object": "model"} for m in MODELS]}
                )
            self._json(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            served.requests.append({"path": self.path, "body": body})
            if not self.path.endswith("/embeddings"):
                return self._json(
                    500, {"error": {"code": 500, "message": NOT_COMPLETIONS, "type": "server_error"}}
                )
            texts = body["input"]
            data = [
                {"object": "embedding", "index": i, "embedding": vector(t, served.dimensions)}
                for i, t in enumerate(texts)
            ]
            tokens = sum(len(t.split()) for t in texts)
            self._json(200, {"object": "list", "data": data, "usage": {"prompt_tokens": tokens}})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    served = Served(f"http://127.0.0.1:{server.server_address[1]}/v1", server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return served


@pytest.fixture
def embedding_server():
    served = start()
    yield served
    served.stop()
