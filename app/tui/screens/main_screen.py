"""The conversation screen: transcript, `/` menu, activity line, prompt, status bar. It renders
what the SessionController knows and hands it the user's intent; it decides nothing itself."""

from __future__ import annotations

import time
from typing import Unpack

from m3agent.agent.ops import UserTurn
from m3agent.engine.api import ThinkingMode
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Static

from ...extensions import commands_of
from ...safe_text import visible
from ...slash import SlashError, parse_slash
from .. import ext_view
from ..approval_flow import ApprovalFlow
from ..controller import SessionController
from ..event_batch import batches, coalesce
from ..event_flow import EventFlow
from ..history import append_history, load_history
from ..hosts import AppHost
from ..messages import (
    EngineProgress,
    EventStreamEnded,
    SessionEvent,
    SessionEvents,
    SessionFailed,
    SessionReady,
)
from ..plan_flow import cycle_mode
from ..ports import SessionLike, TuiConfig
from ..rewind_flow import DOUBLE_ESC_S, open_rewind
from ..slash_actions import SlashActions
from ..slash_daily import SHELL_ESCAPE
from ..status import StatusChanges, StatusState, engine_info, engine_label
from ..status_line import StatusLineRunner, session_payload
from ..tasks import send_to_background
from ..transcript import Transcript
from ..widgets.activity_line import ActivityLine
from ..widgets.command_menu import CommandMenu
from ..widgets.conversation_view import ConversationView
from ..widgets.loading_view import LoadingView
from ..widgets.plan_view import PlanView
from ..widgets.prompt_input import PromptInput
from ..widgets.status_bar import StatusBar

WELCOME = "m3agent · type a task and press Enter · / opens the commands · /help lists the keys"
QUIT_WINDOW_S = 2.0  # a second ctrl+c within this time quits


