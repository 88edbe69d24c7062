"""Shared fixtures for the agent tests: a temporary git repo, an isolated data home, and
helpers that write real M3 model output (reasoning + tool-call markup) for the ScriptedEngine."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
from m3agent.agent import events as ev
from m3agent.agent.config import AgentConfig
from m3agent.agent.ops import ApprovalDecision
from m3agent.agent.session import Session
from m3agent.engine.backends.scripted import ScriptedEngine
from m3agent.tools.toolset import default_toolset
from sandbox_support import world  # noqa: F401  (the sandbox tests' fixture, tests/tools)

from ..support.markup import NS, answer, calls, invoke


def make_session(
    home: Path, cwd: Path, script: list[str], *, toolset=None, sandbox=None, **cfg
) -> Session:
    """A session over the scripted engine: thinking enabled, no approvals unless cfg says
    (AgentConfig fields), the default tools unless toolset is given."""
    engine = ScriptedEngine(script, chunk_delay_s=cfg.pop("chunk_delay_s", 0.0))
    config = AgentConfig(**{"thinking_default": "enabled", "approval_policy": "never", **cfg})
    return Session.create(
        engine,
        default_toolset() if toolset is None else toolset,
        config,
        sessions_dir=home / "sessions",
        cwd=cwd,
        sandbox=sandbox,
    )


def answering(decision: str, asked: list, *message: str):
    """An on_event for drive(): each ApprovalRequest is kept in asked and answered decision."""

    async def on(session: Session, e) -> None:
        if isinstance(e, ev.ApprovalRequest):
            asked.append(e)
            session.submit(ApprovalDecision(e.call_id, decision, *message))

    return on


async def drive(session: Session, text: str, on_event=None, **turn) -> tuple[list, ev.TurnComplete]:
    """Submits one prompt and collects events until its TurnComplete."""
    from m3agent.agent.ops import UserTurn

    seen = []
    session.submit(UserTurn(text, **turn))
    async for e in session.events():
        seen.append(e)
        if on_event is not None:
            await on_event(session, e)
        if isinstance(e, ev.TurnComplete):
            return seen, e
    raise AssertionError("session ended before TurnComplete")


def run(coro):
    return asyncio.run(coro)


def one_turn(home: Path, cwd: Path, script: list[str], text: str, **session):
    """make_session(**session), one prompt driven to its TurnComplete, the session closed:
    (session, events, TurnComplete)."""

    async def go():
        s = make_session(home, cwd, script, **session)
        seen, done = await drive(s, text)
        await s.close()
        return s, seen, done

    return run(go())


@pytest.fixture
def repo(make_repo) -> Path:
    return make_repo({"calc.py": "def add(a, b):\n    return a - b\n"})


@pytest.fixture
def m3():
    return SimpleNamespace(
        NS=NS,
        invoke=invoke,
        calls=calls,
        answer=answer,
        make_session=make_session,
        answering=answering,
        drive=drive,
        run=run,
        one_turn=one_turn,
    )
