"""The `task` tool: delegate to a subagent (Claude Code's Task). Several task calls in one
reply run concurrently (the loop batches tools marked `concurrent`), against the same engine,
which batches their requests.

Tools run in a worker thread; a child session is async, so the tool hands it to the parent's
event loop and waits, polling ctx.cancel so that an interrupt stops the child too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterable
from typing import TYPE_CHECKING

from m3agent.tools.base import Tool, ToolContext, ToolOutcome, ToolResult, Touches
from pydantic import BaseModel, ConfigDict, Field

from .child import run_child
from .definitions import GENERAL, AgentDef

if TYPE_CHECKING:
    from ..session import Session

_POLL_S = 0.1


class TaskArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str = Field(description="A short (3-5 word) title of the task.")
    prompt: str = Field(description="The task, with everything the subagent must know.")
    subagent_type: str = Field(
        default=GENERAL.name, description="Which subagent (default general-purpose)."
    )


class TaskTool(Tool[TaskArgs]):
    name = "task"
    claude_names = ("Task",)
    description = (
        "Run a subagent on a self-contained task; it works with its own tools and budget and "
        "returns a summary. Several task calls in one reply run in parallel. The subagent "
        "types are listed in the system prompt."
    )
    mutates = False  # its child's own calls are approved one by one
    concurrent = True

    def __init__(self, agents: Iterable[AgentDef] = (GENERAL,)) -> None:
        self.agents = {a.name: a for a in agents} or {GENERAL.name: GENERAL}
        self._session: Session | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, session: Session) -> None:
        self._session = session

    def listing(self) -> str:
        rows = [f"- {a.name}: {a.description}" for a in self.agents.values()]
        return "Subagents for the task tool (subagent_type):\n" + "\n".join(rows)

    def touches(self, args: TaskArgs) -> Touches:
        return Touches()  # the child's calls say what they touch, each through the gate

    def run(self, args: TaskArgs, ctx: ToolContext) -> ToolResult:
        agent = self.agents.get(args.subagent_type)
        if agent is None:
            known = ", ".join(self.agents)
            return ToolResult(f"no subagent {args.subagent_type!r} (known: {known})", is_error=True)
        session = self._session
        loop = session.loop if session is not None else None
        if session is None or loop is None:
            return ToolResult("the task tool is not attached to a running session", True)
        fut = asyncio.run_coroutine_threadsafe(
            run_child(session, agent, args.prompt, ctx.call_id), loop
        )
        while True:
            try:
                out = fut.result(timeout=_POLL_S)
                break
            except concurrent.futures.TimeoutError:
                if ctx.cancel.is_set():
                    fut.cancel()
                    return ToolResult(
                        "the subagent was interrupted", True, {ToolOutcome.INTERRUPTED: True}
                    )
            except concurrent.futures.CancelledError:
                return ToolResult(
                    "the subagent was interrupted", True, {ToolOutcome.INTERRUPTED: True}
                )
        share = out.first_cached_tokens / out.first_prompt_tokens if out.first_prompt_tokens else 0
        meta = {
            "subagent": agent.name,
            "session_id": out.session_id,
            "reason": out.reason,
            "turns": out.turns,
            "tool_calls": out.tool_calls,
            "first_request": {
                "prompt_tokens": out.first_prompt_tokens,
                "cached_prompt_tokens": out.first_cached_tokens,
                "cached_share": round(share, 4),
            },
        }
        if out.reason != "done":
            text = f"subagent {agent.name} stopped ({out.reason}); its last answer:\n{out.answer}"
            return ToolResult(text, True, meta)
        return ToolResult(f"[{agent.name}: {args.description}]\n{out.answer}", metadata=meta)
