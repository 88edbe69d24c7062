"""One tool call inside a turn: approval, checkpoint, dispatch in a worker thread, cancellation.

Every call the model made gets exactly one tool message back (a result, a denial, or "not run"),
so the conversation stays well formed whatever stops the turn.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from m3agent.engine.api import MediaPart, Message, ToolCall
from m3agent.tools.base import Preview, PreviewKind, Tool, ToolContext, ToolOutcome, ToolResult
from m3agent.tools.claude_names import canonical_arguments

from . import events as ev
from .config import Verdict
from .hooks import points as hook_points
from .ops import ApprovalDecision, Decision
from .shell_prefixes import Prefix, describe
from .turn_state import LoopDeps, TurnControl

if TYPE_CHECKING:
    from m3agent.tools.diagnostics import Diagnostics
    from m3agent.tools.toolset import ToolsetProtocol

# How long an interrupted tool may take to notice ctx.cancel before we stop waiting for it.
_CANCEL_GRACE_S = 10.0


def find_tool(toolset: ToolsetProtocol | None, name: str) -> Tool[Any] | None:
    if toolset is None:
        return None
    try:
        return toolset.get(name)
    except KeyError:
        return None


def _preview(toolset: ToolsetProtocol, call: ToolCall, ctx: ToolContext) -> Preview | None:
    """The tool's own preview of the call (Tool.preview), shown with the approval request."""
    try:
        return toolset.preview(call.name, call.arguments, ctx)
    except Exception as e:  # Toolset promises not to raise; the approval must still be asked
        return Preview(PreviewKind.TEXT, f"no preview: {type(e).__name__}: {e}", is_error=True)


async def ask_approval(
    deps: LoopDeps,
    control: TurnControl,
    call: ToolCall,
    reason: str,
    amendment: Prefix | None = None,
) -> ApprovalDecision:
    # The same context the call will run with (a shell preview shows its timeout).
    ctx = ToolContext(
        cwd=deps.cwd, sandbox=deps.sandbox, timeout_s=deps.config.tool_timeout_s, env=deps.tool_env
    )
    preview = (
        await asyncio.to_thread(_preview, deps.toolset, call, ctx)
        if deps.toolset is not None
        else None
    )
    fut: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
    control.approvals[call.id] = fut
    try:
        await deps.emit(
            ev.ApprovalRequest(
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
                diff=preview.text if preview and preview.kind is PreviewKind.DIFF else None,
                reason=reason,
                preview=preview,
                amendment=amendment,
                _future=fut,
            )
        )
        await hook_points.notify(deps, f"m3agent needs your permission to use {call.name}")
        decision = await fut
    finally:
        control.approvals.pop(call.id, None)
    if not isinstance(decision, ApprovalDecision):
        return ApprovalDecision(call.id, Decision.DENY, "no valid answer to the approval request")
    return decision


async def dispatch(deps: LoopDeps, control: TurnControl, call: ToolCall) -> ToolResult:
    """Runs the tool in a thread; on cancellation sets ctx.cancel and waits for it to stop."""
    ctx = ToolContext(
        cwd=deps.cwd,
        sandbox=deps.sandbox,
        timeout_s=deps.config.tool_timeout_s,
        env=deps.tool_env,
        hidden=deps.gate.hides,
    )
    ctx.call_id = call.id  # the task tool nests its child's events under this call
    control.tool_cancel = ctx.cancel
    fut = asyncio.ensure_future(
        asyncio.to_thread(_dispatch_sync, deps.toolset, call, ctx, deps.diagnostics)
    )
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        ctx.cancel.set()
        try:
            await asyncio.wait_for(asyncio.shield(fut), _CANCEL_GRACE_S)
        except (TimeoutError, asyncio.CancelledError):
            pass
        raise
    finally:
        control.tool_cancel = None


