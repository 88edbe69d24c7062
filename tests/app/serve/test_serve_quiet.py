"""Friction 12 of issue 37: `m3agent serve` gives memory back once it falls quiet.

What the release does, measured in a child process: freed but fragmented heap memory (what
many concurrent requests leave in glibc's arenas) stays resident until `release_memory`
trims it; the control does not call it and the memory stays. When the server releases: over
real HTTP on loopback (ChatServer, the scripted engine), once after each burst of requests,
never before the first, never while a request is in flight."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import httpx
import pytest
from m3agent.app.serve.http import start
from m3agent.app.serve.idle import IdleWatch
from m3agent.app.serve.quiet import release_when_quiet
from m3agent.app.serve.server import ChatServer, ServeConfig
from m3agent.engine.backends.scripted import ScriptedEngine

_FRAGMENTED = textwrap.dedent(
    """
    import os, sys
    from m3agent.app.serve.quiet import release_memory

    def rss_mb():
        for line in open(f"/proc/{os.getpid()}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024

    blocks = [bytes(2000) for _ in range(100_000)]  # ~200 MB through malloc
    kept = blocks[::16]  # one block in 16 stays: the heap cannot shrink from its top
    del blocks
    before = rss_mb()
    if sys.argv[1] == "release":
        release_memory()
    print(before, rss_mb())
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
@pytest.mark.parametrize("mode", ["release", "control"])
def test_release_gives_fragmented_heap_memory_back(mode):
    out = subprocess.run(
        [sys.executable, "-c", _FRAGMENTED, mode], capture_output=True, text=True, check=True
    ).stdout
    before, after = map(int, out.split())
    if mode == "release":
        assert after < before - 100, out  # most of the ~190 MB freed goes back
    else:
        assert after > before - 20, out  # nothing trims it by itself


async def _until(cond, timeout_s: float = 10.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("timed out")


def test_the_server_releases_once_after_each_burst_and_never_in_flight(tmp_path):
    asyncio.run(_bursts(tmp_path))


async def _bursts(tmp_path) -> None:
    watch = IdleWatch(3600)
    released: list[int] = []  # requests in flight at each release
    app = ChatServer(ScriptedEngine(["</mm:think>hi"] * 8), ServeConfig("t", tmp_path / "media"))
    server = await start(watch.wrap(app.handle), host="127.0.0.1", port=0)
    port = server.sockets[0].getsockname()[1]
    quiet = asyncio.ensure_future(
        release_when_quiet(watch, 0.3, lambda: released.append(watch.in_flight), poll_s=0.05)
    )
    body = {"model": "t", "messages": [{"role": "user", "content": "x"}], "max_tokens": 8}
    try:
        await asyncio.sleep(0.6)
        assert released == []  # no request yet: nothing to give back
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/v1") as client:
            for _ in range(3):  # one burst
                r = await client.post("/chat/completions", json=body)
                assert r.status_code == 200, r.text
            await _until(lambda: released != [])
            assert released == [0]  # once, after the burst, with nothing in flight
            await asyncio.sleep(0.5)
            assert released == [0]  # not again while nothing new came
            r = await client.post("/chat/completions", json=body)
            assert r.status_code == 200
            await _until(lambda: len(released) > 1)
        assert released == [0, 0]
    finally:
        quiet.cancel()
        server.close()
        await server.wait_closed()
