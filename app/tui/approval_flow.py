"""Approval requests on the main screen: answered at once when an allowed command prefix
covers the call, otherwise asked in the modal; the answer goes back to the session."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from m3agent.agent import events as ev
from m3agent.agent.ops import Decision

from .ports import ApprovalAnswer

if TYPE_CHECKING:
    from .controller import SessionController
    from .hosts import AppHost
    from .transcript import Transcript


class ApprovalFlow:
    def __init__(self, controller: SessionController, transcript: Transcript, app: AppHost) -> None:
        self.controller, self.transcript, self.app = controller, transcript, app

    async def ask(self, request: ev.ApprovalRequest) -> None:
        controller = self.controller
        card = await self.transcript.tool_started(request.call_id, request.name, request.arguments)
        auto = controller.auto_decision(request)
        if auto is not None:  # an allowed command prefix covers it: no question
            decision, prefix = auto
            card.note = f"allowed: {prefix} …"
            card.set_status("running")
            await controller.submit(decision)
            return
        card.set_status("approval")
        from .screens.approval_screen import ApprovalScreen

        modal = ApprovalScreen(
            request, controller.config.cwd, prefix=controller.prefix_for(request)
        )
        self.app.push_screen(modal, self._answer(request))

    def _answer(
        self, request: ev.ApprovalRequest
    ) -> Callable[[ApprovalAnswer | None], Awaitable[None]]:
        async def answer(result: ApprovalAnswer | None) -> None:
            if result is None:
                return  # closed by the app (the turn already ended): nothing to answer
            if result.allow_prefix:
                self.controller.allow_prefix(result.allow_prefix)
                home = self.controller.config.state_dir
                if result.save_prefix and home is not None:
                    from ..prefix_rules import save_prefix

                    try:
                        save_prefix(home, result.allow_prefix)
                    except OSError as e:  # the answer still holds for this session
                        await self.transcript.error(f"not saved: {e}", "internal")
            decision = result.decision
            card = self.transcript.cards.get(request.call_id)
            if card is not None:
                card.set_status("running" if decision.decision != Decision.DENY else "denied")
            await self.controller.submit(decision)

        return answer
