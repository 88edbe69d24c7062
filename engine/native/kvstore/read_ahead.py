"""Reading a run of disk-tier pages ahead (disk.DiskTier.prefetch): one thread reads and checks
them in order, stopping at the first one missing or unusable, so that reading the next page
overlaps the engine thread copying this one into the cache."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Sequence

from .page_file import PageKey
from .page_io import Loaded


class ReadAhead:
    """The pages `keys`, read by `load` on a thread of its own; `take` hands them over in the
    same order, `stop` ends the thread."""

    def __init__(self, keys: Sequence[PageKey], load: Callable[[PageKey], Loaded]) -> None:
        self.names = [k.name for k in keys]  # the pages asked for, in order
        self.next = 0  # the next one `take` hands over
        self.results: queue.Queue[Loaded] = queue.Queue(maxsize=8)
        self._stop = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(list(keys), load), name="m3agent-kv-read", daemon=True
        )
        self.thread.start()

    def _run(self, keys: list[PageKey], load: Callable[[PageKey], Loaded]) -> None:
        for key in keys:
            loaded = load(key)
            while not self._stop.is_set():
                try:
                    self.results.put(loaded, timeout=0.05)
                    break
                except queue.Full:
                    continue
            if self._stop.is_set() or loaded.payload is None:
                return

    def take(self, name: str) -> Loaded | None:
        """The next page read ahead when it is page `name`; None when the caller asks for
        another page, or the reader is stuck (a dead disk): then the caller stops this one
        and reads the page itself."""
        if self.next >= len(self.names) or self.names[self.next] != name:
            return None
        self.next += 1
        try:
            return self.results.get(timeout=60.0)
        except queue.Empty:
            return None

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(queue.Empty):
            while True:
                self.results.get_nowait()
        self.thread.join(5.0)