def _dispatch_sync(
    toolset: ToolsetProtocol | None,
    call: ToolCall,
    ctx: ToolContext,
    diagnostics: Diagnostics | None = None,
) -> ToolResult:
    if toolset is None:  # the model was offered no tools, yet called one
        return ToolResult(f"unknown tool {call.name!r}; this session has no tools", is_error=True)
    try:
        result = toolset.dispatch(call.name, call.arguments, ctx)
    except Exception as e:  # Toolset promises not to raise; a tool bug still must not kill us
        return ToolResult(f"tool {call.name} failed: {type(e).__name__}: {e}", is_error=True)
    if not isinstance(result, ToolResult):
        return ToolResult(f"tool {call.name} returned no result", is_error=True)
    if diagnostics is not None:  # the checker's findings on the files this call changed
        try:
            result = diagnostics.annotate(result, ctx)
        except Exception as e:  # a checker problem must not lose the call's own result
            result = replace(
                result, output=f"{result.output}\n\n[diagnostics failed: {type(e).__name__}: {e}]"
            )
    return result


async def record_result(deps: LoopDeps, call: ToolCall, result: ToolResult) -> None:
    """Log the tool message (before anything else happens), then tell the front ends."""
    media, refused = checked_media(result)
    if refused:  # an image the server sent cannot be read: the model is told, as an error
        result = ToolResult(
            result.output + "".join(f"\n[image not shown: {r}]" for r in refused),
            is_error=True,
            metadata=dict(result.metadata),
        )
    deps.conversation.append(
        Message(
            role="tool",
            content=result.output,
            tool_call_id=call.id,
            name=call.name,
            media=media,
        ),
        is_error=result.is_error,
    )
    await deps.emit(
        ev.ToolCallFinished(
            call_id=call.id,
            name=call.name,
            output=result.output,
            is_error=result.is_error,
            metadata=dict(result.metadata),
        )
    )
    if isinstance(result.metadata.get("plan"), list) and not result.is_error:  # update_plan
        await deps.emit(
            ev.PlanUpdate(call.id, result.metadata["plan"], result.metadata.get("explanation", ""))
        )


async def run_call(
    deps: LoopDeps, control: TurnControl, call: ToolCall, turn_flags: dict[str, bool]
) -> ToolResult:
    """Approval -> checkpoint (first mutation of the turn) -> dispatch. Returns the result;
    the caller records it."""
    tool = find_tool(deps.toolset, call.name)
    mutates = tool is not None and tool.mutates
    await deps.emit(ev.ToolCallStarted(call_id=call.id, name=call.name, arguments=call.arguments))
    # One set of arguments from here on: what hooks see, rules judge and the tool runs with.
    canonical = _canonical(tool, call)
    if isinstance(canonical, ToolResult):
        return canonical
    call, blocked, permission = await hook_points.pre_tool(deps, canonical)
    if blocked is not None:
        return blocked
    if call is not canonical:  # a hook's updatedInput: checked like the model's own
        canonical = _canonical(tool, call)
        if isinstance(canonical, ToolResult):
            return canonical
        call = canonical
    allowed_by: Prefix | None = None  # the allowed command prefix that answered, if one did
    if tool is not None and deps.toolset is not None:
        try:
            touches = deps.toolset.touches(call.name, call.arguments)
        except Exception as e:  # a tool bug: fail closed, with one result as always
            return ToolResult(
                f"not run: cannot tell what {call.name} would touch ({type(e).__name__}: {e})",
                is_error=True,
                metadata={ToolOutcome.DENIED: True},
            )
        check = deps.gate.check(
            call.name,
            touches,
            mutates=mutates,
            risky=tool.risky,
            sandbox=deps.sandbox,
            capability=tool.capability,
            arguments=call.arguments,
        )
        allowed_by = check.prefix
        if check.verdict is Verdict.DENY:
            return ToolResult(
                f"not run: {check.reason}", is_error=True, metadata={ToolOutcome.DENIED: True}
            )
        # A hook's "allow" or the running command's allowed-tools skip the prompt (never a
        # deny rule); a hook's "ask" asks even where the policy would not.
        skip = permission == "allow" or call.name in deps.allowed_tools
        # An allowed command prefix answers a hook's "ask" too (as the front ends did when
        # they held the prefixes).
        hook_asks = permission == "ask" and check.prefix is None
        if (check.verdict is Verdict.ASK and not skip) or hook_asks:
            amendment = check.amendment or deps.gate.amendment(call.name, call.arguments)
            decision = await ask_approval(deps, control, call, check.reason, amendment)
            if decision.decision is Decision.DENY:
                note = f": {decision.note}" if decision.note else ""
                return ToolResult(
                    f"not run: the user denied this call{note}",
                    is_error=True,
                    metadata={ToolOutcome.DENIED: True},
                )
            await _remember(deps, call.name, decision.decision, amendment)
    if mutates and deps.checkpoints is not None and not turn_flags.get("checkpointed"):
        turn_flags["checkpointed"] = True
        try:
            cp_id = await asyncio.to_thread(deps.checkpoints.snapshot, f"before {call.name}")
        except Exception as e:  # a failed snapshot is reported, never silent, and not fatal
            await deps.emit(ev.Error(message=f"checkpoint failed: {e}", kind=ev.ErrorKind.TOOL))
        else:
            await deps.emit(
                ev.ContextEvent(action=ev.ContextAction.CHECKPOINT, detail={"id": str(cp_id)})
            )
    result = await dispatch(deps, control, call)
    if allowed_by is not None:  # front ends name the prefix that let it run (the TUI card)
        result = replace(result, metadata={**result.metadata, "allowed_by": describe(allowed_by)})
    return await hook_points.post_tool(deps, call, result)


