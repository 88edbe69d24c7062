"""One line above the prompt while a turn runs: a spinner, what the turn does, the elapsed
time and how to stop it; when idle, a passing hint (e.g. "ctrl+c again to quit")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Unpack

from textual.widgets import Static

from .widget_options import WidgetOptions

FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def activity_text(activity: str, elapsed_s: float) -> str:
    frame = FRAMES[int(elapsed_s * 10) % len(FRAMES)]
    seconds = int(elapsed_s)
    clock = f"{seconds}s" if seconds < 60 else f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{frame} {activity or 'working'}… {clock} · esc to interrupt"


class ActivityLine(Static):
    DEFAULT_CSS = """
    ActivityLine {
        height: 1;
        padding: 0 2;
        color: $accent;
        display: none;
    }
    """

    def __init__(
        self, state: Callable[[], tuple[str, float | None]], **kwargs: Unpack[WidgetOptions]
    ) -> None:
        """state() -> (activity, elapsed seconds or None when no turn runs)."""
        super().__init__("", markup=False, **kwargs)
        self.state = state
        self.hint = ""

    def on_mount(self) -> None:
        self.set_interval(0.1, self.refresh_line)

    def show_hint(self, hint: str) -> None:
        self.hint = hint
        self.refresh_line()

    def refresh_line(self) -> None:
        activity, elapsed = self.state()
        if elapsed is not None:
            text = activity_text(activity, elapsed)
        else:
            text = self.hint
        self.display = bool(text)
        if str(self.content) != text:
            self.update(text)
