"""Who may talk to `m3agent serve`, checked on the request head before any body byte is read.

- **A per-user token** for everything but `/health`: `<home>/serve/token`, 32 random bytes
  (hex), created 0600 in a 0700 directory the first time a server starts and reused after.
  The agent's own client reads it from there (app/warm.py) and sends it as
  `Authorization: Bearer`. Another local user cannot read the file, so they can neither query
  the owner's server nor learn its cached-token counts (which would confirm guessed blocks of
  the owner's cached prompts).
- **Host and Origin**: a web page that rebinds its DNS name to 127.0.0.1 reaches the port with
  its own name in `Host`, and a browser adds `Origin` to every cross-site POST; both are
  refused unless they name this server (loopback or the address it was told to listen on).
- **JSON only**: a POST must say `Content-Type: application/json`, so that a page's
  "simple" `text/plain` form post (which needs no CORS preflight) is refused.
- **Body size**: a Content-Length over the limit is refused before reading it (413).
"""

from __future__ import annotations

import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from m3agent.tools.private_fs import open_private, private_dir

from .http import BadRequest

OPEN_PATHS = ("/health", "/v1/health")
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def token_path(home: Path) -> Path:
    return home / "serve" / "token"


def read_token(home: Path) -> str | None:
    """The owner's token, or None when no server ever made one (or it is unreadable)."""
    try:
        text = token_path(home).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def ensure_token(home: Path) -> str:
    """The token, created now (0600, written whole) when there is none."""
    path = token_path(home)
    private_dir(path.parent)
    existing = read_token(home)
    if existing is not None:
        fd = open_private(path, os.O_RDONLY)  # fixes the mode of one an older version left
        os.close(fd)
        return existing
    token = secrets.token_hex(32)
    tmp = path.with_name(f".token.{os.getpid()}.tmp")
    with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_TRUNC), "w", encoding="ascii") as f:
        f.write(token + "\n")
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)  # two servers starting at once: the first token written wins
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return read_token(home) or token


def _host_name(value: str) -> str:
    """`host[:port]` -> host, lower case; IPv6 in brackets keeps them."""
    value = value.strip().lower()
    if value.startswith("["):
        return value.split("]", 1)[0] + "]"
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


@dataclass(frozen=True, slots=True)
class Guard:
    token: str | None  # None: no authentication (in-process tests of the routes only)
    max_body_bytes: int
    # Host names a request's Host may carry; None: any (a wildcard --allow-public listener,
    # whose clients use names this process cannot know; the token still guards it).
    hosts: tuple[str, ...] | None = _LOOPBACK

    def check_head(self, method: str, path: str, headers: dict[str, str]) -> None:
        """BadRequest (4xx, one line) for a request to refuse before its body is read."""
        host = headers.get("host")
        if host is not None and self.hosts is not None and _host_name(host) not in self.hosts:
            raise BadRequest(403, f"Host {host!r} is not this server (DNS rebinding?)")
        origin = headers.get("origin")
        if origin is not None and not self._own_origin(origin):
            raise BadRequest(403, f"Origin {origin!r} may not use this server")
        if path not in OPEN_PATHS and self.token is not None:
            given = headers.get("authorization", "")
            scheme, _, value = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                value.strip().encode(), self.token.encode()
            ):
                raise BadRequest(
                    401,
                    "missing or wrong token: send Authorization: Bearer <the token in "
                    "serve/token of the server owner's m3agent data home>",
                )
        if method == "POST":
            kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if kind != "application/json":
                shown = kind or "none"
                raise BadRequest(415, f"Content-Type must be application/json, got {shown!r}")
        length = headers.get("content-length", "0").strip()
        if length.isdigit() and int(length) > self.max_body_bytes:
            raise BadRequest(
                413,
                f"request body of {int(length)} bytes is over this server's limit of "
                f"{self.max_body_bytes} (what the model's context can hold, plus media)",
            )

    def _own_origin(self, origin: str) -> bool:
        scheme, sep, rest = origin.strip().lower().partition("://")
        hosts = _LOOPBACK if self.hosts is None else self.hosts
        return bool(sep) and scheme in ("http", "https") and _host_name(rest) in hosts
