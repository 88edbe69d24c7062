"""Where the turn loop fires hooks: one function per point, so loop.py, tool_step.py and
session.py each call a single line. Every run is reported as a ContextEvent("hook"); a hook
that failed is also an Error the user sees (it blocks nothing)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from m3agent.engine.api import ToolCall
from m3agent.tools.base import ToolResult
from m3agent.tools.claude_names import from_claude_keys, with_claude_keys

from .. import events as ev
from .config import HookEvent
from .dispatch import NO_HOOKS, Hooks, HookVerdict
from .runner import HookRun

if TYPE_CHECKING:
    from ..conversation import Conversation
    from ..turn_state import Emit, LoopDeps


def _common(conv: Conversation) -> dict[str, Any]:
    return {"session_id": conv.id, "transcript_path": str(conv.path)}


async def fire(
    hooks: Hooks | None,
    emit: Emit,
    conv: Conversation,
    event: HookEvent,
    payload: dict[str, Any],
    tool_name: str | None = None,
) -> HookVerdict:
    if hooks is None or not hooks.has(event, tool_name):
        return NO_HOOKS

    async def report(e: HookEvent, run: HookRun) -> None:
        await emit(
            ev.ContextEvent(
                action=ev.ContextAction.HOOK,
                detail={
                    "event": str(e),
                    "command": run.command,
                    "exit_code": run.exit_code,
                    "timed_out": run.timed_out,
                    "duration_s": round(run.duration_s, 3),
                    **({"tool": tool_name} if tool_name else {}),
                },
            )
        )

    verdict = await hooks.fire(
        event, {**_common(conv), **payload}, tool_name=tool_name, report=report
    )
    for line in verdict.failures:
        await emit(ev.Error(message=line, kind=ev.ErrorKind.HOOK))
    return verdict


async def pre_tool(
    deps: LoopDeps, call: ToolCall
) -> tuple[ToolCall, ToolResult | None, str | None]:
    """(the call to run, possibly with the hook's input; a result when a hook blocked it; the
    hooks' permission decision, "allow" skipping the approval prompt)."""
    v = await fire(
        deps.hooks,
        deps.emit,
        deps.conversation,
        HookEvent.PRE_TOOL_USE,
        {"tool_name": call.name, "tool_input": with_claude_keys(call.arguments)},
        call.name,
    )
    if v.blocked or v.stop:
        why = v.reason or v.stop_reason
        return (
            call,
            ToolResult(f"blocked by a PreToolUse hook: {why}", True, {"hook": "blocked"}),
            None,
        )
    if v.updated_input is not None:
        updated = from_claude_keys(v.updated_input, call.arguments)
        call = ToolCall(call.id, call.name, {**call.arguments, **updated})
    return call, None, v.permission


async def post_tool(deps: LoopDeps, call: ToolCall, result: ToolResult) -> ToolResult:
    v = await fire(
        deps.hooks,
        deps.emit,
        deps.conversation,
        HookEvent.POST_TOOL_USE,
        {
            "tool_name": call.name,
            "tool_input": with_claude_keys(call.arguments),
            "tool_response": {"output": result.output, "is_error": result.is_error},
        },
        call.name,
    )
    notes = []
    if v.blocked:
        notes.append(f"PostToolUse hook: {v.reason}")
    if v.context_text:
        notes.append(v.context_text)
    if not notes:
        return result
    text = result.output + "\n\n" + "\n".join(notes)
    return ToolResult(text, result.is_error, {**result.metadata, "hook": "noted"}, result.media)


async def prompt_submit(deps: LoopDeps, text: str) -> tuple[str | None, str]:
    """(the prompt with any hook context appended, or None when a hook blocked it; reason)."""
    v = await fire(
        deps.hooks, deps.emit, deps.conversation, HookEvent.USER_PROMPT_SUBMIT, {"prompt": text}
    )
    if v.blocked or v.stop:
        return None, v.reason or v.stop_reason
    if v.context_text:
        # Appended to the new message at the end of the prompt: nothing earlier changes.
        text = f"{text}\n\n<hook_context>\n{v.context_text}\n</hook_context>"
    return text, ""


async def on_stop(deps: LoopDeps, active: bool) -> str | None:
    """A reason to go on (a hook blocked the stop), fed to the model as the next message."""
    event = HookEvent.SUBAGENT_STOP if deps.subagent else HookEvent.STOP
    v = await fire(deps.hooks, deps.emit, deps.conversation, event, {"stop_hook_active": active})
    if v.stop:
        return None
    return v.reason if v.blocked else None


async def notify(deps: LoopDeps, message: str) -> None:
    await fire(
        deps.hooks, deps.emit, deps.conversation, HookEvent.NOTIFICATION, {"message": message}
    )
