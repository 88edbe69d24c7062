"""OAuth for HTTP MCP servers (the MCP authorization spec), on the SDK's OAuthClientProvider.

The SDK does the protocol: protected resource metadata (RFC 9728) from the server's 401,
authorization server metadata (RFC 8414, issuer checked), dynamic client registration
(RFC 7591), the authorization code grant with PKCE S256 and a `state`, the resource
indicator (RFC 8707, checked against the server's URL) and token refresh. This module adds
what m3agent decides:

- where tokens live: one 0600 file per server under `<home>/mcp-oauth/` (TokenFile), bound to
  the server's URL: a record written for another URL is never read;
- where the flow may send anything (OAuthGuard): the flow's own requests go only to the MCP
  server's origin (metadata discovery) or to the origin of the authorization server its
  metadata names (metadata, registration, token); a token endpoint elsewhere is refused before
  the code and the PKCE verifier are sent; plain http only to loopback hosts; the bearer token
  goes only to the server's own origin;
- that a session never waits for a person: without a usable token a server fails with
  McpLoginRequired ("run `m3agent mcp login NAME`"); only `mcp login` runs the browser step
  (oauth_login.py).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

from ..private_fs import open_private, private_dir
from .state import McpCallError

if TYPE_CHECKING:  # the SDK and httpx2 are imported when a flow needs them
    import httpx2
    from mcp.client.auth.oauth2 import OAuthContext
    from mcp.shared.auth import (
        AuthorizationCodeResult,
        OAuthClientInformationFull,
        OAuthClientMetadata,
        OAuthToken,
    )

_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


class McpLoginRequired(McpCallError):
    """The server wants an OAuth login that this (non-interactive) connection cannot do."""

    def __init__(self, server: str) -> None:
        super().__init__(
            f"MCP server {server} needs a login: run `m3agent mcp login {server}`, then try again"
        )
        self.server = server


class OAuthRefused(McpCallError):
    """The flow was stopped because the server or authorization server asked for something
    m3agent does not do (one line: what and why)."""


def origin(url: str) -> str:
    """scheme://host:port, lower case, default ports made explicit."""
    parts = urlsplit(str(url))
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port or {"http": 80, "https": 443}.get(scheme, 0)
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def check_transport_security(url: str, what: str) -> None:
    parts = urlsplit(str(url))
    if parts.scheme == "https":
        return
    if parts.scheme == "http" and (parts.hostname or "").lower() in _LOOPBACK:
        return
    raise OAuthRefused(f"{what} {url} is not https (plain http only to 127.0.0.1/localhost)")


def token_path(oauth_dir: Path, server: str) -> Path:
    return Path(oauth_dir) / f"{server}.json"


