"""Our ChatServer (`m3agent serve`'s HTTP app) in this process on 127.0.0.1, in front of any
engine, for tests whose client is real HTTP (httpx, the openai SDK, RemoteEngine)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from m3agent.app.serve.http import start
from m3agent.app.serve.server import ChatServer, ServeConfig


@contextlib.asynccontextmanager
async def chat_server(
    engine: Any, media_dir: Path, *, aliases: tuple[str, ...] = ()
) -> AsyncIterator[str]:
    """Serves engine as model "tiny" on a free port; yields the base URL (…/v1)."""
    app = ChatServer(engine, ServeConfig("tiny", media_dir, aliases=aliases))
    server = await start(app.handle, port=0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    finally:
        server.close()
        await server.wait_closed()


def serve_and_run(engine: Any, tmp_path: Path, client_main: Callable[[str], Awaitable[Any]]):
    """asyncio.run of client_main(base_url) against engine served over HTTP."""

    async def main():
        async with chat_server(engine, tmp_path / "media") as url:
            return await client_main(url)

    return asyncio.run(main())
