"""Fixtures for the MCP tests: a workspace with a real SDK server script in it, an isolated
m3agent home, and a driver that runs prompts through the whole agent loop."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from m3agent.agent import events as ev
from m3agent.agent import ops
from mcp_support import GARBAGE, write_server


@pytest.fixture
def repo(make_repo) -> Path:
    return make_repo({"README.md": "a project\n"})


@pytest.fixture
def server(repo) -> Path:
    # Inside the workspace: the sandbox hides the rest of /tmp from a stdio server.
    return write_server(repo / ".servers")


@pytest.fixture
def garbage_server(repo) -> Path:
    return write_server(repo / ".servers", GARBAGE, "garbage.py")


@pytest.fixture
def user_config(home):
    """user_config(text): writes <home>/config.toml (Codex-style [mcp_servers] tables)."""

    def write(text: str) -> Path:
        home.mkdir(parents=True, exist_ok=True)
        path = home / "config.toml"
        path.write_text(text)
        return path

    return write


def stdio_table(name: str, script: Path, **extra) -> str:
    lines = [
        f"[mcp_servers.{name}]",
        f"command = {json.dumps(sys.executable)}",
        f"args = [{json.dumps(str(script))}]",
    ]
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


@pytest.fixture
def stdio_config():
    return stdio_table


@pytest.fixture
def open_session():
    """open_session(settings, cwd, script) -> Session with the ScriptedEngine; closed after."""
    made = []

    def open_(settings, cwd: Path, script: list[str]):
        from m3agent.app.factory import build_session
        from m3agent.engine.backends.scripted import ScriptedEngine

        session = build_session(settings, cwd=cwd, engine=ScriptedEngine(script))
        made.append(session)
        return session

    yield open_
    for s in made:
        close = getattr(s.toolset, "close", None)
        if close is not None:
            close()


async def _drive(session, texts, decide=None, interrupt_after: float | None = None):
    seen, last = [], None
    events = session.events()
    for text in texts:
        session.submit(ops.UserTurn(text))
        timer = None
        async for e in events:
            seen.append(e)
            if isinstance(e, ev.ApprovalRequest):
                decision = decide(e) if decide else "approve"
                session.submit(ops.ApprovalDecision(e.call_id, decision))
            elif isinstance(e, ev.ToolCallStarted) and interrupt_after is not None and not timer:
                loop = asyncio.get_running_loop()
                timer = loop.call_later(interrupt_after, session.submit, ops.Interrupt())
            elif isinstance(e, ev.TurnComplete):
                last = e
                break
    return seen, last


@pytest.fixture
def drive():
    """drive(session, prompt, ..., decide=None, interrupt_after=None) -> (events, the last
    TurnComplete); the session is closed afterwards (its MCP servers stop)."""

    def run(session, *texts: str, **kw):
        async def go():
            try:
                return await _drive(session, texts, **kw)
            finally:
                await session.close()

        return asyncio.run(go())

    return run
