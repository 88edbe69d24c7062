"""/rewind and Esc-Esc: pick an earlier prompt, then what to restore (Claude Code's picker)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from ...safe_text import visible
from ..rewind import RewindPoint, first_line

BOTH, CONVERSATION, FILES = "both", "conversation", "files"
ACTIONS = (
    (BOTH, "Restore the conversation and the files"),
    (CONVERSATION, "Restore the conversation only (the files stay as they are)"),
    (FILES, "Restore the files only (the conversation stays)"),
)


class RewindScreen(ModalScreen[tuple[RewindPoint, str] | None]):
    """Dismisses with (the point, BOTH | CONVERSATION | FILES), or None (Esc)."""

    CSS_PATH = "sessions_screen.tcss"  # the same dialog as /sessions
    BINDINGS = [Binding("escape", "cancel", "close", show=False)]

    def __init__(self, points: list[RewindPoint]) -> None:
        super().__init__()
        self.points = points
        self.chosen: RewindPoint | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="sessions-dialog"):
            yield Label(
                "Rewind to before a prompt  (Enter choose · Esc close)", id="sessions-title"
            )
            options = [
                Option(Text(visible(f"{p.turn}. {first_line(p.text)}")), id=str(p.index))
                for p in reversed(self.points)  # the newest first: one Enter steps back once
            ]
            yield OptionList(*options, id="sessions-list")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        listing = self.query_one(OptionList)
        if self.chosen is None:
            self.chosen = next(p for p in self.points if str(p.index) == event.option.id)
            files = "" if self.chosen.checkpoint else "  (no file changed since that prompt)"
            self.query_one("#sessions-title", Label).update(
                visible(f"Rewind to before {self.chosen.turn}. {first_line(self.chosen.text, 50)}")
                + files
            )
            listing.clear_options()
            listing.add_options([Option(text, id=key) for key, text in ACTIONS])
            listing.highlighted = 0
            return
        self.dismiss((self.chosen, event.option.id or BOTH))

    def action_cancel(self) -> None:
        self.dismiss(None)
