"""Approval requests on the main screen: answered at once when an allowed command prefix
covers the call, otherwise asked in the modal; the answer goes back to the session."""

from __future__ import annotations

from typing import TYPE_CHECKING

from m3agent.agent import events as ev

from .ports import ApprovalAnswer

if TYPE_CHECKING:
    from .screens.main_screen import MainScreen


class ApprovalFlow:
    def __init__(self, screen: MainScreen) -> None:
        self.screen = screen

    async def ask(self, request: ev.ApprovalRequest) -> None:
        screen, controller = self.screen, self.screen.controller
        card = await screen.transcript.tool_started(
            request.call_id, request.name, request.arguments
        )
        auto = controller.auto_decision(request)
        if auto is not None:  # an allowed command prefix covers it: no question
            decision, prefix = auto
            card.note = f"allowed: {prefix} …"
            card.set_status("running")
            await screen.submit(decision)
            return
        card.set_status("approval")
        from .screens.approval_screen import ApprovalScreen

        modal = ApprovalScreen(request, screen.config.cwd, prefix=controller.prefix_for(request))
        screen.app.push_screen(modal, self._answer(request))

    def _answer(self, request: ev.ApprovalRequest):
        async def answer(result: ApprovalAnswer | None) -> None:
            if result is None:
                return  # closed by the app (the turn already ended): nothing to answer
            if result.allow_prefix:
                self.screen.controller.allow_prefix(result.allow_prefix)
                home = self.screen.config.state_dir
                if result.save_prefix and home is not None:
                    from ..prefix_rules import save_prefix

                    try:
                        save_prefix(home, result.allow_prefix)
                    except OSError as e:  # the answer still holds for this session
                        await self.screen.transcript.error(f"not saved: {e}", "internal")
            decision = result.decision
            card = self.screen.transcript.cards.get(request.call_id)
            if card is not None:
                card.set_status("running" if decision.decision != "deny" else "denied")
            await self.screen.submit(decision)

        return answer
