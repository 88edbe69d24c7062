"""A tool call: name, arguments, status, output, and the diff for edits."""

from __future__ import annotations

import json
from typing import Any, Unpack

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from ...safe_text import visible
from .diff_view import DiffView
from .output_view import OutputView
from .widget_options import WidgetOptions

_STATUS = {
    "running": ("⋯ running", "yellow"),
    "approval": ("? awaiting approval", "magenta"),
    "ok": ("✓ done", "green"),
    "error": ("✗ failed", "red"),
    "denied": ("✗ denied", "red"),
    "interrupted": ("■ interrupted", "red"),
}


def format_arguments(arguments: dict[str, Any], max_value: int = 160) -> str:
    lines = []
    for key, value in arguments.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        first, *rest = shown.splitlines() or [""]
        if len(first) > max_value:
            first = first[: max_value - 1] + "…"
        more = f"  (+{len(rest)} lines)" if rest else ""
        lines.append(f"{key}: {first}{more}")
    return visible("\n".join(lines))


class ToolCard(Vertical):
    DEFAULT_CSS = """
    ToolCard {
        height: auto;
        margin: 1 0 0 0;
        padding: 0 1;
        border: round $primary-darken-1;
    }
    ToolCard.-error { border: round $error; }
    ToolCard .tool-args { color: $text-muted; }
    ToolCard .tool-output { margin: 1 0 0 0; }
    """

    def __init__(
        self, call_id: str, name: str, arguments: dict[str, Any], **kwargs: Unpack[WidgetOptions]
    ) -> None:
        super().__init__(**kwargs)
        self.call_id = call_id
        self.tool_name = name
        self.arguments = arguments
        self.status = "running"
        self.note = ""  # e.g. "exit 1", "timed out", "blocked by landlock"
        self._header = Static(self._header_text())
        self._args = Static(format_arguments(arguments), markup=False, classes="tool-args")

    def compose(self) -> ComposeResult:
        yield self._header
        yield self._args

    def _header_text(self) -> Text:
        label, style = _STATUS[self.status]
        text = Text()
        text.append(f"⚙ {visible(self.tool_name)}", style="bold")
        text.append(f"  {label}", style=style)
        if self.note:
            text.append(f"  ({visible(self.note)})", style="dim")
        return text

    def set_status(self, status: str) -> None:
        self.status = status
        self.set_class(status in ("error", "denied", "interrupted"), "-error")
        self._header.update(self._header_text())

    async def finish(self, output: str, is_error: bool, metadata: dict[str, Any]) -> None:
        status = "error" if is_error else "ok"
        if metadata.get("denied") or (is_error and self.status == "denied"):
            status = "denied"  # the user said no: keep saying so rather than "failed"
        elif metadata.get("interrupted"):
            status = "interrupted"
        self.note = _note(metadata) or self.note
        self.set_status(status)
        diff = metadata.get("diff")
        if isinstance(diff, str) and diff.strip():
            await self.mount(DiffView(diff, classes="tool-output"))
        if output.strip() and not (diff and not is_error):
            # For a successful edit the diff says it all; otherwise show what the tool said.
            await self.mount(OutputView(output, classes="tool-output"))


def _note(metadata: dict[str, Any]) -> str:
    """The one fact from a result's metadata worth a glance in the header."""
    if metadata.get("timed_out"):
        return "timed out"
    if metadata.get("blocked_by"):
        return f"blocked by {metadata['blocked_by']}"
    code = metadata.get("exit_code")
    if isinstance(code, int) and code != 0:
        return f"exit {code}"
    if metadata.get("truncated"):
        return "output truncated"
    if isinstance(metadata.get("allowed_by"), str):  # the gate's allowed command prefix
        return f"allowed: {metadata['allowed_by']}"
    return ""
