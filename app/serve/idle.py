"""The idle timeout of a server the front ends started for themselves (app/warm.py): with no
request in flight and none for `timeout_s`, `m3agent serve` stops, so a model left behind by
a closed TUI does not hold the GPUs (or a GB of RAM) forever. A streamed response counts as
in flight until its last event is sent."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from .request import Handler, HttpRequest, HttpResponse


class IdleWatch:
    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if timeout_s <= 0:
            raise ValueError(f"the idle timeout must be positive, got {timeout_s}")
        self.timeout_s = timeout_s
        self.clock = clock
        self.in_flight = 0
        self.last = clock()

    def wrap(self, handler: Handler) -> Handler:
        async def handle(req: HttpRequest) -> HttpResponse:
            self.in_flight += 1
            try:
                resp = await handler(req)
            except BaseException:
                self._done()
                raise
            if resp.events is None:
                self._done()
                return resp
            return replace(resp, events=self._counted(resp.events))

        return handle

    async def _counted(self, events: AsyncIterator[str]) -> AsyncIterator[str]:
        try:
            async for item in events:
                yield item
        finally:
            self._done()

    def _done(self) -> None:
        self.in_flight -= 1
        self.last = self.clock()

    def idle_for(self) -> float:
        return 0.0 if self.in_flight else self.clock() - self.last

    async def wait_idle(self, poll_s: float = 1.0) -> None:
        """Returns once the server has been idle for the timeout."""
        while self.idle_for() < self.timeout_s:
            await asyncio.sleep(min(poll_s, max(0.05, self.timeout_s - self.idle_for())))
