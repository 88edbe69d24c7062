"""run_turn: the flat agent loop of one user prompt.

    request -> engine.stream -> events -> tool calls -> approvals -> tools -> results -> repeat

until the model answers without a tool call or a limit stops it (engine calls, tool calls, wall
time) or the Session cancels the task (interrupt / timeout; `control.stop_reason` says which).
Every message is in the session log before the next step starts.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

from m3agent.engine import api

from . import events as ev
from . import tool_step
from .attachments import AttachmentError, validate_attachments
from .events import ErrorKind, StopReason
from .hooks import points as hook_points
from .ops import UserTurn
from .prefill_progress import PrefillReporter
from .prompt_messages import request_messages
from .turn_state import LoopDeps, TurnControl


@dataclass(slots=True)
class _Generation:
    """What one engine call produced so far (kept when an interrupt cuts it short)."""

    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    calls: list[api.ToolCall] = field(default_factory=list)
    usage: api.UsageDelta | None = None
    # For a call cut short (no UsageDelta came): the prompt's size as the engine's prefill
    # reported it, the streamed pieces (one per decode step), when it started.
    prefill: api.PrefillProgress | None = None
    pieces: int = 0
    started: float = field(default_factory=time.monotonic)

    def cut_usage(self) -> api.Usage:
        """The figures of a call an interrupt cut short, as far as they came back."""
        p = self.prefill
        return api.Usage(
            prompt_tokens=p.prompt_tokens if p is not None else 0,
            cached_prompt_tokens=p.cached_tokens if p is not None else 0,
            generated_tokens=self.pieces,
            total_time_s=round(time.monotonic() - self.started, 3),
        )

    def message(self, mode: api.ThinkingMode) -> api.Message:
        raw = self.usage.raw_text if self.usage is not None else None
        reasoning = "".join(self.reasoning)
        return api.Message(
            role="assistant",
            content="".join(self.content),
            reasoning=reasoning if self.reasoning else None,
            tool_calls=tuple(self.calls),
            thinking_mode=mode,
            raw_text=raw,
        )


def _concurrent_run(deps: LoopDeps, pending: list[api.ToolCall], room: int) -> list[api.ToolCall]:
    """The leading calls that may run together (tools marked `concurrent`: the task tool);
    otherwise just the first."""
    out: list[api.ToolCall] = []
    for c in pending[: max(1, room)]:
        tool = tool_step.find_tool(deps.toolset, c.name)
        if tool is None or not tool.concurrent:
            break
        out.append(c)
    return out or pending[:1]


def _new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


async def _generate(deps: LoopDeps, request: api.ChatRequest, gen: _Generation) -> None:
    stream = deps.engine.stream(request)
    prefill = PrefillReporter()
    try:
        async for delta in stream:
            if isinstance(delta, api.ReasoningDelta | api.ContentDelta):
                gen.pieces += 1
            if isinstance(delta, api.ReasoningDelta):
                gen.reasoning.append(delta.text)
                await deps.emit(ev.ReasoningDelta(text=delta.text))
            elif isinstance(delta, api.ContentDelta):
                gen.content.append(delta.text)
                await deps.emit(ev.ContentDelta(text=delta.text))
            elif isinstance(delta, api.ToolCallDelta):
                call = delta.call
                if not call.id:
                    call = api.ToolCall(_new_id("call"), call.name, call.arguments)
                gen.calls.append(call)
            elif isinstance(delta, api.UsageDelta):
                gen.usage = delta
            elif isinstance(delta, api.PrefillProgress):
                gen.prefill = delta
                shown = prefill.report(delta)
                if shown is not None:
                    await deps.emit(shown)
    except asyncio.CancelledError:
        await deps.engine.abort(request.request_id)
        raise
    finally:
        if isinstance(stream, AsyncGenerator):  # Engine.stream promises an iterator only
            await stream.aclose()


async def run_turn(
    deps: LoopDeps,
    control: TurnControl,
    op: UserTurn,
    turn: int,
    thinking_mode: api.ThinkingMode,
    session_thinking_mode: api.ThinkingMode = api.ThinkingMode.ADAPTIVE,
) -> ev.TurnComplete:
    """`thinking_mode` is this turn's (the generation prefix); `session_thinking_mode` the one
    written in the prompt's system block, fixed for the session (prefix caching)."""
    started = time.monotonic()
    refused = await _admit_prompt(deps, op, turn)
    if refused is not None:
        return refused
    await deps.emit(ev.TurnStarted(turn=turn, thinking_mode=thinking_mode))
    run = _Turn(deps, control, turn, thinking_mode, session_thinking_mode, started)
    try:
        return await run.steps()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        return await run.cut_short()