async def _remember(
    deps: LoopDeps, name: str, decision: Decision, amendment: Prefix | None
) -> None:
    """What an approving answer allows from now on, kept by the gate."""
    if decision is Decision.APPROVE_SESSION:
        deps.gate.allow_for_session(name)
    elif decision is Decision.APPROVE_ALWAYS:
        deps.gate.allow_always(name)
    elif decision in (Decision.APPROVE_PREFIX, Decision.APPROVE_PREFIX_ALWAYS) and amendment:
        failed = deps.gate.allow_prefix(amendment, save=decision is Decision.APPROVE_PREFIX_ALWAYS)
        if failed is not None:  # the answer still holds for this session
            await deps.emit(ev.Error(message=f"not saved: {failed}", kind=ev.ErrorKind.TOOL))


def _canonical(tool: Tool[Any] | None, call: ToolCall) -> ToolCall | ToolResult:
    """The call with the arguments its tool will use (tools/claude_names.py:
    canonical_arguments), or the error result for arguments it cannot use. An unknown tool's
    call is left as it is: dispatch answers it."""
    if tool is None:
        return call
    try:
        arguments = canonical_arguments(tool, call.arguments)
    except ValueError as e:
        return ToolResult(str(e), is_error=True)
    return ToolCall(call.id, call.name, arguments)


def not_run(reason: str) -> ToolResult:
    return ToolResult(f"not run: {reason}", is_error=True, metadata={ToolOutcome.SKIPPED: True})


def cancelled_result() -> ToolResult:
    return ToolResult(
        "interrupted by the user", is_error=True, metadata={ToolOutcome.INTERRUPTED: True}
    )


def result_media(result: ToolResult) -> tuple[MediaPart, ...]:
    """The images a tool result shows the model (those `checked_media` accepts)."""
    return checked_media(result)[0]


def checked_media(result: ToolResult) -> tuple[tuple[MediaPart, ...], list[str]]:
    """The images a tool result shows the model, each checked like an attachment (format,
    size, decompression bomb), and one line per image refused."""
    from .attachments import AttachmentError, validate_attachments

    out, refused = [], []
    for kind, path, offset in result.media:
        try:  # tools' kind is a str (tools cannot import the engine's Literal): checked here
            (part,) = validate_attachments([MediaPart(kind, path)])  # type: ignore[arg-type]
        except AttachmentError as e:
            refused.append(str(e))
            continue
        out.append(MediaPart(part.kind, part.path, offset=offset))
    return tuple(out), refused
