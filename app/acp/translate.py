"""Session events -> ACP session updates (pure: one event in, zero or more updates out)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, TypeGuard, get_args

import acp
from acp.helpers import SessionUpdate
from acp.schema import PermissionOption, ToolKind
from m3agent.agent import events as ev
from m3agent.agent.shell_prefixes import describe
from m3agent.tools.skills import SkillTool
from m3agent.tools.toolset import default_toolset
from m3agent.tools.update_plan import UpdatePlan

if TYPE_CHECKING:
    from collections.abc import Sequence

    from m3agent.engine.api import Message
    from m3agent.tools.base import Tool

_ACP_KINDS = frozenset(get_args(ToolKind))


def _is_acp_kind(kind: str) -> TypeGuard[ToolKind]:
    return kind in _ACP_KINDS


@functools.cache
def _kinds() -> dict[str, str]:
    """Tool name -> ACP kind, as each tool declares it (tools/base.py's `kind`)."""
    builtin = default_toolset(use_ripgrep=False).tools()
    classes: list[type[Tool[Any]]] = [*(type(t) for t in builtin), SkillTool, UpdatePlan]
    return {c.name: c.kind for c in classes}


PERMISSION_OPTIONS = [
    PermissionOption(option_id="approve", name="Allow once", kind="allow_once"),
    PermissionOption(
        option_id="approve_session", name="Allow for this session", kind="allow_always"
    ),
    PermissionOption(option_id="deny", name="Deny", kind="reject_once"),
]
# The answers an editor may pick, by option id (Decision values; anything else denies).
APPROVALS = ("approve", "approve_session", "approve_prefix")


def permission_options(amendment: tuple[str, ...] | None) -> list[PermissionOption]:
    """The choices for one request: with the command prefix the gate offers (shell), also
    "allow commands starting with it" for this session, as the TUI's `p` and run's `p`."""
    if amendment is None:
        return PERMISSION_OPTIONS

    prefix = PermissionOption(
        option_id="approve_prefix",
        name=f"Allow `{describe(amendment)}` for this session",
        kind="allow_always",
    )
    return [PERMISSION_OPTIONS[0], prefix, *PERMISSION_OPTIONS[1:]]


def kind_of(name: str) -> ToolKind:
    kind = _kinds().get(name, "fetch" if name.startswith("mcp__") else "other")
    return kind if _is_acp_kind(kind) else "other"  # every tool declares one of ACP's


def title_of(name: str, arguments: dict[str, Any]) -> str:
    for key in ("path", "command", "pattern", "description"):
        value = arguments.get(key)
        if isinstance(value, str) and value:
            return f"{name}: {value[:120]}"
    return name


def updates(e: ev.Event) -> list[SessionUpdate]:
    if isinstance(e, ev.ContentDelta) and e.text:
        return [acp.update_agent_message_text(e.text)]
    if isinstance(e, ev.ReasoningDelta) and e.text:
        return [acp.update_agent_thought_text(e.text)]
    if isinstance(e, ev.ToolCallStarted):
        return [
            acp.start_tool_call(
                e.call_id,
                title_of(e.name, e.arguments),
                kind=kind_of(e.name),
                status="in_progress",
                raw_input=e.arguments,
            )
        ]
    if isinstance(e, ev.ToolCallFinished):
        content = [acp.tool_content(acp.text_block(e.output))] if e.output else []
        diff = e.metadata.get("diff")
        if isinstance(diff, str) and diff:
            content.append(acp.tool_content(acp.text_block(diff)))
        return [
            acp.update_tool_call(
                e.call_id,
                status="failed" if e.is_error else "completed",
                content=content,
                raw_output={"output": e.output, "is_error": e.is_error},
            )
        ]
    if isinstance(e, ev.Error):  # e.g. untrusted project hooks, a failed MCP server
        return [acp.update_agent_message_text(f"\n[m3agent {e.kind}] {e.message}\n")]
    if isinstance(e, ev.PlanUpdate):
        return [
            acp.update_plan(
                acp.plan_entry(s["step"], status=s["status"])  # type: ignore[arg-type]
                for s in e.plan
            )
        ]
    if isinstance(e, ev.SubagentEvent):
        inner = e.event
        if inner.get("type") == "tool_call_started":  # the child's calls: progress of the task
            return [
                acp.update_tool_call(
                    e.parent_call_id,
                    content=[
                        acp.tool_content(
                            acp.text_block(
                                f"{e.agent}: {title_of(inner['name'], inner['arguments'])}"
                            )
                        )
                    ],
                )
            ]
    return []


def stop_reason(reason: str) -> str:
    return {
        "done": "end_turn",
        "interrupted": "cancelled",
        "max_turns": "max_turn_requests",
        "max_tool_calls": "max_turn_requests",
        "timeout": "max_turn_requests",
        "blocked": "refusal",
    }.get(reason, "end_turn")


def history_updates(messages: Sequence[Message]) -> list[SessionUpdate]:
    """A loaded session's conversation as ACP replays it: user, thought, answer, tools."""
    out: list[SessionUpdate] = []
    for m in messages:
        if m.role == "user":
            out.append(acp.update_user_message_text(m.content))
        elif m.role == "assistant":
            if m.reasoning:
                out.append(acp.update_agent_thought_text(m.reasoning))
            if m.content:
                out.append(acp.update_agent_message_text(m.content))
            for c in m.tool_calls:
                args = c.arguments if isinstance(c.arguments, dict) else {}
                out.append(
                    acp.start_tool_call(
                        c.id,
                        title_of(c.name, args),
                        kind=kind_of(c.name),
                        status="completed",
                    )
                )
    return out
