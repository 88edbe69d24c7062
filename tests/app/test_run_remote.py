"""`m3agent run --engine remote` as a subprocess against a real OpenAI-format server on
127.0.0.1: the server asks for a tool call, the agent runs it, the result goes back."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _sse(*objs) -> bytes:
    return b"".join(f"data: {json.dumps(o)}\n\n".encode() for o in objs) + b"data: [DONE]\n\n"


def _chunk(delta=None, finish=None):
    return {"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}


def _usage(prompt: int, completion: int, cached: int):
    """The stream's last chunk: no choices, the request's usage."""
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    return {"choices": [], "usage": usage}


REPLIES = [
    _sse(
        _chunk({"reasoning_content": "Read the file first."}),
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call-1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "greet.py"}'},
                    }
                ]
            }
        ),
        _chunk(finish="tool_calls"),
        _usage(900, 20, cached=0),
    ),
    _sse(
        _chunk({"content": "greet() returns "}),
        _chunk({"content": '"helo".'}),
        _chunk(finish="stop"),
        _usage(960, 8, cached=896),
    ),
]


def test_run_remote_end_to_end(cli, repo):
    bodies = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            payload = REPLIES[len(bodies) - 1]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        r = cli.run(
            "run",
            "what does greet return?",
            "--engine",
            "remote",
            "--base-url",
            url,
            "--model",
            "m3",
            "--cwd",
            str(repo),
            "--output-format",
            "json",
            "--thinking",
            "disabled",
        )
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["answer"] == 'greet() returns "helo".'
    assert out["turns"] == 2 and out["tool_calls"] == 1
    assert out["usage"]["prompt_tokens"] == 1860 and out["usage"]["cached_prompt_tokens"] == 896
    assert out["last_usage"]["cached_prompt_tokens"] == 896
    assert bodies[0]["chat_template_kwargs"] == {"thinking_mode": "disabled"}
    assert [t["function"]["name"] for t in bodies[0]["tools"]][:2] == ["read_file", "list_dir"]
    second = bodies[1]["messages"]
    assert second[-2]["role"] == "assistant" and second[-2]["reasoning_content"] == (
        "Read the file first."
    )
    assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "call-1"
    assert "helo" in second[-1]["content"]
    # The request's messages start with the previous request's: history is append-only.
    assert second[: len(bodies[0]["messages"])] == bodies[0]["messages"]
