"""The Session's runner task: queued ops one at a time (a UserTurn or a Compact), after the
SessionStart hooks. Split out of session.py. What the runner keeps is only what the SessionStart
hooks said (it goes with the first prompt, a local of `run`); the rest is the Session's, reached
through its public members. They are typed as RunnerHost (below), the slice of Session the
runner uses, so this module never imports session.py (which imports it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from m3agent.engine.api import Engine, Message, ThinkingMode, Usage
from m3agent.tools.background import ended_report
from m3agent.tools.toolset import background_jobs

from . import events as ev
from . import ops
from .approvals import ApprovalGate
from .config import AgentConfig
from .conversation import Conversation
from .loop import run_turn
from .prompt_cache import CacheTracker
from .turn_state import CheckpointStore, LoopDeps, TurnControl

if TYPE_CHECKING:  # types only: the sandbox runner and the tools load when used
    from m3agent.tools.diagnostics import Diagnostics
    from m3agent.tools.sandbox.runner import Sandbox
    from m3agent.tools.toolset import ToolsetProtocol

    from .hooks.dispatch import Hooks


class End(Enum):
    """The one value that closes a queue: END."""

    END = "end"


END: Final = End.END  # queued by Shutdown; put on the event queue when the runner stops


class RunnerHost(Protocol):
    """What the runner uses of agent.session.Session: what a turn's LoopDeps take, the modes,
    and the runner's side of the Session (its op queue, its events, the running turn)."""

    engine: Engine
    toolset: ToolsetProtocol | None
    config: AgentConfig
    conversation: Conversation
    cwd: Path
    sandbox: Sandbox | None
    checkpoints: CheckpointStore | None
    tool_env: dict[str, str] | None
    resumed: bool
    hooks: Hooks | None
    subagent: bool
    diagnostics: Diagnostics | None
    gate: ApprovalGate
    cache: CacheTracker
    snapshot_builder: Callable[[Callable[[ev.Progress], None]], Message] | None

    @property
    def thinking_default(self) -> ThinkingMode: ...

    @property
    def session_thinking_mode(self) -> ThinkingMode: ...

    def report(self, event: ev.Event) -> None: ...

    async def emit(self, event: ev.Event) -> None: ...

    def stop_turn(self, reason: ev.StopReason) -> None: ...

    async def next_op(self) -> ops.UserTurn | ops.Compact | None: ...

    def end_events(self) -> None: ...

    def begin_turn(self, task: asyncio.Task[ev.TurnComplete], control: TurnControl) -> None: ...

    def end_turn(self) -> None: ...

    def session_thinking_for_turn(self) -> ThinkingMode: ...


async def run(session: RunnerHost) -> None:
    """The Session's runner task, until Shutdown: each queued op in turn, then the end of the
    events. What the SessionStart hooks add goes with the first prompt only."""
    hook_context = await _session_start(session) if not session.subagent else ""
    while (op := await session.next_op()) is not None:
        if isinstance(op, ops.Compact):
            await compact(session, op.refresh_snapshot, "manual")
            continue
        if session.cache.wants_compaction():
            await compact(session, False, "auto")
        session.report(await _turn(session, op, hook_context))
        hook_context = ""
    session.end_events()


def _prompt_additions(session: RunnerHost, op: ops.UserTurn, hook_context: str) -> ops.UserTurn:
    """The turn's prompt with what the model should learn beside it, appended so the cached
    prefix stays: background commands that ended unseen (Claude Code tells its model too),
    and the SessionStart hooks' context."""
    if not session.subagent and (ended := ended_report(background_jobs(session.toolset))):
        op = replace(
            op, text=f"{op.text}\n\n<background_commands>\n{ended}\n</background_commands>"
        )
    if hook_context:
        op = replace(op, text=f"{op.text}\n\n<hook_context>\n{hook_context}\n</hook_context>")
    return op


