"""The `/` menu: the slash commands matching what is typed, one highlighted. The prompt keeps
the focus; it moves the highlight (↑/↓) and takes the choice (Tab, Enter)."""

from __future__ import annotations

from typing import Unpack

from rich.text import Text
from textual.widgets import Static

from ...slash import SlashSpec, menu_matches
from .widget_options import WidgetOptions


class CommandMenu(Static):
    DEFAULT_CSS = """
    CommandMenu {
        height: auto;
        max-height: 10;
        margin: 0 1;
        padding: 0 1;
        border: round $secondary;
        display: none;
    }
    """

    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__("", **kwargs)
        self.matches: list[SlashSpec] = []
        self.index = 0
        self.extra: tuple[SlashSpec, ...] = ()  # custom commands and skills of the session

    @property
    def open(self) -> bool:
        return bool(self.matches)

    @property
    def selected(self) -> SlashSpec | None:
        return self.matches[self.index] if self.matches else None

    def filter(self, text: str) -> None:
        """Shows the commands for the prompt's text; hides itself when none (or no `/word`)."""
        matches = menu_matches(text, self.extra)
        if [m.name for m in matches] != [m.name for m in self.matches]:
            self.index = 0
        self.matches = matches
        self._show()

    def move(self, step: int) -> None:
        if self.matches:
            self.index = (self.index + step) % len(self.matches)
            self._show()

    def close(self) -> None:
        self.matches = []
        self._show()

    def _show(self) -> None:
        self.display = bool(self.matches)
        text = Text(no_wrap=True, overflow="ellipsis")
        width = max((len(m.usage) for m in self.matches), default=0)
        for i, spec in enumerate(self.matches):
            style = "reverse" if i == self.index else ""
            text.append(f"{spec.usage.ljust(width)}  ", style=style + " bold" if style else "bold")
            text.append(spec.help + ("\n" if i < len(self.matches) - 1 else ""), style=style)
        self.update(text)
