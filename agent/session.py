"""Session: the Op/Event protocol around the loop.

`submit(op)` in, `events()` out. Control ops (Interrupt, ApprovalDecision, SetThinking) act at
once; UserTurns queue and run one at a time. The conversation and its JSONL log live in a
Conversation; `Session.resume` rebuilds the exact message list from that log. The runner task
that takes the queued ops one at a time is agent/session_runner.py; the log a session opens
with, new or resumed, agent/session_open.py; its two thinking modes, agent/session_thinking.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from m3agent.engine.api import THINKING_MODES, Engine, Message, ThinkingMode

from . import events as ev
from . import ops, session_runner
from .approvals import ApprovalGate
from .config import AgentConfig
from .conversation import Conversation
from .prompt_cache import REWOUND, CacheTracker
from .session_open import new_log, resumed_log
from .session_options import SessionOptions
from .session_runner import END, End
from .session_thinking import ThinkingModes
from .shell_prefixes import ShellPrefixes
from .turn_state import CheckpointStore, TurnControl

if TYPE_CHECKING:  # types only: the sandbox runner and the tools load when used
    from m3agent.tools.diagnostics import Diagnostics
    from m3agent.tools.sandbox.runner import Sandbox
    from m3agent.tools.toolset import ToolsetProtocol

    from .hooks.dispatch import Hooks

# Streaming text is not logged line by line: the assistant message that follows holds it all.
_UNLOGGED = (ev.ReasoningDelta, ev.ContentDelta, ev.Progress)


class Session:
    def __init__(
        self,
        engine: Engine,
        toolset: ToolsetProtocol | None,
        config: AgentConfig,
        *,
        conversation: Conversation,
        cwd: Path,
        sandbox: Sandbox | None = None,
        checkpoints: CheckpointStore | None = None,
        tool_env: dict[str, str] | None = None,
        resumed: bool = False,
        # snapshot_builder(progress): a fresh snapshot; progress gets its Progress events.
        snapshot_builder: Callable[[Callable[[ev.Progress], None]], Message] | None = None,
        startup_events: Sequence[ev.Event] = (),
        auto_compact_tokens: int | None = None,
        persist_allow: Callable[[str], None] | None = None,
        # shell prefixes allowed from the start (saved ones), and where a saved answer goes
        shell_prefixes: Sequence[tuple[str, ...]] = (),
        persist_prefix: Callable[[tuple[str, ...]], None] | None = None,
        hooks: Hooks | None = None,  # trust already applied by the front end
        subagent: bool = False,
        gate: ApprovalGate | None = None,  # a task child's: its parent's, mode and all
        diagnostics: Diagnostics | None = None,  # a checker run after each file change
        # What the front end adds to this session (app/extensions.py: its commands), kept for
        # as long as the session lives; the agent never reads it.
        extensions: object | None = None,
    ):
        self.engine = engine
        self.toolset = toolset
        self.config = config
        self.conversation = conversation
        self.cwd = Path(cwd)
        self.sandbox = sandbox
        self.checkpoints = checkpoints
        self.tool_env = tool_env
        self.resumed = resumed
        self.hooks = hooks
        self.subagent = subagent
        self.diagnostics = diagnostics
        self.extensions = extensions
        # persist_allow: where an "always allow" answer is kept for later sessions.
        self.gate = gate or ApprovalGate(
            config.approval_policy,
            config.rules,
            persist=persist_allow,
            workspace=self.cwd,
            prefixes=ShellPrefixes(shell_prefixes, persist=persist_prefix),
        )
        if hooks is not None:
            hooks.follow(self.gate)  # plan mode binds the project's hooks too
        self._events: asyncio.Queue[ev.Event | End] = asyncio.Queue()
        self._turns: asyncio.Queue[ops.UserTurn | ops.Compact | End] = asyncio.Queue()
        self._runner: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._turn_task: asyncio.Task[ev.TurnComplete] | None = None
        self._control: TurnControl | None = None
        self._closed = False
        self._started_event_sent = False
        # Repository context (agent/context.py, agent/compaction.py): the snapshot message for
        # a refresh, events to report once the session starts, and per-request cache figures.
        self.snapshot_builder = snapshot_builder
        self._startup_events = tuple(startup_events)
        self.cache = CacheTracker(
            resumed=resumed,
            auto_compact_tokens=auto_compact_tokens,
            last_sequence_tokens=conversation.last_sequence_tokens() if resumed else None,
        )
        self.thinking = ThinkingModes(
            conversation, ThinkingMode(config.thinking_default), self.cache, self.report
        )

    # ---- construction ---------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        engine: Engine,
        toolset: ToolsetProtocol | None,
        config: AgentConfig,
        *,
        sessions_dir: Path,
        cwd: Path,
        context_messages: Sequence[Message] = (),
        **kwargs: Unpack[SessionOptions],
    ) -> Session:
        """A new session: the system prompt (and any repository context) opens the log."""
        conv = new_log(engine, config, sessions_dir, cwd, context_messages)
        return cls(engine, toolset, config, conversation=conv, cwd=cwd, **kwargs)

    @classmethod
    def resume(
        cls,
        session_id: str,
        engine: Engine,
        toolset: ToolsetProtocol | None,
        config: AgentConfig,
        *,
        sessions_dir: Path,
        cwd: Path | None = None,
        **kwargs: Unpack[SessionOptions],
    ) -> Session:
        """A saved session, its log mended after a crash (a ContextEvent says what was)."""
        conv, repair = resumed_log(sessions_dir, session_id)
        where = Path(cwd) if cwd is not None else Path(conv.meta.cwd)
        if repair is not None:
            kwargs["startup_events"] = (*kwargs.get("startup_events", ()), repair)
        return cls(engine, toolset, config, conversation=conv, cwd=where, resumed=True, **kwargs)

    @property
    def id(self) -> str:
        return self.conversation.id

    @property
    def messages(self) -> tuple[Message, ...]:
        return self.conversation.messages

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the session runs on; None until it has started."""
        return self._loop

    @property
    def thinking_default(self) -> ThinkingMode:
        """The mode of a turn that names none (agent/session_thinking.py)."""
        return self.thinking.default

    @thinking_default.setter
    def thinking_default(self, mode: ThinkingMode) -> None:
        self.thinking.default = mode

    @property
    def session_thinking_mode(self) -> ThinkingMode:
        """The mode the prompt's system block says (agent/session_thinking.py)."""
        return self.thinking.system

    @property
    def busy(self) -> bool:
        return self._turn_task is not None and not self._turn_task.done()

    def model_writable(self) -> tuple[Path, ...]:
        """The directories the model's tools and commands can change (the workspace and the
        sandbox's extra writable roots): where a link it planted may wait for a file the user
        names (tools/out_file.py)."""
        extra = self.sandbox.policy.extra_writable if self.sandbox is not None else ()
        return (self.cwd, *extra)

    # ---- protocol ---------------------------------------------------------------------------

    def submit(self, op: ops.Op) -> None:
        """Accepts an op. Call it on the event loop events() runs on, or from any other thread
        once the session runs (it is then handed to that loop)."""
        if self._loop is not None:
            try:
                here = asyncio.get_running_loop()
            except RuntimeError:
                here = None
            if here is not self._loop:
                self._loop.call_soon_threadsafe(self.submit, op)
                return
        if self._closed:
            return
        self._ensure_runner()
        if isinstance(op, ops.UserTurn):
            if op.thinking_mode is not None and op.thinking_mode not in THINKING_MODES:
                msg = f"unknown thinking mode {op.thinking_mode!r}"
                self.report(ev.Error(message=msg, kind=ev.ErrorKind.USAGE))
                return
            if op.thinking_mode is not None:
                op = replace(op, thinking_mode=ThinkingMode(op.thinking_mode))
            self._turns.put_nowait(op)
        elif isinstance(op, ops.Interrupt):
            self.stop_turn(ev.StopReason.INTERRUPTED)
        elif isinstance(op, ops.ApprovalDecision):
            self._decide(op)
        elif isinstance(op, ops.SetThinking):
            self.thinking.set(op)
        elif isinstance(op, ops.Compact):
            self._turns.put_nowait(op)  # runs between turns, never during one
        elif isinstance(op, ops.Shutdown):
            self._closed = True
            self.stop_turn(ev.StopReason.INTERRUPTED)
            self._turns.put_nowait(END)
        else:
            self.report(
                ev.Error(message=f"unknown op {type(op).__name__}", kind=ev.ErrorKind.USAGE)
            )

    async def events(self) -> AsyncIterator[ev.Event]:
        """Every event in order; ends after Shutdown once the running turn has stopped."""
        self._ensure_runner()
        while True:
            item = await self._events.get()
            if item is END:
                return
            yield item

    async def run_prompt(self, text: str, **turn: Any) -> ev.TurnComplete:
        """Convenience for tests and scripts: submit one UserTurn and wait for its end,
        answering nothing (approval requests must be answered by the caller's policy)."""
        self.submit(ops.UserTurn(text, **turn))
        async for e in self.events():
            if isinstance(e, ev.TurnComplete):
                return e
        raise RuntimeError("the session ended before the turn completed")

    async def close(self) -> None:
        if not self._closed:
            self.submit(ops.Shutdown())
        if self._runner is not None:
            await asyncio.gather(self._runner, return_exceptions=True)
        self.conversation.close()
        if self.toolset is not None:  # MCP servers stop with the session
            await asyncio.to_thread(self.toolset.close)
        if self.diagnostics is not None and not self.subagent:  # so do language servers
            await asyncio.to_thread(self.diagnostics.close)

    def replace_toolset(
        self, toolset: ToolsetProtocol, detail: dict[str, Any] | None = None
    ) -> ToolsetProtocol | None:
        """Between turns only: the next request carries the new tools. The tools open the
        prompt, so that request recomputes it all; the cache figures say why. Returns the old
        toolset (the caller closes it). Front ends call this only on the user's word."""
        if self.busy:
            raise RuntimeError("a turn is running; the tools can change between turns")
        old, self.toolset = self.toolset, toolset
        self.cache.note("tools changed")
        self.report(ev.ContextEvent(action=ev.ContextAction.TOOLS, detail=dict(detail or {})))
        return old

    def rewind(self, keep: int, detail: dict[str, Any] | None = None) -> None:
        """Between turns only: the conversation goes back to its first `keep` messages (the
        front end restores the files itself, from the checkpoints). The log keeps everything
        before a rewind record; the next request's prompt is a prefix of an earlier one."""
        if self.busy or not self._turns.empty():
            raise RuntimeError("a turn is running or queued; rewind between turns")
        dropped = len(self.conversation) - keep
        self.conversation.rewind(keep)
        self.cache.note(REWOUND)
        info = {"kept_messages": keep, "dropped_messages": dropped, **(detail or {})}
        self.report(ev.ContextEvent(action=ev.ContextAction.REWIND, detail=info))

    # ---- subagents (agent/subagents: the task tool's children) ------------------------------

    def nested(self, call_id: str, agent: str, session_id: str, e: ev.Event) -> None:
        """A child's event, nested under the task call that runs it."""
        wrapped = ev.SubagentEvent(call_id, agent, session_id, e.to_dict())
        if isinstance(e, _UNLOGGED):  # streaming text: shown, not logged (as the parent's)
            self._events.put_nowait(wrapped)
        else:
            self.report(wrapped)

    def adopt_approval(self, e: ev.ApprovalRequest) -> None:
        """A child's approval request, asked of this session's user like its own."""
        if self._control is not None and e.future is not None:
            self._control.approvals[e.call_id] = e.future
        self.report(e)

    # ---- the runner's side (agent/session_runner.py) --------------------------------------

    def report(self, event: ev.Event) -> None:
        """Logs the event (streaming text aside) and hands it to events()."""
        if not isinstance(event, _UNLOGGED):
            self.conversation.log_event(event.to_dict())
        self._events.put_nowait(event)

    async def emit(self, event: ev.Event) -> None:
        """report, for those that await their emitter (the loop, the hooks)."""
        self.report(event)

    def stop_turn(self, reason: ev.StopReason) -> None:
        """Cancels the running turn (interrupt, timeout, shutdown); `reason` says why."""
        if self._control is not None and self._control.stop_reason is None:
            self._control.stop_reason = reason
        if self._control is not None and self._control.tool_cancel is not None:
            self._control.tool_cancel.set()
        if self.busy:
            self._turn_task.cancel()  # type: ignore[union-attr]  # busy: it is set

    async def next_op(self) -> ops.UserTurn | ops.Compact | None:
        """The next queued op to run; None once Shutdown came (what was queued before it is
        dropped)."""
        while True:
            op = await self._turns.get()
            if op is END:
                return None
            if not self._closed:
                return op

    def end_events(self) -> None:
        """The runner has stopped: events() ends after what is already queued."""
        self._events.put_nowait(END)

    def begin_turn(self, task: asyncio.Task[ev.TurnComplete], control: TurnControl) -> None:
        """The turn now running: an interrupt cancels `task`; approvals and the stop reason
        go through `control` until end_turn."""
        self._turn_task, self._control = task, control

    def end_turn(self) -> None:
        self._control = None

    def session_thinking_for_turn(self) -> ThinkingMode:
        """The system block's thinking mode for the next turn (agent/session_thinking.py)."""
        return self.thinking.for_turn()

    # ---- internals --------------------------------------------------------------------------

    def _ensure_runner(self) -> None:
        if self._runner is None:
            if not self._started_event_sent:
                self._started_event_sent = True
                info = self.engine.info()
                self.report(
                    ev.SessionStarted(
                        session_id=self.id,
                        engine=info.backend,
                        model=info.model,
                        cwd=str(self.cwd),
                        resumed=self.resumed,
                    )
                )
                for e in self._startup_events:
                    self.report(e)
            self._loop = asyncio.get_running_loop()
            self._runner = self._loop.create_task(session_runner.run(self))

    def _decide(self, decision: ops.ApprovalDecision) -> None:
        fut = self._control.approvals.get(decision.call_id) if self._control else None
        if fut is None or fut.done():
            self.report(
                ev.Error(
                    message=f"no pending approval for call {decision.call_id}",
                    kind=ev.ErrorKind.USAGE,
                )
            )
            return
        fut.set_result(decision)
