"""A unified diff, coloured by line kind."""

from __future__ import annotations

from typing import Unpack

from rich.text import Text
from textual.widgets import Static

from ...safe_text import visible
from .widget_options import WidgetOptions

_STYLES = (("+++", "bold"), ("---", "bold"), ("@@", "cyan"), ("+", "green"), ("-", "red"))


def render_diff(diff: str, max_lines: int = 200) -> Text:
    lines = visible(diff).splitlines()
    text = Text(no_wrap=True, overflow="ellipsis")
    for line in lines[:max_lines]:
        style = next((s for prefix, s in _STYLES if line.startswith(prefix)), "")
        text.append(line + "\n", style=style)
    if len(lines) > max_lines:
        text.append(f"… {len(lines) - max_lines} more lines\n", style="dim")
    text.rstrip()
    return text


class DiffView(Static):
    DEFAULT_CSS = """
    DiffView {
        height: auto;
        padding: 0 1;
        background: $surface-darken-1;
    }
    """

    def __init__(self, diff: str, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(render_diff(diff), **kwargs)
