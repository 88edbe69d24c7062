"""The result object's Claude Code fields, so that scripts written for `claude -p
--output-format json` work: type "result", subtype, result (the answer), num_turns,
duration_ms, duration_api_ms, session_id, is_error; also the line printed when a run fails
before its session starts (a bad flag, an unreachable server), which has no tally."""

from __future__ import annotations

from typing import Any

from m3agent.agent.events import EVENT_SCHEMA_VERSION

from . import exit_codes
from .safe_text import dumps

# Claude Code's subtypes: success, error_max_turns, error_during_execution.
SUBTYPES = {exit_codes.OK: "success", exit_codes.TURN_LIMIT: "error_max_turns"}
ERROR_KINDS = {
    exit_codes.USAGE_ERROR: "usage",
    exit_codes.ENGINE_UNAVAILABLE: "engine_unavailable",
    exit_codes.SANDBOX_UNAVAILABLE: "sandbox",
}


def subtype(code: int) -> str:
    return SUBTYPES.get(code, "error_during_execution")


def claude_fields(
    *,
    code: int,
    answer: str,
    session_id: str | None,
    turns: int,
    duration_s: float,
    api_s: float,
) -> dict[str, Any]:
    return {
        "type": "result",
        "subtype": subtype(code),
        "is_error": code != exit_codes.OK,
        "result": answer,
        "session_id": session_id,
        "num_turns": turns,
        "duration_ms": round(duration_s * 1000),
        "duration_api_ms": round(api_s * 1000),
    }


def early_error_line(code: int, message: str) -> str:
    """One JSON line for a run that never started a session (json and stream-json alike)."""
    obj = {
        "v": EVENT_SCHEMA_VERSION,
        **claude_fields(code=code, answer="", session_id=None, turns=0, duration_s=0, api_s=0),
        "reason": "error",
        "answer": "",
        "errors": [{"kind": ERROR_KINDS.get(code, "internal"), "message": message}],
        "exit_code": code,
    }
    return dumps(obj) + "\n"
