"""The TUI side of issue 23: the pinned plan, subagents as nested lines in their task card,
and custom commands and skills in the `/` menu. The main screen calls in with one line per
hook point, so the screen itself stays about rendering its own events."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Unpack

from m3agent.agent import events as ev
from rich.text import Text
from textual.widgets import Static

from ..custom_commands import CustomCommand, find
from ..extensions import commands_of, granted_tools, refusal
from ..safe_text import visible
from ..slash import SlashSpec
from .widgets.widget_options import WidgetOptions

if TYPE_CHECKING:
    from m3agent.agent.ops import UserTurn

    from .controller import SessionController
    from .transcript import Transcript
    from .widgets.plan_view import PlanView


class NestedLog(Static):
    """A subagent's activity inside its task card: one line per tool call and its answer."""

    DEFAULT_CSS = """
    NestedLog { height: auto; margin: 0 0 0 2; color: $text-muted; }
    """

    def __init__(self, agent: str, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__("", **kwargs)
        self.agent = agent
        self.lines: list[tuple[str, str]] = []
        self.answer = ""

    def add(self, event: dict[str, Any]) -> None:
        t = event.get("type")
        if t == "tool_call_started":
            self.lines.append((f"⚙ {event.get('name')}", "running"))
        elif t == "tool_call_finished":
            status = "error" if event.get("is_error") else "ok"
            for i in range(len(self.lines) - 1, -1, -1):
                if self.lines[i][0] == f"⚙ {event.get('name')}" and self.lines[i][1] == "running":
                    self.lines[i] = (self.lines[i][0], status)
                    break
        elif t == "content_delta":
            self.answer += str(event.get("text", ""))
        elif t == "turn_complete":
            self.answer = str(event.get("answer", self.answer))
            self.lines.append((f"done ({event.get('reason')})", "ok"))
        self.show_lines()

    def show_lines(self) -> None:
        text = Text()
        text.append(f"↳ subagent {visible(self.agent)}\n", style="bold")
        for label, status in self.lines:
            mark = {"ok": "✓", "error": "✗", "running": "⋯"}.get(status, "")
            text.append(f"  {visible(label)} {mark}\n")
        if self.answer.strip():
            text.append("  " + visible(self.answer.strip().splitlines()[-1][:200]))
        self.update(text)


async def show(e: ev.Event, transcript: Transcript, plan: PlanView) -> bool:
    """True when the event was one of ours (already shown)."""
    if isinstance(e, ev.PlanUpdate):
        plan.show(e.plan, e.explanation)
        return True
    if isinstance(e, ev.SubagentEvent):
        card = transcript.cards.get(e.parent_call_id)
        if card is None:
            return True
        log = next(iter(card.query(NestedLog)), None)
        if log is None:
            log = NestedLog(e.agent, classes="nested")
            await card.mount(log)
        log.add(e.event)
        return True
    return False


def menu_specs(commands: tuple[CustomCommand, ...]) -> tuple[SlashSpec, ...]:
    return tuple(SlashSpec(c.name, c.argument_hint or "[args]", c.description) for c in commands)


def custom_turn(controller: SessionController, text: str) -> UserTurn | None:
    """The UserTurn of a `/name args` custom command or skill, else None. ValueError: one
    that may not run (extensions.refusal)."""
    session = controller.session
    hit = find(commands_of(session), text)
    if hit is None or session is None:
        return None
    command, args = hit
    if (why := refusal(session.gate, command)) is not None:
        raise ValueError(why)
    turn = controller.make_turn(command.expand(args))
    return replace(turn, allowed_tools=granted_tools(session, command))
