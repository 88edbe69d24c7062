"""The user's prompt as it appears in the conversation."""

from __future__ import annotations

from pathlib import Path
from typing import Unpack

from rich.text import Text

from ...safe_text import visible
from .bar_block import BarBlock
from .widget_options import WidgetOptions


class UserMessage(BarBlock):
    DEFAULT_CSS = """
    UserMessage {
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
