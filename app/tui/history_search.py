"""ctrl+r in the prompt: reverse search of the prompt history, as in bash and Claude Code.

The text typed before the first ctrl+r is the query; each ctrl+r loads the next older prompt
that contains it (case-insensitive); Esc puts the draft back; any other key keeps the found
prompt for editing. A plain value: the prompt widget only asks it."""

from __future__ import annotations


class HistorySearch:
    def __init__(self, history: list[str], draft: str) -> None:
        self.history = history
        self.draft = draft
        self.query = draft.strip().lower()
        self.pos = len(history)  # the next match is looked for below this index

    def next(self) -> str | None:
        """The next older match, or None when there is none (the position stays)."""
        for i in range(self.pos - 1, -1, -1):
            if self.query in self.history[i].lower():
                self.pos = i
                return self.history[i]
        return None

    def title(self, found: bool) -> str:
        shown = self.query or "(any)"
        return f"history search: {shown}" + ("" if found else " (no older match)")
