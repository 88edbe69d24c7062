"""Scanning what the cache did not know, on every core when there is enough of it.

Workers are plain subprocesses (`python -m ...scan_worker`) fed chunks of (path, bytes) over
their stdin as marshal frames, one thread per worker waiting on its pipe (the GIL is free while
it waits). Not multiprocessing: its spawn mode re-imports the caller's main module, which a
script without a `__main__` guard cannot survive, and fork is unsafe once tokenizer threads
run. Below POOL_MIN_BYTES, or when a worker cannot start, the scan runs in this process.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import queue
import subprocess
import sys

from m3agent.tools.procs import wait_or_kill

from .files import FileRules
from .frames import read_frame, write_frame
from .scan import PlainRecord, records_of

# -P: the working directory (the workspace, whose files the model writes) is not put on the
# worker's sys.path, so a planted `m3agent/__init__.py` there is never imported in its place.
WORKER = (sys.executable, "-P", "-m", "m3agent.agent.context.scan_worker")
POOL_MIN_BYTES = 24 * 2**20  # below this, starting workers costs more than it saves
_CHUNK_BYTES = 4 * 2**20


def _cores() -> int:
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(4, n or 1))


class Scanner:
    def __init__(self, rules: FileRules, min_bytes: int = POOL_MIN_BYTES) -> None:
        self._rules = rules
        self._rules_plain = (rules.extra_skip, rules.max_file_bytes, rules.use_builtin_rules,
                             rules.max_walk_entries)  # fmt: skip
        self._min = min_bytes
        self._items: list[tuple[str, bytes]] = []
        self._bytes = 0

    def add(self, path: str, data: bytes) -> None:
        self._items.append((path, data))
        self._bytes += len(data)

    def close(self) -> None:
        self._items = []

    def results(self) -> list[tuple[str, PlainRecord]]:
        """(path, plain record) in the order the paths were added."""
        items, self._items = self._items, []
        if self._bytes < self._min or _cores() < 2:
            return list(zip((p for p, _ in items), records_of(items, self._rules), strict=True))
        chunks: list[list[tuple[str, bytes]]] = [[]]
        size = 0
        for item in items:
            if size >= _CHUNK_BYTES:
                chunks.append([])
                size = 0
            chunks[-1].append(item)
            size += len(item[1])
        parts = self._in_workers(chunks)
        plains = [p for part in parts for p in part]
        return list(zip((p for p, _ in items), plains, strict=True))

    def _in_workers(self, chunks: list[list[tuple[str, bytes]]]) -> list[list[PlainRecord]]:
        workers: queue.Queue[subprocess.Popen[bytes]] = queue.Queue()
        procs = []
        for _ in range(min(_cores(), len(chunks))):
            try:
                p = subprocess.Popen(
                    list(WORKER),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
            except OSError:
                break
            procs.append(p)
            workers.put(p)

        def run(chunk: list[tuple[str, bytes]]) -> list[PlainRecord]:
            proc = workers.get() if procs else None
            try:
                # Popen makes stdin and stdout pipes (PIPE above): neither is None.
                if proc is not None and proc.poll() is None and proc.stdin and proc.stdout:
                    try:
                        write_frame(proc.stdin, (self._rules_plain, chunk))
                        reply = read_frame(proc.stdout)
                        if isinstance(reply, list) and len(reply) == len(chunk):
                            return reply
                    except (OSError, ValueError, EOFError):
                        pass
                return records_of(chunk, self._rules)  # a worker that failed: here instead
            finally:
                if proc is not None:
                    workers.put(proc)

        try:
            with cf.ThreadPoolExecutor(max_workers=max(1, len(procs))) as pool:
                return list(pool.map(run, chunks))
        finally:
            for p in procs:
                try:
                    if p.stdin is not None:
                        p.stdin.close()
                except OSError:
                    pass
                wait_or_kill(p, 10)
