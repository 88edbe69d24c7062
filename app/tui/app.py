"""The Textual app and `create_app`, the factory shared by the CLI and the tests."""

from __future__ import annotations

import inspect
import io
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from m3agent.engine.api import EngineError
from rich.console import Console
from textual import work
from textual.app import App
from textual.binding import Binding

from .messages import EngineProgress, SessionFailed, SessionReady
from .ports import SessionFactory, SessionLike, SetupResult, TuiConfig
from .screens.main_screen import MainScreen
from .slash_actions import shutdown_session
from .usage_tally import UsageTally

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from m3agent.tools.sandbox.policy import SandboxLayer


class M3App(App[None]):
    TITLE = "m3agent"
    BINDINGS = [
        Binding("ctrl+q", "quit", "quit", priority=True),
        # Textual's own ctrl+c pops a "press ctrl+q" toast, and each screen binds it to copy.
        # Here it is one key everywhere: on the main screen interrupt / clear / quit (twice);
        # over a modal it interrupts the turn, which also closes a pending question.
        Binding("ctrl+c", "ctrl_c", show=False, priority=True),
    ]

    def __init__(self, session_factory: SessionFactory, config: TuiConfig) -> None:
        super().__init__()
        self.session_factory = session_factory
        self.config = config
        self.first_paint_s: float | None = None
        self.resume_hint: str | None = None  # printed by run.py once the terminal is back
        self._t0 = time.perf_counter()
        # Textual prints a crash's traceback to error_console as it exits. Into memory here:
        # run.py writes it to the crash log and shows one line instead of a screenful.
        self.crash_report = io.StringIO()
        self.error_console = Console(
            file=self.crash_report, width=160, color_system=None, markup=False, highlight=False
        )

    @property
    def main(self) -> MainScreen:
        screen = self.get_screen("main")
        assert isinstance(screen, MainScreen)  # installed as "main" in on_mount
        return screen

    def on_mount(self) -> None:
        self.install_screen(MainScreen(self.config, self), "main")
        self.push_screen("main")
        if self.config.setup is not None:  # first run: which engine? (onboarding_screen)
            from .screens.onboarding_screen import OnboardingScreen

            self.push_screen(OnboardingScreen(self.config.setup), self._setup_done)
        # Load only after the first frame is on screen: the window is usable at once.
        self.call_after_refresh(self._first_frame)

    def _first_frame(self) -> None:
        self.first_paint_s = time.perf_counter() - self._t0
        if self.config.setup is None:
            self.load_session(self.config.resume)

    async def _setup_done(self, result: SetupResult | None) -> None:
        if result is None:
            self.exit()
            return
        self.session_factory, saved, chosen = result
        # The demo is the scripted engine, not the configured default (native).
        engine = "scripted" if chosen.kind == "demo" else chosen.kind
        self.main.controller.config = replace(self.main.config, engine=engine)
        self.main.set_status(engine=engine, model="")
        await self.main.transcript.notice(saved)
        self.load_session(self.config.resume)

    @work(thread=True, exclusive=True, group="engine-load")
    def load_session(self, resume_id: str | None) -> None:
        """Builds engine and session off the UI thread (weights can take minutes)."""
        screen = self.main

        def progress(label: str, fraction: float | None) -> None:
            screen.post_message(EngineProgress(label, fraction))

        try:
            session = self.session_factory(resume_id, progress)
        except Exception as e:  # the factory names the cause in one line (EngineUnavailable…)
            screen.post_message(SessionFailed(_one_line(e), _failure_kind(e)))
            return
        layers = None
        if self.config.probe_sandbox is not None and not inspect.isawaitable(session):
            progress("probing the sandbox…", None)
            try:
                layers = tuple(self.config.probe_sandbox(session))
            except Exception:  # the probe is informational; the shell checks again itself
                layers = None
        # Textual types the callback as `T | Awaitable[T]`, which mypy cannot solve for an
        # async one returning None (it infers Never): the one ignore of the TUI.
        self.call_from_thread(self._session_built, session, layers)  # type: ignore[arg-type]

    async def _session_built(
        self,
        built: SessionLike | Awaitable[SessionLike],
        layers: tuple[SandboxLayer, ...] | None,
    ) -> None:
        if inspect.isawaitable(built):
            try:
                session = await built
            except Exception as e:
                self.main.post_message(SessionFailed(_one_line(e), _failure_kind(e)))
                return
        else:
            session = built
        self.main.post_message(SessionReady(session, layers))

    async def switch_session(self, session_id: str) -> None:
        """/sessions picked one: close the current session and load the chosen one."""
        screen = self.main
        await shutdown_session(screen.controller.detach())
        await screen.show_loading()
        self.load_session(session_id)

    async def new_session(self) -> None:
        """/clear and /new: the current session ends (its log stays, resumable) and a fresh
        one opens on the same engine; nothing of the old prompt is rewritten."""
        screen = self.main
        await shutdown_session(screen.controller.detach())
        screen.controller.usage = UsageTally()
        screen.controller.pending_context.clear()
        # The old session's figures (context held, cache, speed) are not the new one's.
        screen.set_status(
            context_used=None, cached_tokens=None, cache_hit_pct=None, cache_miss=None,
            tokens_per_s=None, prefill=None,
        )  # fmt: skip
        await screen.show_loading()
        self.load_session(None)

    async def shutdown(self) -> None:
        self.main.set_status(state="closing")  # an engine can take a moment to stop
        self.resume_hint = self.main.controller.resume_command()
        if self.main.status_line is not None:
            await self.main.status_line.stop()
        try:
            await shutdown_session(self.main.controller.session, close_engine=True)
        finally:
            self.exit()

    async def action_ctrl_c(self) -> None:
        if self.screen is self.main:
            await self.main.action_ctrl_c()
        else:
            await self.main.controller.interrupt()

    async def action_quit(self) -> None:
        await self.shutdown()


def _log_dir(config: TuiConfig) -> Path:
    base = config.state_dir or (Path.home() / ".m3agent")
    return base / "logs"


def _failure_kind(error: BaseException) -> str:
    """Which advice fits: an engine that cannot be had, or anything else at start-up."""
    return "engine_unavailable" if isinstance(error, EngineError) else "startup"


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def create_app(session_factory: SessionFactory, config: TuiConfig) -> M3App:
    """The one way to build the TUI: the CLI and the tests both come through here."""
    return M3App(session_factory, config)
