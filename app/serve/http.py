"""A small HTTP/1.1 server on asyncio streams: enough for an OpenAI-compatible endpoint.

Keep-alive for ordinary responses (HTTP/1.1's default; `Connection: close` from the client or
an idle connection ends it); a streamed (SSE) response ends its connection, which is how the
client knows the body is complete. A client that closes its connection while its request runs
has left: the handler is cancelled (which aborts the engine request). Each request is one
line in the access log, when one is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 512 * 1024 * 1024  # the hard ceiling; serve sets a smaller one (guard.py)
KEEP_ALIVE_S = 30.0  # an idle kept-alive connection is closed after this
# After a refusal, the rest of a body still on its way is read and dropped (never kept), so
# that the client, still sending, does not get a reset instead of the answer.
_DISCARD_S = 5.0
_DISCARD_BYTES = 1 << 30
_GONE_POLL_S = 0.05

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    version: str = "HTTP/1.1"

    @property
    def keep_alive(self) -> bool:
        conn = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return conn == "keep-alive"
        return conn != "close"


@dataclass(slots=True)
class HttpResponse:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    # When set, the body is streamed as server-sent events (each item one `data:` line).
    events: AsyncIterator[str] | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, obj: Any, status: int = 200) -> HttpResponse:
        return cls(status, json.dumps(obj, ensure_ascii=False).encode())


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]
# Called with (method, path, headers) before the body is read; raises BadRequest to refuse.
HeadCheck = Callable[[str, str, dict[str, str]], None]


class BadRequest(Exception):
    def __init__(self, status: int, message: str, unread: int = 0):
        super().__init__(message)
        self.status = status
        self.unread = unread  # body bytes the client is still sending


async def read_request(
    reader: asyncio.StreamReader,
    check_head: HeadCheck | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    reserve: Callable[[int], None] | None = None,
) -> HttpRequest | None:
    """One request; check_head runs on the head, reserve(length) before the body is read."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None  # the client connected and left
    except asyncio.LimitOverrunError:
        raise BadRequest(413, "request headers too large") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise BadRequest(400, "malformed request line")
    method, path, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise BadRequest(400, "chunked request bodies are not supported; send Content-Length")
    raw_length = headers.get("content-length", "0").strip()
    if not raw_length.isdigit():  # int() would take "-5", "+5", " 5", "1_000"
        raise BadRequest(400, f"bad Content-Length {raw_length[:40]!r}: not a byte count")
    length = int(raw_length)
    route = path.split("?", 1)[0]
    try:
        if check_head is not None:
            check_head(method.upper(), route, headers)
        if length > max_body_bytes:
            raise BadRequest(413, f"request body over {max_body_bytes} bytes")
        if reserve is not None and length:
            reserve(length)
    except BadRequest as e:
        e.unread = length
        raise
    body = await reader.readexactly(length) if length else b""
    return HttpRequest(method.upper(), route, headers, body, version.upper())


async def _discard(reader: asyncio.StreamReader, n: int) -> None:
    """Reads and drops up to n bytes (bounded in time and size): memory stays flat."""
    left = min(n, _DISCARD_BYTES)
    deadline = time.monotonic() + _DISCARD_S
    with contextlib.suppress(Exception):
        while left > 0 and time.monotonic() < deadline:
            chunk = await asyncio.wait_for(
                reader.read(min(left, 1 << 16)), max(0.01, deadline - time.monotonic())
            )
            if not chunk:
                return
            left -= len(chunk)


