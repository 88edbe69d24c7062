"""The model's checklist (update_plan), pinned above the prompt while a plan exists."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from ...safe_text import visible

_MARK = {"completed": ("✔", "green"), "in_progress": ("▶", "yellow"), "pending": ("○", "dim")}


class PlanView(Static):
    DEFAULT_CSS = """
    PlanView {
        height: auto;
        max-height: 12;
        margin: 0 1;
        padding: 0 1;
        border: round $accent;
        border-title-align: left;
        display: none;
    }
    """

    def show(self, plan: list[dict[str, Any]], explanation: str = "") -> None:
        done = sum(1 for s in plan if s.get("status") == "completed")
        self.border_title = f"plan {done}/{len(plan)}"
        text = Text(no_wrap=True, overflow="ellipsis")
        for i, step in enumerate(plan):
            mark, style = _MARK.get(str(step.get("status")), ("?", ""))
            text.append(f"{mark} ", style=style)
            strike = "strike dim" if step.get("status") == "completed" else ""
            text.append(visible(str(step.get("step", ""))), style=strike)
            if i < len(plan) - 1:
                text.append("\n")
        self.update(text)
        self.display = bool(plan)
