"""A scripted session that writes every closed vocabulary into its log (thinking modes, stop
reasons, context actions, error kinds, finish reasons, the engine name, tool outcomes), and
the log masked of what changes from run to run (ids, times, the temporary paths).

test_vocab_log.py compares it with data/session_log_before.jsonl, which this same module wrote
on the commit before the vocabularies became StrEnums:
    PYTHONPATH=<a checkout's package farm> python tests/agent/vocab_log.py OUT.jsonl
It uses only what both sides have (Session, ScriptedEngine, the default tools)."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import tempfile
from pathlib import Path

from m3agent.agent import events as ev
from m3agent.agent.config import AgentConfig, ToolRule
from m3agent.agent.ops import SetThinking, UserTurn
from m3agent.agent.session import Session
from m3agent.engine.backends.scripted import ScriptedEngine
from m3agent.tools.toolset import default_toolset

NS = "]<]minimax[>["


def _call(name: str, **params: str) -> str:
    body = "".join(f"{NS}<{k}>{v}{NS}</{k}>" for k, v in params.items())
    return f'{NS}<tool_call>\n{NS}<invoke name="{name}">{body}{NS}</invoke>\n{NS}</tool_call>'


# One raw model output per engine call. Turn 1 runs "enabled" (the prompt opened <mm:think>),
# the later ones "disabled" (no think block).
SCRIPT = [
    "I write it.</mm:think>" + _call("write_file", path="a.txt", content="hello\n"),
    "Done.</mm:think>Wrote a.txt.",
    _call("shell", command="rm a.txt"),  # denied by the config's rule
    "The shell is not allowed here.",
    _call("read_file", path="a.txt"),  # turn 3: max_turns (2 engine calls) stops it
    _call("read_file", path="a.txt"),
]


async def _drive(session: Session) -> None:
    async def turn(text: str) -> None:
        session.submit(UserTurn(text))
        async for e in session.events():
            if isinstance(e, ev.TurnComplete):
                return

    await turn("write a.txt")
    session.submit(SetThinking("disabled", session_default=True))
    session.submit(SetThinking("sometimes"))  # an Error of kind "usage"
    await turn("remove it")
    await turn("read it twice")
    await session.close()


def session_log(home: Path, cwd: Path) -> str:
    engine = ScriptedEngine(SCRIPT, chunk_delay_s=0.0)
    config = AgentConfig(
        thinking_default="enabled",
        approval_policy="never",
        max_turns=2,
        rules=(ToolRule("shell", "deny"),),
    )
    session = Session.create(
        engine, default_toolset(), config, sessions_dir=home / "sessions", cwd=cwd
    )
    asyncio.run(_drive(session))
    (log,) = (home / "sessions").glob("*.jsonl")
    return mask(log.read_text(encoding="utf-8"), session.id, cwd, home)


_TIMES = re.compile(r'"(time_to_first_token_s|total_time_s|created|ts|duration_s)": [^,}]+')
_IDS = re.compile(r"\b(call|req)([-_])[0-9a-f]{8,12}\b")


def mask(text: str, session_id: str, cwd: Path, home: Path) -> str:
    """The log with what differs between two runs of the same script replaced by names."""
    for raw, name in ((session_id, "SESSION"), (str(cwd), "CWD"), (str(home), "HOME")):
        text = text.replace(raw, name).replace(json.dumps(raw)[1:-1], name)
    text = _TIMES.sub(lambda m: f'"{m.group(1)}": "T"', text)
    return _IDS.sub(lambda m: f"{m.group(1)}{m.group(2)}ID", text)


def main(out: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home, cwd = Path(tmp, "home"), Path(tmp, "work")
        cwd.mkdir()
        Path(out).write_text(session_log(home, cwd), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1])
