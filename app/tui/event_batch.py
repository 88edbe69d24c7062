"""Batching the Session's events for the screen.

A model streams hundreds of small deltas a second; one Textual message and one re-render per
delta costs ~2 ms each, far more than the agent itself. So the pump hands the screen every
event that is ready at once (waiting a frame while text streams), and consecutive deltas of
the same kind are merged into one before they reach the widgets. Order is kept exactly.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

from m3agent.agent import events as ev

_DELTAS = (ev.ReasoningDelta, ev.ContentDelta)


async def batches(
    events: AsyncIterator[ev.Event], frame_s: float = 0.02
) -> AsyncIterator[list[ev.Event]]:
    """Lists of events in order; while deltas stream, at most one list per frame."""
    queue: asyncio.Queue[ev.Event | None] = asyncio.Queue()  # None: the stream ended

    async def read() -> None:
        try:
            async for event in events:
                queue.put_nowait(event)
        except Exception as e:  # the stream broke: say so, keep the window usable
            queue.put_nowait(ev.Error(f"event stream failed: {e}", ev.ErrorKind.INTERNAL))
        finally:
            queue.put_nowait(None)

    reader = asyncio.get_running_loop().create_task(read())
    try:
        while True:
            first = await queue.get()
            if first is None:
                return
            batch = [first]
            if isinstance(first, _DELTAS):
                await asyncio.sleep(frame_s)  # let a frame's worth of text gather
            while not queue.empty():
                item = queue.get_nowait()
                if item is None:
                    yield batch
                    return
                batch.append(item)
            yield batch
    finally:
        reader.cancel()


def coalesce(events: list[ev.Event]) -> list[ev.Event]:
    """Merges runs of reasoning deltas and runs of content deltas; other events untouched."""
    out: list[ev.Event] = []
    for event in events:
        last = out[-1] if out else None
        if isinstance(event, _DELTAS) and isinstance(last, _DELTAS) and type(last) is type(event):
            out[-1] = replace(event, text=last.text + event.text)
        else:
            out.append(event)
    return out
