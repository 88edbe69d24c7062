"""Real MCP servers for the tests (written with the official SDK, started as subprocesses),
and raw M3 model text that calls their tools (for the ScriptedEngine)."""

from __future__ import annotations

import json
import select
import subprocess
import sys
import textwrap
from pathlib import Path

NS = "]<]minimax[>["


def _red_png_b64() -> str:
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 30, 30)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


# One server with every behaviour the tests need; the tool names say what each one does.
SERVER = textwrap.dedent('''
    import os, sys, time, socket
    import anyio
    import mcp_types as t
    from mcp.server import MCPServer
    from mcp.server.mcpserver import Context

    s = MCPServer("demo")

    @s.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @s.tool()
    def pic() -> list:
        """An image, a resource link and some text."""
        return [t.TextContent(type="text", text="here is the chart"),
                t.ImageContent(type="image", data="iVBORw0KGgo=", mime_type="image/png"),
                t.ResourceLink(type="resource_link", uri="mem://report", name="report",
                               mime_type="text/plain")]

    @s.resource("mem://report")
    def report() -> str:
        return "the full report text"

    @s.tool()
    async def grow(ctx: Context) -> str:
        """Adds a tool and says so (notifications/tools/list_changed)."""
        s.add_tool(lambda: "new", name="late_tool", description="added later")
        await ctx.notify_tools_changed()
        return "grew"

    @s.tool()
    def crash() -> str:
        """Exits the process."""
        os._exit(3)

    @s.tool()
    def die_soon() -> str:
        """Answers, then the process exits."""
        import threading
        threading.Timer(0.2, os._exit, (0,)).start()
        return "bye"

    @s.tool()
    def hang() -> str:
        """Never answers in time."""
        time.sleep(600)
        return "late"

    @s.tool()
    async def slow(marker: str) -> str:
        """Waits; writes the marker file when cancelled."""
        try:
            await anyio.sleep(60)
        except BaseException:
            with open(marker, "w") as f:
                f.write("cancelled")
            raise
        return "done"

    @s.tool()
    def env(name: str) -> str:
        """One environment variable of the server process."""
        return os.environ.get(name, "<unset>")

    @s.tool()
    def write(path: str) -> str:
        """Writes a file; says what happened."""
        try:
            with open(path, "w") as f:
                f.write("x")
            return "written"
        except OSError as e:
            return f"refused: {e.strerror}"

    @s.tool()
    def connect(port: int) -> str:
        """Opens a TCP connection to 127.0.0.1:port."""
        try:
            socket.create_connection(("127.0.0.1", port), timeout=3).close()
            return "connected"
        except OSError as e:
            return f"refused: {e}"

    @s.tool()
    def big(n: int) -> str:
        """n characters of output."""
        return "y" * n

    @s.tool()
    def whoami(ctx: Context) -> str:
        """The Authorization header this request came with (HTTP only)."""
        h = ctx.headers or {}
        return h.get("authorization", "<none>")

    if __name__ == "__main__":
        if len(sys.argv) > 1 and sys.argv[1] in ("streamable-http", "sse"):
            # Listens before it says where: port 0 lets the system pick one (no race with
            # another test for a port picked beforehand); the port is the first stdout line.
            import uvicorn
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", int(sys.argv[2])))
            sock.listen(128)
            print(sock.getsockname()[1], flush=True)
            app = s.streamable_http_app() if sys.argv[1] == "streamable-http" else s.sse_app()
            server = uvicorn.Server(uvicorn.Config(app, log_level="error"))
            anyio.run(lambda: server.serve(sockets=[sock]))
        else:
            s.run()
''')
SERVER = SERVER.replace(
    '@s.resource("mem://report")',
    textwrap.dedent(f'''
    @s.tool()
    def photo() -> list:
        """A real 32x32 PNG: the model sees it inside the tool response."""
        return [t.TextContent(type="text", text="the photo"),
                t.ImageContent(type="image", data="{_red_png_b64()}", mime_type="image/png")]

    @s.tool()
    def big_photo(n: int) -> list:
        """n characters of text, then the PNG: the cut leaves the image at its note."""
        return [t.TextContent(type="text", text="z" * n),
                t.ImageContent(type="image", data="{_red_png_b64()}", mime_type="image/png")]

    ''').lstrip("\n")
    + '@s.resource("mem://report")',
    1,
)


