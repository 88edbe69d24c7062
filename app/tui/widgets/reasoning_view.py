"""The model's reasoning: open while it streams, collapsed once the answer starts."""

from __future__ import annotations

from typing import Unpack

from textual.widgets import Collapsible, Static

from ...safe_text import visible
from .widget_options import WidgetOptions


class ReasoningView(Collapsible):
    DEFAULT_CSS = """
    ReasoningView {
        height: auto;
        margin: 0;
        padding: 0;
        border: none;
        background: transparent;
        color: $text-muted;
    }
    ReasoningView > Contents {
        padding: 0 0 0 2;
    }
    ReasoningView .reasoning-text {
        color: $text-muted;
        text-style: italic;
    }
    """

    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        self._text = ""
        self.finished = False
        self._body = Static("", markup=False, classes="reasoning-text")
        super().__init__(self._body, title="Thinking…", collapsed=False, **kwargs)

    @property
    def text(self) -> str:
        return self._text

    def append(self, delta: str) -> None:
        self._text += delta
        self._body.update(visible(self._text.strip("\n")))

    def finish(self) -> None:
        """The answer (or a tool call) started: fold the reasoning away, once."""
        if self.finished:
            return
        self.finished = True
        words = len(self._text.split())
        self.title = f"Thought ({words} words)"
        self.collapsed = True
