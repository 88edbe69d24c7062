"""Approval requests on the main screen: asked in the modal; the answer goes back to the
session. The session's gate decided that it asks (an allowed command prefix answers there,
never here) and what the modal may offer besides "once" (the request's amendment)."""

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
        card.set_status("approval")
        from .screens.approval_screen import ApprovalScreen

        modal = ApprovalScreen(request, controller.config.cwd)
        self.app.push_screen(modal, self._answer(request))

    def _answer(
        self, request: ev.ApprovalRequest
    ) -> Callable[[ApprovalAnswer | None], Awaitable[None]]:
        async def answer(result: ApprovalAnswer | None) -> None:
            if result is None:
                return  # closed by the app (the turn already ended): nothing to answer
            decision = result.decision
            card = self.transcript.cards.get(request.call_id)
            if card is not None:
                card.set_status("running" if decision.decision != Decision.DENY else "denied")
            await self.controller.submit(decision)

        return answer
