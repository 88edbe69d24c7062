"""Issue 37 item 2: `m3agent run --engine remote --base-url` on your own `m3agent serve` works
without a key typed in (the server's token is found in the data home, as the README's first
install row promises), and a server that wants a key nobody gave is named before the snapshot
(exit 3, one line), not as an HTTP 401 after it. The server is the real `m3agent serve` HTTP
app with its guard and lock (app/serve/run.py) on 127.0.0.1, in front of a scripted engine."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from m3agent.app.serve import lock as locks
from m3agent.app.serve.guard import ensure_token
from m3agent.app.serve.run import serve_forever
from m3agent.app.serve.server import ServeConfig
from m3agent.engine.backends.scripted import ScriptedEngine

from ...support.cli import CONSOLE_SCRIPT, cli_env


@pytest.fixture
def own_serve(tmp_path):
    """(data home, base URL) of a running `m3agent serve` of the model "tiny"."""
    yield from _own_serve(tmp_path, ScriptedEngine(["Done: served."]))


@pytest.fixture
def slow_serve(tmp_path):
    """The same, its one answer streamed a character every 20 ms (about 20 s in all)."""
    answer = "</mm:think>" + "slowly " * 150
    yield from _own_serve(tmp_path, ScriptedEngine([answer], chunk_chars=1, chunk_delay_s=0.02))


def _own_serve(tmp_path, engine):
    home = tmp_path / "home"
    token = ensure_token(home)
    lock = locks.ServerLock(
        pid=os.getpid(), model=str(tmp_path / "tiny"), served_model_name="tiny", backend="native"
    )
    held = locks.acquire(home, lock)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def serve_until_cancelled() -> None:
        await serve_forever(
            engine, ServeConfig("tiny", tmp_path / "media"), home=home, lock=lock,
            host="127.0.0.1", port=None, socket_path=None, log=io.StringIO(), token=token,
        )  # fmt: skip

    task = asyncio.run_coroutine_threadsafe(_as_task(serve_until_cancelled()), loop).result(10)
    deadline = time.monotonic() + 30
    while (ready := locks.find_lock(home, lock.model)) is None or ready.state != "ready":
        assert time.monotonic() < deadline and not task.done()
        time.sleep(0.05)
    try:
        yield home, ready.base_url
    finally:
        # serve_forever's own `finally` closes the listener and the engine; then the loop ends
        asyncio.run_coroutine_threadsafe(_cancel(task), loop).result(15)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        locks.release(home, lock, held)


async def _as_task(coro) -> asyncio.Task:
    return asyncio.ensure_future(coro)


async def _cancel(task: asyncio.Task) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def run_remote(home: Path, base_url: str, cwd: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CONSOLE_SCRIPT, "run", "--engine", "remote", "--base-url", base_url, *flags,
         "--accept-sandbox-gaps", "hello"],
        env=cli_env(home), cwd=cwd, capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_remote_on_own_serve_finds_its_token(own_serve, tmp_path):
    home, url = own_serve
    work = tmp_path / "work"
    work.mkdir()
    r = run_remote(home, url, work)
    assert r.returncode == 0 and r.stdout == "Done: served.\n", r.stderr
    # control: from another data home the same server wants its key, said before the snapshot
    r = run_remote(tmp_path / "other-home", url, work)
    assert r.returncode == 3 and "snapshot" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: {url.removesuffix('/v1')} wants an API key (HTTP 401): set M3AGENT_API_KEY or "
        "api_key in the config (an m3agent serve of another data home: the token in its "
        "serve/token)"
    ]


def test_an_interrupted_run_counts_the_call_it_cut(slow_serve, tmp_path):
    """Issue 37 item 6: Ctrl-C mid-answer: the summary counts the model call that was
    running and what it had streamed, not "0 model calls ... 0 generated"."""
    home, url = slow_serve
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.Popen(
        [*CONSOLE_SCRIPT, "run", "--engine", "remote", "--base-url", url,
         "--accept-sandbox-gaps", "--output-format", "stream-json", "hello"],
        env=cli_env(home), cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deltas = 0
        assert proc.stdout is not None
        for line in proc.stdout:
            deltas += json.loads(line)["type"] == "content_delta"
            if deltas == 10:
                proc.send_signal(signal.SIGINT)
                break
        rest = proc.stdout.read()
        assert proc.wait(60) == 130
    finally:
        proc.kill() if proc.poll() is None else None
    result = json.loads(rest.strip().splitlines()[-1])
    assert result["type"] == "result" and result["reason"] == "interrupted"
    assert result["turns"] == 1 and result["num_turns"] == 1
    assert 10 <= result["usage"]["generated_tokens"] < 150 * 7  # what it streamed, no more
