"""ApprovalGate decisions and the JSONL session log on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from m3agent.agent.approvals import ApprovalGate
from m3agent.agent.config import AgentConfig, ToolRule
from m3agent.agent.conversation import Conversation, SessionLogError
from m3agent.agent.session_index import list_sessions
from m3agent.engine.api import Message, ToolCall
from m3agent.tools.sandbox.policy import SandboxPolicy
from sandbox_support import unprobed

from ..support.conversation import tool_round


@pytest.mark.parametrize(
    ("policy", "mutates", "mode", "expected"),
    [
        ("untrusted", True, "workspace-write", "ask"),
        ("untrusted", False, "workspace-write", "allow"),
        ("on-request", True, "workspace-write", "allow"),
        ("on-request", True, "read-only", "ask"),
        ("on-request", False, "read-only", "allow"),
        ("never", True, "read-only", "allow"),
    ],
)
def test_policy_matrix(tmp_path, policy, mutates, mode, expected):
    gate = ApprovalGate(policy)
    sandbox = unprobed(SandboxPolicy(workspace=tmp_path, mode=mode))
    assert gate.check("t", None, mutates=mutates, sandbox=sandbox).verdict == expected


def test_rules_deny_wins_and_session_approval():
    gate = ApprovalGate("never", (ToolRule("*", "allow"), ToolRule("shell", "deny")))
    assert gate.check("shell", None, mutates=True).verdict == "deny"
    assert gate.check("read_file", None, mutates=False).verdict == "allow"
    ask = ApprovalGate("never", (ToolRule("shell", "ask"),))
    assert ask.check("shell", None, mutates=True).verdict == "ask"
    ask.allow_for_session("shell")
    assert ask.check("shell", None, mutates=True).verdict == "allow"
    risky = ApprovalGate("on-request")
    assert risky.check("x", None, mutates=True, risky=True).verdict == "ask"


def test_config_validation():
    with pytest.raises(ValueError, match="approval policy 'sometimes'"):
        AgentConfig(approval_policy="sometimes")
    with pytest.raises(ValueError, match="thinking mode 'deep'"):
        AgentConfig(thinking_default="deep")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_turns"):
        AgentConfig(max_turns=0)


def test_log_round_trip_and_torn_last_line(tmp_path: Path):
    d = tmp_path / "sessions"
    c = Conversation.create(d, cwd="/w", engine="scripted", model="m")
    msgs = [
        Message("system", "s"),
        *tool_round(
            "héllo",
            ToolCall("c1", "shell", {"command": "ls"}),
            "a\nb",
            text="ok",
            reasoning="r",
            thinking_mode="enabled",
            raw_text="r</mm:think>ok...",
        ),
    ]
    for m in msgs:
        c.append(m)
    c.log_setting(thinking_default="disabled")
    c.close()
    with open(c.path, "a") as f:
        f.write('{"kind": "message", "message": {"role": "us')  # a crash mid-write
    loaded = Conversation.load(d, c.id)
    assert loaded.messages == tuple(msgs)
    assert loaded.meta.thinking_default == "disabled" and loaded.meta.cwd == "/w"
    # A torn line in the middle is corruption, reported with the file and line.
    lines = c.path.read_text().splitlines()
    c.path.write_text("\n".join([lines[0], "{oops", *lines[1:]]) + "\n")
    with pytest.raises(SessionLogError, match=r":2: not JSON"):
        Conversation.load(d, c.id)


def test_list_sessions_newest_first(tmp_path: Path):
    d = tmp_path / "sessions"
    a = Conversation.create(d, cwd="/a", session_id="20260101-000000-aaaaaa")
    a.append(Message("user", "first task"))
    b = Conversation.create(d, cwd="/b", session_id="20260102-000000-bbbbbb")
    b.append(Message("system", "sys"))
    b.append(Message("user", "second task"))
    (d / "junk.jsonl").write_text("not json\n")
    found = list_sessions(d)
    assert [s.first_prompt for s in found] == ["second task", "first task"]
    by_id = {s.id: s for s in found}
    assert by_id[b.id].cwd == "/b" and by_id[b.id].messages == 2
    assert json.loads(a.path.read_text().splitlines()[0])["kind"] == "session"
    with pytest.raises(SessionLogError, match="no session"):
        Conversation.load(d, "missing")
    with pytest.raises(SessionLogError, match="invalid session id"):
        Conversation.load(d, "../etc")
