"""Durable sessions (issue 13, class 10): resume answers every tool call left without a result,
a torn last line is cut off (backed up) and reported, and `m3agent run` killed at random
points always resumes.

`openai_history_errors` checks the rule an OpenAI-style chat server enforces on a history: an
assistant message with tool_calls must be followed by one tool message per call id before any
other message, and no tool message may answer a call that was not made.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from m3agent.agent.conversation import Conversation, SessionLogError
from m3agent.agent.events import ContextEvent
from m3agent.agent.log_repair import INTERRUPTED
from m3agent.agent.ops import UserTurn
from m3agent.app.factory import build_session
from m3agent.app.settings import Settings
from m3agent.engine.api import Message, ToolCall
from m3agent.engine.backends.scripted import ScriptedEngine

from ..support.bench import load_bench

# The benchmark's long run kills the same runs and checks its sessions with the same rule.
durability = load_bench("session_durability")
openai_history_errors = durability.history_errors


def settings(home: Path, **kw) -> Settings:
    return Settings(
        home=home,
        config_path=home / "config.toml",
        engine="scripted",
        approval="never",
        context=False,
        **kw,
    )


def resume_and_continue(home: Path, sid: str, cwd: Path):
    """Resume the session in-process, run one more turn; (session, engine, events)."""
    engine = ScriptedEngine(["</mm:think>resumed fine"])
    session = build_session(settings(home), resume=sid, engine=engine, cwd=cwd)
    seen = []

    async def go():
        session.submit(UserTurn("continue"))
        async for e in session.events():
            seen.append(e)
            if type(e).__name__ == "TurnComplete":
                break
        await session.close()

    asyncio.run(go())
    return session, engine, seen


def _call(cid: str, name: str = "shell") -> ToolCall:
    return ToolCall(cid, name, {"command": "sleep 5"})


def _log_with(home: Path, messages: list[Message]) -> Conversation:
    conv = Conversation.create(home / "sessions", cwd="/w", engine="scripted")
    for m in messages:
        conv.append(m)
    conv.close()
    return conv


def test_resume_closes_a_tool_call_killed_mid_run(tmp_path):
    home = tmp_path / "home"
    conv = _log_with(
        home,
        [
            Message(role="system", content="sys"),
            Message(role="user", content="do two things"),
            Message(role="assistant", content="", tool_calls=(_call("c1"), _call("c2"))),
            Message(role="tool", content="exit code: 0", tool_call_id="c1", name="shell"),
        ],
    )  # killed while c2 ran
    before = Conversation.load(home / "sessions", conv.id).messages
    assert openai_history_errors(before)  # control: a server would reject this history
    session, engine, seen = resume_and_continue(home, conv.id, tmp_path)
    msgs = session.messages
    assert openai_history_errors(msgs) == []
    assert (
        msgs[4].role == "tool" and msgs[4].tool_call_id == "c2" and msgs[4].content == INTERRUPTED
    )
    assert [m.role for m in msgs[5:]] == ["user", "assistant"]
    assert INTERRUPTED in engine.prompts[0]
    assert seen[-1].reason == "done"
    repairs = [e for e in seen if isinstance(e, ContextEvent) and e.action == "repair"]
    assert repairs and repairs[0].detail["interrupted_calls"] == ["c2"]
    # The log holds the repair: loading again gives the same, valid history.
    assert Conversation.load(home / "sessions", conv.id).messages == msgs


def test_resume_repairs_an_old_log_with_a_message_after_the_unanswered_call(tmp_path):
    """An older version appended `user: continue` right after the unanswered call."""
    home = tmp_path / "home"
    conv = _log_with(
        home,
        [
            Message(role="system", content="sys"),
            Message(role="user", content="go"),
            Message(role="assistant", content="", tool_calls=(_call("c1"),)),
            Message(role="user", content="continue"),
            Message(role="assistant", content="ok"),
        ],
    )
    assert openai_history_errors(Conversation.load(home / "sessions", conv.id).messages)
    session, _, seen = resume_and_continue(home, conv.id, tmp_path)
    msgs = session.messages
    assert openai_history_errors(msgs) == []
    assert [m.role for m in msgs[:6]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "user",
        "assistant",
    ]
    assert Conversation.load(home / "sessions", conv.id).messages == msgs


def test_a_torn_last_line_is_cut_backed_up_and_reported(tmp_path):
    home = tmp_path / "home"
    conv = _log_with(
        home, [Message(role="system", content="sys"), Message(role="user", content="hello")]
    )
    torn = b'{"kind": "message", "message": {"role": "assistant", "content": "half'
    with open(conv.path, "ab") as f:
        f.write(torn)
    # Control: without the cut, the next record glues onto the torn bytes and the log can
    # never be loaded again.
    copy = tmp_path / "copy" / "sessions"
    copy.mkdir(parents=True)
    record = b'{"kind": "event", "event": {}}\n'
    (copy / conv.path.name).write_bytes(conv.path.read_bytes() + record + record)
    with pytest.raises(SessionLogError, match="not JSON"):
        Conversation.load(copy, conv.id)

    loaded = Conversation.load(home / "sessions", conv.id)
    assert len(loaded.repairs) == 1 and "torn line" in loaded.repairs[0]
    assert f"{conv.id}.jsonl.torn-1" in loaded.repairs[0]
    backup = conv.path.with_name(conv.path.name + ".torn-1")
    assert backup.read_bytes() == torn and (backup.stat().st_mode & 0o777) == 0o600
    assert conv.path.read_bytes().endswith(b"\n")
    loaded.append(Message(role="assistant", content="whole"))
    loaded.close()
    again = Conversation.load(home / "sessions", conv.id)
    assert [m.content for m in again.messages] == ["sys", "hello", "whole"] and not again.repairs
    # And resume reports it.
    with open(conv.path, "ab") as f:
        f.write(b'{"kind": "mess')
    _, _, seen = resume_and_continue(home, conv.id, tmp_path)
    notes = [
        n
        for e in seen
        if isinstance(e, ContextEvent) and e.action == "repair"
        for n in e.detail["notes"]
    ]
    assert any("torn line" in n for n in notes)


def test_a_whole_last_record_without_its_newline_is_kept(tmp_path):
    home = tmp_path / "home"
    conv = _log_with(home, [Message(role="user", content="a")])
    rec = json.dumps({"kind": "message", "message": {"role": "user", "content": "b"}})
    with open(conv.path, "ab") as f:
        f.write(rec.encode())
    loaded = Conversation.load(home / "sessions", conv.id)
    assert [m.content for m in loaded.messages] == ["a", "b"] and not loaded.repairs
    loaded.append(Message(role="user", content="c"))
    loaded.close()
    assert [m.content for m in Conversation.load(home / "sessions", conv.id).messages] == [
        "a",
        "b",
        "c",
    ]


def test_a_log_being_written_is_never_cut(tmp_path):
    home = tmp_path / "home"
    conv = _log_with(home, [Message(role="user", content="a")])
    with open(conv.path, "ab") as f:
        f.write(b'{"kind": "mes')
    fd = os.open(conv.path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)  # as a live writer holds it
    try:
        with pytest.raises(SessionLogError, match="another m3agent process"):
            Conversation.load(home / "sessions", conv.id)
    finally:
        os.close(fd)
    assert conv.path.read_bytes().endswith(b'{"kind": "mes')


# ---- kill `m3agent run` at random points, then resume every session ---------------------


def test_kill_m3agent_run_at_random_points_and_resume_every_session(tmp_path):
    exe = Path(sys.executable).with_name("m3agent")
    home = tmp_path / "m3home"
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                durability.tool_call("edit_file", path="a.py", old_string="1", new_string="2"),
                durability.tool_call("shell", command="sleep 0.4; echo slept"),
                "</mm:think>all done",
            ]
        )
    )

    def start(ws: Path) -> subprocess.Popen:
        return durability.start_run(exe, home, script, ws, prompt="work")

    def workspace(n: int) -> Path:
        return durability.workspace(tmp_path, n)

    started = time.monotonic()
    # Control: an unkilled run ends well. Its timeline (the first stream-json line is printed
    # once the session exists) places the kill points.
    control = start(workspace(0))
    assert control.stdout is not None and b'"session_started"' in control.stdout.readline()
    opened = time.monotonic() - started
    control.stdout.read()
    assert control.wait(60) == 0
    rest = time.monotonic() - started - opened

    rng = random.Random(13)
    early, later = 3, 20  # kills before the session exists, then after it does
    delays = [rng.uniform(0.0, opened) for _ in range(early)]
    delays += [rng.uniform(0.0, 1.2 * rest) for _ in range(later)]

    def kill_one(n: int) -> Path:
        ws = workspace(n + 1)
        p = start(ws)
        if n >= early:  # a random point after the session log exists
            assert p.stdout is not None and p.stdout.readline()
        time.sleep(delays[n])
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the agent and everything it started
        except ProcessLookupError:
            pass
        p.wait(30)
        if p.stdout is not None:
            p.stdout.close()
        return ws

    kills = early + later
    before = set((home / "sessions").glob("*.jsonl"))
    with ThreadPoolExecutor(4) as pool:
        workspaces = list(pool.map(kill_one, range(kills)))
    killed_at = time.monotonic() - started
    by_cwd = {}
    for log in set((home / "sessions").glob("*.jsonl")) - before:
        by_cwd[json.loads(log.read_text().splitlines()[0])["cwd"]] = log.stem
    states = {"no session yet": 0, "tool call without result": 0, "other": 0}
    for ws in workspaces:
        sid = by_cwd.get(str(ws))
        if sid is None:
            states["no session yet"] += 1
            continue
        loaded = Conversation.load(home / "sessions", sid).messages
        states["tool call without result" if openai_history_errors(loaded) else "other"] += 1
        session, engine, seen = resume_and_continue(home, sid, ws)
        assert seen[-1].reason == "done" and seen[-1].answer == "resumed fine", (sid, seen[-1])
        assert openai_history_errors(session.messages) == [], sid
        assert Conversation.load(home / "sessions", sid).messages == session.messages
    resumed = kills - states["no session yet"]
    print(
        f"kills={kills} {states} control run {opened:.2f}+{rest:.2f}s, kills done at "
        f"{killed_at:.1f}s, "
        f"total {time.monotonic() - started:.1f}s"
    )
    assert resumed >= 20, states
    assert states["tool call without result"] >= 3, states  # the kills did land mid-tool
    # (about 20 s on a 2-core machine at load average 17; printed, not asserted: a loaded CI
    # runner must not turn it into a failure)
