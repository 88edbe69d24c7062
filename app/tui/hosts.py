"""What the main screen's helpers (slash_actions, slash_daily, approval_flow, plan_flow,
rewind_flow, event_flow) need from the app and from the screen, as protocols. A helper takes these, with
the SessionController and the Transcript, instead of the screen itself: none of them imports
the screen (or the app) back, and each says what it touches."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, TypeVar, Unpack

if TYPE_CHECKING:
    from m3agent.agent.ops import UserTurn
    from m3agent.engine.api import ThinkingMode
    from textual.screen import Screen

    from .controller import SessionController
    from .ports import TuiConfig
    from .status import StatusChanges, StatusState
    from .transcript import Transcript
    from .widgets.prompt_input import PromptInput

R = TypeVar("R")


class AppHost(Protocol):
    """The app (M3App): screens over the main one, and the session's life."""

    def push_screen(
        self, screen: Screen[R], callback: Callable[[R | None], Awaitable[None]]
    ) -> object: ...

    def suspend(self) -> AbstractContextManager[None]: ...

    async def switch_session(self, session_id: str) -> None: ...

    async def new_session(self) -> None: ...

    async def shutdown(self) -> None: ...


class ScreenHost(Protocol):
    """The main screen: its status bar, its prompt, and a prompt sent as if typed (or a turn
    made elsewhere, shown as the command that made it)."""

    @property
    def status(self) -> StatusState: ...

    @property
    def prompt_input(self) -> PromptInput: ...

    def set_status(self, **changes: Unpack[StatusChanges]) -> None: ...

    def set_thinking(self, mode: ThinkingMode) -> None: ...

    async def send_text(self, text: str) -> None: ...

    async def send_turn(self, turn: UserTurn, shown_as: str) -> None: ...

    async def send_next(self) -> None: ...

    def close_questions(self) -> None:
        """Dismiss any approval question still open (its turn has ended)."""

    def refresh_activity(self) -> None: ...


class ScreenHelper:
    """What a helper of the main screen holds: the session's controller, the transcript, the
    app and the screen (as the protocols above), and the TUI's config."""

    def __init__(
        self,
        controller: SessionController,
        transcript: Transcript,
        app: AppHost,
        view: ScreenHost,
    ) -> None:
        self.controller, self.transcript, self.app, self.view = controller, transcript, app, view

    @property
    def config(self) -> TuiConfig:
        """The controller's: one copy, which the first-run screen may replace."""
        return self.controller.config
