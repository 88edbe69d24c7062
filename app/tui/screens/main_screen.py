"""The conversation screen: transcript, prompt, status bar. It forwards the user's
intent to the Session as Ops and shows the Session's Events; nothing more."""

from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Any

from m3agent.agent import events as ev
from m3agent.agent.ops import ApprovalDecision, Interrupt, UserTurn
from m3agent.app.safe_text import visible
from m3agent.app.tui.context_notice import describe_context_event
from m3agent.app.tui.event_batch import batches, coalesce
from m3agent.app.tui.history import load_history
from m3agent.app.tui.messages import (
    EngineProgress,
    EventStreamEnded,
    SessionEvent,
    SessionEvents,
    SessionFailed,
    SessionReady,
)
from m3agent.app.tui.ports import TuiConfig
from m3agent.app.tui.prompt_flow import PromptFlow
from m3agent.app.tui.slash import next_thinking
from m3agent.app.tui.slash_actions import SlashActions
from m3agent.app.tui.status import StatusState
from m3agent.app.tui.transcript import Transcript
from m3agent.app.tui.widgets.conversation import Conversation
from m3agent.app.tui.widgets.loading_view import LoadingView
from m3agent.app.tui.widgets.prompt_input import PromptInput
from m3agent.app.tui.widgets.status_bar import StatusBar
from m3agent.engine.api import MediaPart
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Static

WELCOME = "m3agent · type a task and press Enter · /help lists commands and keys"


