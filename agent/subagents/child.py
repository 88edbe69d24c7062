"""One child session: the parent's prefix (system block, repository snapshot, the same tool
list and session thinking mode), then its task as the first user message. Its first request
therefore shares every token of that prefix with the parent's last one: a prefix-cache hit.

Its events reach the parent as SubagentEvents; its approval requests are the parent's to
answer (re-emitted at top level, registered with the parent's running turn so that
Session.submit(ApprovalDecision) finds them).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from m3agent.engine.api import Message

from .. import events as ev
from ..conversation import Conversation
from ..events import StopReason
from .definitions import AgentDef
from .restricted import RestrictedToolset

if TYPE_CHECKING:
    from ..ops import UserTurn
    from ..session import Session

_QUIET = (ev.ReasoningDelta, ev.ContentDelta, ev.Progress)


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    session_id: str
    answer: str
    reason: StopReason
    turns: int
    first_prompt_tokens: int
    first_cached_tokens: int
    tool_calls: int


def prefix_messages(messages: tuple[Message, ...]) -> list[Message]:
    """The leading system messages: the system prompt and the snapshot."""
    out = []
    for m in messages:
        if m.role != "system":
            break
        out.append(m)
    return out


def task_message(agent: AgentDef, prompt: str) -> str:
    head = f"You are now the subagent {agent.name!r}, working for the main agent."
    rules = agent.instructions or "Do the task, then answer with a short report."
    tools = (
        f"You may use only these tools: {', '.join(agent.tools)}."
        if agent.tools is not None
        else "You may use the tools except task."
    )
    return (
        f"{head}\n{rules}\n{tools}\nThe main agent sees only your final answer: make it a "
        f"concise summary.\n\n<task>\n{prompt}\n</task>"
    )


async def run_child(parent: Session, agent: AgentDef, prompt: str, call_id: str) -> ChildOutcome:
    from ..session import Session

    parent_tools = parent.toolset
    names = {s["function"]["name"] for s in parent_tools.schemas()} if parent_tools else set()
    allowed = frozenset(agent.tools) & names if agent.tools is not None else names
    allowed = allowed - {"task"}  # no grandchildren: a budget that is easy to reason about
    conv = Conversation.create(
        parent.conversation.path.parent,
        cwd=str(parent.cwd),
        engine=parent.conversation.meta.engine,
        model=parent.conversation.meta.model,
        thinking_default=parent.session_thinking_mode,
    )
    for m in prefix_messages(parent.conversation.messages):
        conv.append(m)
    config = replace(parent.config, max_turns=agent.max_turns)
    child = Session(
        parent.engine,
        RestrictedToolset(parent_tools, frozenset(allowed)) if parent_tools is not None else None,
        config,
        conversation=conv,
        cwd=parent.cwd,
        sandbox=parent.sandbox,
        checkpoints=parent.checkpoints,
        tool_env=parent.tool_env,
        hooks=parent.hooks,
        subagent=True,
        diagnostics=parent.diagnostics,
    )
    child.thinking_default = parent.thinking_default
    first: ev.ModelRequestFinished | None = None
    turns = calls = 0
    done: ev.TurnComplete | None = None
    try:
        child.submit(ev_turn(task_message(agent, prompt)))
        async for e in child.events():
            if isinstance(e, ev.ModelRequestFinished):
                turns += 1
                first = first or e
            elif isinstance(e, ev.ToolCallFinished):
                calls += 1
            if isinstance(e, ev.ApprovalRequest):
                parent.adopt_approval(e)
            else:
                parent.nested(call_id, agent.name, child.id, e)
            if isinstance(e, ev.TurnComplete):
                done = e
                break
    finally:
        await child.close()
    u = first.usage if first is not None else None
    return ChildOutcome(
        session_id=child.id,
        answer=done.answer if done else "",
        reason=done.reason if done else StopReason.ERROR,
        turns=turns,
        first_prompt_tokens=u.prompt_tokens if u else 0,
        first_cached_tokens=u.cached_prompt_tokens if u else 0,
        tool_calls=calls,
    )


def ev_turn(text: str) -> UserTurn:
    from ..ops import UserTurn

    return UserTurn(text)
