"""The Language Server Protocol's base protocol: `Content-Length: N\\r\\n\\r\\n` and N bytes
of UTF-8 JSON. A message over MAX_MESSAGE_BYTES, a header without a length or a body that is
not a JSON object is a ProtocolError: the server is then treated as broken, never trusted to
fill memory."""

from __future__ import annotations

import json
from typing import IO, Any

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
MAX_HEADER_BYTES = 4096


class ProtocolError(Exception):
    pass


def encode(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def read_message(stream: IO[bytes]) -> dict[str, Any] | None:
    """The next message, or None at the end of the stream (the server exited)."""
    length = None
    seen = 0
    while True:
        line = stream.readline(MAX_HEADER_BYTES + 1)
        if not line:
            return None
        seen += len(line)
        if seen > MAX_HEADER_BYTES or not line.endswith(b"\n"):
            raise ProtocolError("header too long")
        line = line.strip()
        if not line:
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise ProtocolError(f"bad Content-Length {value.strip()[:20]!r}") from None
    if length is None or length < 0:
        raise ProtocolError("a message without Content-Length")
    if length > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"a {length}-byte message (the limit is {MAX_MESSAGE_BYTES})")
    body = stream.read(length)
    if len(body) < length:
        return None
    try:
        msg = json.loads(body)
    except ValueError as e:
        raise ProtocolError(f"a message that is not JSON: {e}") from None
    if not isinstance(msg, dict):
        raise ProtocolError("a message that is not a JSON object")
    return msg
