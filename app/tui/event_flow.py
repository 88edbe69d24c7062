"""How each session event shows: the one place that maps an agent event onto the transcript,
the plan view, the status bar and the approval flow, and what the end of a turn does (the
plan mode's and /review's follow-ups, the next queued prompt). The main screen feeds it the
events in order; it holds no state of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from m3agent.agent import events as ev

from ..context_notice import describe_context_event
from . import ext_view
from .hosts import ScreenHelper
from .plan_flow import after_turn
from .status import engine_label, usage_fields

if TYPE_CHECKING:
    from .approval_flow import ApprovalFlow
    from .review_flow import ReviewFlow
    from .widgets.plan_view import PlanView


class EventFlow(ScreenHelper):
    def __init__(
        self,
        host: ScreenHelper,
        plan_view: PlanView,
        approvals: ApprovalFlow,
        review: ReviewFlow,
    ) -> None:
        """The same controller, transcript, app and screen as HOST (the slash actions), and
        the screen's other parts an event reaches."""
        super().__init__(host.controller, host.transcript, host.app, host.view)
        self.plan_view, self.approvals, self.review = plan_view, approvals, review

    async def show(self, e: ev.Event) -> None:
        self.controller.observe(e)
        t, view = self.transcript, self.view
        if await ext_view.show(e, t, self.plan_view):  # plan, subagents (issue 23)
            return
        if isinstance(e, ev.ReasoningDelta):
            await t.reasoning(e.text)
        elif isinstance(e, ev.ContentDelta):
            await t.content(e.text)
        elif isinstance(e, ev.ToolCallStarted):
            await t.tool_started(e.call_id, e.name, e.arguments)
        elif isinstance(e, ev.ApprovalRequest):
            await self.approvals.ask(e)
        elif isinstance(e, ev.ToolCallFinished):
            await t.tool_finished(e.call_id, e.name, e.output, e.is_error, e.metadata)
        elif isinstance(e, ev.ModelRequestFinished):
            await t.end_segment()
            view.set_status(**usage_fields(view.status.with_usage(e.usage)))
        elif isinstance(e, ev.TurnStarted):
            view.set_status(state="working")
        elif isinstance(e, ev.Progress) and e.stage == ev.ProgressStage.PREFILL:
            view.set_status(prefill=None if e.final else e.message)
        elif isinstance(e, ev.TurnComplete):
            await self._turn_complete(e)
        elif isinstance(e, ev.Error):
            await t.error(e.message, e.kind)
            if e.fatal:
                view.set_status(state="failed")
        elif isinstance(e, ev.ContextEvent):
            await t.notice(describe_context_event(e.action, e.detail))
        elif isinstance(e, ev.SessionStarted):
            view.set_status(engine=engine_label(self.config.engine, e.engine), model=e.model)
            if e.resumed:
                await t.notice(f"resumed session {e.session_id}")

    async def _turn_complete(self, e: ev.TurnComplete) -> None:
        t, view = self.transcript, self.view
        view.close_questions()  # an interrupt or a time limit can end the turn mid-question
        await t.end_segment()
        for card in t.unfinished_cards():
            card.set_status("interrupted")
        view.set_status(prefill=None)  # an interrupt can end the turn mid-prefill
        if e.last_usage is not None:
            view.set_status(**usage_fields(view.status.with_usage(e.last_usage)))
        if e.reason == "interrupted":
            await t.notice("interrupted: the turn stopped; type a prompt to go on")
        elif e.reason not in ("done", "error"):
            await t.notice(f"turn stopped: {e.reason.replace('_', ' ')} reached")
        view.set_status(state="ready")
        view.refresh_activity()
        # plan mode: act on the plan, edit it, or keep planning
        if not await self.review.after_turn(e):  # /review's turn: its findings
            await after_turn(e, self.controller, t, self.app, view)  # plan mode
        await view.send_next()