class MainScreen(Screen):
    CSS_PATH = "main_screen.tcss"
    BINDINGS = [
        Binding("escape", "interrupt", "interrupt", show=False),
        Binding("ctrl+t", "cycle_thinking", "thinking mode", priority=True),
        # ctrl+c interrupts like in a shell, but only while something runs: otherwise it
        # stays the prompt's copy key (check_action hands it on).
        Binding("ctrl+c", "interrupt_running", "interrupt", show=False, priority=True),
    ]

    def __init__(self, config: TuiConfig) -> None:
        super().__init__()
        self.config = config
        self.session: Any = None
        self.thinking: str = config.thinking
        self.busy = False
        self.attachments: list[MediaPart] = []
        self.queued: list[tuple[UserTurn, bool]] = []  # (turn, already shown)
        self.status = StatusState(
            engine=config.engine, model=config.model, state="loading", thinking=config.thinking,
            context_max=config.max_context_tokens, sandbox=config.sandbox,
            sandbox_layers=config.sandbox_layers,
        )
        self.transcript: Transcript | None = None
        self.last_snapshot_detail: dict[str, Any] | None = None  # for /context
        self.completed_turns = 0  # lets tests and scripts wait for "the turn is over"
        self.slash = SlashActions(self)
        self.prompts = PromptFlow(self)
        state = config.state_dir
        self.history_path = state / "prompt_history.jsonl" if state is not None else None

    def compose(self) -> ComposeResult:
        yield Conversation(id="conversation")
        yield LoadingView(id="loading")
        yield Static("", id="completions", markup=False)
        yield Static("", id="waiting", markup=False)
        yield PromptInput(self.config.cwd, id="prompt")
        yield StatusBar(self.status, id="status")

    def on_mount(self) -> None:
        self.transcript = Transcript(self.query_one(Conversation))
        self.query_one("#completions").display = False
        self.query_one("#waiting").display = False
        prompt = self.query_one(PromptInput)
        if self.history_path is not None:
            prompt.prompt_history = load_history(self.history_path)
        prompt.focus()
        self.call_later(self.transcript.notice, WELCOME)

    # ---- status ---------------------------------------------------------------------------

    def set_status(self, **changes: Any) -> None:
        self.status = replace(self.status, **changes)
        self.query_one(StatusBar).show(self.status)

    # ---- session lifecycle ----------------------------------------------------------------

    def on_engine_progress(self, message: EngineProgress) -> None:
        self.query_one(LoadingView).progress(message.label, message.fraction)

    async def on_session_ready(self, message: SessionReady) -> None:
        self.session = message.session
        self.query_one(LoadingView).display = False
        info = _engine_info(self.session)
        if info is not None:
            self.set_status(engine=info.backend, model=info.model,
                            context_max=self.status.context_max or info.max_context_tokens)
        if message.sandbox_layers is not None:
            self.set_status(sandbox_layers=message.sandbox_layers)
        if getattr(self.session, "resumed", False):
            await self.transcript.history(getattr(self.session, "messages", ()))
        self.set_status(state="ready")
        self.pump_events(self.session)
        await self._send_queued()

    async def on_session_failed(self, message: SessionFailed) -> None:
        self.query_one(LoadingView).display = False
        self.set_status(state="failed")
        await self.transcript.error(message.message, message.kind)

    @work(exclusive=True, group="session-events")
    async def pump_events(self, session: Any) -> None:
        """The one worker that reads the Session: its events become messages, in order."""
        async for batch in batches(session.events()):
            self.post_message(SessionEvents(batch))
        self.post_message(EventStreamEnded(session))

    async def submit(self, op: Any) -> None:
        result = self.session.submit(op)
        if inspect.isawaitable(result):
            await result

    # ---- events -> widgets ----------------------------------------------------------------

    async def on_session_events(self, message: SessionEvents) -> None:
        for event in coalesce(message.events):
            await self.show_event(event)

    async def on_session_event(self, message: SessionEvent) -> None:
        await self.show_event(message.event)

    async def show_event(self, e: Any) -> None:
        t = self.transcript
        if isinstance(e, ev.ReasoningDelta):
            await t.reasoning(e.text)
        elif isinstance(e, ev.ContentDelta):
            await t.content(e.text)
        elif isinstance(e, ev.ToolCallStarted):
            await t.tool_started(e.call_id, e.name, e.arguments)
        elif isinstance(e, ev.ApprovalRequest):
            card = await t.tool_started(e.call_id, e.name, e.arguments)
            card.set_status("approval")
            from m3agent.app.tui.screens.approval_screen import ApprovalScreen

            self.app.push_screen(ApprovalScreen(e, self.config.cwd), self._approval_callback(e))
        elif isinstance(e, ev.ToolCallFinished):
            await t.tool_finished(e.call_id, e.name, e.output, e.is_error, e.metadata)
        elif isinstance(e, ev.ModelRequestFinished):
            await t.end_segment()
            self.set_status(**_usage_fields(self.status.with_usage(e.usage)))
        elif isinstance(e, ev.TurnStarted):
            self.busy = True
            self.set_status(state="working")
        elif isinstance(e, ev.TurnComplete):
            await self._turn_complete(e)
        elif isinstance(e, ev.Error):
            await t.error(e.message, e.kind)
            if e.fatal:
                self.set_status(state="failed")
        elif isinstance(e, ev.ContextEvent):
            if e.action in ("snapshot", "refresh"):
                self.last_snapshot_detail = dict(e.detail)
            await t.notice(describe_context_event(e.action, e.detail))
        elif isinstance(e, ev.SessionStarted):
            self.set_status(engine=e.engine, model=e.model)
            if e.resumed:
                await t.notice(f"resumed session {e.session_id}")

    async def _turn_complete(self, e: ev.TurnComplete) -> None:
        t = self.transcript
        # An interrupt or a time limit can end the turn while a question is still open.
        while type(self.app.screen).__name__ == "ApprovalScreen":
            self.app.screen.dismiss(None)
        await t.end_segment()
        for card in t.unfinished_cards():
            card.set_status("interrupted")
        if e.last_usage is not None:
            self.set_status(**_usage_fields(self.status.with_usage(e.last_usage)))
        if e.reason == "interrupted":
            await t.notice("interrupted: the turn stopped; type a prompt to go on")
        elif e.reason not in ("done", "error"):
            await t.notice(f"turn stopped: {e.reason.replace('_', ' ')} reached")
        self.busy = False
        self.completed_turns += 1
        self.set_status(state="ready")
        await self._send_queued()

    def on_event_stream_ended(self, message: EventStreamEnded) -> None:
        if message.session is not self.session:
            return  # a session left for another one (/sessions): not the current state
        self.busy = False
        if self.status.state != "failed":
            self.set_status(state="stopped")

    def _approval_callback(self, request: ev.ApprovalRequest):
        async def answer(decision: ApprovalDecision | None) -> None:
            if decision is None:
                return  # closed by the app (the turn already ended): nothing to answer
            card = self.transcript.cards.get(request.call_id)
            if card is not None:
                card.set_status("running" if decision.decision != "deny" else "denied")
            await self.submit(decision)

        return answer

    # ---- user input -----------------------------------------------------------------------

    @on(PromptInput.Completions)
    def show_completions(self, message: PromptInput.Completions) -> None:
        hint = self.query_one("#completions", Static)
        hint.update(visible("  ".join(message.options[:20])))
        hint.display = True

    @on(PromptInput.Changed)
    def hide_completions(self) -> None:
        self.query_one("#completions").display = False
        self.query_one("#waiting").display = False

    async def on_prompt_input_submitted(self, message: PromptInput.Submitted) -> None:
        await self.prompts.submitted(message.text)

    async def _send_queued(self) -> None:
        await self.prompts.send_next()

    async def action_interrupt(self) -> None:
        if self.session is not None and self.busy:
            await self.submit(Interrupt())
        elif self.queued:
            self.queued.clear()
            self.prompts.show_waiting()
            await self.transcript.notice("queued prompts dropped")

    async def action_interrupt_running(self) -> None:
        await self.action_interrupt()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "interrupt_running":
            return self.session is not None and self.busy
        return True

    def action_cycle_thinking(self) -> None:
        self.set_thinking(next_thinking(self.thinking))

    def set_thinking(self, mode: str) -> None:
        self.thinking = mode
        self.set_status(thinking=mode)


def _usage_fields(state: StatusState) -> dict[str, Any]:
    return {
        "context_used": state.context_used,
        "cached_tokens": state.cached_tokens,
        "cache_hit_pct": state.cache_hit_pct,
        "tokens_per_s": state.tokens_per_s,
    }


def _engine_info(session: Any) -> Any:
    """EngineInfo when the session exposes its engine; optional, for the status bar."""
    engine = getattr(session, "engine", None)
    try:
        return engine.info() if engine is not None else None
    except Exception:
        return None
