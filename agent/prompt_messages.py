"""What the agent sends: the conversation in the shape M3's real chat template keeps.

The real template renders only `messages[0]` as system (developer) text and renders nothing
for a `system` message anywhere later. The session log keeps the system prompt and the
repository snapshot (with AGENTS.md in it) as two leading system messages, so that a refresh
can replace the snapshot alone; every request folds that leading run into ONE system message,
the developer block that opens the prompt. Everything added later is user or tool text: a
compaction summary is a user message (agent/compaction.py), a fresh snapshot replaces the
folded block's second half (a reported full recompute), tool results are tool messages. A
`system` message found later (an old log, a bug) is sent as user text rather than dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

from m3agent.engine.api import Message

SYSTEM_JOIN = "\n\n"


def request_messages(messages: Sequence[Message]) -> tuple[Message, ...]:
    """The messages of an engine request: one leading system message, no later one."""
    n = 0
    while n < len(messages) and messages[n].role == "system":
        n += 1
    out: list[Message] = []
    if n:
        text = SYSTEM_JOIN.join(m.content for m in messages[:n] if m.content)
        out.append(Message(role="system", content=text))
    for m in messages[n:]:
        out.append(Message(role="user", content=m.content) if m.role == "system" else m)
    return tuple(out)
