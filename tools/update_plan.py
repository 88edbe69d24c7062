"""update_plan: the model's checklist (Codex's tool of the same name and arguments).

The tool does nothing but validate and echo: the plan travels in the result's metadata, the
agent emits it as a PlanUpdate event, the TUI pins it and stream-json prints it.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from .base import Tool, ToolContext, ToolResult, Touches


class StepStatus(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


class PlanItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: str = Field(description="One short step.")
    status: StepStatus = Field(description="pending, in_progress or completed.")


class UpdatePlanArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    explanation: str | None = Field(default=None, description="Why the plan changed.")
    plan: list[PlanItem] = Field(description="The steps, in order.")


class UpdatePlan(Tool[UpdatePlanArgs]):
    name = "update_plan"
    claude_names = ("TodoWrite",)
    kind = "think"
    description = (
        "Keep a short checklist of the task's steps. Send the whole list each time; at most "
        "one step is in_progress. Use it for tasks of several steps, not for one-liners."
    )

    def touches(self, args: UpdatePlanArgs) -> Touches:
        return Touches()  # touches nothing: no approval, no sandbox

    def run(self, args: UpdatePlanArgs, ctx: ToolContext) -> ToolResult:
        items = args.plan
        running = sum(1 for i in items if i.status is StepStatus.IN_PROGRESS)
        if running > 1:
            return ToolResult("at most one step may be in_progress", is_error=True)
        plan = [{"step": i.step, "status": str(i.status)} for i in items]
        done = sum(1 for i in items if i.status is StepStatus.COMPLETED)
        return ToolResult(
            f"Plan updated ({done}/{len(items)} done).",
            metadata={"plan": plan, "explanation": args.explanation or ""},
        )
