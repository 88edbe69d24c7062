"""The one-line status bar: engine, context, cache, speed, thinking mode, sandbox; or the
line the user's status line command printed (app/tui/status_line.py)."""

from __future__ import annotations

from typing import Unpack

from rich.text import Text
from textual.widgets import Static

from ...safe_text import visible
from ..status import StatusState
from .widget_options import WidgetOptions


class StatusBar(Static):
    DEFAULT_CSS = """
    StatusBar {
        dock: bottom;
        height: 1;
        padding: 0 1;
        background: $panel;
        color: $text-muted;
    }
    """

    def __init__(self, state: StatusState, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(_line(state.render()), **kwargs)
        self.state = state
        self.custom: str | None = None  # the status line command's line, when it has one

    def show(self, state: StatusState) -> None:
        self.state = state
        self.update(_line(self.custom or state.render()))

    def show_custom(self, line: str | None) -> None:
        """The command's line instead of the built-in one (None: the built-in one again)."""
        self.custom = line
        self.show(self.state)


def _line(text: str) -> Text:
    # One line, cut with an ellipsis on narrow terminals rather than wrapped out of sight;
    # a command's escape sequences are shown, never obeyed (safe_text.visible).
    return Text(visible(text), no_wrap=True, overflow="ellipsis")
