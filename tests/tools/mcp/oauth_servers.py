"""A real OAuth 2.1 authorization server and MCP HTTP servers on 127.0.0.1, for test_oauth.py.

    python oauth_servers.py SETTINGS.json PORTS.json

The four servers listen on ports the system picks (no race with other tests for a port picked
beforehand); once all four listen, PORTS.json appears (written whole, then renamed) with
as_port, mcp_port, plain_port and evil_port. SETTINGS says what to do wrong (for the attacks):
  events                                     a JSONL file every server appends what it saw to
  token_endpoint_origin: "evil"              the AS metadata names a token endpoint on evil_port
  resource: URL                              the protected resource metadata names this resource
  expires_in: N                              access tokens from a login live N seconds
                                             (default 3600)
  refreshed_expires_in: N                    tokens from a refresh (default 3600: the one
                                             refresh a test expects is not followed by
                                             another on a slow machine)

The AS does dynamic client registration (RFC 7591), the authorization endpoint (it redirects
at once: the "user" always consents), and the token endpoint: authorization_code with PKCE
S256 checked against the challenge, refresh_token. The MCP server `secure` (mcp_port) needs a
valid bearer token for its own resource and answers 401 with the RFC 9728 WWW-Authenticate
otherwise; `plain` (plain_port) needs nothing and records the Authorization header it gets;
`evil` records anything sent to it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import secrets
import socket
import sys
import time
from urllib.parse import urlencode

import uvicorn
from mcp.server import MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

PORT_NAMES = ("as_port", "mcp_port", "plain_port", "evil_port")


def _listening() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


cfg = json.load(open(sys.argv[1]))
sockets = {name: _listening() for name in PORT_NAMES}
cfg.update({name: s.getsockname()[1] for name, s in sockets.items()})
H = "http://127.0.0.1"
AS = f"{H}:{cfg['as_port']}"
MCP = f"{H}:{cfg['mcp_port']}"
EVIL = f"{H}:{cfg['evil_port']}"
RESOURCE = cfg.get("resource") or f"{MCP}/mcp"
clients: dict[str, dict] = {}
codes: dict[str, dict] = {}
access: dict[str, dict] = {}
refresh: dict[str, dict] = {}


def event(**kw) -> None:
    with open(cfg["events"], "a") as f:
        f.write(json.dumps(kw) + "\n")


# ---- the authorization server -------------------------------------------------------------


async def as_metadata(request: Request) -> Response:
    token = f"{EVIL}/token" if cfg.get("token_endpoint_origin") == "evil" else f"{AS}/token"
    return JSONResponse(
        {
            "issuer": AS,
            "authorization_endpoint": f"{AS}/authorize",
            "token_endpoint": token,
            "registration_endpoint": f"{AS}/register",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
        }
    )


async def register(request: Request) -> Response:
    body = await request.json()
    client_id = "client-" + secrets.token_hex(4)
    clients[client_id] = body
    event(at="as", what="register", client_id=client_id, redirect_uris=body["redirect_uris"])
    return JSONResponse(
        {**body, "client_id": client_id, "token_endpoint_auth_method": "none"}, status_code=201
    )


async def authorize(request: Request) -> Response:
    q = request.query_params
    client = clients.get(q.get("client_id", ""))
    if client is None or q.get("redirect_uri") not in client["redirect_uris"]:
        return PlainTextResponse("unknown client or redirect_uri", status_code=400)
    if q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
        return PlainTextResponse("PKCE S256 required", status_code=400)
    code = "code-" + secrets.token_hex(8)
    codes[code] = {
        "client_id": q["client_id"],
        "redirect_uri": q["redirect_uri"],
        "challenge": q["code_challenge"],
        "resource": q.get("resource"),
    }
    event(at="as", what="authorize", resource=q.get("resource"), state=q.get("state"))
    sep = "&" if "?" in q["redirect_uri"] else "?"
    return RedirectResponse(
        f"{q['redirect_uri']}{sep}{urlencode({'code': code, 'state': q.get('state', '')})}",
        status_code=302,
    )


def _issue(client_id: str, resource: str | None, *, refreshed: bool = False) -> dict:
    token, again = "at-" + secrets.token_hex(16), "rt-" + secrets.token_hex(16)
    ttl = int(cfg.get("refreshed_expires_in" if refreshed else "expires_in", 3600))
    access[token] = {"client_id": client_id, "resource": resource, "exp": time.time() + ttl}
    refresh[again] = {"client_id": client_id, "resource": resource}
    event(at="as", what="issued", access_token=token, refresh_token=again)
    return {
        "access_token": token,
        "token_type": "Bearer",
        "expires_in": ttl,
        "refresh_token": again,
    }


async def token(request: Request) -> Response:
    form = dict(await request.form())
    event(at="as", what="token", grant_type=form.get("grant_type"), code=form.get("code"))
    if form.get("grant_type") == "authorization_code":
        grant = codes.pop(form.get("code", ""), None)
        if grant is None or grant["redirect_uri"] != form.get("redirect_uri"):
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        digest = hashlib.sha256(form.get("code_verifier", "").encode()).digest()
        if base64.urlsafe_b64encode(digest).decode().rstrip("=") != grant["challenge"]:
            return JSONResponse({"error": "invalid_grant", "error_description": "PKCE"}, 400)
        return JSONResponse(_issue(grant["client_id"], grant["resource"]))
    if form.get("grant_type") == "refresh_token":
        grant = refresh.pop(form.get("refresh_token", ""), None)
        if grant is None:
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        return JSONResponse(_issue(grant["client_id"], grant["resource"], refreshed=True))
    return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)


auth_app = Starlette(
    routes=[
        Route("/.well-known/oauth-authorization-server", as_metadata),
        Route("/register", register, methods=["POST"]),
        Route("/authorize", authorize),
        Route("/token", token, methods=["POST"]),
    ]
)


# ---- the MCP servers ----------------------------------------------------------------------


def mcp_app(name: str, needs_token: bool):
    s = MCPServer(name)

    @s.tool()
    def hello() -> str:
        """Says which server answered."""
        return f"hello from {name}"

    inner = s.streamable_http_app()
    prm_path = "/.well-known/oauth-protected-resource/mcp"
    port = cfg["mcp_port"] if needs_token else cfg["plain_port"]

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return await inner(scope, receive, send)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        auth = headers.get("authorization")
        event(at=name, what="request", path=scope["path"], authorization=auth)
        if scope["path"] in (prm_path, "/.well-known/oauth-protected-resource"):
            body = {"resource": RESOURCE, "authorization_servers": [AS]}
            return await JSONResponse(body)(scope, receive, send)
        if needs_token:
            grant = access.get((auth or "").removeprefix("Bearer ").strip())
            if grant is None or grant["exp"] < time.time() or grant["resource"] != RESOURCE:
                www = f'Bearer resource_metadata="{H}:{port}{prm_path}"'
                deny = Response(status_code=401, headers={"WWW-Authenticate": www})
                return await deny(scope, receive, send)
        return await inner(scope, receive, send)

    return app


async def evil_app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            break
    event(at="evil", what="request", path=scope["path"], body=body.decode("utf-8", "replace"))
    await PlainTextResponse("no", status_code=400)(scope, receive, send)


async def main() -> None:
    apps = {
        "as_port": auth_app,
        "mcp_port": mcp_app("secure", True),
        "plain_port": mcp_app("plain", False),
        "evil_port": evil_app,
    }
    tmp = sys.argv[2] + ".tmp"
    with open(tmp, "w") as f:  # the sockets listen already: a client that connects now waits
        json.dump({name: cfg[name] for name in PORT_NAMES}, f)
    os.replace(tmp, sys.argv[2])
    await asyncio.gather(
        *(
            uvicorn.Server(uvicorn.Config(app, log_level="error")).serve(sockets=[sockets[name]])
            for name, app in apps.items()
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
