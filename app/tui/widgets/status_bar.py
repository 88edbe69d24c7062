"""The one-line status bar: engine, context, cache, speed, thinking mode, sandbox."""

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
        super().__init__(_line(state), **kwargs)
        self.state = state

    def show(self, state: StatusState) -> None:
        self.state = state
        self.update(_line(state))


def _line(state: StatusState) -> Text:
    # One line, cut with an ellipsis on narrow terminals rather than wrapped out of sight.
    return Text(visible(state.render()), no_wrap=True, overflow="ellipsis")