class TokenFile:
    """The SDK's TokenStorage as one private JSON file per server.

    The record names the server URL it was written for; a record for another URL (the server
    was re-pointed, or the file was copied) reads as empty, so a token is never sent to a
    server it was not issued for. Writes go to a temporary file (0600, never through a
    symlink) renamed over the record; the directory is 0700. `fresh=True` (a new login)
    starts from an empty record and replaces the old one only once new tokens arrive.
    """

    def __init__(self, path: Path, server_url: str, fresh: bool = False) -> None:
        self.path = Path(path)
        self.server_url = server_url
        self._record: dict[str, Any] = {} if fresh else self._read()
        self.context: OAuthContext | None = None  # the provider's: its discovery is kept too

    def _read(self) -> dict[str, Any]:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        except OSError as e:  # a symlink (ELOOP) or unreadable: not ours to trust
            raise OAuthRefused(f"cannot read the token file {self.path}: {e.strerror}") from None
        with os.fdopen(fd, encoding="utf-8") as f:
            st = os.fstat(f.fileno())
            if st.st_uid != os.geteuid():
                raise OAuthRefused(f"the token file {self.path} belongs to another user")
            if st.st_mode & 0o077:
                os.fchmod(f.fileno(), 0o600)  # what an older copy left readable is fixed
            try:
                record = json.load(f)
            except ValueError:
                return {}
        if not isinstance(record, dict) or record.get("server_url") != self.server_url:
            return {}
        return record

    def _write(self) -> None:
        private_dir(self.path.parent)
        self._record["server_url"] = self.server_url
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        fd = open_private(tmp, os.O_WRONLY | os.O_TRUNC)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(self._record, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    # ---- what the provider reads --------------------------------------------------------

    @property
    def has_tokens(self) -> bool:
        return bool(self._record.get("tokens"))

    @property
    def expires_at(self) -> float | None:
        value = self._record.get("expires_at")
        return float(value) if isinstance(value, int | float) else None

    async def get_tokens(self) -> OAuthToken | None:
        from mcp.shared.auth import OAuthToken

        data = self._record.get("tokens")
        return OAuthToken.model_validate(data) if data else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._record["tokens"] = tokens.model_dump(mode="json", exclude_none=True)
        ctx = self.context
        if ctx is not None and ctx.oauth_metadata is not None:
            # where a refresh goes: the authorization server found at login, not a guess
            self._record["auth_server"] = ctx.auth_server_url
            self._record["as_metadata"] = ctx.oauth_metadata.model_dump(
                mode="json", exclude_none=True
            )
            if ctx.protected_resource_metadata is not None:
                self._record["resource_metadata"] = ctx.protected_resource_metadata.model_dump(
                    mode="json", exclude_none=True
                )
        expires_in = tokens.expires_in
        self._record["expires_at"] = time.time() + expires_in if expires_in else None
        self._write()

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        from mcp.shared.auth import OAuthClientInformationFull

        data = self._record.get("client")
        return OAuthClientInformationFull.model_validate(data) if data else None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._record["client"] = client_info.model_dump(mode="json", exclude_none=True)
        # registered, not yet logged in: nothing is written until tokens arrive

    def restore(self, ctx: OAuthContext) -> None:
        """Puts what the login discovered back into a new provider's context."""
        from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata

        ctx.token_expiry_time = self.expires_at
        if self._record.get("as_metadata"):
            ctx.oauth_metadata = OAuthMetadata.model_validate(self._record["as_metadata"])
            ctx.auth_server_url = self._record.get("auth_server")
        if self._record.get("resource_metadata"):
            ctx.protected_resource_metadata = ProtectedResourceMetadata.model_validate(
                self._record["resource_metadata"]
            )

    def summary(self) -> dict[str, bool | float | None]:
        """For `mcp list/get`: whether there is a token and when it expires (no secrets)."""
        tokens = self._record.get("tokens") or {}
        return {
            "logged_in": bool(tokens),
            "expires_at": self.expires_at,
            "refreshable": bool(tokens.get("refresh_token")),
        }


def client_metadata(redirect_uri: str) -> OAuthClientMetadata:
    from mcp.shared.auth import OAuthClientMetadata

    return OAuthClientMetadata(
        redirect_uris=[redirect_uri],  # type: ignore[list-item]  # pydantic parses the str
        client_name="m3agent",
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )


def make_provider(
    server: str,
    server_url: str,
    storage: TokenFile,
    *,
    redirect_uri: str = "http://127.0.0.1/callback",
    redirect_handler: Callable[[str], Awaitable[None]] | None = None,
    callback_handler: Callable[[], Awaitable[AuthorizationCodeResult]] | None = None,
) -> Any:  # a subclass of the SDK's OAuthClientProvider, made here (the SDK loads lazily)
    """The SDK provider with the stored token's expiry restored (so an expired token is
    refreshed before it is sent) and, without handlers, a flow that stops with
    McpLoginRequired where it would need a person."""
    from mcp.client.auth import OAuthClientProvider

    async def no_person(*_args: object) -> NoReturn:
        raise McpLoginRequired(server)

    class _Provider(OAuthClientProvider):
        interactive = False  # True when a person can do the browser step (mcp login)

        async def _initialize(self) -> None:
            await super()._initialize()
            storage.restore(self.context)

    provider = _Provider(
        server_url,
        client_metadata(redirect_uri),
        storage,
        redirect_handler=redirect_handler or no_person,
        callback_handler=callback_handler or no_person,
    )
    provider.interactive = callback_handler is not None
    storage.context = provider.context
    return provider


def _httpx() -> ModuleType:
    import httpx2

    return httpx2


class OAuthGuard:
    """An httpx2.Auth around the SDK provider that checks every request the flow makes.

    Built lazily as a subclass of httpx2.Auth (see guard()), so importing this module does not
    import httpx2.
    """

    requires_response_body = True

    def __init__(self, server: str, server_url: str, provider: Any, storage: TokenFile) -> None:
        self.server = server
        self.server_url = server_url
        self.provider = provider
        self.storage = storage
        self.interactive = provider.interactive

    def _allowed(self) -> set[str]:
        allowed = {origin(self.server_url)}
        as_url = self.provider.context.auth_server_url
        if as_url:
            allowed.add(origin(as_url))
        return allowed

    def _check(self, outgoing: httpx2.Request, original: httpx2.Request) -> None:
        url = str(outgoing.url)
        if outgoing is original:
            if origin(url) != origin(self.server_url):
                outgoing.headers.pop("Authorization", None)
            return
        check_transport_security(url, "the OAuth request to")
        # discovery (GET) may ask the MCP server; registration and tokens (POST) go only to
        # the authorization server (the MCP server's own origin only when it is its own AS)
        as_url = self.provider.context.auth_server_url
        allowed = (
            self._allowed() if outgoing.method == "GET" else {origin(as_url or self.server_url)}
        )
        if origin(url) not in allowed:
            raise OAuthRefused(
                f"MCP server {self.server}: the OAuth flow would send the {_what(outgoing)} to "
                f"{origin(url)}, not to {' or '.join(sorted(allowed))}: refused"
            )

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if not self.interactive and not self.storage.has_tokens:
            # never logged in: say so instead of registering a client nobody will use
            response = yield request
            if response.status_code == 401:
                raise McpLoginRequired(self.server)
            return
        flow = self.provider.async_auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                self._check(outgoing, request)
                response = yield outgoing
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()

    def sync_auth_flow(self, request: httpx2.Request) -> NoReturn:  # pragma: no cover
        raise RuntimeError("OAuthGuard works with async clients only")


def _what(request: httpx2.Request) -> str:
    if request.method == "POST":
        body = request.content.decode("utf-8", "replace")
        if "grant_type=" in body:
            return "token request"
        return "client registration"
    return "metadata request"


def guard(server: str, server_url: str, provider: Any, storage: TokenFile) -> httpx2.Auth:
    """OAuthGuard as an httpx2.Auth instance."""
    auth_cls = type("OAuthGuardAuth", (OAuthGuard, _httpx().Auth), {})
    auth: httpx2.Auth = auth_cls(server, server_url, provider, storage)
    return auth


def quiet_sdk_logs() -> None:
    """The SDK logs a traceback for every flow it stops; ours says it in one line instead."""
    log = logging.getLogger("mcp.client.auth")
    if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
        log.addHandler(logging.NullHandler())
    log.propagate = False


def session_auth(server: str, server_url: str, oauth_dir: Path) -> httpx2.Auth | None:
    """The auth of a session's connection: stored tokens, refresh, never a browser. None for
    a plain-http server that is not on this machine (no token is ever sent over it)."""
    try:
        check_transport_security(server_url, f"MCP server {server}:")
    except OAuthRefused:
        return None
    quiet_sdk_logs()
    storage = TokenFile(token_path(oauth_dir, server), server_url)
    provider = make_provider(server, server_url, storage)
    return guard(server, server_url, provider, storage)
