"""The Session's runner task: queued ops one at a time (a UserTurn or a Compact), after the
SessionStart hooks. Split out of session.py; these functions hold no state of their own: they
read and write the Session's, as its methods did. They type it as RunnerHost (below), the
slice of Session they use, so this module never imports session.py (which imports it).
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
from .prompt_cache import THINKING_DEFAULT_CHANGED, CacheTracker
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
    """The state of agent.session.Session these functions read and write (its queues, its
    turn's task and control, what a turn's LoopDeps take, the hooks' context and the modes)."""

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
    thinking_default: ThinkingMode
    session_thinking_mode: ThinkingMode
    _hook_context: str
    _mode_sent: ThinkingMode
    _events: asyncio.Queue[ev.Event | End]
    _turns: asyncio.Queue[ops.UserTurn | ops.Compact | End]
    _turn_task: asyncio.Task[ev.TurnComplete] | None
    _control: TurnControl | None
    _closed: bool

    def _put(self, event: ev.Event) -> None: ...

    async def _emit(self, event: ev.Event) -> None: ...

    def _stop_turn(self, reason: ev.StopReason) -> None: ...


async def run(session: RunnerHost) -> None:
    if session.hooks is not None and not session.subagent:
        await _session_start(session)
    while True:
        op = await session._turns.get()
        if op is END:
            break
        if session._closed:
            continue
        if isinstance(op, ops.Compact):
            await compact(session, op.refresh_snapshot, "manual")
            continue
        if session.cache.wants_compaction():
            await compact(session, False, "auto")
        session._put(await _turn(session, op))
    session._events.put_nowait(END)


async def _turn(session: RunnerHost, op: ops.UserTurn) -> ev.TurnComplete:
    """Runs one turn under the wall-time limit; its TurnComplete, however it ended."""
    loop = asyncio.get_running_loop()
    control = TurnControl()
    session._control = control
    deps = LoopDeps(
        engine=session.engine,
        toolset=session.toolset,
        conversation=session.conversation,
        config=session.config,
        gate=session.gate,
        cwd=session.cwd,
        emit=session._emit,
        sandbox=session.sandbox,
        checkpoints=session.checkpoints,
        tool_env=session.tool_env,
        cache=session.cache,
        hooks=session.hooks,
        subagent=session.subagent,
        allowed_tools=frozenset(op.allowed_tools),
        diagnostics=session.diagnostics,
    )
    if not session.subagent and (ended := ended_report(background_jobs(session.toolset))):
        # Background commands that ended unseen (Claude Code tells its model too), appended
        # to the new prompt like the hooks' context
        op = replace(
            op, text=f"{op.text}\n\n<background_commands>\n{ended}\n</background_commands>"
        )
    if session._hook_context:  # appended to the new prompt: the cached prefix stays
        op = replace(
            op, text=f"{op.text}\n\n<hook_context>\n{session._hook_context}\n</hook_context>"
        )
        session._hook_context = ""
    if session._mode_sent != session.session_thinking_mode:  # applies from this turn on
        if session.cache.history:
            session.cache.note(THINKING_DEFAULT_CHANGED)
        session._mode_sent = session.session_thinking_mode
    mode = op.thinking_mode or session.thinking_default
    turn = sum(1 for m in session.conversation.messages if m.role == "user") + 1
    session._turn_task = loop.create_task(
        run_turn(deps, control, op, turn, mode, session.session_thinking_mode)
    )
    timer = loop.call_later(
        session.config.max_wall_time_s, session._stop_turn, ev.StopReason.TIMEOUT
    )
    task = session._turn_task
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
        session._put(ev.Error(message=f"internal error: {type(e).__name__}: {e}", fatal=True))
        return ev.TurnComplete(turn=turn, reason=ev.StopReason.ERROR, answer="", usage=Usage())
    finally:
        timer.cancel()
        session._control = None


async def compact(session: RunnerHost, refresh: bool, trigger: str) -> None:
    """Compacts the conversation (agent/compaction.py), with a fresh repository snapshot when
    `refresh`; PreCompact hooks first."""
    from .compaction import compact as compact_conversation

    snapshot = None
    if refresh:
        if session.snapshot_builder is None:
            session._put(
                ev.Error(
                    message="this session has no repository snapshot to refresh",
                    kind=ev.ErrorKind.USAGE,
                )
            )
            return
        try:
            loop = asyncio.get_running_loop()

            def report(p: ev.Progress) -> None:  # from the builder's thread
                loop.call_soon_threadsafe(session._put, p)

            snapshot = await asyncio.to_thread(session.snapshot_builder, report)
        except (OSError, ValueError) as e:
            session._put(
                ev.Error(message=f"cannot take a fresh snapshot: {e}", kind=ev.ErrorKind.USAGE)
            )
            return
    from .hooks import HookEvent
    from .hooks import points as hook_points

    await hook_points.fire(
        session.hooks,
        session._emit,
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
        session._put(ev.Error(message=f"compaction failed: {type(e).__name__}: {e}"))
        return
    session._put(event)


async def _session_start(session: RunnerHost) -> None:
    from .hooks import HookEvent
    from .hooks import points as hook_points

    source = "resume" if session.resumed else "startup"
    v = await hook_points.fire(
        session.hooks,
        session._emit,
        session.conversation,
        HookEvent.SESSION_START,
        {"source": source},
    )
    session._hook_context = v.context_text
