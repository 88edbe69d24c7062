"""A real HTTP server on 127.0.0.1 that lists models as an OpenAI-compatible server does
(`GET /v1/models`; 404 for any other path), for the tests that probe a server."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextlib.contextmanager
def models_server(models: list[dict[str, Any]], key: str | None = None) -> Iterator[str]:
    """Serves MODELS as the model list on a free port; yields the server's root URL
    (`http://127.0.0.1:PORT`, without /v1). With `key`, a request without
    `Authorization: Bearer KEY` gets 401."""

    class Models(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if key is not None and self.headers.get("Authorization") != f"Bearer {key}":
                self.send_error(401)
                return
            if self.path != "/v1/models":
                self.send_error(404)
                return
            body = json.dumps({"object": "list", "data": models}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
