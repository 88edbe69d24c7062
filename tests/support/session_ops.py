"""A real Session driven op by op, as a client drives it, for the tests that look at every
event of a whole conversation."""

from __future__ import annotations

from m3agent.agent import events as ev
from m3agent.agent.ops import Compact, UserTurn


def _finished(op, e) -> bool:
    if isinstance(op, UserTurn):
        return isinstance(e, ev.TurnComplete)
    return isinstance(e, ev.Error) or (
        isinstance(e, ev.ContextEvent) and e.action in ("compact", "refresh")
    )


async def drive(session, ops: list) -> list:
    """Submits each op once the one before it has finished: a UserTurn at its TurnComplete, a
    Compact at its compact (or refresh) notice or an error; any other op (SetThinking...) is
    only submitted. Closes the session; returns every event seen."""
    seen: list = []
    stream = session.events()
    for op in ops:
        session.submit(op)
        if not isinstance(op, (UserTurn, Compact)):
            continue
        async for e in stream:
            seen.append(e)
            if _finished(op, e):
                break
    await session.close()
    return seen


class NoCheckpoints:
    """A checkpoint store that keeps nothing, for the tests about the prompt, not the files."""

    def snapshot(self, label: str) -> None:
        return None
