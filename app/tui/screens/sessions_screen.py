"""/sessions: browse the saved sessions and pick one to resume."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from ...safe_text import visible
from ..ports import SessionRow


class SessionsScreen(ModalScreen[str | None]):
    CSS_PATH = "sessions_screen.tcss"
    BINDINGS = [Binding("escape", "cancel", "close", show=False)]

    def __init__(self, sessions: list[SessionRow]) -> None:
        super().__init__()
        self.sessions = sessions

    def compose(self) -> ComposeResult:
        with Vertical(id="sessions-dialog"):
            yield Label("Resume a session  (Enter resume · Esc close)", id="sessions-title")
            if not self.sessions:
                yield Label("No saved sessions yet.", id="sessions-empty")
            options = [
                Option(
                    Text(
                        visible(
                            f"{s.title[:60]}\n  {s.updated} · {s.turns} messages · {s.session_id}"
                        )
                    ),
                    id=s.session_id,
                )
                for s in self.sessions
            ]
            yield OptionList(*options, id="sessions-list")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
