"""After a plan-mode answer: act on the plan, edit it first, or keep planning (Claude Code's
"Would you like to proceed?")."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class PlanScreen(ModalScreen[str]):
    """Dismisses with "act", "edit" or "keep"."""

    DEFAULT_CSS = """
    PlanScreen { align: center middle; }
    #plan-box { width: 80; height: auto; border: thick $primary; padding: 1 2;
                background: $surface; }
    #plan-buttons { height: auto; margin-top: 1; }
    #plan-buttons Button { margin-right: 1; }
    """
    BINDINGS = [
        Binding("y", "answer('act')", "act on the plan", show=False),
        Binding("e", "answer('edit')", "edit the plan", show=False),
        Binding("n", "answer('keep')", "keep planning", show=False),
        Binding("escape", "answer('keep')", "keep planning", show=False),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="plan-box"):
            yield Label("The model answered with a plan. Act on it?")
            with Horizontal(id="plan-buttons"):
                yield Button("Yes, act on it (y)", id="act", variant="success")
                yield Button("Edit it first (e)", id="edit", variant="primary")
                yield Button("Keep planning (n)", id="keep")

    def on_mount(self) -> None:
        self.query_one("#act", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id or "keep")

    def action_answer(self, choice: str) -> None:
        self.dismiss(choice)
