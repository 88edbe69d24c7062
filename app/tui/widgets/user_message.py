"""The user's prompt as it appears in the conversation."""

from __future__ import annotations

from pathlib import Path
from typing import Unpack

from rich.text import Text
from textual.widgets import Static

from ...safe_text import visible
from .widget_options import WidgetOptions


class UserMessage(Static):
    DEFAULT_CSS = """
    UserMessage {
        height: auto;
        margin: 1 0 0 0;
        padding: 0 1;
        border-left: thick $accent;
        background: $boost;
    }
    """

    def __init__(
        self, text: str, attachments: tuple[str, ...] = (), **kwargs: Unpack[WidgetOptions]
    ) -> None:
        body = Text(visible(text))
        for path in attachments:
            body.append(f"\n📎 {visible(Path(path).name)}", style="italic")
        super().__init__(body, **kwargs)
