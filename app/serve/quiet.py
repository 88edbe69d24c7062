"""Memory given back when the server goes quiet (issue 37, friction 12).

Under load the server's resident memory rises and stays up: glibc keeps the freed working
memory of many concurrent requests in its arenas, and a closed connection stays in a reference
cycle inside asyncio until a full garbage collection, which the model's many long-lived objects
make rare. Measured on the tiny model (bench/serve_load.py --soak): +33-39 MB at the first
64-client level, then about 2 MB more per 1,000 requests; `malloc_trim(0)` gave 21.5 MB back,
and one `gc.collect()` freed the connections' cycles. So once no request has been in flight
for `quiet_s` after some work, the server collects and trims once; not again until more
requests came and went. It never runs while a request is in flight, so it costs a request no
latency.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
from collections.abc import Callable

from .idle import IdleWatch

QUIET_S = 2.0  # no request in flight for this long after some: give memory back


def release_memory() -> None:
    """A full garbage collection, then glibc's malloc_trim(0) where the C library has it."""
    gc.collect()
    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return
    trim(ctypes.c_size_t(0))


async def release_when_quiet(
    watch: IdleWatch,
    quiet_s: float = QUIET_S,
    release: Callable[[], None] = release_memory,
    poll_s: float = 0.5,
) -> None:
    """Runs until cancelled: RELEASE once each time the server falls quiet after requests."""
    released_at = watch.last  # nothing to give back before the first request
    while True:
        await asyncio.sleep(poll_s)
        if watch.last != released_at and watch.idle_for() >= quiet_s:
            released_at = watch.last
            release()
