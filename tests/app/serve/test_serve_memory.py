"""Friction 12 of issue 37: what `m3agent serve` holds after a batch of requests must not grow
with the number of requests. ChatServer over real HTTP on loopback (in process, the scripted
engine behind it), each request on its own connection, streamed and not, one client hanging
up mid-stream; after a warm-up batch, two more batches of the same size. Live Python memory
(pymalloc's allocated blocks, after a full collection) and live objects may differ between the two by a
small bound only: an unbounded leak (a per-connection buffer, a task, a per-request record
kept) grows them by the same amount every batch."""

from __future__ import annotations

import asyncio
import gc
import sys

import httpx
import pytest
from m3agent.app.serve.http import start
from m3agent.app.serve.server import ChatServer, ServeConfig
from m3agent.engine.backends.scripted import ScriptedEngine

BATCH = 16
ANSWER = "</mm:think>" + "word " * 20


def _body(i: int) -> dict:
    return {
        "model": "tiny",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": f"request {i}: " + "x" * 1000},  # a body of some size
        ],
        "stream": i % 2 == 1,
        "max_tokens": 64,
    }


async def _batch(port: int, start_at: int) -> int:
    ok = 0
    # no keep-alive: every request opens and closes its own connection
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", timeout=30, limits=limits
    ) as client:

        async def one(i: int) -> None:
            nonlocal ok
            if i % 8 == 7:  # hangs up mid-stream
                async with client.stream("POST", "/v1/chat/completions", json=_body(i)) as r:
                    async for _ in r.aiter_lines():
                        break
                return
            r = await client.post("/v1/chat/completions", json=_body(i))
            r.raise_for_status()
            ok += 1

        for group in range(start_at, start_at + BATCH, 8):  # 8 at a time
            await asyncio.gather(*(one(i) for i in range(group, group + 8)))
    return ok


def _live() -> tuple[int, int]:
    gc.collect()
    return sys.getallocatedblocks(), len(gc.get_objects())


@pytest.mark.parametrize("leak", [False, True], ids=["serve", "control-a-leaking-handler"])
def test_a_batch_of_requests_leaves_nothing_behind(tmp_path, leak):
    engine = ScriptedEngine([ANSWER] * (3 * BATCH), chunk_chars=16)
    kept = []

    async def main() -> list[tuple[int, int, int]]:
        app = ChatServer(engine, ServeConfig("tiny", tmp_path / "media"))

        async def leaking(req):  # the control: a server that keeps every request it saw
            kept.append(req)
            return await app.handle(req)

        server = await start(leaking if leak else app.handle, port=0)
        port = server.sockets[0].getsockname()[1]
        rows = []
        try:
            for b in range(3):
                ok = await _batch(port, b * BATCH)
                await asyncio.sleep(0.3)  # the server's side of each hang-up is handled
                engine.prompt_token_ids.clear()  # the scripted engine's own record of prompts
                engine.prompts.clear()
                rows.append((ok, *_live()))
        finally:
            server.close()
            await server.wait_closed()
        return rows

    rows = asyncio.run(main())
    assert [ok for ok, *_ in rows] == [BATCH - BATCH // 8] * 3
    (_, _, _), (_, blocks2, objs2), (_, blocks3, objs3) = rows
    # Keeping as little as one request object (a few blocks) per request exceeds these.
    grew = blocks3 - blocks2 >= 10 * BATCH or objs3 - objs2 >= BATCH
    assert grew is leak, (rows, len(kept))
