"""The look of a block of the conversation that is not the model's: a full-width paragraph
set off by a bar on its left. Each kind (the user's prompt, a notice, an error) subclasses it
and gives the bar its colour."""

from __future__ import annotations

from textual.widgets import Static


class BarBlock(Static):
    DEFAULT_CSS = """
    BarBlock {
        height: auto;
        margin: 1 0 0 0;
        padding: 0 1;
        border-left: thick $secondary;
    }
    """
