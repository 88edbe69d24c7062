"""Fixtures for the backend tests: a small real OpenAI-format HTTP server on 127.0.0.1 for the remote backend tests.

Each test queues replies; the server answers requests with them in order and records every
request body. Replies: a status, raw body chunks (SSE lines or an error body), an optional delay
between chunks, and whether to cut the connection before finishing.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest


@dataclass
class Reply:
    status: int = 200
    chunks: list[bytes] = field(default_factory=list)
    delay_s: float = 0.0
    cut: bool = False  # close the socket mid-stream (a broken chunked body)
    content_type: str = "text/event-stream"


def sse(*objs: Any, done: bool = True) -> list[bytes]:
    out = [f"data: {json.dumps(o)}\n\n".encode() for o in objs]
    if done:
        out.append(b"data: [DONE]\n\n")
    return out


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, usage=None) -> dict:
    obj: dict[str, Any] = {"id": "cmpl-1", "object": "chat.completion.chunk", "choices": []}
    if delta is not None or finish is not None:
        obj["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    if usage is not None:
        obj["usage"] = usage
    return obj


class OpenAIServer:
    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.disconnected = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", 0))
                outer.requests.append(json.loads(self.rfile.read(n)))
                outer.headers.append(dict(self.headers))
                reply = outer.replies.pop(0) if outer.replies else Reply(404, [b'{"error": "x"}'])
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for i, c in enumerate(reply.chunks):
                        if reply.cut and i == len(reply.chunks) // 2:
                            # A chunk header promising more bytes than follow, then close.
                            self.wfile.write(b"100\r\npartial")
                            self.wfile.flush()
                            self.connection.shutdown(socket.SHUT_RDWR)
                            return
                        self.wfile.write(f"{len(c):x}\r\n".encode() + c + b"\r\n")
                        self.wfile.flush()
                        if reply.delay_s:
                            time.sleep(reply.delay_s)
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    outer.disconnected.set()

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # the "cut" replies break connections on purpose

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> OpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def free_port() -> int:
    """A port with nothing listening on it (bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def server():
    with OpenAIServer() as s:
        yield s


@pytest.fixture
def wire():
    """The helpers, for test modules (importlib mode does not put conftest on sys.path)."""
    return SimpleNamespace(Reply=Reply, sse=sse, chunk=chunk, free_port=free_port)
