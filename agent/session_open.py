"""The log a Session starts from: a new one (the system prompt, then any repository context)
or a resumed one, mended after a crash.

Split out of session.py: what a log holds before the first op is the Conversation's and the
log repair's business (agent/conversation.py, agent/log_repair.py), not the op/event
protocol's; Session.create and Session.resume call these and hand the Conversation on.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from m3agent.engine.api import Engine, Message

from . import events as ev
from .config import AgentConfig
from .conversation import Conversation


def new_log(
    engine: Engine,
    config: AgentConfig,
    sessions_dir: Path,
    cwd: Path,
    context_messages: Sequence[Message] = (),
) -> Conversation:
    """A new session's log: the system prompt (and any repository context) opens it."""
    info = engine.info()
    conv = Conversation.create(
        sessions_dir,
        cwd=str(cwd),
        engine=info.backend,
        model=info.model,
        thinking_default=config.thinking_default,
    )
    conv.append(Message(role="system", content=config.system_prompt))
    for m in context_messages:
        conv.append(m)
    return conv


def resumed_log(sessions_dir: Path, session_id: str) -> tuple[Conversation, ev.ContextEvent | None]:
    """A saved session's log, and the event that says what loading it had to mend (None when
    nothing was)."""
    conv = Conversation.load(sessions_dir, session_id)
    # A crash mid-tool left calls without results: close them, and say what was mended.
    closed = conv.close_unanswered_calls()
    notes = list(conv.repairs)
    if closed:
        notes.append(
            f"{len(closed)} tool call(s) had no result (the session stopped while "
            'they ran); each now has an "interrupted" result'
        )
    if not notes:
        return conv, None
    repair = ev.ContextEvent(
        action=ev.ContextAction.REPAIR, detail={"notes": notes, "interrupted_calls": closed}
    )
    return conv, repair
