"""The scrolling transcript, on screen; it sticks to the bottom while the answer streams.

ConversationView, not Conversation: agent/conversation.py's Conversation is the messages and
their log; this is only the widget that shows them.
"""

from __future__ import annotations

from textual.containers import VerticalScroll


class ConversationView(VerticalScroll):
    DEFAULT_CSS = """
    ConversationView {
        height: 1fr;
        padding: 0 1;
        scrollbar-size-vertical: 1;
    }
    """

    def on_mount(self) -> None:
        self.anchor()
