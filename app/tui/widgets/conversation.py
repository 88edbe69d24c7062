"""The scrolling transcript; it sticks to the bottom while the answer streams."""

from __future__ import annotations

from textual.containers import VerticalScroll


class Conversation(VerticalScroll):
    DEFAULT_CSS = """
    Conversation {
        height: 1fr;
        padding: 0 1;
        scrollbar-size-vertical: 1;
    }
    """

    def on_mount(self) -> None:
        self.anchor()
