"""Engine loading progress, shown above the prompt until the session is ready."""

from __future__ import annotations

from textual.containers import Horizontal
from textual.widgets import Label, ProgressBar


class LoadingView(Horizontal):
    DEFAULT_CSS = """
    LoadingView {
        height: 1;
        padding: 0 1;
    }
    LoadingView Label { width: auto; margin: 0 2 0 0; }
    LoadingView ProgressBar { width: 40; }
    """

    def compose(self):
        yield Label("starting engine…", id="loading-label")
        # show_eta off: a clock on screen would make snapshots flaky.
        yield ProgressBar(total=None, show_eta=False, id="loading-bar")

    def progress(self, label: str, fraction: float | None) -> None:
        self.query_one("#loading-label", Label).update(label)
        bar = self.query_one("#loading-bar", ProgressBar)
        if fraction is None:
            bar.update(total=None)
        else:
            bar.update(total=100, progress=max(0.0, min(1.0, fraction)) * 100)
