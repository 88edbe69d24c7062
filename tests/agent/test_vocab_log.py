"""The closed vocabularies are StrEnums, and what they write is what the strings wrote: the
session log of a scripted session is byte for byte the one recorded before the change."""

from __future__ import annotations

import json
from pathlib import Path

from m3agent.agent import events as ev
from m3agent.agent.config import AgentConfig
from m3agent.engine import api
from m3agent.tools.base import ToolOutcome, ToolResult

from .vocab_log import session_log

BEFORE = Path(__file__).parent / "data" / "session_log_before.jsonl"


def test_session_log_is_byte_identical_to_the_one_written_before(home, tmp_path):
    cwd = tmp_path / "work"
    cwd.mkdir()
    after = session_log(home, cwd)
    assert after == BEFORE.read_text(encoding="utf-8")
    # The log holds each vocabulary (the comparison above covers something).
    for needle in (
        '"thinking_mode": "enabled"',
        '"reason": "max_turns"',
        '"action": "thinking_default"',
        '"kind": "usage"',
        '"finish_reason": "tool_calls"',
        '"engine": "scripted"',
        '"metadata": {"denied": true}',
    ):
        assert needle in after


def test_json_dumps_writes_the_plain_string():
    done = ev.TurnComplete(turn=1, reason=ev.StopReason.MAX_TURNS, answer="", usage=api.Usage())
    assert json.dumps(done.to_dict()["reason"]) == '"max_turns"'
    err = ev.Error(message="m")  # the default kind is a member too
    assert err.kind is ev.ErrorKind.INTERNAL
    assert json.dumps(err.to_dict()) == (
        '{"type": "error", "message": "m", "kind": "internal", "fatal": false}'
    )
    ctx = ev.ContextEvent(action=ev.ContextAction.CHECKPOINT, detail={"id": "1"})
    assert json.dumps(ctx.to_dict()) == (
        '{"type": "context", "action": "checkpoint", "detail": {"id": "1"}}'
    )
    msg = api.Message(role="assistant", content="x", thinking_mode=api.ThinkingMode.DISABLED)
    assert json.dumps(msg.to_dict()) == (
        '{"role": "assistant", "content": "x", "thinking_mode": "disabled"}'
    )
    result = ToolResult("no", True, {ToolOutcome.DENIED: True})
    assert json.dumps(result.metadata) == '{"denied": true}'
    assert result.metadata.get("denied") is True  # front ends read the plain key
    usage = api.UsageDelta(api.Usage(), api.FinishReason.LENGTH)
    assert f"{usage.finish_reason}" == "length" and str(usage.finish_reason) == "length"


def test_strings_read_back_become_members():
    """Where a string enters a typed field (a log line, a config value), it becomes the member."""
    m = api.Message.from_dict({"role": "assistant", "thinking_mode": "enabled"})
    assert m.thinking_mode is api.ThinkingMode.ENABLED
    assert AgentConfig(thinking_default="disabled").thinking_default is api.ThinkingMode.DISABLED  # type: ignore[arg-type]
    assert "adaptive" in api.THINKING_MODES and "sometimes" not in api.THINKING_MODES
    assert ", ".join(api.ENGINE_NAMES) == "native, vllm, remote, scripted"


def test_settings_hold_members(home):
    from m3agent.app.settings import load_settings

    s = load_settings({"M3AGENT_HOME": str(home), "M3AGENT_ENGINE": "remote"})
    assert s.engine is api.EngineName.REMOTE and s.thinking is api.ThinkingMode.ADAPTIVE
    assert s.override(thinking="enabled").thinking is api.ThinkingMode.ENABLED
