"""The root cause of a vLLM load failure, read from what its engine core process printed.

With vLLM's default multiprocess engine core, a failure inside the core (CUDA out of memory,
a KV cache that does not fit, an unsupported GPU) reaches the frontend only as
"Engine core initialization failed. See root cause above." The cause is in the traceback the
core process logs to the stdout/stderr it inherited. So while the engine loads, this process's
fds 1 and 2 point into a pipe: a thread copies everything through to the real stderr (the
user still sees vLLM's log) and keeps the tail, from which `root_cause()` picks the last
exception line. Children inherit the pipe and keep writing through it after the load.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections import deque

TAIL_BYTES = 256 * 1024
# "torch.OutOfMemoryError: CUDA out of memory..." anywhere in a (log-prefixed) line.
_EXC_LINE = re.compile(r"(?:^|[\s\]])((?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception)): (.+)$")
_WRAPPERS = ("Engine core initialization failed", "Frontend process failed during engine core")


class CoreOutputTail:
    """Context manager around the engine load; `root_cause()` after it failed."""

    def __init__(self, tail_bytes: int = TAIL_BYTES) -> None:
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._max = tail_bytes
        self._lock = threading.Lock()
        self._saved: list[int] = []
        self._thread: threading.Thread | None = None

    def __enter__(self) -> CoreOutputTail:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        try:
            read_fd, write_fd = os.pipe()
            self._saved = [os.dup(1), os.dup(2)]
        except OSError:  # no stdout/stderr to pass through (a closed fd): capture nothing
            return self
        out_fd = os.dup(self._saved[1])  # the thread's own copy of the real stderr
        os.dup2(write_fd, 1)
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self._thread = threading.Thread(
            target=self._pump, args=(read_fd, out_fd), name="m3agent-vllm-log", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._saved:
            return
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os.dup2(self._saved[0], 1)
        os.dup2(self._saved[1], 2)
        for fd in self._saved:
            os.close(fd)
        self._saved = []

    def _pump(self, read_fd: int, out_fd: int) -> None:
        try:
            while chunk := os.read(read_fd, 65536):
                with contextlib.suppress(OSError):
                    os.write(out_fd, chunk)
                with self._lock:
                    self._chunks.append(chunk)
                    self._size += len(chunk)
                    while self._size > self._max and len(self._chunks) > 1:
                        self._size -= len(self._chunks.popleft())
        finally:
            os.close(read_fd)
            os.close(out_fd)

    def text(self) -> str:
        with self._lock:
            return b"".join(self._chunks).decode("utf-8", "replace")

    def root_cause(self, wait_s: float = 2.0) -> str | None:
        """The last exception line the core printed, e.g. "torch.OutOfMemoryError: CUDA out
        of memory. ..."; None when none was printed. Waits briefly for the dying core's
        output to drain (the frontend may notice the death before the pipe is read)."""
        if self._thread is not None:
            self._thread.join(wait_s)
        return last_exception_line(self.text())


def last_exception_line(text: str) -> str | None:
    found = None
    for line in text.splitlines():
        m = _EXC_LINE.search(line.rstrip())
        if m and not any(w in m.group(2) for w in _WRAPPERS):
            found = f"{m.group(1)}: {m.group(2).strip()}"
    return found
