"""The one-line status bar: engine, context, cache, speed, thinking mode, sandbox."""

from __future__ import annotations

from m3agent.app.tui.status import StatusState
from textual.widgets import Static


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

    def __init__(self, state: StatusState, **kwargs) -> None:
        super().__init__(state.render(), markup=False, **kwargs)
        self.state = state

    def show(self, state: StatusState) -> None:
        self.state = state
        self.update(state.render())
