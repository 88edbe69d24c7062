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
from collections.abc import Awaitable, Callable
from typing import TextIO

from .request import (
    MAX_BODY_BYTES,
    MAX_HEADER_BYTES,
    BadRequest,
    Handler,
    HeadCheck,
    HttpRequest,
    HttpResponse,
    discard,
    read_request,
)

__all__ = ["BadRequest", "Handler", "HttpRequest", "HttpResponse", "read_request", "start"]

KEEP_ALIVE_S = 30.0  # an idle kept-alive connection is closed after this
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
) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
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

    async def _one_held(
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: str,
        reserve: Callable[[int], None],
    ) -> bool:
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
                await discard(reader, e.unread)
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
