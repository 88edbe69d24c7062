"""One GET through the fetch policy: every hop (the first URL and each redirect) is checked
against the allowed domains and connected to the address the check approved (no second DNS
lookup), the body is read up to the policy's byte bound, and nothing is decompressed (the
request asks for the identity encoding)."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from .policy import FetchPolicy, Resolver, _getaddrinfo

USER_AGENT = "m3agent-web-fetch/1"
CHUNK = 65_536
REDIRECTS = (301, 302, 303, 307, 308)


class FetchRefused(Exception):
    """The URL (or a redirect) may not be fetched, or the fetch failed; one line."""


@dataclass(frozen=True, slots=True)
class Page:
    url: str  # after redirects
    status: int
    content_type: str  # the media type, lower case, no parameters
    charset: str | None
    body: bytes
    truncated: bool  # the body was longer than the policy's max_bytes
    redirects: tuple[str, ...]


class _Pinned(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, addr: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._addr = addr

    def connect(self) -> None:
        self.sock = socket.create_connection((self._addr, self.port), self.timeout)


class _PinnedTLS(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, addr: str, timeout: float) -> None:
        self._tls = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self._tls)
        self._addr = addr

    def connect(self) -> None:
        raw = socket.create_connection((self._addr, self.port), self.timeout)
        self.sock = self._tls.wrap_socket(raw, server_hostname=self.host)


def check_url(url: str, policy: FetchPolicy) -> tuple[str, str, int]:
    """(scheme, host, port) of a URL web_fetch may request; FetchRefused otherwise."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as e:
        raise FetchRefused(f"not a valid URL: {url!r} ({e})") from None
    if parts.scheme not in ("http", "https"):
        raise FetchRefused(f"only http and https URLs can be fetched, not {url!r}")
    if parts.username is not None or parts.password is not None:
        raise FetchRefused("a URL with a user name or password is not fetched")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise FetchRefused(f"no host in {url!r}")
    why = policy.host_refusal(host)
    if why is not None:
        raise FetchRefused(why)
    return parts.scheme, host, port or (443 if parts.scheme == "https" else 80)


def fetch(
    url: str,
    policy: FetchPolicy,
    resolve: Resolver = _getaddrinfo,
    cancel: threading.Event | None = None,
) -> Page:
    """GET `url` (following redirects); each request gives up after the policy's timeout_s in
    all, or when `cancel` is set (an interrupt)."""
    redirects: list[str] = []
    while True:
        try:
            scheme, host, port = check_url(url, policy)
        except FetchRefused as e:
            if redirects:  # checked again: a redirect never leaves the allowed domains
                raise FetchRefused(f"{redirects[-1]} redirected to {url}, refused: {e}") from None
            raise
        try:
            addr = policy.address(host, port, resolve)
        except ValueError as e:
            raise FetchRefused(str(e)) from None
        conn_type = _PinnedTLS if scheme == "https" else _Pinned
        conn = conn_type(host, port, addr, policy.timeout_s)
        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            conn.request(
                "GET",
                target,
                headers={
                    "User-Agent": USER_AGENT,
                    "Accept": "text/html,text/plain;q=0.9,*/*;q=0.5",
                    "Accept-Encoding": "identity",
                    "Connection": "close",
                },
            )
            resp = conn.getresponse()
            location = resp.getheader("Location")
            if resp.status in REDIRECTS and location:
                if len(redirects) >= policy.max_redirects:
                    raise FetchRefused(f"more than {policy.max_redirects} redirects from {url}")
                redirects.append(url)
                url = urljoin(url, location.strip())
                continue
            body = _read(resp, policy.max_bytes + 1, time.monotonic() + policy.timeout_s, cancel)
            ctype = resp.getheader("Content-Type") or ""
            encoding = (resp.getheader("Content-Encoding") or "identity").strip().lower()
        except (OSError, http.client.HTTPException) as e:
            raise FetchRefused(f"fetching {url} failed: {type(e).__name__}: {e}") from None
        finally:
            conn.close()
        if encoding not in ("", "identity"):
            raise FetchRefused(f"{url} answered in the {encoding} encoding, which is not read")
        media, _, params = ctype.partition(";")
        charset = None
        for p in params.split(";"):
            k, _, v = p.strip().partition("=")
            if k.lower() == "charset" and v:
                charset = v.strip().strip('"').lower()
        return Page(
            url=url,
            status=resp.status,
            content_type=media.strip().lower(),
            charset=charset,
            body=body[: policy.max_bytes],
            truncated=len(body) > policy.max_bytes,
            redirects=tuple(redirects),
        )


def _read(
    resp: http.client.HTTPResponse, limit: int, deadline: float, cancel: threading.Event | None
) -> bytes:
    """Up to `limit` bytes of the body, a chunk at a time: a server that sends slowly cannot
    hold the call past the deadline, and an interrupt stops it."""
    parts: list[bytes] = []
    got = 0
    while got < limit:
        if time.monotonic() > deadline:
            raise FetchRefused(f"the response took longer than the timeout ({got} bytes read)")
        if cancel is not None and cancel.is_set():
            raise FetchRefused("interrupted")
        chunk = resp.read1(min(CHUNK, limit - got))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
