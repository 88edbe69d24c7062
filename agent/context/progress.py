"""How far the snapshot has got, as Progress events: files listed, files read (and their MB),
tokens counted, time elapsed.

A repository of 30,000 files must not become 30,000 updates: reports are at most `interval_s`
apart, apart from the listing (once) and the end (always).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..events import Progress, ProgressStage


class SnapshotProgress:
    """Counts the snapshot's work (files listed, files read, tokens counted) and reports it as
    Progress events to `report`, at most once per `interval_s` apart from the first listing and
    the end: 100,000 files must not become 100,000 updates."""

    def __init__(
        self,
        report: Callable[[Progress], None],
        interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._report = report
        self._interval = interval_s
        self._clock = clock
        self._last = float("-inf")
        self._start = clock()
        self.listed = 0
        self.read = 0
        self.read_bytes = 0
        self.tokens = 0

    def listed_files(self, n: int) -> None:
        self.listed = n
        self._emit(force=True)

    def read_file(self, n_bytes: int = 0) -> None:
        self.read += 1
        self.read_bytes += n_bytes
        self._emit()

    def counted(self, tokens: int) -> None:
        self.tokens += tokens
        self._emit()

    def done(self, tokens: int) -> None:
        self.tokens = tokens
        self._emit(force=True, final=True)

    def _emit(self, *, force: bool = False, final: bool = False) -> None:
        now = self._clock()
        if not force and now - self._last < self._interval:
            return
        self._last = now
        message = (
            f"repository snapshot: {self.read:,}/{self.listed:,} files read "
            f"({self.read_bytes / 1e6:,.1f} MB), {self.tokens:,} tokens, "
            f"{now - self._start:.1f} s"
        )
        self._report(
            Progress(
                stage=ProgressStage.SNAPSHOT,
                message=message,
                done=self.read,
                total=self.listed,
                unit="files",
                final=final,
            )
        )
