"""A small language server for the tests (stdlib only; real LSP framing on stdio).

It publishes one error diagnostic for each line containing "BAD" of every document opened
or changed, numbering its publications (the diagnostic's code: n1, n2, ...), so a test sees
whether the same process answered. A document containing CRASH makes it exit with code 3
(after a line on stderr), SLOW makes it publish nothing, HUGE makes it publish 5,000
diagnostics. Before publishing it asks its client for its configuration, as real servers do.
`--touch PATH` tries to write PATH at start (the sandbox must stop that); on `exit` it
writes `lsp-exited` in its working directory (a clean shutdown)."""

import json
import sys
from pathlib import Path


def read():
    length = None
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            sys.exit(0)
        if not line.strip():
            break
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return json.loads(sys.stdin.buffer.read(length))


def send(msg):
    body = json.dumps(msg).encode()
    sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    sys.stdout.buffer.flush()


def main():
    if "--touch" in sys.argv:
        try:
            Path(sys.argv[sys.argv.index("--touch") + 1]).write_text("escaped\n")
        except OSError:
            pass
    published = 0
    asked = 1000
    while True:
        msg = read()
        method = msg.get("method")
        if method == "initialize":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": msg["id"],
                    "result": {"capabilities": {"textDocumentSync": 1}},
                }
            )
        elif method == "shutdown":
            send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
        elif method == "exit":
            Path("lsp-exited").write_text("clean\n")
            sys.exit(0)
        elif method in ("textDocument/didOpen", "textDocument/didChange"):
            doc = msg["params"]["textDocument"]
            text = doc.get("text")
            if text is None:
                text = msg["params"]["contentChanges"][-1]["text"]
            if "CRASH" in text:
                sys.stderr.write("fake-lsp: boom\n")
                sys.exit(3)
            if "SLOW" in text:
                continue
            asked += 1
            send(
                {
                    "jsonrpc": "2.0",
                    "id": asked,
                    "method": "workspace/configuration",
                    "params": {"items": [{"section": "fake"}]},
                }
            )
            published += 1
            lines = text.splitlines()
            if "HUGE" in text:
                lines = ["BAD"] * 5000
            found = [
                {
                    "range": {
                        "start": {"line": i, "character": 0},
                        "end": {"line": i, "character": 3},
                    },
                    "severity": 1,
                    "source": "fake-lsp",
                    "code": f"n{published}",
                    "message": "BAD is not allowed here",
                }
                for i, line in enumerate(lines)
                if "BAD" in line
            ]
            send(
                {
                    "jsonrpc": "2.0",
                    "method": "textDocument/publishDiagnostics",
                    "params": {"uri": doc["uri"], "version": doc["version"], "diagnostics": found},
                }
            )


main()