async def _admit_prompt(deps: LoopDeps, op: UserTurn, turn: int) -> ev.TurnComplete | None:
    """Log the user's message, unless its attachments are refused or a UserPromptSubmit hook
    blocks it: then nothing is logged or sent, and the session goes on without this turn."""
    try:
        media = validate_attachments(op.media, cwd=deps.cwd) if op.media else ()
    except AttachmentError as e:
        await deps.emit(ev.Error(message=str(e), kind=ErrorKind.USAGE))
        return ev.TurnComplete(turn=turn, reason=StopReason.ERROR, answer="", usage=api.Usage())
    text, why = await hook_points.prompt_submit(deps, op.text)
    if text is None:
        await deps.emit(ev.Error(message=f"prompt blocked by a hook: {why}", kind=ErrorKind.HOOK))
        return ev.TurnComplete(turn=turn, reason=StopReason.BLOCKED, answer="", usage=api.Usage())
    deps.conversation.append(api.Message(role="user", content=text, media=media))
    return None


class _Turn:
    """One turn's running state, one method per decision. An interrupt may land at any await:
    `gen` (the engine call under way) and `pending` (the calls of the last assistant message
    still without a result) say, at every moment, what `cut_short` has to close."""

    def __init__(
        self,
        deps: LoopDeps,
        control: TurnControl,
        turn: int,
        thinking_mode: api.ThinkingMode,
        session_thinking_mode: api.ThinkingMode,
        started: float,
    ) -> None:
        self.deps = deps
        self.control = control
        self.turn = turn
        self.thinking_mode = thinking_mode
        self.session_thinking_mode = session_thinking_mode
        self.started = started
        self.tools = tuple(deps.toolset.schemas()) if deps.toolset is not None else ()
        self.usage = api.Usage()  # the turn's engine calls, summed
        self.last_usage: api.Usage | None = None
        self.answer = ""
        self.tool_calls_done = 0
        self.flags: dict[str, bool] = {}  # tool_step's per-turn answers
        self.stop_hook_active = False
        self.gen: _Generation | None = None
        self.pending: list[api.ToolCall] = []

    def done(self, reason: StopReason) -> ev.TurnComplete:
        return ev.TurnComplete(
            turn=self.turn,
            reason=reason,
            answer=self.answer,
            usage=self.usage,
            last_usage=self.last_usage,
        )

    def _count(self, u: api.Usage) -> None:
        self.usage, self.last_usage = self.usage.then(u), u

    async def steps(self) -> ev.TurnComplete:
        """Engine call, then its tool calls, until the model stops asking for tools or a
        limit (engine calls, tool calls, wall time) stops the turn."""
        cfg = self.deps.config
        for _step in range(cfg.max_turns):
            if time.monotonic() - self.started > cfg.max_wall_time_s:
                return self.done(StopReason.TIMEOUT)
            failed = await self._ask_model()
            if failed is not None:
                return self.done(failed)
            if not self.pending:
                if await self._may_stop():
                    return self.done(StopReason.DONE)
                continue
            stopped = await self._run_tool_calls()
            if stopped is not None:
                return self.done(stopped)
        return self.done(StopReason.MAX_TURNS)

    async def _ask_model(self) -> StopReason | None:
        """One engine call over the conversation; its message is logged and its tool calls
        become `pending`. An engine failure ends the turn (what it had streamed is kept)."""
        deps = self.deps
        conv = deps.conversation
        request = api.ChatRequest(
            request_id=_new_id("req"),
            messages=request_messages(conv.messages),
            tools=self.tools,
            thinking_mode=self.thinking_mode,
            sampling=deps.config.sampling,
            session_thinking_mode=self.session_thinking_mode,
        )
        gen = self.gen = _Generation()
        try:
            await _generate(deps, request, gen)
        except api.EngineError as e:
            unavailable = isinstance(e, api.EngineUnavailable)
            kind = ErrorKind.ENGINE_UNAVAILABLE if unavailable else ErrorKind.ENGINE
            if gen.content or gen.reasoning or gen.calls:
                conv.append(gen.message(self.thinking_mode))
            self.gen = None
            await deps.emit(ev.Error(message=str(e), kind=kind, fatal=True))
            return StopReason.ERROR
        msg = gen.message(self.thinking_mode)
        conv.append(msg)
        self.gen = None
        self.answer = msg.content
        finished = gen.usage
        if finished is not None:
            u = finished.usage if deps.cache is None else deps.cache.annotate(finished.usage)
            self._count(u)
            await deps.emit(ev.ModelRequestFinished(usage=u, finish_reason=finished.finish_reason))
        self.pending = list(msg.tool_calls)
        return None

    async def _may_stop(self) -> bool:
        """The model answered without a tool call: the turn ends unless a Stop hook blocks,
        saying why the model must go on (Claude Code's shape); that reason becomes a user
        message for the next engine call."""
        again = await hook_points.on_stop(self.deps, self.stop_hook_active)
        if again is None:
            return True
        self.stop_hook_active = True
        self.deps.conversation.append(api.Message(role="user", content=f"Stop hook: {again}"))
        return False

    async def _run_tool_calls(self) -> StopReason | None:
        """Run `pending` in order (leading `concurrent` calls together), each result logged
        as it lands; past the tool-call limit the rest are answered 'not run'."""
        deps, cfg = self.deps, self.deps.config
        while self.pending:
            if self.tool_calls_done >= cfg.max_tool_calls:
                for c in self.pending:
                    await tool_step.record_result(
                        deps, c, tool_step.not_run("the tool-call limit was reached")
                    )
                self.pending = []
                return StopReason.MAX_TOOL_CALLS
            room = cfg.max_tool_calls - self.tool_calls_done
            batch = _concurrent_run(deps, self.pending, room)
            if len(batch) > 1:  # several task calls: their children run side by side
                results = await asyncio.gather(
                    *(tool_step.run_call(deps, self.control, c, self.flags) for c in batch)
                )
            else:
                results = [await tool_step.run_call(deps, self.control, batch[0], self.flags)]
            for c, result in zip(batch, results, strict=True):
                # pop, then record: no await between them, so a cancellation cannot
                # leave a call with two results or none.
                self.pending.pop(0)
                self.tool_calls_done += 1
                await tool_step.record_result(deps, c, result)
        return None

    async def cut_short(self) -> ev.TurnComplete:
        """The Session cancelled the turn (interrupt / timeout: `control.stop_reason`): count
        and keep what the cut engine call had done, and give every call without a result one,
        so the log stays whole for the next turn."""
        deps = self.deps
        reason = self.control.stop_reason or StopReason.INTERRUPTED
        gen, pending = self.gen, self.pending
        in_tool = gen is None and bool(pending)  # else the generation itself was cut
        if gen is not None:  # the cut call still counts, with what it had done
            u = gen.cut_usage()
            self._count(u)
            await deps.emit(ev.ModelRequestFinished(usage=u, finish_reason=api.FinishReason.ABORT))
        if gen is not None and (gen.content or gen.reasoning or gen.calls):
            # Keep what was already shown to the user; a cut generation has no tool calls run.
            partial = gen.message(self.thinking_mode)
            pending = list(partial.tool_calls)
            deps.conversation.append(partial)
            self.answer = partial.content
        note = "the turn timed out" if reason is StopReason.TIMEOUT else "interrupted by the user"
        for i, c in enumerate(pending):
            # Only the call that was running was interrupted; the others never started.
            res = tool_step.cancelled_result() if in_tool and i == 0 else tool_step.not_run(note)
            await tool_step.record_result(deps, c, res)
        return self.done(reason)
