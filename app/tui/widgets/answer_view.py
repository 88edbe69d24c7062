"""The assistant's answer, streamed as Markdown."""

from __future__ import annotations

from typing import Unpack

from textual.widgets import Markdown
from textual.widgets.markdown import MarkdownStream

from ...safe_text import visible
from .widget_options import WidgetOptions


class AnswerView(Markdown):
    DEFAULT_CSS = """
    AnswerView {
        height: auto;
        margin: 0;
        padding: 0 1;
        background: transparent;
    }
    """

    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__("", **kwargs)
        self._stream: MarkdownStream | None = None
        self._source = ""

    @property
    def text(self) -> str:
        """The model's text as it came (the screen shows its visible() form)."""
        return self._source

    @property
    def caught_up(self) -> bool:
        """The Markdown stream has rendered everything written so far."""
        return self.source == visible(self._source)

    async def write(self, delta: str) -> None:
        # A MarkdownStream coalesces many small deltas into few re-renders.
        if self._stream is None:
            self._stream = Markdown.get_stream(self)
        self._source += delta
        # Per character, so a sequence split across two deltas is caught too.
        await self._stream.write(visible(delta))

    async def finish(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await stream.stop()
