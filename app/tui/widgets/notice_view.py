"""A line of information from the app itself (help, /context, interrupted, ...)."""

from __future__ import annotations

from typing import Unpack

from ...safe_text import visible
from .bar_block import BarBlock
from .widget_options import WidgetOptions


class NoticeView(BarBlock):
    DEFAULT_CSS = """
    NoticeView {
        color: $text-muted;
    }
    """

    def __init__(self, text: str, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(visible(text), markup=False, **kwargs)
