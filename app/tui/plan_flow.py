"""Permission modes in the TUI (app/permission_modes.py): shift+Tab cycles default / accept
edits / plan; the mode is set on the session's approval gate through its one operation (no
prompt byte changes; SessionController.apply_mode -> ApprovalGate.set_mode); after a plan-mode answer the user acts on the plan,
edits it, or keeps planning."""

from __future__ import annotations

from typing import TYPE_CHECKING

from m3agent.agent import events as ev
from m3agent.agent.config import PermissionMode

from ..permission_modes import GO_AHEAD, SHOWN, next_mode
from .screens.plan_screen import PlanScreen

if TYPE_CHECKING:
    from .controller import SessionController
    from .hosts import AppHost, ScreenHost
    from .transcript import Transcript

WORDS = {
    PermissionMode.DEFAULT: "default mode: edits and commands are asked about as configured",
    PermissionMode.ACCEPT_EDITS: (
        "accept edits: file edits run without asking (commands as configured)"
    ),
    PermissionMode.PLAN: (
        "plan mode: read-only tools; the model answers with a plan (shift+Tab leaves)"
    ),
}


async def cycle_mode(
    controller: SessionController, transcript: Transcript, view: ScreenHost
) -> None:
    mode = next_mode(controller.mode)
    controller.apply_mode(mode)
    view.set_status(mode=SHOWN.get(mode, ""))
    await transcript.notice(WORDS[mode])


async def after_turn(
    e: ev.TurnComplete,
    controller: SessionController,
    transcript: Transcript,
    app: AppHost,
    view: ScreenHost,
) -> None:
    """A plan-mode turn that ended with an answer: ask what to do with the plan."""
    if controller.mode is not PermissionMode.PLAN or e.reason != "done" or not e.answer.strip():
        return

    async def chosen(choice: str | None) -> None:
        if choice in ("act", "edit"):
            controller.apply_mode(PermissionMode.DEFAULT)
            view.set_status(mode="")
        if choice == "act":
            await view.send_text(GO_AHEAD)
        elif choice == "edit":
            prompt = view.prompt_input
            prompt.load_text(f"Carry out this plan:\n{e.answer.strip()}")
            prompt.focus()
            await transcript.notice("edit the plan in the prompt, then press Enter")

    app.push_screen(PlanScreen(), chosen)
