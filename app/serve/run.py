"""Running `m3agent serve`: lock, load, listen, serve until SIGTERM/SIGINT, clean up."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from m3agent.engine.model_source import resolve_model
from m3agent.tools.private_fs import private_dir

from ..warm import user_model_dirs
from . import lock as locks
from .guard import Guard, ensure_token
from .http import Handler, start
from .idle import IdleWatch
from .quiet import release_when_quiet
from .server import ChatServer, ServeConfig, body_limit

if TYPE_CHECKING:
    from m3agent.engine.api import Engine

    from ..settings import Settings


async def serve_forever(
    engine: Engine,
    config: ServeConfig,
    *,
    home: Path,
    lock: locks.ServerLock,
    host: str,
    port: int | None,
    socket_path: str | None,
    log: TextIO,
    token: str | None = None,
    idle_timeout_s: float | None = None,
) -> None:
    app = ChatServer(engine, config)
    handler: Handler = app.handle

    # Requests in flight and the last one's end: for the idle stop of an auto-started server
    # (app/warm.py: it ends itself when unused) and for giving memory back when quiet.
    watch = IdleWatch(idle_timeout_s or math.inf)
    handler = watch.wrap(handler)
    if socket_path is not None:
        sock = Path(socket_path)
        if sock.exists():
            if _socket_in_use(socket_path):
                raise ValueError(f"{socket_path} is in use by another server")
            sock.unlink()  # a stale socket left by a server that died
    limit = body_limit(engine.info().max_context_tokens, config.media_bytes)
    # Host names a request may carry: loopback, and the address it was told to listen on.
    hosts: tuple[str, ...] | None = tuple(
        {"127.0.0.1", "localhost", "::1", "[::1]", host.lower(), f"[{host.lower()}]"}
    )
    if host in ("0.0.0.0", "::", ""):
        hosts = None  # clients reach a wildcard listener by names we cannot know
    guard = Guard(token=token, max_body_bytes=limit, hosts=hosts)
    server = await start(
        handler,
        host=host,
        port=port,
        socket_path=socket_path,
        access_log=log,
        check_head=guard.check_head,
        max_body_bytes=limit,
    )
    if socket_path is not None:
        os.chmod(socket_path, 0o600)  # only the owner connects (the token guards TCP)
    bound_port = None if socket_path else server.sockets[0].getsockname()[1]
    # Clients on this machine reach a wildcard listener through loopback.
    local = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    ready = replace(
        lock,
        host=None if socket_path else local,
        port=bound_port,
        socket=socket_path,
        state="ready",
        max_context_tokens=engine.info().max_context_tokens,
    )
    locks.update(home, ready)
    log.write(
        f"m3agent serve: {config.served_model_name} ({engine.info().backend}) on "
        f"{ready.address} (pid {os.getpid()}), request bodies up to {limit:,} bytes, "
        "token required (serve/token in the data home)\n"
    )
    log.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        waits: list[asyncio.Future[object]] = [
            asyncio.ensure_future(stop.wait()),
            asyncio.ensure_future(release_when_quiet(watch)),  # never ends by itself
        ]
        if idle_timeout_s:
            waits.append(asyncio.ensure_future(watch.wait_idle()))
        _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for w in pending:
            w.cancel()
        if not stop.is_set():
            log.write(f"m3agent serve: idle for {idle_timeout_s:g} s\n")
        log.write("m3agent serve: stopping\n")
        log.flush()
    finally:
        server.close()
        close_clients = getattr(server, "close_clients", None)  # Python 3.13+: idle keep-alives
        if close_clients is not None:
            close_clients()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5.0)
        await engine.close()
        if socket_path is not None:
            Path(socket_path).unlink(missing_ok=True)


def _socket_in_use(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
        except OSError:
            return False
    return True


def run_server(
    settings: Settings,
    *,
    host: str,
    port: int | None,
    socket_path: str | None,
    served_model_name: str | None,
    build_engine: Callable[..., Engine],
    log: TextIO | None = None,
    allow_public: bool = False,
    allowed_media: tuple[Path, ...] = (),
    media_bytes: int | None = None,
    idle_timeout_s: float | None = None,
) -> None:
    """Blocks until stopped. ValueError for usage errors, EngineError when loading fails.
    allowed_media: directories whose files a client may name as file:// URLs."""
    log = log or sys.stderr
    if host not in ("127.0.0.1", "localhost", "::1") and not allow_public:
        # Beyond loopback the token travels in clear text and anyone on the network can try it.
        raise ValueError(f"--host {host} is not loopback; add --allow-public to listen there")
    for d in allowed_media:
        if not d.is_dir():
            raise ValueError(f"--allow-media-dir {d} is not a directory")
    private_dir(settings.home)  # a fresh home is private whatever the umask
    token = ensure_token(settings.home)

    spec = settings.model or ""  # none given: resolve_model says "--model is empty"
    resolved = resolve_model(spec, model_dirs=user_model_dirs(settings))
    name = served_model_name or resolved.repo_id or resolved.path.name
    lock = locks.ServerLock(
        pid=os.getpid(),
        model=resolved.key,
        served_model_name=name,
        backend=settings.engine,
        started_at=time.time(),
    )
    held = locks.acquire(settings.home, lock)  # before loading: a second server fails at once
    try:
        from ..warm import load_log_writer

        # Weight-loading lines in the log: a run waiting for this server shows them.
        engine = build_engine(
            settings.override(model=str(resolved.path)), attach=False, progress=load_log_writer(log)
        )
        aliases = tuple({spec, resolved.key, str(resolved.path)} - {name})
        config = ServeConfig(
            name,
            settings.home / "serve" / "media",
            default_thinking=settings.thinking,
            aliases=aliases,
            allowed_media=tuple(Path(os.path.realpath(d)) for d in allowed_media),
            **({} if media_bytes is None else {"media_bytes": media_bytes}),
        )
        asyncio.run(
            serve_forever(
                engine,
                config,
                home=settings.home,
                lock=lock,
                host=host,
                port=port,
                socket_path=socket_path,
                log=log,
                token=token,
                idle_timeout_s=idle_timeout_s,
            )
        )
    finally:
        locks.release(settings.home, lock, held)
