"""`m3agent mcp login NAME`: the browser step of OAuth, with a redirect listener on loopback.

The listener binds 127.0.0.1 on a port the kernel picks, is registered as the client's
redirect URI, and accepts exactly one redirect: the one whose `state` equals the state of the
authorization URL this login printed. Any other request (a wrong or missing state, another
path) is answered 400 and ignored, so a page that guesses the port cannot complete someone
else's login or plant its own code; the login keeps waiting for the right one until its
timeout. The code goes to the token endpoint together with the PKCE verifier; the tokens land
in the server's token file (oauth.TokenFile).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import parse_qs, urlsplit

from .config import McpServerConfig, Transport
from .oauth import (
    OAuthRefused,
    TokenFile,
    check_transport_security,
    guard,
    make_provider,
    origin,
    quiet_sdk_logs,
    token_path,
)
from .state import one_line

if TYPE_CHECKING:  # the SDK is imported when a login runs
    from mcp.shared.auth import AuthorizationCodeResult

E = TypeVar("E", bound=BaseException)

_PAGE = (
    "<!doctype html><meta charset=utf-8><title>m3agent</title>"
    "<p>{text}</p><p>You can close this tab.</p>"
)


@dataclass(frozen=True, slots=True)
class LoginResult:
    server: str
    tools: int
    token_file: Path


class RedirectListener:
    """One-shot HTTP listener for the authorization redirect on 127.0.0.1:<random port>."""

    def __init__(self) -> None:
        self._server: asyncio.AbstractServer | None = None
        self._expected_state: str | None = None
        self._result: asyncio.Future[AuthorizationCodeResult] | None = None
        self.port = 0

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}/callback"

    async def start(self) -> None:
        self._result = asyncio.get_running_loop().create_future()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def expect(self, state: str) -> None:
        self._expected_state = state

    async def wait(self, timeout_s: float) -> AuthorizationCodeResult:
        assert self._result is not None
        try:
            return await asyncio.wait_for(asyncio.shield(self._result), timeout_s)
        except TimeoutError:
            raise OAuthRefused(
                f"no authorization redirect reached {self.redirect_uri} within {timeout_s:g}s"
            ) from None

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = line.split(" ")
            status, text = self._answer(parts[1] if len(parts) == 3 and parts[0] == "GET" else "")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            status, text = 400, "Bad request."
        body = _PAGE.format(text=text).encode()
        reason = {200: "OK", 400: "Bad Request"}[status]
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(Exception):
            await writer.drain()
        writer.close()

    def _answer(self, target: str) -> tuple[int, str]:
        from mcp.shared.auth import AuthorizationCodeResult

        url = urlsplit(target)
        if url.path != "/callback" or self._result is None or self._result.done():
            return 400, "Not an authorization redirect this login is waiting for."
        query = parse_qs(url.query)
        state = (query.get("state") or [""])[0]
        if not self._expected_state or not secrets.compare_digest(state, self._expected_state):
            return 400, "The state does not match this login's; ignored. The login still waits."
        error = (query.get("error") or [""])[0]
        if error:
            why = (query.get("error_description") or [error])[0]
            self._result.set_exception(OAuthRefused(f"the authorization server said: {why}"))
            return 400, f"Login refused: {why}"
        code = (query.get("code") or [""])[0]
        if not code:
            return 400, "The redirect has no code; ignored."
        iss = query["iss"][0] if query.get("iss") else None
        self._result.set_result(AuthorizationCodeResult(code=code, state=state, iss=iss))
        return 200, "m3agent is logged in."


async def login(
    cfg: McpServerConfig,
    oauth_dir: Path,
    show_url: Callable[[str], Awaitable[None] | None],
    timeout_s: float = 300.0,
) -> LoginResult:
    """Runs the whole flow against the server and lists its tools with the new token."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp_types import Implementation

    if cfg.transport is not Transport.HTTP:
        raise OAuthRefused(
            f"MCP server {cfg.name} is a {cfg.transport.value} server: OAuth login is for "
            "streamable HTTP servers"
        )
    check_transport_security(cfg.url, f"MCP server {cfg.name}:")
    quiet_sdk_logs()
    listener = RedirectListener()
    await listener.start()
    path = token_path(oauth_dir, cfg.name)
    storage = TokenFile(path, cfg.url, fresh=True)

    async def redirect(url: str) -> None:
        as_url = provider.context.auth_server_url or cfg.url
        if origin(url) != origin(as_url):
            raise OAuthRefused(
                f"MCP server {cfg.name}: the authorization endpoint {origin(url)} is not on the "
                f"authorization server's origin {origin(as_url)}: refused"
            )
        check_transport_security(url, "the authorization endpoint")
        listener.expect((parse_qs(urlsplit(url).query).get("state") or [""])[0])
        shown = show_url(url)
        if shown is not None:
            await shown

    async def callback() -> AuthorizationCodeResult:
        return await listener.wait(timeout_s)

    provider = make_provider(
        cfg.name,
        cfg.url,
        storage,
        redirect_uri=listener.redirect_uri,
        redirect_handler=redirect,
        callback_handler=callback,
    )
    import httpx2

    headers = {k: v for k, v in dict(cfg.headers).items() if k.lower() != "authorization"}
    try:
        async with httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(30.0),
            auth=guard(cfg.name, cfg.url, provider, storage),
        ) as http:
            transport = streamable_http_client(cfg.url, http_client=http)
            client = Client(
                transport,
                mode="auto",
                cache=None,
                client_info=Implementation(name="m3agent", version="0"),
            )
            async with client:
                listing = await client.list_tools()
    except OAuthRefused:
        raise
    except BaseException as e:
        inner = _find(e, OAuthRefused)
        if inner is not None:
            raise inner from None
        if isinstance(e, asyncio.CancelledError | KeyboardInterrupt):
            raise
        raise OAuthRefused(f"MCP server {cfg.name}: login failed: {one_line(e)}") from None
    finally:
        await listener.close()
    if not storage.has_tokens:
        raise OAuthRefused(
            f"MCP server {cfg.name} answered without asking for a login: nothing to store"
        )
    return LoginResult(cfg.name, len(listing.tools), path)


def _find(e: BaseException, cls: type[E]) -> E | None:
    if isinstance(e, cls):
        return e
    if isinstance(e, BaseExceptionGroup):
        for x in e.exceptions:
            found = _find(x, cls)
            if found is not None:
                return found
    cause = e.__cause__ or e.__context__
    return _find(cause, cls) if cause is not None and cause is not e else None