def _head(
    status: int,
    content_type: str,
    extra: dict[str, str],
    length: int | None,
    keep_alive: bool = False,
) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}",
        f"Content-Type: {content_type}",
        "Connection: keep-alive" if keep_alive else "Connection: close",
    ]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    else:
        lines.append("Cache-Control: no-cache")
    lines += [f"{k}: {v}" for k, v in extra.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _send_events(
    resp: HttpResponse, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    events = resp.events
    writer.write(_head(resp.status, "text/event-stream", resp.headers, None))
    await writer.drain()

    async def pump() -> None:
        async for item in events:  # type: ignore[union-attr]
            writer.write(f"data: {item}\n\n".encode())
            await writer.drain()

    pumping = asyncio.ensure_future(pump())
    # EOF from the client while we stream means it went away: stop generating.
    gone = asyncio.ensure_future(_client_gone(reader))
    try:
        done, _ = await asyncio.wait({pumping, gone}, return_when=asyncio.FIRST_COMPLETED)
        if pumping not in done:
            pumping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pumping  # re-raises a pump failure
    finally:
        gone.cancel()
        pumping.cancel()
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()  # runs the generator's finally: the engine request is aborted


async def _unless_client_leaves(
    work: Awaitable[HttpResponse], reader: asyncio.StreamReader
) -> HttpResponse | None:
    """The handler's response, or None (handler cancelled) when the client hangs up first:
    a non-streaming completion nobody waits for should not keep the engine busy."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_client_gone(reader))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return None
    finally:
        gone.cancel()


async def _client_gone(reader: asyncio.StreamReader) -> None:
    """Returns once the client has closed its side. Polls instead of reading, so that a
    kept-alive client's next request stays in the buffer for read_request."""
    while not reader.at_eof():
        await asyncio.sleep(_GONE_POLL_S)


def _access(
    log: TextIO | None, peer: str, req: HttpRequest | None, status: int | str, started: float
) -> None:
    if log is None:
        return
    what = f"{req.method} {req.path}" if req is not None else "-"
    with contextlib.suppress(Exception):
        log.write(f'{peer} "{what}" {status} {time.monotonic() - started:.3f}s\n')
        log.flush()


def connection_handler(
    handler: Handler,
    log: TextIO | None = None,
    check_head: HeadCheck | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    body_budget: int | None = None,
):
    """body_budget: the request-body bytes all connections together may hold at once (default
    4 bodies of the largest size); past it a request is a 503 before its body is read, so
    that many large requests at once cannot exhaust memory either."""
    budget = 4 * max_body_bytes if body_budget is None else body_budget
    inflight = [0]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if isinstance(peername, tuple) else "unix"
        try:
            while await _one(reader, writer, peer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away; nothing to answer
        except asyncio.CancelledError:
            pass  # the server is shutting down: an idle kept-alive connection just ends
        finally:
            with contextlib.suppress(Exception):
                writer.close()
                await writer.wait_closed()

    async def _one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> bool:
        """One request and its response; True when the connection stays open for another."""
        held = [0]

        def reserve(n: int) -> None:
            if inflight[0] + n > budget:
                raise BadRequest(503, "the server is busy reading other large requests; retry")
            inflight[0] += n
            held[0] += n

        try:
            return await _one_held(reader, writer, peer, reserve)
        finally:
            inflight[0] -= held[0]

    async def _one_held(reader, writer, peer: str, reserve: Callable[[int], None]) -> bool:
        req: HttpRequest | None = None
        try:
            try:
                # The whole request within KEEP_ALIVE_S: a trickling client is dropped.
                req = await asyncio.wait_for(
                    read_request(reader, check_head, max_body_bytes, reserve), KEEP_ALIVE_S
                )
            except TimeoutError:
                return False
            if req is None:
                return False
            started = time.monotonic()
            resp = await _unless_client_leaves(_answered(handler, req, log), reader)
            if resp is None:
                _access(log, peer, req, "client left", started)
                return False
        except BadRequest as e:
            started = time.monotonic()
            body = json.dumps({"error": {"message": str(e), "code": e.status}}).encode()
            writer.write(_head(e.status, "application/json", {}, len(body)) + body)
            await writer.drain()
            if e.unread:
                await _discard(reader, e.unread)
            _access(log, peer, None, e.status, started)
            return False
        keep = req is not None and req.keep_alive and resp.events is None
        if resp.events is not None:
            await _send_events(resp, reader, writer)
        else:
            writer.write(
                _head(resp.status, resp.content_type, resp.headers, len(resp.body), keep_alive=keep)
            )
            writer.write(resp.body)
            await writer.drain()
        _access(log, peer, req, resp.status, started)
        return keep

    return serve


async def _answered(handler: Handler, req: HttpRequest, log: TextIO | None) -> HttpResponse:
    """The handler's response; an unexpected exception is a 500 with one line (and the
    traceback's last line in the log), never a dropped connection."""
    try:
        return await handler(req)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # a bug: answer it, keep serving everyone else
        if log is not None:
            with contextlib.suppress(Exception):
                log.write(f"m3agent serve: internal error on {req.path}: {type(e).__name__}: {e}\n")
                log.flush()
        body = json.dumps(
            {"error": {"message": f"internal error: {type(e).__name__}", "code": 500}}
        ).encode()
        return HttpResponse(500, body)


async def start(
    handler: Handler,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    socket_path: str | None = None,
    access_log: TextIO | None = None,
    check_head: HeadCheck | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    body_budget: int | None = None,
) -> asyncio.base_events.Server:
    """Listens on host:port or on a unix socket; port 0 picks a free one."""
    cb = connection_handler(handler, access_log, check_head, max_body_bytes, body_budget)
    if socket_path is not None:
        return await asyncio.start_unix_server(cb, path=socket_path, limit=MAX_HEADER_BYTES)
    return await asyncio.start_server(cb, host, port or 0, limit=MAX_HEADER_BYTES)
