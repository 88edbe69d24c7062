"""Permission modes in the TUI (app/permission_modes.py): shift+Tab cycles default / accept
edits / plan; the mode's tool rules are set on the session's approval gate (no prompt byte
changes); after a plan-mode answer the user acts on the plan, edits it, or keeps planning."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..permission_modes import GO_AHEAD, SHOWN, mode_rules, next_mode

if TYPE_CHECKING:
    from .screens.main_screen import MainScreen


def apply_mode(controller: Any, mode: str) -> None:
    """The mode's rules after the gate's own (config and saved answers)."""
    controller.mode = mode
    gate = getattr(controller.session, "gate", None)
    if gate is None:
        return
    if controller.base_rules is None:
        controller.base_rules = tuple(gate.rules)
    gate.rules = (*controller.base_rules, *mode_rules(mode))


async def cycle_mode(screen: MainScreen) -> None:
    mode = next_mode(screen.controller.mode)
    apply_mode(screen.controller, mode)
    screen.set_status(mode=SHOWN.get(mode, ""))
    words = {
        "default": "default mode: edits and commands are asked about as configured",
        "acceptEdits": "accept edits: file edits run without asking (commands as configured)",
        "plan": "plan mode: read-only tools; the model answers with a plan (shift+Tab leaves)",
    }
    await screen.transcript.notice(words[mode])


async def after_turn(screen: MainScreen, e: Any) -> None:
    """A plan-mode turn that ended with an answer: ask what to do with the plan."""
    if screen.controller.mode != "plan" or e.reason != "done" or not e.answer.strip():
        return
    from .screens.plan_screen import PlanScreen

    async def chosen(choice: str | None) -> None:
        if choice in ("act", "edit"):
            apply_mode(screen.controller, "default")
            screen.set_status(mode="")
        if choice == "act":
            await screen.send_text(GO_AHEAD)
        elif choice == "edit":
            from .widgets.prompt_input import PromptInput

            prompt = screen.query_one(PromptInput)
            prompt.load_text(f"Carry out this plan:\n{e.answer.strip()}")
            prompt.focus()
            await screen.transcript.notice("edit the plan in the prompt, then press Enter")

    screen.app.push_screen(PlanScreen(), chosen)
