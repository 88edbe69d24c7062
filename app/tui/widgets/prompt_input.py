"""The multi-line prompt: Enter sends, ctrl+j / shift+enter add a line, ↑/↓ walk the
history, Tab completes an `@path` or a `/command` and never moves the focus away (a Tab that
left the prompt made every later key, Enter too, land elsewhere)."""

from __future__ import annotations

from pathlib import Path
from typing import Unpack

from textual import events
from textual.message import Message
from textual.widgets import TextArea

from ..attachments import at_token, common_prefix, complete_path
from ..clipboard import clipboard_image
from ..history_search import HistorySearch
from .command_menu import CommandMenu
from .widget_options import WidgetOptions

_NEWLINE_KEYS = frozenset({"ctrl+j", "shift+enter", "alt+enter", "newline"})


class PromptInput(TextArea):
    DEFAULT_CSS = """
    PromptInput {
        height: auto;
        min-height: 3;
        max-height: 12;
        border: round $accent;
        padding: 0 1;
    }
    PromptInput:focus { border: round $accent-lighten-1; }
    """

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    class Completions(Message):
        """Several paths match the `@partial`: the screen lists them."""

        def __init__(self, options: list[str]) -> None:
            super().__init__()
            self.options = options

    class ImagePasted(Message):
        """ctrl+v found an image on the system clipboard (saved as `path`): attach it."""

        def __init__(self, path: str) -> None:
            super().__init__()
            self.path = path

    class MenuChosen(Message):
        """Enter on a `/` menu entry that needs no argument: run it."""

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(
        self, cwd: Path, menu: CommandMenu | None = None, **kwargs: Unpack[WidgetOptions]
    ) -> None:
        super().__init__(
            "",
            soft_wrap=True,
            tab_behavior="focus",
            show_line_numbers=False,
            highlight_cursor_line=False,
            placeholder="Ask m3agent…  (Enter send · ctrl+j newline · /help)",
            **kwargs,
        )
        self.cwd = cwd
        self.menu = menu
        self.prompt_history: list[str] = []
        self._history_pos: int | None = None  # None: editing a fresh draft
        self._draft = ""
        self._search: HistorySearch | None = None  # while ctrl+r searches (history_search.py)

    async def on_key(self, event: events.Key) -> None:
        # A subclass's public key handler runs before TextArea's own; prevent_default() keeps
        # TextArea from handling a key this prompt has taken (Enter, Tab, ↑/↓ in the history).
        key = event.key
        if key == "ctrl+r" or self._search is not None:
            if self._search_key(key):
                self._stop(event)
                return
        if self.menu is not None and self.menu.open:
            # The menu follows the text through TextArea.Changed, a message that may still be
            # queued behind this key (typed fast, or pasted, then Enter): match it to the text
            # as it is now, so Enter sends "/cmd args" instead of taking a stale menu entry.
            self.menu.filter(self.text)
        if self.menu is not None and self.menu.open and self._menu_key(key):
            self._stop(event)
            return
        if key == "enter":
            self._stop(event)
            self._submit()
            return
        if key in _NEWLINE_KEYS:
            self._stop(event)
            start, end = self.selection
            self.replace("\n", start, end, maintain_selection_offset=False)
            return
        if key == "tab":
            self._stop(event)  # completes when it can; never leaves the prompt
            self._complete()
            return
        if key == "up" and self.cursor_location[0] == 0 and self.prompt_history:
            self._stop(event)
            self._walk_history(-1)
            return
        if key == "down" and self._history_pos is not None and self._on_last_line():
            self._stop(event)
            self._walk_history(+1)
            return

    def _search_key(self, key: str) -> bool:
        """ctrl+r: the next older match; Esc: back to the draft; other keys end the search
        (and do what they do, on the found prompt)."""
        if key == "ctrl+r":
            if self._search is None:
                self._search = HistorySearch(self.prompt_history, self.text)
            found = self._search.next()
            if found is not None:
                self.load_text(found)
                self.move_cursor(self.document.end)
            self.border_title = self._search.title(found is not None)
            return True
        search, self._search = self._search, None
        self.border_title = None
        if key == "escape" and search is not None:
            self.load_text(search.draft)
            self.move_cursor(self.document.end)
            return True
        return False

    def action_paste(self) -> None:
        """ctrl+v: an image on the system clipboard is attached (clipboard.py); otherwise
        TextArea's own paste of text."""
        home = getattr(getattr(self.app, "config", None), "state_dir", None)
        image = clipboard_image(Path(home) / "pasted") if home is not None else None
        if image is not None:
            self.post_message(self.ImagePasted(str(image)))
            return
        super().action_paste()

    def _menu_key(self, key: str) -> bool:
        """↑/↓ move in the `/` menu, Tab takes the entry, Enter takes and runs it, Esc closes."""
        menu = self.menu
        assert menu is not None
        spec = menu.selected
        if key in ("up", "down"):
            menu.move(-1 if key == "up" else 1)
        elif key == "escape":
            menu.close()
        elif key in ("tab", "enter") and spec is not None:
            if key == "enter" and spec.runs_alone:
                menu.close()
                self.load_text("")
                self.post_message(self.MenuChosen(f"/{spec.name}"))
            else:
                self.load_text(f"/{spec.name}" + (" " if spec.args else ""))
                self.move_cursor(self.document.end)
                menu.close()
        else:
            return False
        return True

    @staticmethod
    def _stop(event: events.Key) -> None:
        event.stop()
        event.prevent_default()

    def _on_last_line(self) -> bool:
        return self.cursor_location[0] >= self.document.line_count - 1

    def _submit(self) -> None:
        text = self.text
        if not text.strip():
            return
        if not self.prompt_history or self.prompt_history[-1] != text:
            self.prompt_history.append(text)
        self._history_pos = None
        self._draft = ""
        self.load_text("")
        self.post_message(self.Submitted(text))

    def _walk_history(self, step: int) -> None:
        if self._history_pos is None:
            self._draft = self.text
            pos = len(self.prompt_history)
        else:
            pos = self._history_pos
        pos = max(0, min(len(self.prompt_history), pos + step))
        if pos == len(self.prompt_history):
            self._history_pos = None
            self.load_text(self._draft)
        else:
            self._history_pos = pos
            self.load_text(self.prompt_history[pos])
        self.move_cursor(self.document.end)

    def _complete(self) -> bool:
        row, col = self.cursor_location
        line = self.document.get_line(row)
        partial = at_token(line, col)
        if partial is None:
            return False
        options = complete_path(partial, self.cwd)
        if not options:
            return True  # swallow Tab: moving focus away mid-word would surprise
        completion = options[0] if len(options) == 1 else common_prefix(options)
        if len(completion) > len(partial):
            self.insert(completion[len(partial) :], (row, col))
        if len(options) > 1:
            self.post_message(self.Completions(options))
        return True