class MainScreen(Screen[None]):
    CSS_PATH = "main_screen.tcss"
    BINDINGS = [
        Binding("escape", "interrupt", "interrupt", show=False),
        Binding("ctrl+t", "cycle_thinking", "thinking mode", priority=True),
        Binding("ctrl+b", "background", "background the running command", priority=True),
        Binding("shift+tab", "cycle_mode", "default / accept edits / plan", priority=True),
        Binding("pageup", "scroll_transcript('scroll_page_up')", show=False, priority=True),
        Binding("pagedown", "scroll_transcript('scroll_page_down')", show=False, priority=True),
        # Home/End scroll the transcript while the prompt is empty; with text they stay the
        # prompt's own keys (start / end of the line); see check_action.
        Binding("home", "scroll_transcript('scroll_home')", show=False, priority=True),
        Binding("end", "scroll_transcript('scroll_end')", show=False, priority=True),
    ]

    def __init__(self, config: TuiConfig, app_host: AppHost) -> None:
        super().__init__()
        self.app_host = app_host  # the M3App, as the helpers use it (hosts.py)
        self.controller = SessionController(config, clock=config.clock)
        self.status = StatusState(
            engine=config.engine,
            model=config.model,
            state="loading",
            thinking=config.thinking,
            context_max=config.max_context_tokens,
            sandbox=config.sandbox,
            sandbox_layers=config.sandbox_layers,
        )
        self.conversation = ConversationView(id="conversation")
        self.plan_view = PlanView(id="plan")
        self.transcript = Transcript(self.conversation)
        self.slash = SlashActions(self.controller, self.transcript, app_host, self)
        self.approvals = ApprovalFlow(self.controller, self.transcript, app_host)
        self.events = EventFlow(self.slash, self.plan_view, self.approvals, self.slash.review)
        state = config.state_dir
        self.history_path = state / "prompt_history.jsonl" if state is not None else None
        self._quit_armed: Timer | None = None
        self._last_idle_esc: float | None = None  # Esc-Esc (rewind_flow.py)
        self.status_line = (
            None
            if config.status_line is None
            else StatusLineRunner(
                config.status_line, config.cwd, self._status_line_shown, self._status_line_failed
            )
        )

    @property
    def config(self) -> TuiConfig:
        """The TUI's settings: the controller holds the one copy every helper reads (the
        first-run screen replaces it once, with the engine chosen)."""
        return self.controller.config

    def compose(self) -> ComposeResult:
        menu = CommandMenu(id="command-menu")
        yield self.conversation
        yield LoadingView(clock=self.config.clock, id="loading")
        yield Static("", id="completions", markup=False)
        yield Static("", id="waiting", markup=False)
        yield menu
        yield self.plan_view
        yield ActivityLine(self._activity, id="activity")
        yield PromptInput(self.config.cwd, menu=menu, id="prompt")
        yield StatusBar(self.status, id="status")

    def on_mount(self) -> None:
        self.query_one("#completions").display = False
        self.query_one("#waiting").display = False
        prompt = self.query_one(PromptInput)
        if self.history_path is not None:
            prompt.prompt_history = load_history(self.history_path)
        prompt.focus()
        self.call_later(self.transcript.notice, WELCOME)
        for note in self.config.start_notes:
            self.call_later(self.transcript.notice, note)
        self._feed_status_line()

    def _activity(self) -> tuple[str, float | None]:
        c = self.controller
        return c.activity, c.elapsed_s() if c.busy else None

    # ---- status ---------------------------------------------------------------------------

    @property
    def prompt_input(self) -> PromptInput:
        return self.query_one(PromptInput)

    def set_status(self, **changes: Unpack[StatusChanges]) -> None:
        self.status = self.status.changed(changes)
        self.query_one(StatusBar).show(self.status)
        self._feed_status_line()

    def _feed_status_line(self) -> None:
        if self.status_line is not None:
            self.status_line.feed(session_payload(self.status, self.controller, self.config.cwd))

    def _status_line_shown(self, line: str | None) -> None:
        self.query_one(StatusBar).show_custom(line)

    def _status_line_failed(self, message: str) -> None:
        self.call_later(self.transcript.error, message, "usage")

    # ---- session lifecycle ----------------------------------------------------------------

    def on_engine_progress(self, message: EngineProgress) -> None:
        self.query_one(LoadingView).progress(message.label, message.fraction)

    async def on_session_ready(self, message: SessionReady) -> None:
        session = message.session
        self.controller.attach(session)
        self.query_one(CommandMenu).extra = ext_view.menu_specs(commands_of(session))
        self.query_one(LoadingView).display = False
        info = engine_info(session)
        if info is not None:
            self.set_status(
                engine=engine_label(self.config.engine, info.backend),
                model=info.model,
                context_max=self.status.context_max or info.max_context_tokens,
            )
        if message.sandbox_layers is not None:
            self.set_status(sandbox_layers=message.sandbox_layers)
        if session.resumed:
            if self.controller.last_snapshot_detail is None:  # /context: the log's snapshot
                self.controller.last_snapshot_detail = self.controller.logged_snapshot_detail()
                self.controller.snapshot_from_log = True
            await self.transcript.history(
                session.messages,
                self.controller.tool_errors(),
                self.controller.tool_metadata(),
            )
        self.set_status(state="ready")
        self.pump_events(session)
        await self.send_next()

    async def show_loading(self) -> None:
        """Back to "loading" (another session is being opened): an empty transcript."""
        await self.transcript.clear()
        self.query_one(LoadingView).display = True
        self.set_status(state="loading")

    async def on_session_failed(self, message: SessionFailed) -> None:
        self.controller.failed = True
        self.query_one(LoadingView).display = False
        self.set_status(state="failed")
        await self.transcript.error(message.message, message.kind)

    @work(exclusive=True, group="session-events")
    async def pump_events(self, session: SessionLike) -> None:
        """The one worker that reads the Session: its events become messages, in order."""
        async for batch in batches(session.events()):
            self.post_message(SessionEvents(batch))
        self.post_message(EventStreamEnded(session))

    # ---- events -> widgets ----------------------------------------------------------------

    async def on_session_events(self, message: SessionEvents) -> None:
        for event in coalesce(message.events):
            await self.events.show(event)

    async def on_session_event(self, message: SessionEvent) -> None:
        await self.events.show(message.event)

    def close_questions(self) -> None:
        while type(self.app.screen).__name__ == "ApprovalScreen":
            self.app.screen.dismiss(None)

    def refresh_activity(self) -> None:
        self.query_one(ActivityLine).refresh_line()

    def on_event_stream_ended(self, message: EventStreamEnded) -> None:
        # A session left for another one (/sessions) is not the current state.
        if self.controller.stream_ended(message.session) and self.status.state != "failed":
            self.set_status(state="stopped")

    # ---- prompts --------------------------------------------------------------------------

    async def on_prompt_input_submitted(self, message: PromptInput.Submitted) -> None:
        await self.submitted(message.text)

    async def on_prompt_input_image_pasted(self, message: PromptInput.ImagePasted) -> None:
        await self.slash.do_attach(message.path)  # checked like /attach (text-only models)

    async def on_prompt_input_menu_chosen(self, message: PromptInput.MenuChosen) -> None:
        await self.submitted(message.text)

    async def submitted(self, text: str) -> None:
        """A prompt or a slash command from the prompt (Enter)."""
        if self.history_path is not None:
            append_history(self.history_path, text)
        if text.startswith(SHELL_ESCAPE):  # `!git status`: the shell, not the model
            await self.slash.daily.shell_escape(text[len(SHELL_ESCAPE) :].strip())
            return
        try:
            custom = ext_view.custom_turn(self.controller, text)  # a custom command or skill
        except ValueError as e:
            await self.transcript.error(str(e), "usage")
            return
        if custom is not None:
            if self.controller.enqueue(custom).shown:
                await self.transcript.user(text)
            self.show_waiting()
            await self.send_next()
            return
        try:
            command = parse_slash(text)
        except SlashError as e:
            await self.transcript.error(str(e), "usage")
            return
        if command is not None:
            await self.slash.run(command)
            return
        await self.send_text(text)

    async def send_text(self, text: str) -> None:
        """A prompt for the model (typed, or written by /init)."""
        c = self.controller
        if c.session is None and c.failed:
            await self.transcript.error(
                "no engine: it failed to start (see above); fix that and start m3agent again",
                "usage",
            )
            return
        await self.send_turn(c.make_turn(text), text)

    async def send_turn(self, turn: UserTurn, shown_as: str) -> None:
        """A turn as it is (/review's: no attachments, no plan-mode note), shown as SHOWN_AS."""
        queued = self.controller.enqueue(turn)
        if queued.shown:
            await self.transcript.user(shown_as, tuple(m.path for m in turn.media))
        self.show_waiting()
        await self.send_next()

    async def send_next(self) -> None:
        queued = self.controller.take_next()
        if queued is None:
            return
        self.show_waiting()
        if not queued.shown:
            await self.transcript.user(queued.turn.text, tuple(m.path for m in queued.turn.media))
        self.set_status(state="working")
        self.query_one(ActivityLine).refresh_line()
        await self.controller.submit(queued.turn)

    def show_waiting(self) -> None:
        waiting = self.query_one("#waiting", Static)
        n = self.controller.waiting
        waiting.update(
            f"{n} prompt{'s' if n > 1 else ''} waiting for this turn (Esc stops the "
            "turn; they are sent after it)"
            if n
            else ""
        )
        waiting.display = n > 0

    # ---- keys -----------------------------------------------------------------------------

    @on(PromptInput.Completions)
    def show_completions(self, message: PromptInput.Completions) -> None:
        hint = self.query_one("#completions", Static)
        hint.update(visible("  ".join(message.options[:20])))
        hint.display = True

    @on(PromptInput.Changed)
    def prompt_changed(self, message: PromptInput.Changed) -> None:
        self.query_one("#completions").display = False
        self.query_one("#waiting").display = False
        self.query_one(CommandMenu).filter(message.text_area.text)

    async def action_interrupt(self) -> None:
        outcome = await self.controller.interrupt()
        if outcome == "dropped":
            self.show_waiting()
            await self.transcript.notice("queued prompts dropped")
        if outcome is not None or self.app.screen is not self:
            self._last_idle_esc = None
            return
        # Idle, nothing queued: a second Esc soon after the first opens /rewind (Claude Code).
        now = time.monotonic()  # key timing: the real clock, whatever config.clock says
        if self._last_idle_esc is not None and now - self._last_idle_esc <= DOUBLE_ESC_S:
            self._last_idle_esc = None
            await open_rewind(self.controller, self.transcript, self.app_host, self.prompt_input)
        else:
            self._last_idle_esc = now

    async def action_ctrl_c(self) -> None:
        """ctrl+c (bound in app.py): interrupt a running turn, else clear the prompt, else
        (twice within QUIT_WINDOW_S) quit."""
        prompt = self.query_one(PromptInput)
        activity = self.query_one(ActivityLine)
        if self.controller.busy:
            await self.controller.interrupt()
        elif prompt.text:
            prompt.load_text("")
        elif self._quit_armed is not None:
            await self.app_host.shutdown()
        else:
            activity.show_hint("press ctrl+c again to quit")
            self._quit_armed = self.set_timer(QUIT_WINDOW_S, self._disarm_quit)

    def _disarm_quit(self) -> None:
        self._quit_armed = None
        self.query_one(ActivityLine).show_hint("")

    def action_scroll_transcript(self, how: str) -> None:
        view = self.conversation
        scroll = {
            "scroll_page_up": view.scroll_page_up,
            "scroll_page_down": view.scroll_page_down,
            "scroll_home": view.scroll_home,
            "scroll_end": view.scroll_end,
        }[how]
        scroll(animate=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if (
            action == "scroll_transcript"
            and parameters
            and parameters[0] in ("scroll_home", "scroll_end")
        ):
            # Only an empty prompt hands Home/End to the transcript.
            return not self.query_one(PromptInput).text and self.app.screen is self
        return True

    async def action_cycle_mode(self) -> None:
        await cycle_mode(self.controller, self.transcript, self)

    async def action_background(self) -> None:
        await self.transcript.notice(send_to_background(self.controller.session))

    def action_cycle_thinking(self) -> None:
        self.set_thinking(self.controller.cycle_thinking())

    def set_thinking(self, mode: ThinkingMode) -> None:
        self.controller.set_thinking(mode)
        self.set_status(thinking=mode)