async def _turn(session: RunnerHost, op: ops.UserTurn, hook_context: str) -> ev.TurnComplete:
    """Runs one turn under the wall-time limit; its TurnComplete, however it ended."""
    loop = asyncio.get_running_loop()
    control = TurnControl()
    deps = LoopDeps(
        engine=session.engine,
        toolset=session.toolset,
        conversation=session.conversation,
        config=session.config,
        gate=session.gate,
        cwd=session.cwd,
        emit=session.emit,
        sandbox=session.sandbox,
        checkpoints=session.checkpoints,
        tool_env=session.tool_env,
        cache=session.cache,
        hooks=session.hooks,
        subagent=session.subagent,
        allowed_tools=frozenset(op.allowed_tools),
        diagnostics=session.diagnostics,
    )
    op = _prompt_additions(session, op, hook_context)
    session_mode = session.session_thinking_for_turn()
    mode = op.thinking_mode or session.thinking_default
    turn = sum(1 for m in session.conversation.messages if m.role == "user") + 1
    task = loop.create_task(run_turn(deps, control, op, turn, mode, session_mode))
    session.begin_turn(task, control)
    timer = loop.call_later(
        session.config.max_wall_time_s, session.stop_turn, ev.StopReason.TIMEOUT
    )
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        me = asyncio.current_task()
        if task.cancelled() and not (me is not None and me.cancelling()):
            # Stopped before its first step ran: nothing to clean up.
            reason = control.stop_reason or ev.StopReason.INTERRUPTED
            return ev.TurnComplete(turn=turn, reason=reason, answer="", usage=Usage())
        task.cancel()  # the runner itself is being cancelled (event loop shutting down)
        raise
    except Exception as e:  # a bug in the loop: report it, keep the session usable
        session.report(ev.Error(message=f"internal error: {type(e).__name__}: {e}", fatal=True))
        return ev.TurnComplete(turn=turn, reason=ev.StopReason.ERROR, answer="", usage=Usage())
    finally:
        timer.cancel()
        session.end_turn()


async def compact(session: RunnerHost, refresh: bool, trigger: str) -> None:
    """Compacts the conversation (agent/compaction.py), with a fresh repository snapshot when
    `refresh`; PreCompact hooks first."""
    from .compaction import compact as compact_conversation

    snapshot = None
    if refresh:
        if session.snapshot_builder is None:
            session.report(
                ev.Error(
                    message="this session has no repository snapshot to refresh",
                    kind=ev.ErrorKind.USAGE,
                )
            )
            return
        try:
            loop = asyncio.get_running_loop()

            def report(p: ev.Progress) -> None:  # from the builder's thread
                loop.call_soon_threadsafe(session.report, p)

            snapshot = await asyncio.to_thread(session.snapshot_builder, report)
        except (OSError, ValueError) as e:
            session.report(
                ev.Error(message=f"cannot take a fresh snapshot: {e}", kind=ev.ErrorKind.USAGE)
            )
            return
    from .hooks import HookEvent
    from .hooks import points as hook_points

    await hook_points.fire(
        session.hooks,
        session.emit,
        session.conversation,
        HookEvent.PRE_COMPACT,
        {"trigger": trigger},
    )
    tools = tuple(session.toolset.schemas()) if session.toolset is not None else ()
    try:
        event = await compact_conversation(
            session.conversation,
            session.engine,
            tools=tools,
            sampling=session.config.sampling,
            cache=session.cache,
            trigger=trigger,
            new_snapshot=snapshot,
            session_thinking_mode=session.session_thinking_mode,
        )
    except Exception as e:  # a bug in compaction: report it, keep the session usable
        session.report(ev.Error(message=f"compaction failed: {type(e).__name__}: {e}"))
        return
    session.report(event)


async def _session_start(session: RunnerHost) -> str:
    """Runs the SessionStart hooks; the context they add to the first prompt."""
    if session.hooks is None:
        return ""
    from .hooks import HookEvent
    from .hooks import points as hook_points

    source = "resume" if session.resumed else "startup"
    v = await hook_points.fire(
        session.hooks,
        session.emit,
        session.conversation,
        HookEvent.SESSION_START,
        {"source": source},
    )
    return v.context_text
