"""A tool's output: the first lines, and all of it on a click (or Enter when focused)."""

from __future__ import annotations

from typing import Unpack

from textual.binding import Binding
from textual.widgets import Static

from ...safe_text import visible
from .widget_options import WidgetOptions

PREVIEW_LINES = 12
MAX_LINES = 2000  # beyond this the tool itself truncates; keep the widget light too


class OutputView(Static, can_focus=True):
    DEFAULT_CSS = """
    OutputView { height: auto; }
    OutputView:focus { background: $boost; }
    """
    BINDINGS = [Binding("enter", "toggle_lines", "show all / fewer lines", show=False)]

    def __init__(self, output: str, **kwargs: Unpack[WidgetOptions]) -> None:
        self.lines = visible(output.rstrip("\n")).splitlines()[:MAX_LINES]
        self.expanded = False
        super().__init__(self._text(), markup=False, **kwargs)
        self.can_focus = len(self.lines) > PREVIEW_LINES

    @property
    def hidden_lines(self) -> int:
        return 0 if self.expanded else max(0, len(self.lines) - PREVIEW_LINES)

    def _text(self) -> str:
        if self.expanded or len(self.lines) <= PREVIEW_LINES:
            return "\n".join(self.lines)
        more = len(self.lines) - PREVIEW_LINES
        return "\n".join(self.lines[:PREVIEW_LINES] + [f"… {more} more lines (click to show)"])

    def action_toggle_lines(self) -> None:
        if len(self.lines) > PREVIEW_LINES:
            self.expanded = not self.expanded
            self.update(self._text())

    def on_click(self) -> None:
        self.action_toggle_lines()