# The start of a stdio server written by hand: send() writes one JSON-RPC line, requests()
# yields each request (notifications skipped) with its id and method.
_BY_HAND = textwrap.dedent("""
    import json, sys

    def send(obj):
        sys.stdout.write(json.dumps(obj) + "\\n")
        sys.stdout.flush()

    def requests():
        for line in sys.stdin:
            msg = json.loads(line)
            if msg.get("id") is not None:
                yield msg, msg["id"], msg.get("method")
""")

# A server that speaks enough JSON-RPC to start, then answers a tool call with garbage.
GARBAGE = _BY_HAND + textwrap.dedent("""
    for msg, mid, method in requests():
        if method == "initialize":
            result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities":
                      {"tools": {}}, "serverInfo": {"name": "garbage", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": [{"name": "talk", "description": "answers garbage",
                                 "inputSchema": {"type": "object", "properties": {}}}]}
        elif method == "tools/call":
            sys.stdout.write("this is not JSON-RPC at all\\n")
            sys.stdout.flush()
            continue
        else:
            send({"jsonrpc": "2.0", "id": mid,
                  "error": {"code": -32601, "message": "method not found"}})
            continue
        send({"jsonrpc": "2.0", "id": mid, "result": result})
""")


# A pre-2026 server (initialize handshake only, written by hand, as many servers in the wild
# are): its tool call announces notifications/tools/list_changed before answering.
LEGACY = _BY_HAND + textwrap.dedent("""
    for msg, mid, method in requests():
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": "2025-06-18", "serverInfo": {"name": "legacy", "version": "1"},
                "capabilities": {"tools": {"listChanged": True}}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [
                {"name": "change", "description": "changes the tool list",
                 "inputSchema": {"type": "object", "properties": {}}}]}})
        elif method == "tools/call":
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": "changed"}], "isError": False}})
        else:
            send({"jsonrpc": "2.0", "id": mid,
                  "error": {"code": -32601, "message": "method not found"}})
""")


def write_server(dir: Path, source: str = SERVER, name: str = "server.py") -> Path:
    dir.mkdir(parents=True, exist_ok=True)
    path = dir / name
    path.write_text(source)
    return path


def invoke(tool: str, **params: object) -> str:
    body = "".join(
        f"{NS}<{k}>{v if isinstance(v, str) else json.dumps(v)}{NS}</{k}>"
        for k, v in params.items()
    )
    return f'{NS}<invoke name="{tool}">{body}{NS}</invoke>\n'


def calls(*invokes: str) -> str:
    """Raw model text of an "enabled"-mode turn that calls tools."""
    return f"</mm:think>{NS}<tool_call>\n{''.join(invokes)}{NS}</tool_call>"


def answer(text: str) -> str:
    return "</mm:think>" + text


def start_http_server(
    script: Path, transport: str = "streamable-http", port: int = 0
) -> tuple[subprocess.Popen, int]:
    """The server of `script` on 127.0.0.1: on `port`, or (0) on one it picks and reports
    once it listens. Returns the process and the port."""
    proc = subprocess.Popen(
        [sys.executable, str(script), transport, str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    ready, _, _ = select.select([proc.stdout], [], [], 60)  # importing the SDK on a busy machine
    line = proc.stdout.readline() if ready else ""
    if not line.strip().isdigit():
        proc.kill()
        proc.wait()
        raise RuntimeError("the HTTP MCP server did not start listening")
    return proc, int(line)


def finished(events) -> list:
    """The ToolCallFinished events, in order."""
    from m3agent.agent import events as ev

    return [e for e in events if isinstance(e, ev.ToolCallFinished)]


def of_type(events, cls) -> list:
    return [e for e in events if isinstance(e, cls)]
