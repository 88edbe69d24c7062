"""Engine loading progress, shown above the prompt until the session is ready: what is being
done, for how long so far, and a bar (a fraction when the loader reports one)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Unpack

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label, ProgressBar

from ...safe_text import visible
from .widget_options import WidgetOptions


class LoadingView(Horizontal):
    DEFAULT_CSS = """
    LoadingView {
        height: 1;
        padding: 0 1;
    }
    LoadingView Label { width: auto; margin: 0 2 0 0; }
    LoadingView ProgressBar { width: 40; }
    """

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, **kwargs: Unpack[WidgetOptions]
    ) -> None:
        super().__init__(**kwargs)
        self.clock = clock
        self.label = "starting engine…"
        self.started = clock()

    def compose(self) -> ComposeResult:
        yield Label(self.label, id="loading-label", markup=False)
        # show_eta off: a clock on screen would make snapshots flaky (the label has its own,
        # from the injectable clock).
        yield ProgressBar(total=None, show_eta=False, id="loading-bar")

    def on_mount(self) -> None:
        self.set_interval(0.5, self._tick)

    def _tick(self) -> None:
        if self.display:
            seconds = int(self.clock() - self.started)
            shown = f"{self.label} {seconds}s" if seconds else self.label
            self.query_one("#loading-label", Label).update(visible(shown))

    def progress(self, label: str, fraction: float | None) -> None:
        if label != self.label:
            self.label = label
            self.started = self.clock()  # each step is timed on its own
        self.query_one("#loading-label", Label).update(visible(label))
        bar = self.query_one("#loading-bar", ProgressBar)
        if fraction is None:
            bar.update(total=None)
        else:
            bar.update(total=100, progress=max(0.0, min(1.0, fraction)) * 100)
