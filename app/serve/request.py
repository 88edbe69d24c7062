"""The request side of serve's HTTP/1.1 server: the request and response objects, reading
one request (head checks before the body: see guard.py), and dropping a refused body."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 512 * 1024 * 1024  # the hard ceiling; serve sets a smaller one (guard.py)
# After a refusal, the rest of a body still on its way is read and dropped (never kept), so
# that the client, still sending, does not get a reset instead of the answer.
_DISCARD_S = 5.0
_DISCARD_BYTES = 1 << 30


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
        try:  # read as latin-1 above (every byte a character); UTF-8 is what is allowed
            head.decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest(400, "the request line or a header is not valid UTF-8") from None
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


async def discard(reader: asyncio.StreamReader, n: int) -> None:
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
