"""An error shown inline, with what to do next."""

from __future__ import annotations

from typing import Unpack

from rich.text import Text

from ...safe_text import visible
from .bar_block import BarBlock
from .widget_options import WidgetOptions

HINTS = {
    "engine_unavailable": "check the engine is running (m3agent doctor), then send the prompt again",
    "engine": "the engine failed on this request; send the prompt again or /compact if it is long",
    "tool": "the tool failed; the model has been told and may try another way",
    "usage": "type /help for the commands and keys",
    "startup": "fix the cause above, then start m3agent again",
    "internal": "this is a bug in m3agent; the details are in the log",
}


class ErrorView(BarBlock):
    DEFAULT_CSS = """
    ErrorView {
        border-left: thick $error;
        color: $text;
        background: $error 15%;
    }
    """

    def __init__(
        self, message: str, kind: str = "internal", **kwargs: Unpack[WidgetOptions]
    ) -> None:
        text = Text()
        text.append("Error: ", style="bold red")
        text.append(visible(message))
        hint = HINTS.get(kind)
        if hint:
            text.append(f"\n→ {hint}", style="italic")
        super().__init__(text, **kwargs)
