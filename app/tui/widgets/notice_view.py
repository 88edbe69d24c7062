"""A line of information from the app itself (help, /context, interrupted, ...)."""

from __future__ import annotations

from typing import Unpack

from textual.widgets import Static

from ...safe_text import visible
from .widget_options import WidgetOptions


class NoticeView(Static):
    DEFAULT_CSS = """
    NoticeView {
        height: auto;
        margin: 1 0 0 0;
        padding: 0 1;
        color: $text-muted;
        border-left: thick $secondary;
    }
    """

    def __init__(self, text: str, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(visible(text), markup=False, **kwargs)
