"""What the hostile-repository tests of issue 36 share: a real session over the scripted
engine replaying M3 markup, driven through one turn."""

from __future__ import annotations

from pathlib import Path

from m3agent.agent import events as ev
from m3agent.agent.config import AgentConfig
from m3agent.agent.session import Session
from m3agent.engine.backends.scripted import ScriptedEngine
from m3agent.tools.toolset import default_toolset

SECRET = "TOKEN-5f1e"


def hostile_session(home: Path, cwd: Path, script: list[str], *, hooks=None, tools=None, **cfg):
    config = AgentConfig(**{"thinking_default": "enabled", "approval_policy": "never", **cfg})
    return Session.create(
        ScriptedEngine(script),
        tools if tools is not None else default_toolset(),
        config,
        sessions_dir=home / "sessions",
        cwd=cwd,
        hooks=hooks,
    )


async def drive(session: Session, text: str = "go") -> list:
    from m3agent.agent.ops import UserTurn

    seen = []
    session.submit(UserTurn(text))
    async for e in session.events():
        seen.append(e)
        if isinstance(e, ev.TurnComplete):
            break
    await session.close()
    return seen


def results(events: list) -> list[ev.ToolCallFinished]:
    return [e for e in events if isinstance(e, ev.ToolCallFinished)]
